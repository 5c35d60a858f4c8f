"""`start_agent()`: a guard that finds no agent starts one (with MTGUARD_AGENT=auto).

The agent runs detached: its own session and process group, stdin from /dev/null, stdout and
stderr appended to `<state dir>/agent.log`, no fd of the guard's (its MCP pipes, the lock).
It says it is ready on a pipe (`agent run --ready-fd`); the starter waits for that, bounded
by AGENT_START_S, else kills the agent's group and falls back (`mtguard proxy` starts it
before its own imports, `start_early`, and waits for it later). One lock (flock on
`<socket dir>/agent.lock`) makes guards started at once start ONE agent: the holder starts
it; the others block on the lock, which is bounded by the holder's own bounded wait (and a
dead holder's lock is released by the kernel), then connect to it or fall back in-process.
"""

from __future__ import annotations

import fcntl
import os
import select
import signal
import socket
import subprocess
import sys
from pathlib import Path

from ..paths import state_home
from .client import AgentUnavailable, RemoteProgram, connect_agent

AGENT_START_S = 240.0  # one bcc compile on a loaded 2-core host (10-15 s quiet)
READY = b"ready\n"
# agents started by this process, kept so that one that ends while we live is reaped (and
# none is reported as a leaked child while it serves: it is meant to outlive us)
_started: list[subprocess.Popen[bytes]] = []
_early: list[tuple[int, subprocess.Popen[bytes], int]] = []  # start_early's lock, agent, pipe


def agent_log_path() -> Path:
    return state_home() / "agent.log"


def _open_lock(path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return os.open(path.parent / "agent.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def start_early(path: Path) -> None:
    """`mtguard proxy` with MTGUARD_AGENT=auto, first thing: no agent answering and the lock
    free, start one now (its compile overlaps the proxy's imports) and keep the lock and its
    ready pipe for `start_agent`. Never raises: any failure is met again there."""
    if _early:
        return
    try:
        connect_agent(path).close()
        return
    except AgentUnavailable:
        pass
    try:
        lock = _open_lock(path)
    except OSError:
        return
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            connect_agent(path).close()  # started between our look and the lock
        except AgentUnavailable:
            proc, ready = _launch(path)
            _early.append((lock, proc, ready))
            return
    except OSError:  # BlockingIOError: another guard is starting it
        pass
    os.close(lock)


def start_agent(path: Path) -> tuple[RemoteProgram, str]:
    """The agent at `path`, started here if none answers; (its program, how it was found).
    `AgentUnavailable` when it could not be started in time (the caller goes in-process)."""
    how = f"started on demand, log {agent_log_path()}"
    if _early:  # started by start_early(): wait for it, then let the lock go
        lock, proc, ready = _early.pop()
        try:
            _await_ready(proc, ready, AGENT_START_S)
            return connect_agent(path), how
        finally:
            os.close(lock)
    lock = _open_lock(path)
    try:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another guard is starting it: wait for its outcome
            fcntl.flock(lock, fcntl.LOCK_EX)
            return connect_agent(path), "started by another guard"
        try:  # started (and the lock let go) between our first look and the lock
            return connect_agent(path), "found"
        except AgentUnavailable:
            pass
        spawn_agent(path)
        return connect_agent(path), how
    finally:
        os.close(lock)  # the flock goes with it


def spawn_agent(path: Path, timeout_s: float = AGENT_START_S) -> int:
    """Start `mtguard agent run` detached and wait until it serves at `path`; its pid."""
    proc, ready = _launch(path)
    _await_ready(proc, ready, timeout_s)
    return proc.pid


def _launch(path: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The agent started, detached; (it, the read end of its ready pipe)."""
    _started[:] = [p for p in _started if p.poll() is None]
    log_path = agent_log_path()
    log_path.parent.mkdir(parents=True, exist_ok=True)
    r, w = os.pipe()
    try:
        with open(log_path, "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "mtguard_rt", "agent", "run", "--socket", str(path),
                 "--ready-fd", str(w)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                pass_fds=(w,), start_new_session=True,
            )  # fmt: skip
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    _started.append(proc)
    return proc, r


def _await_ready(proc: subprocess.Popen[bytes], r: int, timeout_s: float) -> None:
    """Its word on the pipe, bounded; else its group killed and `AgentUnavailable`."""
    try:
        said = None  # None: no word in time; b"": it closed the pipe (it exited)
        if select.select([r], [], [], timeout_s)[0]:
            said = os.read(r, len(READY))
    finally:
        os.close(r)
    if said == READY:
        return
    why = f"not ready in {timeout_s:g} s" if said is None else "exited before serving"
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # its own group: nothing of ours
    except ProcessLookupError:
        pass
    proc.wait(30)
    _started.remove(proc)
    raise AgentUnavailable(
        f"the agent started on demand (pid {proc.pid}) {why}, see {agent_log_path()}"
    )


def announce_ready(ready_fd: int | None) -> None:
    """The agent serves: tell its starter (`--ready-fd`) and systemd (Type=notify)."""
    if ready_fd is not None:
        try:
            os.write(ready_fd, READY)
        except OSError:
            pass  # the starter gave up on us: serve all the same
        os.close(ready_fd)
    notify = os.environ.get("NOTIFY_SOCKET", "")
    if notify:
        address = "\0" + notify[1:] if notify.startswith("@") else notify
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
            s.connect(address)
            s.sendall(b"READY=1\nSTATUS=serving")
