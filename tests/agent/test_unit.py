"""The agent's systemd unit: the example is the rendering, `install-unit --print` prints
this installation's, systemd-analyze accepts it without a warning, and the agent's
readiness reaches systemd (NOTIFY_SOCKET) and its starter (--ready-fd)."""

from __future__ import annotations

import configparser
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from mtguard_rt.agent.spawn import READY, announce_ready
from mtguard_rt.agent.unit import render_unit

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "systemd" / "mtguard-agent.service"
MTGUARD = str(Path(sys.executable).parent / "mtguard")


def test_the_example_is_the_rendered_unit() -> None:
    assert EXAMPLE.read_text() == render_unit("/usr/local/bin/mtguard")


def test_install_unit_print_renders_this_installation(tmp_path: Path) -> None:
    sock = tmp_path / "a.sock"
    out = subprocess.run(
        [MTGUARD, "agent", "install-unit", "--print", "--socket", str(sock)],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    assert out == render_unit(MTGUARD, str(sock))
    unit = configparser.ConfigParser(strict=True, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment,method-assign]  # keys are case-sensitive
    unit.read_string(out)
    service = unit["Service"]
    assert service["Type"] == "notify"
    assert service["ExecStart"] == f"{MTGUARD} agent run --socket {sock}"
    assert service["RuntimeDirectory"] == "mtguard" and service["RuntimeDirectoryMode"] == "0700"
    caps = set(service["CapabilityBoundingSet"].split())
    assert {"CAP_BPF", "CAP_PERFMON"} <= caps and "CAP_NET_ADMIN" not in caps
    assert service["NoNewPrivileges"] == "yes"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def _verify(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=120
    )


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_analyze_accepts_the_unit_without_a_warning(tmp_path: Path) -> None:
    good = tmp_path / "mtguard-agent.service"
    good.write_text(render_unit(MTGUARD))  # ExecStart must exist to verify
    done = _verify(good)
    assert done.returncode == 0 and not done.stdout.strip() and not done.stderr.strip(), done
    bad = tmp_path / "bad.service"  # the check can fail: a typo'd key is a warning
    bad.write_text(render_unit(MTGUARD).replace("NoNewPrivileges=", "NoNewPrivilege="))
    done = _verify(bad)
    assert "NoNewPrivilege" in done.stdout + done.stderr, done


def test_readiness_reaches_the_starter_and_systemd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(tmp_path / "notify"))
        listener.settimeout(10)
        monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "notify"))
        r, w = os.pipe()
        announce_ready(w)
        with pytest.raises(OSError):
            os.fstat(w)  # closed: the starter sees EOF after the word
        assert os.read(r, 100) == READY and os.read(r, 100) == b""
        os.close(r)
        assert listener.recv(100).split(b"\n")[0] == b"READY=1"


def test_doctor_starts_no_agent_and_says_a_guard_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mtguard_rt.doctor import _agent

    sock = tmp_path / "run" / "agent.sock"
    monkeypatch.setenv("MTGUARD_AGENT_SOCKET", str(sock))
    monkeypatch.setenv("MTGUARD_AGENT", "auto")
    check = _agent()
    assert not check.ok and "a guard would start one (MTGUARD_AGENT=auto)" in check.detail
    assert not sock.parent.exists()  # no lock, no agent: doctor only looks
    monkeypatch.setenv("MTGUARD_AGENT", "")
    assert "would start" not in _agent().detail
