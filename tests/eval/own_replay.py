"""Replay named own-corpus cases of one set for real (tests of the rules on the corpus)."""

from __future__ import annotations

import io
from collections import Counter
from pathlib import Path

import anyio

from mtguard_rt.eval.owncorpus.cases import (
    CLASSES,
    SOURCES,
    Case,
    load_cases,
    load_personas,
    load_set,
)
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


def check_held_out_shape(
    set_name: str, prefix: str, folder: Path, servers: Path, least: int, per_class: int
) -> list[Case]:
    """A held-out set's shape: unique `prefix` ids, at least `least` attack and benign calls
    (half the benign hard) and `per_class` of each per class, all four sources, every attack
    proving its effect, a host attack saying what it sent, its own persona file, one case
    file per class. Its cases, for a set's own further checks."""
    cases, personas = load_set(set_name)
    assert len({c.id for c in cases}) == len(cases)
    assert all(c.id.startswith(prefix) for c in cases)
    unsafe = [(c, k) for c in cases for k in c.unsafe_calls]
    benign = [(c, k) for c in cases if c.label == "benign" for k in c.calls]
    assert len(unsafe) >= least and len(benign) >= least
    assert sum(c.hard for c, _ in benign) * 2 >= len(benign)
    for counts in (Counter(c.cls for c, _ in unsafe), Counter(c.cls for c, _ in benign)):
        assert set(counts) == set(CLASSES) and min(counts.values()) >= per_class, counts
    assert {c.source for c, _ in unsafe} == set(SOURCES)
    assert all(k.expect for _, k in unsafe)  # every attack proves its effect
    assert all(k.sent is not None for c, k in unsafe if c.source == "host")
    assert {s for c in cases for s in c.servers} <= set(personas)
    assert personas == load_personas(servers)
    files = {c.cls for c in load_cases(folder, personas)}  # servers.toml is skipped
    assert files == set(CLASSES)
    return cases
