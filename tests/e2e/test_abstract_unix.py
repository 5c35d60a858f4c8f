"""Abstract AF_UNIX names judged, for real: a sandboxed terminal server sharing the host's
network (`network = "host"`), enforce mode. A connect to an abstract name a host program
listens on (this test's own listener: a stand-in for a host daemon's door) is denied by
`unexpected-network`, its result withheld; a connect to an abstract name the sandbox's own
background process listens on is allowed (the socket bound to it is held in the sandbox)."""

from __future__ import annotations

import secrets
import socket
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from mtguard_rt import CallDenied, open_guard
from tests.audit_records import last_call

from .conftest import SERVERS, online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

CALL_BOUND_S = 30.0
TASK = "Check that the local service answers"
PY = sys.executable
CONNECT = (
    f"{PY} -c \"import socket; socket.socket(socket.AF_UNIX).connect('\\\\0%s'); print('up')\""
)
# a listener of the sandbox's own, left running (its stdio closed: the call ends without
# it), then a connect to it
OWN = (
    f"{PY} -c \"import socket, time; s = socket.socket(socket.AF_UNIX); s.bind('\\\\0%s');"
    ' s.listen(); time.sleep(10)" >/dev/null 2>&1 & sleep 1; ' + CONNECT
)


async def test_an_abstract_host_socket_is_denied_the_sandbox_own_is_not(tmp_path: Path) -> None:
    base = online_guard_config(tmp_path, "enforce")
    box = msgspec.structs.replace(base.sandbox, network="host")
    command = [sys.executable, str(SERVERS / "terminal.py")]
    door = f"mtg-door-{secrets.token_hex(4)}"
    own = f"mtg-own-{secrets.token_hex(4)}"
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind("\0" + door)  # the host's abstract namespace: the guard's
        listener.listen()
        async with open_guard(base) as guard, guard.connect(command, name="ab", sandbox=box) as srv:
            with anyio.fail_after(CALL_BOUND_S):
                out = await srv.call_tool("run_command", {"command": OWN % (own, own)}, task=TASK)
            assert "up" in out["content"][0]["text"], out
            rec = last_call(guard.records)
            assert rec.decision == "allow", rec.reasons
            assert rec.tree is not None
            holders = [u.holder for p in rec.tree.processes for u in p.unix]
            assert holders == ["own"], holders

            with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
                await srv.call_tool("run_command", {"command": CONNECT % door}, task=TASK)
            denied = info.value.record
            assert denied is not None and "unexpected-network" in denied.rules, denied.reasons
            (v,) = [v for v in denied.violations if v.rule == "unexpected-network"]
            line = f"connected to abstract unix socket @{door} (the host's"
            assert any(line in e for e in v.evidence), v.evidence
