"""Whole-system fixtures: the real MCP SDK client driving `mtguard proxy` as a subprocess."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from mtguard_rt import GuardConfig
from mtguard_rt.config import OnlineSection
from mtguard_rt.eval.mcp_client import open_stdio_client
from mtguard_rt.sandbox import SandboxConfig

REPO = Path(__file__).resolve().parents[2]
SERVERS = REPO / "examples" / "servers"
TERMINAL = [sys.executable, str(SERVERS / "terminal.py")]
# names the canary without the words the pre-audit looks for, as an evasive attacker would
READ_CANARY = 'cat $HOME/.s""sh/id_r""sa >/dev/null'
MTGUARD = str(Path(sys.executable).parent / "mtguard")


def online_guard_config(tmp_path: Path, mode: str, kill_on_touch: bool = False) -> GuardConfig:
    """A library guard for the example servers, online mode `mode`, with a workspace
    `tmp_path/ws` the sandbox (uid 1000) can write; no audit log, no telemetry."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    os.chmod(workspace, 0o777)  # the sandbox runs as uid 1000
    return GuardConfig(
        audit_log=None,
        telemetry={"exporter": "off"},
        online=OnlineSection(mode=mode, kill_on_touch=kill_on_touch),  # type: ignore[arg-type]
        sandbox=SandboxConfig(mounts=[str(SERVERS)], workspace=str(workspace)),
    )


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
