"""Real eBPF + real Docker: trees of commands run in the sandbox, and `mtguard trace`."""

from __future__ import annotations

import sys

import anyio
import anyio.abc
import pytest
from dns_server import ANSWER_A, resolver_address, serve_dns
from monitor_harness import CALL
from test_monitor_dns import RAW_LOOKUP

from mtguard_rt.cli import main
from mtguard_rt.model import BehaviorTree, tree_decoder
from mtguard_rt.monitor import MonitorConfig, open_monitor
from mtguard_rt.sandbox import SandboxConfig, open_sandbox

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.docker]
PY = sys.executable


async def run_in_sandbox(cmd: list[str], network: str = "none") -> tuple[BehaviorTree, int]:
    async with open_monitor(MonitorConfig(settle_max_ms=2000)) as mon:
        async with open_sandbox(cmd, SandboxConfig(network=network), gated=True) as sb:  # type: ignore[arg-type]
            async with mon.watch(sb.cgroup_id, sb.cgroup_path) as watch:
                async with watch.window(CALL) as window:
                    await sb.release()
                    with anyio.fail_after(60):
                        code = await sb.wait()
                    window.response_arrived()
    return window.tree, code


@pytest.mark.anyio
async def test_container_tree_reads_canary_as_uid_1000() -> None:
    tree, code = await run_in_sandbox(
        ["sh", "-c", "cd $HOME && cat .aws/credentials >/dev/null 2>&1; touch /tmp/t; exit 5"]
    )
    assert code == 5
    root = [p for p in tree.processes if p.learned == "seeded"]
    assert root and root[0].exit_code == 5 and root[0].uid == 1000
    files = [f for p in tree.processes for f in p.files]
    assert any(f.path == "/home/mtguard/.aws/credentials" and f.flags == ["read"] for f in files)
    assert any(f.path == "/tmp/t" and "create" in f.flags for f in files)
    cats = [p for p in tree.processes if p.exe.endswith("/cat")]
    assert cats and cats[0].cwd == "/home/mtguard"


@pytest.mark.anyio
async def test_dns_lookup_inside_container_on_host_network() -> None:
    host = resolver_address()
    async with anyio.create_task_group() as tg:
        await tg.start(serve_dns, host)
        tree, code = await run_in_sandbox([PY, "-c", RAW_LOOKUP, host], network="host")
        tg.cancel_scope.cancel()
    assert code == 0
    dns = [d for p in tree.processes for d in p.dns]
    assert {(d.direction, d.name) for d in dns} == {
        ("query", "exfil.example.test"),
        ("response", "exfil.example.test"),
    }
    assert [a for d in dns for a in d.answers] == [ANSWER_A]


@pytest.mark.anyio
async def test_tcp_connect_from_container_on_host_network() -> None:
    got = anyio.Event()
    async with await anyio.create_tcp_listener(local_host="127.0.0.1") as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)

        async def handle(stream: anyio.abc.SocketStream) -> None:
            async with stream:
                got.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, handle)
            code = f"import socket; socket.create_connection(('127.0.0.1', {port})).close()"
            tree, code_ = await run_in_sandbox([PY, "-c", code], network="host")
            with anyio.fail_after(10):
                await got.wait()
            tg.cancel_scope.cancel()
    assert code_ == 0
    nets = [(n.op, n.address, n.port, n.result) for p in tree.processes for n in p.net]
    assert ("connect", "127.0.0.1", port, 0) in nets


def test_trace_command_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["trace", "--json", "--", "sh", "-c", "echo hi > /tmp/x; exit 3"]) == 0
    tree = tree_decoder.decode(capsys.readouterr().out.strip())
    assert tree.call.server == "trace" and tree.call.tool == "sh"
    assert any(f.path == "/tmp/x" for p in tree.processes for f in p.files)
    assert any(p.exit_code == 3 for p in tree.processes)
    assert main(["trace", "--", "ls", "/home/mtguard"]) == 0
    out = capsys.readouterr().out
    assert "ls /home/mtguard" in out and "open /home/mtguard [read]" in out
    assert "exit code 0" in out and "complete" in out
    # a chatty command must not block on its bounded stdout stream
    assert main(["trace", "--json", "--", "sh", "-c", "seq 1 200000; exit 9"]) == 0
    captured = capsys.readouterr()
    assert any(p.exit_code == 9 for p in tree_decoder.decode(captured.out.strip()).processes)
    assert captured.err.rstrip().endswith("200000")


@pytest.mark.anyio
async def test_signal_in_the_sandbox_pid_namespace_names_the_tree_process() -> None:
    """The killer passes the sandbox's pid of its sibling; the tree names the host process."""
    # a sibling kills it, once it runs sleep (exec takes milliseconds; 1 s is a wide margin)
    script = 'sleep 30 & w=$!; sleep 1; sh -c "kill -TERM $w"; wait $w; exit 0'
    tree, code = await run_in_sandbox(["sh", "-c", script])
    assert code == 0
    (sig,) = [s for p in tree.processes for s in p.signals if s.name == "SIGTERM"]
    (sleep,) = [p for p in tree.processes if p.argv == ["sleep", "30"]]
    assert sig.target_argv == ["sleep", "30"]
    assert sig.relation == "sandbox" and sig.started_in_call and sig.delivered == 1
    assert sig.target_key == sleep.key and sig.target_host_pid == sleep.pid
    assert sig.target_pid != sleep.pid  # what the sender passed: its own namespace's pid
    assert sleep.end_ns is not None and sleep.exit_code is None  # ended by the signal
