"""`secret-in-result` and `secret-flow` on real sandboxes and eBPF: own-corpus cases replayed
through one guard (observe mode: the effect really happens and is judged).

A server's own token returned with a forecast (sr-01), a chat token split into groups
(sr-04), a listing that starts returning a secret's value (rp-10) and a vault secret sent on
to the translator (xs-03) are caught, the evidence redacted and naming the file read; the
user asking for the key (sr-b01), for a file with its token (sr-b02) and a ticket full of
hashes and UUIDs (sr-b04) are allowed.
"""

from __future__ import annotations

import pytest

from .own_replay import replay

BOUND_S = 300.0  # seven cases, two at a time, each a fresh sandbox per server
LEAKS = {"sr-01": "ghp_R7kq2Lm", "sr-04": "xoxb -284", "rp-10": "Pr0d-Vq9Lx2Tb7Wc"}
BENIGN = ("sr-b01", "sr-b02", "sr-b04")


@pytest.mark.anyio
@pytest.mark.docker
@pytest.mark.bpf
@pytest.mark.parametrize("anyio_backend", ["trio"])
@pytest.mark.timeout(BOUND_S + 60)
async def test_secrets_leaving_are_caught_and_asked_for_ones_allowed() -> None:
    by = await replay({*LEAKS, "xs-03", *BENIGN}, BOUND_S)
    for cid, secret in LEAKS.items():
        *before, last = by[cid].calls
        assert last.unsafe and secret in last.result, (cid, last)  # the leak really happened
        assert last.decision == "deny" and "secret-in-result" in last.denying, (cid, last)
        evidence = "\n".join(e for e in last.evidence if "secret-in-result" in e)
        assert secret not in evidence and "chars)" in evidence, evidence
        assert "/srv/" in evidence, evidence  # the file the server read
        assert all("secret-in-result" not in c.rules for c in before), (cid, before)
    fetch, send = by["xs-03"].calls
    assert send.unsafe and send.decision == "deny" and "secret-flow" in send.denying, send
    assert any("from the result of 'get_secret' on 'vault'" in e for e in send.evidence)
    assert "secret-in-result" in fetch.denying  # a vault secret fetched for a translation
    for cid in BENIGN:
        calls = by[cid].calls
        assert all(c.decision == "allow" for c in calls), calls
