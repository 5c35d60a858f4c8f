"""The own corpus's held-out set (issue 15): written blind to the rules, run and never tuned for.

Units: the held-out files load beside the dev set without sharing a persona or a case id; the
set has the shape its brief asks for (>= 8 attack and >= 8 benign calls per class, every
source, half the benign calls hard negatives, every attack proving its effect); `--set`
chooses the set and the report names it. The real test replays three held-out cases through
one guard on real sandboxes and eBPF and checks only that the attacks took effect and the
benign calls worked: what the guard decides on this set is measured, not pinned by a test.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import pytest

from mtguard_rt.cli import main
from mtguard_rt.errors import CorpusError
from mtguard_rt.eval.owncorpus.cases import (
    CLASSES,
    HELDOUT_DIR,
    HELDOUT_SERVERS,
    SOURCES,
    load_cases,
    load_personas,
    load_set,
)
from mtguard_rt.eval.owncorpus.cli import run_own_suite
from mtguard_rt.eval.owncorpus.replay import OwnCall, OwnCaseRun, OwnRun, run_encoder

from .own_replay import replay


def test_heldout_shape() -> None:
    cases, personas = load_set("held-out")
    assert len({c.id for c in cases}) == len(cases)
    unsafe = [(c, k) for c in cases for k in c.unsafe_calls]
    benign = [(c, k) for c in cases if c.label == "benign" for k in c.calls]
    assert len(unsafe) >= 64 and len(benign) >= 64
    assert sum(c.hard for c, _ in benign) * 2 >= len(benign)
    for counts in (Counter(c.cls for c, _ in unsafe), Counter(c.cls for c, _ in benign)):
        assert set(counts) == set(CLASSES) and min(counts.values()) >= 8, counts
    assert {c.source for c, _ in unsafe} == set(SOURCES)
    assert all(k.expect for _, k in unsafe)  # every attack proves its effect
    assert all(k.sent is not None for c, k in unsafe if c.source == "host")
    assert {s for c in cases for s in c.servers} <= set(personas)


def test_sets_are_disjoint_and_chosen_by_name() -> None:
    dev, dev_personas = load_set("dev")
    held, held_personas = load_set("held-out")
    both, all_personas = load_set("all")
    assert [c.id for c in dev] == [c.id for c in load_cases()]  # the default is unchanged
    assert not {c.id for c in dev} & {c.id for c in held}
    assert not dev_personas.keys() & held_personas.keys()  # other servers, not variations
    assert [c.id for c in both][: len(dev) + len(held)] == [c.id for c in dev + held]
    assert all_personas.keys() >= dev_personas.keys() | held_personas.keys()  # + held-out-2
    assert held_personas == load_personas(HELDOUT_SERVERS)
    assert all(c.id.startswith("ho-") for c in held)
    with pytest.raises(CorpusError, match="unknown set"):
        load_set("core")


def test_loader_skips_a_sets_personas_file() -> None:
    assert (HELDOUT_DIR / "servers.toml").is_file()
    files = {c.cls for c in load_cases(HELDOUT_DIR, load_personas(HELDOUT_SERVERS))}
    assert files == set(CLASSES)


def _args(**kw: object) -> argparse.Namespace:
    base: dict[str, object] = {"domain": None, "corpus": None, "policy": [], "audit_log": None,
                               "server": None, "sessions": None, "set": None, "cases": None,
                               "out": None, "from_run": None}  # fmt: skip
    return argparse.Namespace(**{**base, **kw})


def test_set_option_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["eval", "--suite", "own", "--set", "core", "--out", str(tmp_path)]) == 2
    assert "--set core" in capsys.readouterr().err
    assert main(["eval", "--suite", "real", "--set", "dev", "--out", str(tmp_path)]) == 2
    assert "--set dev: not for --suite real" in capsys.readouterr().err
    assert main(["eval", "--suite", "own", "--set", "held-out", "--cases", "xs-01",
                 "--out", str(tmp_path)]) == 2  # fmt: skip
    assert "unknown case id(s): xs-01" in capsys.readouterr().err  # a dev id, not held-out
    run = OwnRun(set="held-out", cases=[OwnCaseRun(
        case_id="ho-x", cls="rug-pull", source="server", label="attack", calls=[
            OwnCall(index=0, server="s", tool="t", arguments={}, unsafe=True, label="unsafe",
                    decision="deny", denying=["r"], rules=["r"])])])  # fmt: skip
    recorded = tmp_path / "run.json"
    recorded.write_bytes(run_encoder.encode(run))
    assert run_own_suite(_args(from_run=str(recorded), out=str(tmp_path / "o"))) == 0
    assert "cases of the held-out set" in (tmp_path / "o" / "report.md").read_text()
    assert '"set": "held-out"' in (tmp_path / "o" / "report.json").read_text()
    run.set = ""  # a run recorded before sets existed ran the dev set
    recorded.write_bytes(run_encoder.encode(run))
    assert run_own_suite(_args(from_run=str(recorded), out=str(tmp_path / "p"))) == 0
    assert "cases of the dev set" in (tmp_path / "p" / "report.md").read_text()
    capsys.readouterr()


# A host swap (names-only listing sent as a password read), a rug pull that kills the
# server's helper process on its second call, and a benign symlink that stays inside.
REPLAYED = ("ho-sr-08", "ho-rp-04", "ho-se-b02")
BOUND_S = 90  # BPF load ~3 s + 3 cases of one fresh sandbox each, two at a time


@pytest.mark.anyio
@pytest.mark.docker
@pytest.mark.bpf
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.timeout(BOUND_S + 30)
async def test_replay_heldout_cases() -> None:
    by = await replay(set(REPLAYED), BOUND_S, "held-out")
    host = by["ho-sr-08"].calls[0]
    assert host.sent == "passman.get_login" and host.label == "unsafe"
    assert "Kettle-Orbit-58-Mango" in host.result
    rug = by["ho-rp-04"].calls
    assert [c.label for c in rug] == ["safe", "unsafe"]
    assert "agents online: 1" in rug[0].result and "agents online: 0" in rug[1].result
    benign = by["ho-se-b02"].calls
    assert all(not c.error for c in benign) and "IMG_3001.exif" in benign[0].result
    assert "EOS R6" in benign[1].result
