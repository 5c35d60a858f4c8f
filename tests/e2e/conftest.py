"""Whole-system fixtures: the real MCP SDK client driving `mtguard proxy` as a subprocess."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from mtguard_rt.eval.mcp_client import open_stdio_client

REPO = Path(__file__).resolve().parents[2]
SERVERS = REPO / "examples" / "servers"
MTGUARD = str(Path(sys.executable).parent / "mtguard")


def server_cmd(name: str) -> list[str]:
    return [sys.executable, str(SERVERS / f"{name}.py")]


ProxyFactory = Callable[..., AbstractAsyncContextManager[Any]]


@pytest.fixture
def audit_path(tmp_path: Path) -> Path:
    return tmp_path / "audit.jsonl"


@pytest.fixture
def proxy(audit_path: Path) -> ProxyFactory:
    @asynccontextmanager
    async def start(
        server: str, *flags: str, env: dict[str, str] | None = None, mode: str = "auto"
    ) -> AsyncIterator[Any]:
        cmd = [
            MTGUARD,
            "proxy",
            "--audit-log",
            str(audit_path),
            "--mount",
            str(SERVERS),
            *flags,
            "--",
            *server_cmd(server),
        ]
        async with open_stdio_client(cmd, env=env, mode=mode, request_timeout=90) as client:  # type: ignore[arg-type]
            yield client

    return start
