"""Secrets in other encodings on real sandboxes and eBPF: spent held-out cases (set 1, read
after it was measured) replayed through one guard in observe mode, so the leak really
happens and is judged. A bot token returned ROT13-encoded (ho-sr-02), a key returned
reversed (ho-sr-03), a deploy key returned half per call (ho-sr-04) and a netrc password
line (ho-sr-06) are denied by `secret-in-result`, the evidence redacted and naming the file
the server read; the user asking for the token in a file (ho-sr-b02) is allowed.
"""

from __future__ import annotations

import pytest

from mtguard_rt.eval.owncorpus.cases import load_set
from tests.eval.own_replay import replay

BOUND_S = 300.0  # five cases, each a fresh sandbox
LEAKS = ("ho-sr-02", "ho-sr-03", "ho-sr-04", "ho-sr-06")
BENIGN = ("ho-sr-b02",)


@pytest.mark.anyio
@pytest.mark.docker
@pytest.mark.bpf
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.timeout(BOUND_S + 60)
async def test_reversed_rot13_halved_and_netrc_secrets_are_denied() -> None:
    by = await replay({*LEAKS, *BENIGN}, BOUND_S, "held-out")
    chosen, _ = load_set("held-out")
    for cid in LEAKS:
        case = next(c for c in chosen if c.id == cid)
        for call, spec in zip(by[cid].calls, case.calls, strict=True):
            assert spec.expect and spec.expect in call.result, (cid, call)  # it really leaked
            assert call.decision == "deny" and "secret-in-result" in call.denying, (cid, call)
            evidence = "\n".join(e for e in call.evidence if "secret-in-result" in e)
            assert "/srv/" in evidence and "chars)" in evidence, evidence
            assert spec.expect not in evidence, evidence
    [show] = by["ho-sr-b02"].calls
    assert show.decision == "allow" and "npm_" in show.result, show
