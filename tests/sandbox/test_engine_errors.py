"""Docker unreachable, refused or forbidden: one clear error each (real sockets, no daemon)."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from mtguard_rt.errors import DockerUnavailable
from mtguard_rt.sandbox import open_engine

pytestmark = pytest.mark.anyio


async def test_missing_socket(tmp_path) -> None:  # type: ignore[no-untyped-def]
    async with open_engine(str(tmp_path / "docker.sock")) as engine:
        with pytest.raises(DockerUnavailable, match=r"does not exist.*dockerd"):
            await engine.ping()


async def test_socket_with_no_daemon(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "docker.sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)  # bound but never listening: connect() is refused
    try:
        async with open_engine(path) as engine:
            with pytest.raises(DockerUnavailable, match="refused"):
                await engine.ping()
    finally:
        sock.close()


@pytest.mark.root
def test_permission_denied_names_the_fix(tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "docker.sock")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(path)
    sock.listen()
    tmp_path.chmod(0o755)
    code = (
        # Import everything first: the interpreter's own files are not readable by nobody.
        "import anyio, anyio._backends._asyncio, os, httpcore, h11\n"
        "from mtguard_rt.sandbox import open_engine\n"
        "os.setgid(65534); os.setuid(65534)\n"
        "async def main():\n"
        f"    async with open_engine({path!r}) as e: await e.ping()\n"
        "anyio.run(main)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
    finally:
        sock.close()
    assert "DockerUnavailable" in done.stderr
    assert "permission denied" in done.stderr and "docker group" in done.stderr
