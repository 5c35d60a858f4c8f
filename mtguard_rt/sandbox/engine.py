"""Docker Engine API client over the daemon's unix socket (httpx; runs on asyncio and trio).

Only what the sandbox needs: ping/version, images (inspect, import), containers (create,
put archive, attach, start, inspect, wait, kill, remove, list by label). Every foreign error
is translated here, once: connection problems become `DockerUnavailable`, unexpected statuses
`DockerApiError`. The attach stream is a hijacked HTTP connection (101 Upgrade: tcp) exposed
as an httpcore network stream; `attach()` hands it back raw for the sandbox to demultiplex.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx

from ..errors import DockerApiError, DockerUnavailable, ImageNotFound

DEFAULT_SOCKET = "/var/run/docker.sock"
API_VERSION = "v1.41"  # Docker 20.10; newer daemons accept it too
# Engine calls are local and small; a hung daemon must not hang the guard.
REQUEST_TIMEOUT_S = 30.0


def docker_socket() -> str:
    host = os.environ.get("DOCKER_HOST", "")
    if host.startswith("unix://"):
        return host.removeprefix("unix://")
    return DEFAULT_SOCKET


class DockerEngine:
    """One httpx client per engine; create with `open_engine()`."""

    def __init__(self, client: httpx.AsyncClient, socket: str) -> None:
        self._client = client
        self.socket = socket

    async def _request(
        self,
        method: str,
        path: str,
        what: str,
        *,
        params: Mapping[str, Any] | None = None,
        json_body: Any = None,
        content: bytes | None = None,
        ok: tuple[int, ...] = (200, 201, 204),
        timeout: float = REQUEST_TIMEOUT_S,
    ) -> httpx.Response:
        try:
            response = await self._client.request(
                method,
                f"/{API_VERSION}{path}",
                params=params,
                json=json_body,
                content=content,
                timeout=timeout,
            )
        except (httpx.ConnectError, httpx.RemoteProtocolError, PermissionError, OSError) as exc:
            raise DockerUnavailable(self.socket, _why(exc)) from exc
        except httpx.TimeoutException as exc:
            raise DockerUnavailable(self.socket, f"no answer within {timeout:g} s") from exc
        if response.status_code not in ok:
            raise DockerApiError(what, response.status_code, _message(response))
        return response

    async def ping(self) -> None:
        await self._request("GET", "/_ping", "answer a ping")

    async def version(self) -> dict[str, Any]:
        data: dict[str, Any] = (await self._request("GET", "/version", "report its version")).json()
        return data

    async def info(self) -> dict[str, Any]:
        data: dict[str, Any] = (await self._request("GET", "/info", "report its info")).json()
        return data

    async def image_inspect(self, image: str) -> dict[str, Any]:
        response = await self._request(
            "GET", f"/images/{image}/json", f"inspect image {image}", ok=(200, 404)
        )
        if response.status_code == 404:
            raise ImageNotFound(image)
        data: dict[str, Any] = response.json()
        return data

    async def image_import(self, tar_bytes: bytes, repo: str, tag: str, changes: list[str]) -> None:
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("fromSrc", "-"),
            ("repo", repo),
            ("tag", tag),
        ]
        params += [("changes", c) for c in changes]
        response = await self._request(
            "POST",
            "/images/create",
            f"import image {repo}:{tag}",
            params=httpx.QueryParams(params),
            content=tar_bytes,
            timeout=120.0,
        )
        # The import streams JSON progress; an error arrives as {"error": ...} with status 200.
        for line in response.text.splitlines():
            if '"error"' in line:
                raise DockerApiError(f"import image {repo}:{tag}", 200, json.loads(line)["error"])

    async def create_container(self, name: str, spec: dict[str, Any]) -> str:
        response = await self._request(
            "POST",
            "/containers/create",
            "create the sandbox container",
            params={"name": name},
            json_body=spec,
            ok=(201, 404),
        )
        if response.status_code == 404:
            raise ImageNotFound(str(spec.get("Image")))
        return str(response.json()["Id"])

    async def put_archive(self, cid: str, path: str, tar_bytes: bytes) -> None:
        """Extract a tar into a (created, not yet started) container at `path`; entries keep
        the owners their headers name."""
        await self._request(
            "PUT",
            f"/containers/{cid}/archive",
            f"copy files into the container at {path}",
            params={"path": path},
            content=tar_bytes,
        )

    async def start(self, cid: str) -> None:
        await self._request(
            "POST", f"/containers/{cid}/start", "start the container", ok=(204, 304)
        )

    async def inspect(self, cid: str) -> dict[str, Any]:
        data: dict[str, Any] = (
            await self._request("GET", f"/containers/{cid}/json", "inspect the container")
        ).json()
        return data

    async def wait(self, cid: str) -> int:
        response = await self._request(
            "POST",
            f"/containers/{cid}/wait",
            "wait for the container",
            timeout=None,  # type: ignore[arg-type]
        )
        return int(response.json().get("StatusCode", -1))

    async def kill(self, cid: str) -> None:
        # 404: already gone; 409: not running. Both mean there is nothing left to kill.
        await self._request(
            "POST", f"/containers/{cid}/kill", "kill the container", ok=(204, 404, 409)
        )

    async def remove(self, cid: str) -> None:
        await self._request(
            "DELETE",
            f"/containers/{cid}",
            "remove the container",
            params={"force": "1", "v": "1"},
            ok=(204, 404, 409),
        )

    async def list_containers(self, labels: list[str]) -> list[dict[str, Any]]:
        filters = json.dumps({"label": labels})
        data: list[dict[str, Any]] = (
            await self._request(
                "GET",
                "/containers/json",
                "list containers",
                params={"all": "1", "filters": filters},
            )
        ).json()
        return data

    @asynccontextmanager
    async def attach(self, cid: str) -> AsyncIterator[Any]:
        """Hijack an attach connection (stdin, stdout, stderr); yields an httpcore stream."""
        request = self._client.build_request(
            "POST",
            f"/{API_VERSION}/containers/{cid}/attach",
            params={"stream": "1", "stdin": "1", "stdout": "1", "stderr": "1"},
            headers={"Connection": "Upgrade", "Upgrade": "tcp"},
            timeout=REQUEST_TIMEOUT_S,
        )
        try:
            response = await self._client.send(request, stream=True)
        except (httpx.ConnectError, OSError) as exc:
            raise DockerUnavailable(self.socket, _why(exc)) from exc
        try:
            if response.status_code != 101:
                await response.aread()
                raise DockerApiError(
                    "attach to the container", response.status_code, _message(response)
                )
            yield response.extensions["network_stream"]
        finally:
            await response.aclose()


def _why(exc: BaseException) -> str:
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, FileNotFoundError):
            return "the socket does not exist (is dockerd running?)"
        if isinstance(cause, PermissionError):
            return "permission denied on the socket"
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused (the daemon is not running)"
        cause = cause.__cause__ or cause.__context__
    return str(exc) or type(exc).__name__


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json().get("message", response.text)).strip()
    except (ValueError, AttributeError):
        return response.text.strip()[:500]


@asynccontextmanager
async def open_engine(socket: str | None = None) -> AsyncIterator[DockerEngine]:
    path = socket or docker_socket()
    transport = httpx.AsyncHTTPTransport(uds=path)
    async with httpx.AsyncClient(transport=transport, base_url="http://docker") as client:
        engine = DockerEngine(client, path)
        yield engine


async def probe_docker(socket: str | None = None) -> str | None:
    """None when the daemon answers and the sandbox image exists, else why not."""
    from .image import DEFAULT_IMAGE

    try:
        with anyio.fail_after(10):
            async with open_engine(socket) as engine:
                await engine.ping()
                await engine.image_inspect(DEFAULT_IMAGE)
    except (DockerUnavailable, DockerApiError, ImageNotFound) as exc:
        return str(exc)
    except TimeoutError:
        return "Docker did not answer within 10 s"
    return None
