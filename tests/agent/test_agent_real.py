"""One `mtguard agent` serving real proxies (root, eBPF, Docker): one loaded program for
all, each call's tree holds only its own sandbox's events, a SIGKILLed proxy leaves the
others served, strangers are refused, and with the agent stopped a proxy falls back."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import stat
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt.agent.client import AgentUnavailable, connect_agent
from mtguard_rt.agent.protocol import TAG_REQUEST, Request, encode
from mtguard_rt.eval.mcp_client import open_stdio_client

from ..telemetry.daemons import prometheus_query, run_alertmanager, run_prometheus

REPO = Path(__file__).resolve().parents[2]
SERVERS = REPO / "examples" / "servers"
MTGUARD = str(Path(sys.executable).parent / "mtguard")
AGENT_START_S = 240  # one bcc compile on a loaded 2-core host (10-15 s quiet)

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.docker]


@pytest.fixture
def anyio_backend() -> str:
    return "trio"  # the proxies are subprocesses: one backend is enough (CPU is scarce)


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    with running_agent(tmp_path_factory.mktemp("agent") / "run" / "agent.sock") as started:
        yield started


@contextmanager
def running_agent(sock: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    errlog = (sock.parent.parent / "agent.err").open("w")  # kept for a failure's story
    proc = subprocess.Popen(
        [MTGUARD, "agent", "run", "--socket", str(sock), "--metrics", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=errlog,
        text=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], AGENT_START_S)
        line = proc.stdout.readline() if ready else ""
        assert "serving at" in line, (line, proc.poll())
        yield proc, sock
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
        errlog.close()


def bpf_prog_fds(pid: int) -> int:
    """How many BPF programs a process holds open (its fdinfo says prog_type)."""
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            if "prog_type:" in Path(f"/proc/{pid}/fdinfo/{fd}").read_text():
                n += 1
        except OSError:
            pass
    return n


def status(sock: Path) -> dict[str, Any]:
    program = connect_agent(sock)
    try:
        return program.status()
    finally:
        program.close()


def proxy_cmd(audit: Path, task: str) -> list[str]:
    return [
        MTGUARD, "proxy", "--audit-log", str(audit), "--mount", str(SERVERS), "--task", task,
        "--", sys.executable, str(SERVERS / "terminal.py"),
    ]  # fmt: skip


def argvs(audit: Path) -> list[list[str]]:
    """Every process argv of every call tree in an audit log, one list per record."""
    out = []
    for line in audit.read_text().splitlines():
        tree = json.loads(line).get("tree") or {}
        out.append([" ".join(p.get("argv", [])) for p in tree.get("processes", [])])
    return out


async def wait_for(pred: Any, bound_s: float) -> None:
    with anyio.fail_after(bound_s):
        while not pred():  # noqa: ASYNC110 - another process's state: nothing to wait on
            await anyio.sleep(0.1)


@pytest.mark.anyio
async def test_two_proxies_share_one_program_and_see_only_their_own(
    agent: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    proc, sock = agent
    env = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}
    prog_fds = bpf_prog_fds(proc.pid)
    assert prog_fds > 0
    audit_a, audit_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    task = "print this host's name and its kernel's name"
    with (tmp_path / "a.err").open("w") as err_a, (tmp_path / "b.err").open("w") as err_b:

        async def host_a(*, task_status: Any) -> None:
            try:
                async with open_stdio_client(
                    proxy_cmd(audit_a, task), env=env, request_timeout=90, errlog=err_a
                ) as a:
                    task_status.started(a)
                    await anyio.sleep_forever()
            except* Exception:  # only after its proxy is SIGKILLed below: EOF, lost listener
                pass

        async with anyio.create_task_group() as tg:
            a = await tg.start(host_a)
            (pid_a,) = [p["pid"] for p in status(sock)["peers"] if p["cgroups"]]
            async with open_stdio_client(
                proxy_cmd(audit_b, task), env=env, request_timeout=90, errlog=err_b
            ) as b:
                await _both(sock, proc.pid, prog_fds, pid_a, a, b, audit_a, audit_b)
            tg.cancel_scope.cancel()
    assert "monitor: agent" in (tmp_path / "b.err").read_text()
    assert proc.poll() is None and bpf_prog_fds(proc.pid) == prog_fds


async def _both(
    sock: Path, agent_pid: int, prog_fds: int, pid_a: int, a: Any, b: Any,
    audit_a: Path, audit_b: Path,
) -> None:  # fmt: skip
    st = status(sock)
    peers = [p for p in st["peers"] if p["cgroups"]]
    assert len(peers) == 2 and st["watched_cgroups"] == 2
    for peer in peers:  # the proxies load nothing: the agent's program serves both
        assert bpf_prog_fds(peer["pid"]) == 0
    assert bpf_prog_fds(agent_pid) == prog_fds
    results: dict[str, Any] = {}

    async def run(name: str, client: Any, command: str) -> None:
        results[name] = await client.call_tool("run_command", {"command": command})

    async with anyio.create_task_group() as tg:  # both windows open at once
        tg.start_soon(run, "a", a, "sleep 0.5; cat /etc/hostname")
        tg.start_soon(run, "b", b, "sleep 0.5; uname -s")
    assert "Linux" in results["b"]["content"][0]["text"]
    trees_a, trees_b = argvs(audit_a)[-1], argvs(audit_b)[-1]
    assert any("cat /etc/hostname" in x for x in trees_a), trees_a
    assert any(x.startswith("uname") for x in trees_b), trees_b
    assert not any("uname" in x for x in trees_a), trees_a
    assert not any("hostname" in x for x in trees_b), trees_b

    # SIGKILL proxy A mid-call: the agent gives its cgroup back, B is served on
    async with anyio.create_task_group() as tg:

        async def doomed() -> None:
            try:
                await a.call_tool("run_command", {"command": "sleep 20"})
            except Exception:
                pass  # its proxy is gone: the host sees an error or EOF

        tg.start_soon(doomed)
        await anyio.sleep(1.0)
        os.kill(pid_a, signal.SIGKILL)
        await wait_for(lambda: all(p["pid"] != pid_a for p in status(sock)["peers"]), 30)
        tg.cancel_scope.cancel()
    st = status(sock)
    assert st["watched_cgroups"] == 1, st
    out = await b.call_tool("run_command", {"command": "uname -r"})
    assert os.uname().release in out["content"][0]["text"]
    assert any(x.startswith("uname -r") for x in argvs(audit_b)[-1])


def as_nobody(sock: Path) -> str:
    """Connect as uid 65534 (a forked child that drops root) and say hello: `denied` (the
    socket's mode), `closed` (the agent hung up) or `served`."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        said = b"error"
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(10)
            try:
                s.connect(str(sock))
            except PermissionError:
                said = b"denied"
            else:
                try:
                    s.sendall(encode(TAG_REQUEST, Request(op="hello")))
                    said = b"served" if s.recv(100) else b"closed"
                except (ConnectionResetError, BrokenPipeError):
                    said = b"closed"
        finally:
            os.write(w, said)
            os._exit(0)
    os.close(w)
    try:
        with os.fdopen(r, "rb") as f:
            return f.read().decode()
    finally:
        os.waitpid(pid, 0)


def test_a_stranger_is_refused(agent: tuple[subprocess.Popen[str], Path]) -> None:
    """uid 65534 is neither root nor the agent's uid: the socket's mode stops it, and with
    the mode opened up, the peer-credential check still does."""
    _proc, sock = agent
    assert sock.stat().st_mode & 0o777 == 0o600 and sock.parent.stat().st_mode & 0o777 == 0o700
    assert as_nobody(sock) == "denied"
    modes = {d: stat.S_IMODE(d.stat().st_mode) for d in sock.parents}
    dirs = [d for d, mode in modes.items() if not mode & 0o001]  # closed to others
    try:
        for d in dirs:
            os.chmod(d, modes[d] | 0o011)
        os.chmod(sock, 0o666)
        assert as_nobody(sock) == "closed"
    finally:
        os.chmod(sock, 0o600)
        for d in dirs:
            os.chmod(d, modes[d])
    assert status(sock)["pid"] == _proc.pid  # root is still served


def test_a_peer_that_misbehaves_or_vanishes_mid_write_leaves_the_agent_serving(
    agent: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, sock = agent
    for junk in (b"\xff\xff\xff\xffQ", b"\x00\x00\x00\x02Zz"):  # a bad length, a bad tag
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(str(sock))
            s.sendall(junk)
            assert s.recv(100) == b""  # hung up on
    # replies the peer never reads fill the socket; the peer goes while the agent writes
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(str(sock))
        s.sendall(encode(TAG_REQUEST, Request(op="status")) * 20000)
    assert status(sock)["pid"] == proc.pid and proc.poll() is None


def test_doctor_says_which_monitor(
    agent: tuple[subprocess.Popen[str], Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from mtguard_rt.doctor import _agent

    proc, sock = agent
    monkeypatch.setenv("MTGUARD_AGENT_SOCKET", str(sock))
    check = _agent()
    mode = f"monitor: agent (pid {proc.pid}) at {sock}; sessions: "  # then this uid's
    assert check.ok and check.detail.startswith(mode), check.detail
    monkeypatch.setenv("MTGUARD_AGENT_SOCKET", str(tmp_path / "none.sock"))
    check = _agent()
    assert not check.ok and not check.required and "in-process (no agent at" in check.detail
    monkeypatch.setenv("MTGUARD_AGENT_SOCKET", str(sock))
    monkeypatch.setenv("MTGUARD_AGENT", "off")
    assert _agent().detail == "monitor: in-process (MTGUARD_AGENT=off)"


def wait_for_series(port: int, query: str, bound_s: float = 90) -> list[dict[str, Any]]:
    """The query's result once it is not empty (the first scrapes take a few seconds)."""
    deadline = time.monotonic() + bound_s
    while not (result := prometheus_query(port, query)):
        assert time.monotonic() < deadline, f"no {query} in Prometheus after {bound_s} s"
        time.sleep(1)
    return result


def wait_for_alert(port: int, name: str, bound_s: float = 90) -> list[dict[str, Any]]:
    deadline = time.monotonic() + bound_s
    url = f"http://127.0.0.1:{port}/api/v2/alerts?filter=" + urllib.parse.quote(
        f'alertname="{name}"'
    )
    while True:
        with urllib.request.urlopen(url, timeout=5) as resp:
            alerts: list[dict[str, Any]] = json.loads(resp.read())
        if alerts:
            return alerts
        assert time.monotonic() < deadline, f"no {name} alert in Alertmanager after {bound_s} s"
        time.sleep(1)


@pytest.mark.anyio
async def test_a_real_prometheus_scrapes_the_agents_call_metrics_and_alerts_on_a_denial(
    agent: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    """Calls of a proxy served by the agent (one allowed, one denied before dispatch) are
    counted by the agent; Debian's prometheus scrapes them with the agent's own figures, and
    the example alerting rule (examples/prometheus) fires into a real Alertmanager."""
    _proc, sock = agent
    metrics_port = status(sock)["metrics_port"]
    assert metrics_port
    rules = REPO / "examples" / "prometheus" / "mtguard-alerts.yml"
    with (
        run_alertmanager(tmp_path / "am") as am,
        run_prometheus(tmp_path / "prom", metrics_port, rules, am.port) as prom,
    ):
        # scraped before the denial: increase() then sees it
        await anyio.to_thread.run_sync(wait_for_series, prom.port, "mtguard_denials_total")
        env = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}
        audit = tmp_path / "audit.jsonl"
        with (tmp_path / "err").open("w") as err:
            async with open_stdio_client(
                proxy_cmd(audit, "print the kernel's name"), env=env, request_timeout=180,
                errlog=err,
            ) as client:  # fmt: skip
                await client.call_tool("run_command", {"command": "uname -s"})
                denied = await client.call_tool("run_command", {"command": "cat /etc/shadow"})
        assert denied.get("isError"), denied
        records = [json.loads(line) for line in audit.read_text().splitlines()]
        deny_rules = {r for rec in records if rec["decision"] == "deny" for r in rec["rules"]}
        assert deny_rules, records
        await anyio.to_thread.run_sync(_check_scraped, prom.port, deny_rules)
        alerts = await anyio.to_thread.run_sync(wait_for_alert, am.port, "MtguardDenials")
        assert alerts[0]["labels"]["severity"] == "warning"
        assert alerts[0]["labels"]["mode"] == "enforce"


def _check_scraped(port: int, deny_rules: set[str]) -> None:
    calls = wait_for_series(port, 'mtguard_calls_total{decision="deny"}')
    calls += prometheus_query(port, 'mtguard_calls_total{decision="allow"}')
    by_decision = {c["metric"]["decision"]: float(c["value"][1]) for c in calls}
    assert by_decision.get("allow", 0) >= 1 and by_decision.get("deny", 0) >= 1, calls
    rules = prometheus_query(port, "mtguard_rule_violations_total")
    assert deny_rules <= {r["metric"]["rule"] for r in rules}, rules
    up = prometheus_query(port, "mtguard_agent_up")
    assert [float(u["value"][1]) for u in up] == [1.0]
    events = prometheus_query(port, "mtguard_agent_events_total")
    assert float(events[0]["value"][1]) > 0
    stages = prometheus_query(port, 'mtguard_audit_stage_ms_count{stage="pre"}')
    assert float(stages[0]["value"][1]) >= 2

@pytest.mark.anyio
async def test_with_the_agent_stopped_a_proxy_falls_back_and_says_so(
    agent: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    proc, sock = agent  # the module's last test: the agent goes
    out = await anyio.run_process([MTGUARD, "agent", "stop", "--socket", str(sock)])
    assert "stopping" in out.stdout.decode()
    with anyio.fail_after(60):
        while proc.poll() is None:  # noqa: ASYNC110 - a child's exit, polled
            await anyio.sleep(0.1)
    assert not sock.exists()
    with pytest.raises(AgentUnavailable):
        connect_agent(sock)
    env = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}
    audit = tmp_path / "audit.jsonl"
    with (tmp_path / "err").open("w") as err:
        async with open_stdio_client(
            proxy_cmd(audit, "print the kernel's name"), env=env, request_timeout=180,
            errlog=err,
        ) as client:  # fmt: skip
            result = await client.call_tool("run_command", {"command": "uname -s"})
    assert "Linux" in result["content"][0]["text"]
    assert any(x.startswith("uname -s") for x in argvs(audit)[-1])  # traced in-process
    said = (tmp_path / "err").read_text()
    assert f"monitor: in-process (no agent at {sock})" in said, said


@pytest.mark.anyio
async def test_an_agent_killed_mid_call_fails_the_guard_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGKILL of the agent during a call: the library guard's monitor is lost, the call
    and the guard end with MonitorLost (no answer from an unwatched server), promptly."""
    from mtguard_rt import GuardConfig, open_guard
    from mtguard_rt.errors import MonitorLost
    from mtguard_rt.sandbox import SandboxConfig

    with running_agent(tmp_path / "run" / "agent.sock") as (proc, sock):
        monkeypatch.setenv("MTGUARD_AGENT_SOCKET", str(sock))
        config = GuardConfig(
            audit_log=None, telemetry={"exporter": "off"}, task="wait a moment",
            sandbox=SandboxConfig(mounts=[str(SERVERS)]),
        )  # fmt: skip
        answered: list[Any] = []
        started = time.monotonic()
        with pytest.raises(BaseException) as info:  # which one: checked just below
            with anyio.fail_after(120):
                async with open_guard(config) as guard, guard.connect(
                    [sys.executable, str(SERVERS / "terminal.py")], name="term"
                ) as server:
                    assert guard.monitor_mode.startswith("monitor: agent")
                    async with anyio.create_task_group() as tg:

                        async def call() -> None:
                            answered.append(
                                await server.call_tool("run_command", {"command": "sleep 30"})
                            )

                        tg.start_soon(call)
                        await anyio.sleep(1.5)
                        started = time.monotonic()
                        os.kill(proc.pid, signal.SIGKILL)
    took = time.monotonic() - started
    assert not answered
    group = info.value
    lost = (
        group.subgroup(lambda e: isinstance(e, MonitorLost))
        if isinstance(group, BaseExceptionGroup)
        else (group if isinstance(group, MonitorLost) else None)
    )
    assert lost is not None, repr(group)
    assert took < 20, took  # well before the 30 s command would have answered (loaded CI)
