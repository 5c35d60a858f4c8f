"""Learned profiles end to end: real guarded calls to the sandboxed finance server are
learned by `mtguard learn`, then a rug-pulled implementation that runs a shell and reads a
file is flagged by `profile-deviation` with that evidence, and a benign repeat is not."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import pytest

from mtguard_rt import CallDenied, GuardConfig, open_guard
from mtguard_rt.audit.profile import load_profile
from mtguard_rt.cli import main
from mtguard_rt.config import OnlineSection, ProfileSection
from mtguard_rt.sandbox import SandboxConfig
from tests.audit_records import last_call

SERVERS = Path(__file__).resolve().parents[2] / "examples" / "servers"
FINANCE = [sys.executable, str(SERVERS / "finance.py")]


def _task(ticker: str) -> str:
    return f"Get the company profile of {ticker}"


@pytest.mark.anyio
@pytest.mark.docker
@pytest.mark.bpf
async def test_learned_profile_flags_a_rug_pull_not_a_benign_repeat(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "audit.jsonl"
    sandbox = SandboxConfig(mounts=[str(SERVERS)])
    learn_config = GuardConfig(audit_log=str(log), telemetry={"exporter": "off"}, sandbox=sandbox)
    async with open_guard(learn_config) as guard:
        async with guard.connect(FINANCE, name="fin") as server:
            for ticker in ("AAPL", "MSFT", "NVDA"):
                await server.call_tool("get_stock_info", {"ticker": ticker}, task=_task(ticker))
    assert all(r.decision == "allow" for r in guard.records)

    out = tmp_path / "profile.toml"
    assert main(["learn", "--audit-log", str(log), "--out", str(out), "--min-calls", "3"]) == 0
    assert "fin.get_stock_info: 3 call(s)" in capsys.readouterr().err
    assert load_profile(out).missing("fin", "get_stock_info") is None

    policy = tmp_path / "policy.toml"
    policy.write_text('[guard]\npinning_action = "observe"\n')  # let the rug pull run
    config = GuardConfig(
        audit_log=str(tmp_path / "audit2.jsonl"),
        policies=[str(policy)],
        profile=ProfileSection(path=str(out), mode="enforce"),
        online=OnlineSection(mode="observe"),  # let the payload run to its end (no kill)
        telemetry={"exporter": "off"},
        sandbox=sandbox,
    )
    attack = {
        "MTGUARD_RUGPULL_PAYLOAD": "shell",
        "MTGUARD_RUGPULL_AFTER": "1",
        "MTGUARD_ATTACK_TOOL": "get_stock_info",
        "MTGUARD_RUGPULL_COMMAND": "cat /etc/hostname",
    }
    async with open_guard(config) as guard:
        async with guard.connect(FINANCE, name="fin") as server:
            result = await server.call_tool(
                "get_stock_info", {"ticker": "GOOGL"}, task=_task("GOOGL")
            )
            benign = last_call(guard.records)
        assert "GOOGL" in result["content"][0]["text"]
        assert benign.decision == "allow" and "profile-deviation" not in benign.rules
        rugged = msgspec.structs.replace(sandbox, env=attack)
        async with guard.connect(FINANCE, name="fin", sandbox=rugged) as server:
            await server.call_tool("get_stock_info", {"ticker": "AMZN"}, task=_task("AMZN"))
            assert "profile-deviation" not in last_call(guard.records).rules  # still benign
            with pytest.raises(CallDenied) as info:
                await server.call_tool("get_stock_info", {"ticker": "TSLA"}, task=_task("TSLA"))
    found = [v for v in info.value.verdict.violations if v.rule == "profile-deviation"]
    assert found and found[0].mode == "enforce"
    evidence = "\n".join(found[0].evidence)
    assert "executed /usr/bin/cat" in evidence or "executed /bin/cat" in evidence
    assert "read /etc/hostname" in evidence
    assert "fin.get_stock_info" in found[0].reason
