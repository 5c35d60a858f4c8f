"""The official SDK client over streamable HTTP -> `mtguard proxy --listen` -> sandboxed server.

The proxy runs as a subprocess serving http://127.0.0.1:PORT/mcp (port chosen by the OS and
read from its log line). The client speaks the SDK's current protocol (2026-07-28: one POST
per request, `subscriptions/listen` for change events).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import httpx
import pytest
from anyio.abc import TaskStatus
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from mtguard_rt.model import AuditRecord
from tests.audit_records import call_records

from .conftest import MTGUARD, server_cmd
from .listening import listening_proxy

pytestmark = [
    pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),  # slow real tests: one backend
]

START_TIMEOUT_S = 60  # sandbox and server start
STOP_TIMEOUT_S = 30  # SIGTERM -> the guard tears the sandbox down and exits
SESSION_TIMEOUT_S = 120


@asynccontextmanager
async def http_proxy(server: str, audit: Path, *flags: str) -> AsyncIterator[str]:
    """Run `mtguard proxy --listen 127.0.0.1:0` and yield its /mcp URL; stop it with SIGTERM."""
    cmd = [MTGUARD, "proxy", "--listen", "127.0.0.1:0", "--audit-log", str(audit),
           "--mount", str(Path(server_cmd(server)[1]).parent), *flags, "--", *server_cmd(server)]
    async with listening_proxy(
        cmd, start_timeout_s=START_TIMEOUT_S, stop_timeout_s=STOP_TIMEOUT_S
    ) as url:
        yield url


def records(path: Path) -> list[AuditRecord]:
    return call_records(path)


def text_of(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


async def test_sdk_client_over_http_is_guarded_and_sees_list_changed(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    flags = ("--env", "MTGUARD_ATTACK=rugpull", "--env", "MTGUARD_RUGPULL_AFTER=2")
    meta = {"mtguard/task": "echo words"}
    changes = anyio.Event()

    async def listen(client: Client, *, task_status: TaskStatus[None]) -> None:
        async with client.listen(tools_list_changed=True) as subscription:
            task_status.started()
            async for _event in subscription:
                changes.set()

    async with http_proxy("echo", audit, *flags) as url:
        with anyio.fail_after(SESSION_TIMEOUT_S):
            async with Client(streamable_http_client(url), mode="auto", cache=None,
                              read_timeout_seconds=90) as client:
                assert client.protocol_version == "2026-07-28"
                async with anyio.create_task_group() as tg:
                    await tg.start(listen, client)
                    assert "echo" in {t.name for t in (await client.list_tools()).tools}
                    said = [text_of(await client.call_tool("echo", {"text": w}, meta=meta))
                            for w in ("one", "two")]
                    await changes.wait()  # the rug pull's list_changed came through the proxy
                    third = await client.call_tool("echo", {"text": "three"}, meta=meta)
                    tg.cancel_scope.cancel()
    assert said == ["one", "two"]
    assert third.is_error and text_of(third).startswith("mtguard denied echo")
    calls = [r for r in records(audit) if r.tool == "echo" and not r.call_id.endswith("tools/list")]
    assert [r.decision for r in calls] == ["allow", "allow", "deny"]
    assert "MTGCANARY" not in text_of(third)  # the pulled tool's result was withheld


async def test_http_guard_denies_and_rejects_foreign_origins(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    async with http_proxy("terminal", audit) as url:
        with anyio.fail_after(SESSION_TIMEOUT_S):
            async with httpx.AsyncClient(timeout=60) as raw:
                foreign = await raw.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                                         headers={"origin": "https://evil.example",
                                                  "accept": "application/json"})
            async with Client(streamable_http_client(url), mode="auto", cache=None,
                              read_timeout_seconds=90) as client:
                result = await client.call_tool("run_command",
                                                {"command": "cat /home/mtguard/.ssh/id_rsa"})
    assert foreign.status_code == 403
    assert result.is_error and text_of(result).startswith("mtguard denied run_command")
    assert "MTGCANARY" not in text_of(result)
    (rec,) = records(audit)
    assert (rec.decision, rec.phase, rec.tree) == ("deny", "pre", None)
    assert "sensitive-file-arg" in rec.rules
