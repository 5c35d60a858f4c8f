"""Shells judged by identity, for real: a sandboxed server (tests/e2e/servers/disguise.py)
whose `lookup` tool runs a shell under another identity (a memfd through fexecve, an fd path,
the dynamic loader, a script it just wrote, a renamed copy of dash planted before the session).
Each is judged as the shell it is: a command line naming the canary key is killed online at
the exec, before the key is touched and before the later write, with evidence naming what
really ran; the same shell by its own name is denied the same way. A harmless command through
a renamed copy or the server's own interpreter through /proc/self/exe is allowed (a shell is
evidence, not a verdict); through a program with no file on disk it is denied regardless."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from mtguard_rt import CallDenied, open_guard
from mtguard_rt.model import AuditRecord
from tests.audit_records import last_call

from .conftest import online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

SERVERS = Path(__file__).resolve().parent / "servers"
CALL_BOUND_S = 15.0  # an unkilled call sleeps 8 s and then writes
KEY = "/home/mtguard/.ssh/id_rsa"
# what each technique really ran, as the evidence says it
REALLY = {
    "plain": "",
    "memfd": "no file on disk: /memfd:helper",
    "fdpath": "no file on disk: /proc/self/fd/",
    "loader": "run by the dynamic loader /lib",
    "made": "/.glossary-helper was written in the sandbox during the session",
    "copy": "is a copy of /usr/bin/dash",
}


def evidence(rec: AuditRecord | None) -> list[str]:
    assert rec is not None
    return [e for v in rec.violations for e in v.evidence]


async def test_a_shell_under_any_identity_is_judged_as_the_shell(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")
    ws = Path(config.sandbox.workspace or "")
    tools = tmp_path / "tools"
    tools.mkdir()
    copy = tools / "glossary"
    shutil.copy("/usr/bin/dash", copy)  # planted before the session: no window saw it made
    mounts = [*config.sandbox.mounts, str(SERVERS), str(tools)]
    env = {"DISGUISE_COPY": str(copy), "DISGUISE_WS": str(ws)}
    box = msgspec.structs.replace(config.sandbox, mounts=mounts, env=env)
    command = [sys.executable, str(SERVERS / "disguise.py")]
    async with open_guard(config) as guard, guard.connect(command, name="gl", sandbox=box) as srv:
        for term in ("copy", "selfexe"):  # a harmless command: evidence, not a verdict
            got = await srv.call_tool("lookup", {"term": "harmless", "style": term})
            assert "exit 0" in got["content"][0]["text"], got
            last = last_call(guard.records)
            assert last.decision == "allow", last.reasons
        with pytest.raises(CallDenied) as nofile:
            await srv.call_tool("lookup", {"term": "harmless", "style": "memfd"})
        rec = nofile.value.record
        assert rec is not None and rec.rules[:1] == ["unexpected-shell"], evidence(rec)
        assert any("/memfd:helper" in e for e in evidence(rec)), evidence(rec)

        for term, really in REALLY.items():
            with anyio.fail_after(CALL_BOUND_S), pytest.raises(CallDenied) as info:
                await srv.call_tool("lookup", {"term": "ssh", "style": term})
            rec = info.value.record
            assert rec is not None and rec.terminated, (term, evidence(rec))
            assert rec.rules[0] == "unexpected-shell", (term, rec.rules)
            lines = evidence(rec)
            assert really in lines[0], (term, lines)
            assert any(f"names {KEY}" in e for e in lines), (term, lines)
            assert any(e.startswith("terminated online: SIGKILL") for e in lines), lines
        # nothing was quarantined: no confidentiality deny (the key was never opened)
        assert all(r.rules != ["quarantined"] for r in guard.records)
        trees = [r.tree for r in guard.records if r.tree is not None]
        opened = {f.path for t in trees for p in t.processes for f in p.files if f.result >= 0}
        assert KEY not in opened
    for term in REALLY:
        assert not (ws / f"after-{term}.txt").exists(), term
