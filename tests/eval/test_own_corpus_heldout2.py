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

from pathlib import Path

import pytest

from mtguard_rt.eval.owncorpus.cases import (
    HELDOUT2_DIR,
    HELDOUT2_SERVERS,
)

from .own_replay import check_disjoint, check_held_out_shape, check_set_option_and_report, replay


def test_heldout2_shape() -> None:
    check_held_out_shape("held-out-2", "h2-", HELDOUT2_DIR, HELDOUT2_SERVERS, 64, 8)


def test_three_sets_are_disjoint() -> None:
    check_disjoint("held-out-2")


def test_set_option_and_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    check_set_option_and_report("held-out-2", "xs-01", tmp_path, capsys)  # a dev id


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
