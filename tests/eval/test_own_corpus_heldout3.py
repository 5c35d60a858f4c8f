"""The own corpus's THIRD held-out set (issue 15): written blind to the rules, run, never tuned.

Units: the set loads beside the dev, first and second held-out sets without sharing a persona
or a case id; it has the shape its brief asks for (>= 80 attack and >= 80 benign calls, >= 9
of each per class, every source, half the benign calls hard negatives, every attack proving its
effect, every fixture path inside its case root); `--set held-out-3` chooses it and the report
names it. The real test replays two of its cases through one guard on real sandboxes and eBPF
and checks only that the effects happened (a host swap that voids an invoice, a backup that
plants a link out of the workspace and archives the key behind it): what the guard decides on
this set is measured, never pinned by a test.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from mtguard_rt.cli import main
from mtguard_rt.eval.owncorpus.cases import (
    HELDOUT3_DIR,
    HELDOUT3_SERVERS,
    Case,
    Persona,
    load_set,
)
from mtguard_rt.eval.owncorpus.cli import run_own_suite
from mtguard_rt.eval.owncorpus.replay import OwnCall, OwnCaseRun, OwnRun, run_encoder

from .own_replay import check_held_out_shape, replay


def test_heldout3_shape() -> None:
    cases = check_held_out_shape("held-out-3", "h3-", HELDOUT3_DIR, HELDOUT3_SERVERS, 80, 9)
    assert not any(k.sent for c in cases if c.source != "host" for k in c.calls)


def test_four_sets_are_disjoint() -> None:
    earlier: list[Case] = []
    earlier_personas: dict[str, Persona] = {}
    for name in ("dev", "held-out", "held-out-2"):
        cases, personas = load_set(name)
        earlier += cases
        earlier_personas.update(personas)
    held3, held3_personas = load_set("held-out-3")
    every, all_personas = load_set("all")
    assert not held3_personas.keys() & earlier_personas.keys()  # other servers, not variations
    assert not {c.id for c in held3} & {c.id for c in earlier}
    n = len(earlier) + len(held3)
    assert [c.id for c in every][:n] == [c.id for c in earlier + held3]  # then held-out-4
    assert all_personas.keys() >= earlier_personas.keys() | held3_personas.keys()


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"domain": None, "corpus": None, "policy": [], "audit_log": None,
                               "server": None, "sessions": None, "set": None, "cases": None,
                               "out": None, "from_run": None}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_set_option_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--suite", "own", "--set", "held-out-3", "--cases", "h2-uc-09",
                 "--out", str(tmp_path)]) == 2  # fmt: skip
    assert "unknown case id(s): h2-uc-09" in capsys.readouterr().err  # held-out-2's, not ours
    assert main(["eval", "--suite", "real", "--set", "held-out-3", "--out", str(tmp_path)]) == 2
    assert "--set held-out-3: not for --suite real" in capsys.readouterr().err
    run = OwnRun(set="held-out-3", cases=[OwnCaseRun(
        case_id="h3-x", cls="scope-escape", source="user", label="attack", calls=[
            OwnCall(index=0, server="s", tool="t", arguments={}, unsafe=True, label="unsafe",
                    decision="allow")])])  # fmt: skip
    recorded = tmp_path / "run.json"
    recorded.write_bytes(run_encoder.encode(run))
    assert run_own_suite(_args(from_run=str(recorded), out=str(tmp_path / "o"))) == 0
    assert "cases of the held-out-3 set" in (tmp_path / "o" / "report.md").read_text()
    assert '"set": "held-out-3"' in (tmp_path / "o" / "report.json").read_text()
    capsys.readouterr()


REPLAYED = ("h3-uc-03", "h3-se-03")
BOUND_S = 120  # BPF load ~3 s + 2 one-sandbox cases side by side; slack for a loaded CI


@pytest.mark.anyio
@pytest.mark.docker
@pytest.mark.bpf
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.timeout(BOUND_S + 30)
async def test_replay_heldout3_cases() -> None:
    by = await replay(set(REPLAYED), BOUND_S, "held-out-3")
    host = by["h3-uc-03"].calls[0]
    assert host.sent == "invoicer.void_invoice" and host.label == "unsafe"
    assert host.result == "voided INV-1001"
    backup = by["h3-se-03"].calls[0]
    assert backup.label == "unsafe" and not backup.error
    assert "photos/.snapkeep-extra/deploy.pem" in backup.result.splitlines()
    assert "photos/2026/beach.jpg" in backup.result.splitlines()
