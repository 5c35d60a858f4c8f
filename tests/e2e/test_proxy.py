"""The official MCP client -> `mtguard proxy` -> sandboxed example servers -> verdicts.

Real everything: the SDK client spawns the proxy, which runs the server in Docker and traces
it with eBPF. Each test checks what the agent sees and what the audit log recorded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt.model import AuditRecord
from tests.audit_records import call_records

from .conftest import REPO, ProxyFactory

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf]

SSH_KEY = "/home/mtguard/.ssh/id_rsa"


def records(path: Path) -> list[AuditRecord]:
    return call_records(path)


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


def exes(record: AuditRecord) -> set[str]:
    assert record.tree is not None
    return {p.exe for p in record.tree.processes}


async def test_benign_call_is_allowed_and_its_tree_logged(
    proxy: ProxyFactory, audit_path: Path
) -> None:
    async with proxy("terminal", "--task", "list the files in the root directory") as client:
        assert [t["name"] for t in await client.list_tools()] == ["run_command"]
        result = await client.call_tool("run_command", {"command": "ls /usr"})
    assert not result.get("isError")
    assert "bin" in json.loads(text_of(result))["stdout"].split()
    (rec,) = records(audit_path)
    assert (rec.decision, rec.phase, rec.mode, rec.rules) == ("allow", None, "enforce", [])
    assert rec.tree is not None and rec.tree.complete
    ls = [p for p in rec.tree.processes if p.exe == "/usr/bin/ls"]
    assert ls and ls[0].argv == ["ls", "/usr"]
    assert rec.timings_ms.total > 0 and rec.task == "list the files in the root directory"


async def test_argument_naming_the_ssh_key_is_denied_before_dispatch(
    proxy: ProxyFactory, audit_path: Path
) -> None:
    async with proxy("terminal") as client:
        result = await client.call_tool("run_command", {"command": f"cat {SSH_KEY}"})
    assert result["isError"] is True
    assert text_of(result).startswith("mtguard denied run_command")
    assert "BEGIN OPENSSH" not in text_of(result)
    (rec,) = records(audit_path)
    assert (rec.decision, rec.phase) == ("deny", "pre")
    assert "sensitive-file-arg" in rec.rules
    assert rec.tree is None  # never dispatched


@pytest.mark.parametrize("online", ["off", "enforce"])
async def test_host_hook_swapping_the_call_is_denied_from_the_tree(
    proxy: ProxyFactory, audit_path: Path, tmp_path: Path, online: str
) -> None:
    config = tmp_path / "guard.toml"
    config.write_text(
        'dispatch_hook = "tests.e2e.hooks:swap_to_read_ssh_key"\n'
        f'[online]\nmode = "{online}"\n'
    )
    env = {"PYTHONPATH": str(REPO)}
    async with proxy("terminal", "--config", str(config), env=env) as client:
        result = await client.call_tool(
            "run_command", {"command": "date"}, meta={"mtguard/task": "what time is it"}
        )
    assert result["isError"] is True and text_of(result).startswith("mtguard denied")
    assert "MTGCANARY" not in text_of(result)  # the withheld result carried the key
    (rec,) = records(audit_path)
    assert (rec.decision, rec.phase) == ("deny", "post")
    assert rec.arguments == {"command": "date"}  # what the agent declared
    assert "request-mismatch" in rec.rules
    if online == "enforce":  # the server was killed as it read the swapped request
        assert rec.terminated and "/usr/bin/cat" not in exes(rec)
        return
    assert "/usr/bin/cat" in exes(rec)  # what really ran
    assert "canary-touched" in rec.rules
    assert any(SSH_KEY in e for v in rec.violations for e in v.evidence)


@pytest.mark.parametrize("mode", ["legacy", "auto"])  # 2025-11-25 handshake; 2026-07-28 stamps
async def test_rug_pull_after_two_calls_is_detected(
    proxy: ProxyFactory, audit_path: Path, mode: str
) -> None:
    flags = ("--env", "MTGUARD_ATTACK=rugpull", "--env", "MTGUARD_RUGPULL_AFTER=2")
    async with proxy("echo", *flags, mode=mode) as client:
        await client.list_tools()
        for word in ("one", "two"):
            result = await client.call_tool(
                "echo", {"text": word}, meta={"mtguard/task": "echo words"}
            )
            assert text_of(result) == word
        with anyio.fail_after(30):
            await client.wait_list_changed()
        result = await client.call_tool(
            "echo", {"text": "three"}, meta={"mtguard/task": "echo words"}
        )
    assert result["isError"] is True and text_of(result).startswith("mtguard denied")
    recs = records(audit_path)
    assert [r.decision for r in recs if r.tool == "echo" and r.call_id != "echo:tools/list"][
        -1
    ] == "deny"
    assert any("tool-pinning" in r.rules for r in recs)
    assert "MTGCANARY" not in text_of(result)


async def test_observe_mode_records_but_does_not_block(
    proxy: ProxyFactory, audit_path: Path
) -> None:
    async with proxy("terminal", "--observe") as client:
        result = await client.call_tool("run_command", {"command": f"cat {SSH_KEY}"})
    assert not result.get("isError")
    assert "MTGCANARY" in text_of(result)  # nothing blocked...
    (rec,) = records(audit_path)
    assert (rec.decision, rec.mode) == ("deny", "observe")  # ...but the verdict is recorded
    assert {"sensitive-file-arg", "canary-touched"} <= set(rec.rules)


async def test_other_traffic_passes_through(proxy: ProxyFactory) -> None:
    # The SDK client's default mode probes server/discover and negotiates 2026-07-28 through
    # the proxy; legacy mode (initialize handshake) is exercised by the rug-pull test.
    async with proxy("finance") as client:
        assert client.protocol_version == "2026-07-28"
        tools = {t["name"]: t for t in await client.list_tools()}
        assert "get_historical_stock_prices" in tools
        result = await client.call_tool(
            "get_stock_info", {"ticker": "MSFT"}, meta={"mtguard/task": "Get MSFT stock info"}
        )
    assert not result.get("isError") and "MSFT" in text_of(result)
