"""Replay named own-corpus cases of one set for real (tests of the rules on the corpus)."""

from __future__ import annotations

import argparse
import io
from collections import Counter
from pathlib import Path

import anyio
import pytest

from mtguard_rt.cli import main
from mtguard_rt.eval.owncorpus.cases import (
    CLASSES,
    SETS,
    SOURCES,
    Case,
    Persona,
    load_cases,
    load_personas,
    load_set,
)
from mtguard_rt.eval.owncorpus.cli import run_own_suite
from mtguard_rt.eval.owncorpus.replay import OwnCall, OwnCaseRun, OwnRun, run_encoder, run_own


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


def check_disjoint(set_name: str) -> None:
    """`set_name` shares no persona (other servers, not variations) and no case id with the
    sets before it, and `all` lists them in order (the last set: exactly them)."""
    at = SETS.index(set_name)
    earlier: list[Case] = []
    earlier_personas: dict[str, Persona] = {}
    for name in SETS[:at]:
        cases, personas = load_set(name)
        earlier += cases
        earlier_personas.update(personas)
    held, held_personas = load_set(set_name)
    every, all_personas = load_set("all")
    assert not held_personas.keys() & earlier_personas.keys()
    assert not {c.id for c in held} & {c.id for c in earlier}
    ids, names = [c.id for c in earlier + held], earlier_personas.keys() | held_personas.keys()
    assert [c.id for c in every][: len(ids)] == ids
    assert all_personas.keys() >= names
    if SETS[at + 1] == "all":
        assert len(every) == len(ids) and all_personas.keys() == names


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"domain": None, "corpus": None, "policy": [], "audit_log": None,
                               "server": None, "sessions": None, "set": None, "cases": None,
                               "out": None, "from_run": None}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def check_set_option_and_report(
    set_name: str, foreign_id: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--set set_name` picks only its own cases (`foreign_id`, another set's, is unknown),
    is refused for `--suite real`, and a recorded run's report names the set."""
    assert main(["eval", "--suite", "own", "--set", set_name, "--cases", foreign_id,
                 "--out", str(tmp_path)]) == 2  # fmt: skip
    assert f"unknown case id(s): {foreign_id}" in capsys.readouterr().err
    assert main(["eval", "--suite", "real", "--set", set_name, "--out", str(tmp_path)]) == 2
    assert f"--set {set_name}: not for --suite real" in capsys.readouterr().err
    run = OwnRun(set=set_name, cases=[OwnCaseRun(
        case_id="x", cls="rug-pull", source="host", label="attack", calls=[
            OwnCall(index=0, server="s", tool="t", arguments={}, unsafe=True, label="unsafe",
                    decision="deny", denying=["r"], rules=["r"])])])  # fmt: skip
    recorded = tmp_path / "run.json"
    recorded.write_bytes(run_encoder.encode(run))
    assert run_own_suite(_args(from_run=str(recorded), out=str(tmp_path / "o"))) == 0
    assert f"cases of the {set_name} set" in (tmp_path / "o" / "report.md").read_text()
    assert f'"set": "{set_name}"' in (tmp_path / "o" / "report.json").read_text()
    capsys.readouterr()
