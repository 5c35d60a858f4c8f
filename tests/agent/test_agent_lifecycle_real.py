"""The agent's lifecycle with real proxies (root, eBPF, Docker): a SIGKILLed proxy's sandbox
is removed by the agent; a proxy killed together with the agent leaves one, and the next
agent's start removes it; an agent killed mid-call fails the proxy closed (the call answered
with the reason, the sandbox gone)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp.client.subscriptions import SubscriptionLost

from mtguard_rt.eval.mcp_client import McpRpcError, open_stdio_client

from .test_agent_real import proxy_cmd, running_agent, status

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.docker, pytest.mark.timeout(900)]
BOUND_S = 120  # a sandbox start or removal on a loaded 2-core host, with margin
# Every guard also removes dead guards' sandboxes at its first start (sandbox/lifecycle.py):
# on a machine where others start guards meanwhile, one of them may remove the orphan first.
RACE = "another guard on this machine removed the orphan first (its own start-up prune)"


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


def sandboxes_of(pid: int) -> list[str]:
    """Ids of the containers whose owner label names guard process `pid`."""
    out = subprocess.run(
        ["docker", "ps", "-a", "--filter", "label=io.mtguard.owner", "--format",
         '{{.ID}} {{.Label "io.mtguard.owner"}}'],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout  # fmt: skip
    return [line.split()[0] for line in out.splitlines() if f":{pid}:" in line]


def wait_until(pred: Any, bound_s: float, what: str) -> None:
    deadline = time.monotonic() + bound_s
    while not pred():
        assert time.monotonic() < deadline, f"{what} not within {bound_s} s"
        time.sleep(0.5)


def start_proxy(sock: Path, tmp: Path, name: str) -> subprocess.Popen[bytes]:
    """A proxy with a sandbox watched by the agent at `sock` (no MCP traffic needed)."""
    env = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}
    cmd = proxy_cmd(tmp / f"{name}.jsonl", "wait")
    err = (tmp / f"{name}.err").open("w")
    pipe, null = subprocess.PIPE, subprocess.DEVNULL  # stdin held open: the proxy serves on
    proc = subprocess.Popen(cmd, env=env, stdin=pipe, stdout=null, stderr=err)
    err.close()

    def watched() -> bool:
        assert proc.poll() is None, (tmp / f"{name}.err").read_text()
        return any(p["pid"] == proc.pid and p["cgroups"] for p in status(sock)["peers"])

    wait_until(watched, BOUND_S, f"proxy {name} watched by the agent")
    assert sandboxes_of(proc.pid)
    return proc


def kill(proc: subprocess.Popen[bytes]) -> None:
    proc.kill()
    proc.wait(30)
    assert proc.stdin is not None
    proc.stdin.close()


def test_sandboxes_of_dead_proxies_are_removed_by_the_agent(tmp_path: Path) -> None:
    sock = tmp_path / "run" / "agent.sock"
    with running_agent(sock) as (agent, _):
        # a proxy SIGKILLed alone: the agent removes its sandbox once it is dead
        lone = start_proxy(sock, tmp_path, "lone")
        kill(lone)
        wait_until(
            lambda: not sandboxes_of(lone.pid) and status(sock)["orphans_removed"] >= 1,
            BOUND_S, "the lone proxy's sandbox removed by the agent",
        )  # fmt: skip
        # a proxy killed together with the agent (the agent frozen first: it cannot sweep)
        both = start_proxy(sock, tmp_path, "both")
        agent.send_signal(signal.SIGSTOP)
        kill(both)
        agent.kill()
        agent.wait(30)
    if not sandboxes_of(both.pid):  # CI runs one test at a time: no other guard there
        pytest.skip(RACE)
    with running_agent(sock) as (agent, _):  # its start-up sweep removes it
        wait_until(lambda: not sandboxes_of(both.pid), BOUND_S, "the left sandbox removed")
        removed = status(sock)["orphans_removed"]
    said = (tmp_path / "agent.err").read_text()
    if removed == 0 and f":{both.pid}:" not in said:
        pytest.skip(RACE)
    assert removed >= 1 and "removed sandbox" in said and f":{both.pid}:" in said, said


@pytest.mark.anyio
async def test_an_agent_killed_mid_call_fails_the_proxy_closed(tmp_path: Path) -> None:
    """The in-flight call is answered with a clear error (not by an unwatched server) and
    the proxy's sandbox is gone by then."""
    sock = tmp_path / "run" / "agent.sock"
    with running_agent(sock) as (agent, _):
        env = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}
        with (tmp_path / "proxy.err").open("w") as err:
            try:
                async with open_stdio_client(
                    proxy_cmd(tmp_path / "a.jsonl", "wait a moment"), env=env,
                    request_timeout=BOUND_S, errlog=err,
                ) as client:  # fmt: skip
                    (proxy_pid,) = [p["pid"] for p in status(sock)["peers"] if p["cgroups"]]
                    assert sandboxes_of(proxy_pid)
                    failed: list[McpRpcError] = []
                    left: list[list[str]] = []

                    async def call() -> None:
                        try:
                            await client.call_tool("run_command", {"command": "sleep 60"})
                        except McpRpcError as exc:
                            failed.append(exc)  # and at once, with no checkpoint between:
                            left.append(sandboxes_of(proxy_pid))

                    with anyio.fail_after(BOUND_S):
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(call)
                            await anyio.sleep(1.5)
                            agent.kill()
            except* SubscriptionLost:
                pass  # the host's tools listen stream got the same error: it ends too
    assert failed, "the in-flight call got no answer"
    assert left == [[]], left  # answered after the guard unwound: the sandbox was gone
    text = failed[0].message
    assert "not run to its end" in text and "server was stopped" in text, text
    assert "agent" in text, text  # the reason names what was lost
    said = (tmp_path / "proxy.err").read_text()
    assert "the monitor is lost" in said, said


