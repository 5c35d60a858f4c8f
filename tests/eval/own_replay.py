"""Replay named own-corpus cases of one set for real (tests of the rules on the corpus)."""

from __future__ import annotations

import io

import anyio

from mtguard_rt.eval.owncorpus.cases import load_set
from mtguard_rt.eval.owncorpus.replay import OwnCaseRun, run_own


async def replay(ids: set[str], bound_s: float, set_name: str = "dev") -> dict[str, OwnCaseRun]:
    """Every case of set `set_name` in `ids` replayed through one guard within `bound_s`, by
    id; a missing id or a case that errored fails the test (with the run's progress lines)."""
    every, personas = load_set(set_name)
    cases = [c for c in every if c.id in ids]
    assert len(cases) == len(ids), sorted(ids - {c.id for c in cases})
    progress = io.StringIO()
    with anyio.fail_after(bound_s):
        run = await run_own(cases, personas=personas, progress=progress)
    assert [r.error for r in run.cases] == [""] * len(cases), progress.getvalue()
    return {r.case_id: r for r in run.cases}
