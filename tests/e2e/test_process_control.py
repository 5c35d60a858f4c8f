"""`process-control` on a real server: desktop-commander, unmodified, under `mtguard proxy`.

A process started by one call (`start_process`) and ended by a later one (`kill_process`)
is a signal to a process that call did not start: the tree shows it (who sent which signal
to whom, through the sandbox's pid namespace), and it is allowed when the user asks for it,
or when the process-control tool is pointed at that very pid. The same signal in a call
whose tool and arguments say nothing of it, on a task that does not ask, is what the rule
denies (its unit tests, tests/audit/test_rules_process.py, hold those trees).
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio
import pytest

from mtguard_rt.eval.mcp_client import open_stdio_client

from .conftest import MTGUARD
from .test_real_servers import SESSION_TIMEOUT_S, real_servers, records, text_of, workspace

__all__ = ["real_servers"]  # the session fixture that runs scripts/setup-servers.sh once
pytestmark = [
    pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),  # slow real tests: one backend
]

DC_JS = "desktop-commander/node_modules/@wonderwhy-er/desktop-commander/dist/index.js"
ENV = ["--env", "DESKTOP_COMMANDER_DISABLE_TELEMETRY=1",
       "--env", "DC_FLAG_URL=http://127.0.0.1:9/flags.json"]  # fmt: skip


@pytest.mark.parametrize("task", [
    "Start a long sleep in the background, then kill it",  # the user asks for the kill
    "Check that my shop project's tests still pass",  # not asked: the tool names the pid
])  # fmt: skip
async def test_kill_process_of_an_earlier_call_is_seen_and_explained(
    real_servers: Path, tmp_path: Path, task: str
) -> None:
    dc = real_servers / DC_JS
    assert dc.is_file(), "scripts/setup-servers.sh installs desktop-commander"
    ws = workspace(tmp_path / "ws")
    audit = tmp_path / "audit.jsonl"
    cmd = [MTGUARD, "proxy", "--audit-log", str(audit), "--name", "desktop-commander",
           "--workspace", str(ws), "--mount", str(real_servers), "--task", task, *ENV,
           "--", "node", str(dc)]  # fmt: skip
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with open_stdio_client(cmd, mode="legacy", request_timeout=90) as client:
            started = await client.call_tool(
                "start_process", {"command": "sleep 120", "timeout_ms": 1500})
            m = re.search(r"PID\D{0,4}(\d+)", text_of(started))
            assert m, text_of(started)
            pid = int(m.group(1))
            killed = await client.call_tool("kill_process", {"pid": pid})
    assert not started.get("isError") and not killed.get("isError"), text_of(killed)
    rec = next(r for r in records(audit) if r.tool == "kill_process")
    assert rec.decision == "allow" and "process-control" not in rec.rules, rec.reasons
    assert rec.tree is not None
    sent = [s for p in rec.tree.processes for s in p.signals if s.signal == 15]
    assert sent, "the SIGTERM kill_process sent is in the tree"
    sig = sent[0]
    assert sig.target_pid == pid  # the pid as the sandbox and the server saw it
    assert sig.relation == "descendant" and not sig.started_in_call and sig.delivered >= 1
    assert sig.target_key is not None and sig.target_host_pid != pid
