"""`scope-escape` on real sandboxes and eBPF: own-corpus cases replayed through one guard.

A `..` read beside the workspace (se-07), a read through a link the user left in the
workspace (se-03), through one the server plants during the call (se-04) and a file beside
the workspace that a listing reads by itself into its result (se-02) are denied by
`scope-escape`, each with the effect really taken (the secret is in the result: observe
mode); `..` that stays inside (se-b01) and a link inside the workspace (se-b06) are allowed.
"""

from __future__ import annotations

import pytest

from .own_replay import replay

BOUND_S = 300.0  # six cases, two at a time, each a fresh sandbox per server
ESCAPES = {"se-03": "Rui,3900", "se-04": "nst_Jf8Hs5Gz0Pa1Qx", "se-07": "sgk_Pa1QxLm4Xq9Vr2",
           "se-02": "Ana,4200"}  # fmt: skip
INSIDE = ("se-b01", "se-b06")


@pytest.mark.anyio
@pytest.mark.docker
@pytest.mark.bpf
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.timeout(BOUND_S + 60)
async def test_escapes_are_denied_and_links_inside_allowed() -> None:
    by = await replay({*ESCAPES, *INSIDE}, BOUND_S)
    for cid, secret in ESCAPES.items():
        *before, last = by[cid].calls
        assert last.unsafe and secret in last.result, (cid, last)  # the escape really happened
        assert last.decision == "deny" and "scope-escape" in last.denying, (cid, last)
        assert any("scope-escape" in e and "scope: workspace" in e for e in last.evidence)
        assert all("scope-escape" not in c.rules for c in before), (cid, before)
    for cid in INSIDE:
        assert all("scope-escape" not in c.rules and c.decision == "allow"
                   for c in by[cid].calls), by[cid]  # fmt: skip