def _http_proxy(tmp: Path, sock: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """`mtguard proxy --listen 127.0.0.1:0` (the port the kernel picks) over the agent."""
    env = {**os.environ, "MTGUARD_AGENT_SOCKET": str(sock)}
    cmd = proxy_cmd(tmp / "h.jsonl", "wait a moment")
    cmd[2:2] = ["--listen", "127.0.0.1:0"]
    err = tmp / "http-proxy.err"
    with err.open("w") as errf:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=errf)  # fmt: skip
    return proc, err


async def _served_url(proc: subprocess.Popen[bytes], err: Path) -> str:
    with anyio.fail_after(BOUND_S):
        while "serving MCP at " not in (said := err.read_text()):  # noqa: ASYNC240 - polled
            assert proc.poll() is None, said
            await anyio.sleep(0.2)
    return said.split("serving MCP at ")[1].split()[0]


async def _until_running(cid: str, command: str) -> None:
    """Until `command` runs in container `cid` (`docker top`: the daemon's view)."""
    while True:
        top = await anyio.run_process(["docker", "top", cid], check=False)
        if command in top.stdout.decode(errors="replace"):
            return
        await anyio.sleep(0.3)


@pytest.mark.anyio
async def test_an_agent_killed_mid_call_fails_the_http_front_closed(tmp_path: Path) -> None:
    """The HTTP front the stdio front's way: the POST of the call in flight is answered with
    a JSON-RPC error naming the lost monitor, the sandbox gone by then."""
    import httpx

    sock = tmp_path / "run" / "agent.sock"
    with running_agent(sock) as (agent, _):
        proc, err = _http_proxy(tmp_path, sock)
        try:
            url = await _served_url(proc, err)
            headers = {"Accept": "application/json, text/event-stream"}
            async with httpx.AsyncClient(timeout=BOUND_S) as client:
                init = await client.post(url, headers=headers, json={
                    "jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                        "protocolVersion": "2025-11-25", "capabilities": {},
                        "clientInfo": {"name": "test", "version": "0"}}})  # fmt: skip
                assert init.status_code == 200 and "result" in init.json(), init.text
                headers["Mcp-Session-Id"] = init.headers["mcp-session-id"]
                done = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                assert (await client.post(url, headers=headers, json=done)).status_code == 202
                assert sandboxes_of(proc.pid)
                answers: list[httpx.Response] = []
                left: list[list[str]] = []

                async def call() -> None:
                    answers.append(await client.post(url, headers=headers, json={
                        "jsonrpc": "2.0", "id": 2, "method": "tools/call",
                        "params": {"name": "run_command",
                                   "arguments": {"command": "sleep 60"}}}))  # fmt: skip
                    left.append(sandboxes_of(proc.pid))

                (cid,) = sandboxes_of(proc.pid)
                with anyio.fail_after(BOUND_S):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(call)
                        await _until_running(cid, "sleep 60")  # the call is in flight
                        agent.kill()
            with anyio.fail_after(BOUND_S):
                while proc.poll() is None:  # noqa: ASYNC110 - another process's exit
                    await anyio.sleep(0.2)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    (answer,) = answers
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["id"] == 2 and "result" not in body, body
    text = body["error"]["message"]
    assert "not run to its end" in text and "server was stopped" in text, text
    assert "agent" in text, text
    assert left == [[]], left  # answered after the guard unwound: the sandbox was gone
    said = err.read_text()
    assert "the monitor is lost" in said, said
    assert proc.returncode != 0, said
