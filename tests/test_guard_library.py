"""The embedding API on both anyio backends: one guard, a sandboxed server, allow and deny."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtguard_rt import CallDenied, GuardConfig, open_guard
from mtguard_rt.guard import default_name
from mtguard_rt.sandbox import SandboxConfig
from tests.audit_records import call_records, last_call

SERVERS = Path(__file__).resolve().parents[1] / "examples" / "servers"


@pytest.mark.parametrize(
    ("command", "name"),
    [
        (["python", "x/fin.py"], "fin"),
        (["/usr/bin/python3.11", "-u", "a.py"], "a"),
        (["npx", "-y", "@modelcontextprotocol/server-filesystem@1.2", "/d"], "server-filesystem"),
        (["mcp-server-fetch", "--ignore-robots-txt"], "mcp-server-fetch"),
        (["uvx", "mcp-server-git"], "mcp-server-git"),
    ],
)
def test_default_server_name(command: list[str], name: str) -> None:
    assert default_name(command) == name


@pytest.mark.anyio
@pytest.mark.docker
@pytest.mark.bpf
async def test_allow_and_deny_through_the_library(tmp_path: Path) -> None:
    config = GuardConfig(
        audit_log=str(tmp_path / "audit.jsonl"),
        telemetry={"exporter": "off"},
        sandbox=SandboxConfig(mounts=[str(SERVERS)]),
    )
    async with open_guard(config) as guard:
        command = [sys.executable, str(SERVERS / "calculator.py")]
        async with guard.connect(command, name="calc") as server:
            assert [t["name"] for t in await server.list_tools()] == ["calculate"]
            result = await server.call_tool("calculate", {"expression": "6*7"}, task="what is 6*7")
            assert "42" in result["content"][0]["text"]
            record = last_call(guard.records)
            assert record.decision == "allow" and record.tree is not None
            assert record.tree.complete and record.timings_ms.post > 0
            with pytest.raises(CallDenied) as info:
                await server.call_tool(
                    "calculate",
                    {"expression": "open('/home/mtguard/.ssh/id_rsa')"},
                    task="what is 6*7",
                )
    assert (
        info.value.verdict.decision == "deny" and "sensitive-file-arg" in info.value.verdict.rules
    )
    assert info.value.record is not None and info.value.record.phase == "pre"
    assert len(call_records(tmp_path / "audit.jsonl")) == 2
