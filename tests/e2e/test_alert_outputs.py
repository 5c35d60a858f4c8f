"""A real denied call (sandboxed terminal server reading the canary key, traced by eBPF)
arrives as an alert in a real Alertmanager and a real rsyslog, both started by the test;
the allowed call before it raises none."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard

from ..telemetry.daemons import get_alerts, read_lines, run_alertmanager, run_rsyslog
from .conftest import SERVERS, online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]
READ_CANARY = 'cat $HOME/.s""sh/id_r""sa >/dev/null'  # as test_online: no pre-audit words
CALL_BOUND_S = 30.0


async def test_a_denied_call_reaches_alertmanager_and_rsyslog(tmp_path: Path) -> None:
    config = online_guard_config(tmp_path, "enforce")
    command = [sys.executable, str(SERVERS / "terminal.py")]
    with run_alertmanager(tmp_path / "am") as am, run_rsyslog(tmp_path / "rs") as (rs, _):
        config.telemetry = {
            "exporter": "off", "alertmanager_url": f"http://127.0.0.1:{am.port}",
            "syslog_address": f"tcp://127.0.0.1:{rs.port}",
        }
        async with open_guard(config) as guard, guard.connect(command, name="term") as server:
            with anyio.fail_after(CALL_BOUND_S):
                await server.call_tool("run_command", {"command": "echo hi"})
                with pytest.raises(CallDenied) as info:
                    await server.call_tool("run_command", {"command": READ_CANARY})
        record = info.value.record
        assert record is not None and record.decision == "deny"
        alerts = get_alerts(am.port, server="term", tool="run_command")
        lines = read_lines(rs.output, 1)
    assert {a["labels"]["rule"] for a in alerts} == set(record.rules)
    assert {a["annotations"]["call_id"] for a in alerts} == {record.call_id}
    assert all(a["labels"]["decision"] == "deny" for a in alerts)
    assert len(lines) == 1  # the allowed call raised no alert
    assert f'call_id="{record.call_id}"' in lines[0] and 'server="term"' in lines[0]
    assert f'rule="{",".join(record.rules)}"' in lines[0]
