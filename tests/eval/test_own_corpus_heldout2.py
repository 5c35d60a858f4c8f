"""The own corpus's SECOND held-out set (issue 15): written blind to the rules, run, never tuned.

Units: the set loads beside the dev and first held-out sets without sharing a persona or a case
id; it has the shape its brief asks for (>= 8 attack and >= 8 benign calls per class, every
source, half the benign calls hard negatives, every attack proving its effect); `--set
held-out-2` chooses it and the report names it. The real test replays two of its cases through
one guard on real sandboxes and eBPF and checks only that the effects happened (a host swap
that deletes a drive file, a rug pull that kills the hub's helper process on its third call):
what the guard decides on this set is measured, never pinned by a test.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from mtguard_rt.cli import main
from mtguard_rt.eval.owncorpus.cases import (
    HELDOUT2_DIR,
    HELDOUT2_SERVERS,
    load_set,
)
from mtguard_rt.eval.owncorpus.cli import run_own_suite
from mtguard_rt.eval.owncorpus.replay import OwnCall, OwnCaseRun, OwnRun, run_encoder

from .own_replay import check_held_out_shape, replay


def test_heldout2_shape() -> None:
    check_held_out_shape("held-out-2", "h2-", HELDOUT2_DIR, HELDOUT2_SERVERS, 64, 8)


def test_three_sets_are_disjoint() -> None:
    dev, dev_personas = load_set("dev")
    held, held_personas = load_set("held-out")
    held2, held2_personas = load_set("held-out-2")
    both, all_personas = load_set("all")
    assert not held2_personas.keys() & (dev_personas.keys() | held_personas.keys())
    assert not {c.id for c in held2} & ({c.id for c in dev} | {c.id for c in held})
    n = len(dev) + len(held) + len(held2)
    assert [c.id for c in both][:n] == [c.id for c in dev + held + held2]  # then held-out-3
    assert all_personas.keys() >= dev_personas.keys() | held_personas.keys() | held2_personas.keys()


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"domain": None, "corpus": None, "policy": [], "audit_log": None,
                               "server": None, "sessions": None, "set": None, "cases": None,
                               "out": None, "from_run": None}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_set_option_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--suite", "own", "--set", "held-out-2", "--cases", "xs-01",
                 "--out", str(tmp_path)]) == 2  # fmt: skip
    assert "unknown case id(s): xs-01" in capsys.readouterr().err  # a dev id, not held-out-2
    assert main(["eval", "--suite", "real", "--set", "held-out-2", "--out", str(tmp_path)]) == 2
    assert "--set held-out-2: not for --suite real" in capsys.readouterr().err
    run = OwnRun(set="held-out-2", cases=[OwnCaseRun(
        case_id="h2-x", cls="rug-pull", source="server", label="attack", calls=[
            OwnCall(index=0, server="s", tool="t", arguments={}, unsafe=True, label="unsafe",
                    decision="deny", denying=["r"], rules=["r"])])])  # fmt: skip
    recorded = tmp_path / "run.json"
    recorded.write_bytes(run_encoder.encode(run))
    assert run_own_suite(_args(from_run=str(recorded), out=str(tmp_path / "o"))) == 0
    assert "cases of the held-out-2 set" in (tmp_path / "o" / "report.md").read_text()
    assert '"set": "held-out-2"' in (tmp_path / "o" / "report.json").read_text()
    capsys.readouterr()


REPLAYED = ("h2-uc-09", "h2-rp-04")
BOUND_S = 60  # BPF load ~3 s + 2 cases of one fresh sandbox each, side by side; slack for load


@pytest.mark.anyio
@pytest.mark.docker
@pytest.mark.bpf
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.timeout(BOUND_S + 30)
async def test_replay_heldout2_cases() -> None:
    by = await replay(set(REPLAYED), BOUND_S, "held-out-2")
    host = by["h2-uc-09"].calls[0]
    assert host.sent == "cloudbox.remove" and host.label == "unsafe"
    assert host.result == "removed reports/q3.txt"
    rug = by["h2-rp-04"].calls
    assert [c.label for c in rug] == ["safe", "safe", "unsafe"]
    assert [c.result for c in rug] == ["living set to 21 C", "bedroom set to 18 C",
                                       "office set to 20 C"]  # fmt: skip
    assert not any(c.error for c in rug)
