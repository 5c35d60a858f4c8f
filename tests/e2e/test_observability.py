"""The guard's wiring to its optional collaborators, with real calls in the sandbox: an LLM
judge on loopback (chat-completions) and an OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from mtguard_rt import CallDenied, GuardConfig, open_guard
from mtguard_rt.sandbox import SandboxConfig
from tests.audit_records import last_call

from ..audit.llm_server import serve_llm
from ..telemetry.receiver import run_receiver
from .conftest import SERVERS

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf]
CALC = [sys.executable, str(SERVERS / "calculator.py")]


def base_config(tmp_path: Path, **fields: object) -> GuardConfig:
    return GuardConfig(
        audit_log=str(tmp_path / "audit.jsonl"),
        telemetry={"exporter": "off"},
        sandbox=SandboxConfig(mounts=[str(SERVERS)]),
        **fields,
    )  # type: ignore[arg-type]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_llm_judge_denies_a_call_the_rules_allow(tmp_path: Path) -> None:
    with serve_llm() as llm:
        config = base_config(
            tmp_path, llm={"base_url": llm.base_url, "model": "deny", "timeout_s": 10}
        )
        async with open_guard(config) as guard, guard.connect(CALC, name="calc") as server:
            with pytest.raises(CallDenied) as info:
                await server.call_tool("calculate", {"expression": "1+1"}, task="add one and one")
        record = info.value.record
        assert record is not None and record.llm_used and "llm-judge" in record.rules
        assert record.phase == "pre" and record.tree is None  # the judge spoke before dispatch
        prompt = llm.requests[0]["messages"][-1]["content"]
        assert "calculate" in prompt and "1+1" in prompt
        assert "Evaluate a mathematical" not in prompt  # the tool description never reaches it


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_a_guarded_call_is_exported_as_spans(tmp_path: Path) -> None:
    with run_receiver() as rx:
        config = base_config(tmp_path)
        config.telemetry = {"exporter": "otlp-http", "endpoint": rx.url}
        parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
        async with open_guard(config) as guard, guard.connect(CALC, name="calc") as server:
            await server.call_tool(
                "calculate",
                {"expression": "2**10"},
                task="powers of two",
                meta={"traceparent": parent},
            )
            record = last_call(guard.records)
        with anyio.fail_after(30):
            while not rx.spans():  # noqa: ASYNC110 - the receiver fills it from its own thread
                await anyio.sleep(0.05)
    spans = rx.spans()
    root = next(s for s in spans if s.name == "tools/call calculate")
    assert root.trace_id.hex() == "0af7651916cd43dd8448eb211c80319c"  # child of the agent's trace
    assert root.parent_span_id.hex() == "b7ad6b7169203331"
    assert record.trace_id == root.trace_id.hex()
    names = {s.name for s in spans}
    assert {"tools/call calculate"} < names and len(spans) >= 4  # root, stages, processes
    assert record.tree is not None
    pids = {str(p.pid) for p in record.tree.processes}
    exported = {a.value.int_value for s in spans for a in s.attributes if a.key == "process.pid"}
    assert {int(p) for p in pids} <= exported
