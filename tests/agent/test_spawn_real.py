"""On-demand agents (MTGUARD_AGENT=auto, root, eBPF): eight guards that find no agent at
once start ONE, detached (its own session, stdin /dev/null, output to the state dir's
log); one that is not ready in time is killed with its group and the guard goes in-process;
without `auto` nothing is started."""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest

from mtguard_rt.agent.client import AgentUnavailable, RemoteProgram, open_agent_program
from mtguard_rt.agent.protocol import Request
from mtguard_rt.agent.spawn import spawn_agent

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.timeout(900)]
GUARDS = 8


@pytest.fixture
def private(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    sock = tmp_path / "run" / "agent.sock"
    monkeypatch.setenv("MTGUARD_AGENT_SOCKET", str(sock))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return sock


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_guards_started_at_once_start_one_agent(
    private: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MTGUARD_AGENT", "auto")
    results: list[tuple[RemoteProgram | None, str]] = []
    lock = threading.Lock()

    def guard() -> None:
        got = open_agent_program(spawn=True)
        with lock:
            results.append(got)

    threads = [threading.Thread(target=guard) for _ in range(GUARDS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    programs = [p for p, _ in results]
    try:
        modes = [m for _, m in results]
        assert len(results) == GUARDS and all(p is not None for p in programs), modes
        pids = {p.agent_pid for p in programs if p is not None}
        assert len(pids) == 1, modes
        (pid,) = pids
        started = [m for m in modes if "started on demand" in m]
        assert len(started) == 1, modes
        log = tmp_path / "state" / "mtguard" / "agent.log"
        assert f"log {log}" in started[0]
        assert f"agent (pid {pid}) serving at {private}" in log.read_text()
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid  # its own session and group
        assert os.readlink(f"/proc/{pid}/fd/0") == "/dev/null"
        fds = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
        assert str(private.parent / "agent.lock") not in fds  # the lock did not leak into it
        # a later guard finds it: no second start
        again, mode = open_agent_program(spawn=True)
        assert again is not None and again.agent_pid == pid, mode
        assert "on demand" not in mode and "another guard" not in mode, mode
        programs.append(again)
        status = again.status()
        assert status["programs"] == 1 and status["connections"] == GUARDS + 1
    finally:
        for p in programs:
            if p is not None:
                try:
                    p.call(Request(op="stop"))
                except Exception:
                    pass  # the first stop ends it: the others find it gone
                p.close()


def test_an_agent_not_ready_in_time_is_killed_and_the_guard_goes_in_process(
    private: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(AgentUnavailable) as info:
        spawn_agent(private, timeout_s=0.2)  # an interpreter alone takes longer
    said = str(info.value)
    assert "not ready in 0.2 s" in said, said
    match = re.search(r"pid (\d+)", said)
    assert match is not None
    assert _gone(int(match.group(1)))  # killed with its group, and reaped
    monkeypatch.setenv("MTGUARD_AGENT", "")  # the default: use one if it answers, start none
    program, mode = open_agent_program(spawn=True)
    assert program is None and mode == f"monitor: in-process (no agent at {private})"
    assert not private.exists()


def test_an_agent_started_early_is_the_one_a_guard_waits_for(
    private: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mtguard proxy` starts it before its own imports (start_early); the guard's later
    open waits for that one and lets the lock go."""
    import fcntl

    from mtguard_rt.agent import spawn

    monkeypatch.setenv("MTGUARD_AGENT", "auto")
    spawn.start_early(private)
    assert len(spawn._early) == 1
    (_lock, proc, _ready) = spawn._early[0]
    spawn.start_early(private)  # once per process
    assert len(spawn._early) == 1
    program, mode = open_agent_program(spawn=True)
    try:
        assert program is not None and program.agent_pid == proc.pid, mode
        assert "started on demand" in mode and not spawn._early
        lock = os.open(private.parent / "agent.lock", os.O_RDWR)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # let go: free to take
        finally:
            os.close(lock)
    finally:
        if program is not None:
            try:
                program.call(Request(op="stop"))
            except Exception:
                pass  # it closed before its reply went out
            program.close()
        proc.wait(60)
