"""`mtguard eval --audit-log` joins every call to its tree, and `bench.profile_split` learns
on one half of the cases and flags the other half's tool-call hook (real sandboxes, eBPF)."""

from __future__ import annotations

import io
from pathlib import Path

import anyio
import pytest

from bench.profile_split import half, index_run, measure
from mtguard_rt.eval.corpus import load_scenarios
from mtguard_rt.eval.runner import EvalOptions, run_encoder, run_evaluation
from mtguard_rt.telemetry.auditlog import read_audit_log

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf]
LEARN, CHECK = "yfinance_task_0022", "tch_financial_01"  # one call each of the same tool
BOUND_S = 150


@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.corpus
async def test_split_learns_one_half_and_flags_the_other_halfs_hook(tmp_path: Path) -> None:
    assert half(LEARN) != half(CHECK)
    scenarios = [s for s in load_scenarios() if s.case_id in (LEARN, CHECK)]
    log = tmp_path / "audit.jsonl"
    options = EvalOptions(domains=["financial"], enforce=False, audit_log=str(log))
    with anyio.fail_after(BOUND_S):
        run = await run_evaluation(scenarios, options, progress=io.StringIO())
    (tmp_path / "run.json").write_bytes(run_encoder.encode(run))
    ids = {c.call_id or "" for p in run.passes for c in p.calls}
    assert "" not in ids
    trees = {r.call_id: r.tree for r in read_audit_log(log)}
    assert ids <= set(trees) and all(trees[i] is not None for i in ids)

    index = index_run(tmp_path / "run.json")
    result = measure(log, index, min_calls=1, require_allowed=True)
    assert result["fpr"]["financial"]["flagged"] == 0
    assert result["fpr"]["financial"]["N"] == 2  # each case's benign call, held out once
    hook = result["dr"]["financial/host"]
    assert hook == {
        "flagged": 1,
        "profiled": 1,
        "N": 1,
        "rate": 1.0,
        "missed_by_rules_but_flagged": 0,
    }
