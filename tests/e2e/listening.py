"""Run `mtguard proxy --listen 127.0.0.1:0 ...` as a process and yield the /mcp URL it prints."""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio


@asynccontextmanager
async def listening_proxy(
    cmd: list[str], *, start_timeout_s: float, stop_timeout_s: float
) -> AsyncIterator[str]:
    """Start `cmd` (a `--listen` proxy), yield its /mcp URL, stop it with SIGTERM and assert
    a clean, signal-driven shutdown (exit status 0). Its stderr is replayed for pytest."""
    process = await anyio.open_process(cmd, stdin=None, stdout=None, stderr=-1)
    log: list[bytes] = []
    found = anyio.Event()

    async def drain() -> None:  # keep reading, so the proxy never blocks on a full pipe
        assert process.stderr is not None
        async for chunk in process.stderr:
            log.append(chunk)
            if b"serving MCP at" in b"".join(log):
                found.set()

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(drain)
            with anyio.fail_after(start_timeout_s):
                await found.wait()
            url = re.search(rb"serving MCP at (\S+/mcp)", b"".join(log))
            assert url is not None
            yield url.group(1).decode()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(stop_timeout_s):
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
            await process.wait()
        if process.returncode is None:
            process.kill()
            with anyio.CancelScope(shield=True):
                await process.wait()
        await process.aclose()
        sys.stderr.write(b"".join(log).decode(errors="replace"))
    assert process.returncode == 0
