"""Red team (issue 17): a deny withholds for real, and every server-to-host message is scanned.

The real `mtguard proxy` (Docker sandbox, eBPF monitor) guards tests/e2e/servers/withholder.py,
a malicious server that read the canary ~/.aws/credentials once initialized, outside any call
(between-call activity: recorded, and quarantined once its record is cut, ~0.5 s on; read at
start-up it is quarantined before its first answer: tests/e2e/test_startup.py, and the `init`
leak here). The test is the host,
speaking raw JSON-RPC lines so that it sees every byte the proxy relays, including what an
SDK client would discard. Nothing carrying the canary may reach it; each withholding leaves
its own audit record.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest

from .conftest import MTGUARD, REPO

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the proxy under test is a subprocess: one driver backend suffices

SERVERS = Path(__file__).resolve().parent / "servers"
SERVER = [sys.executable, str(SERVERS / "withholder.py")]
SECRET = "aws_secret_access_key"  # the canary line's key: never in what the host receives
TIMEOUT_S = 2  # the guard's call timeout here
BOUND_S = 60  # every wait below is bounded by this


class RawHost:
    def __init__(self, process: anyio.abc.Process) -> None:
        self.process = process
        self.seen: list[dict[str, Any]] = []
        self._buffer = b""

    async def send(self, message: dict[str, Any]) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")

    async def until(self, done: Callable[[dict[str, Any]], bool], bound: float = BOUND_S) -> Any:
        """Read what the proxy relays until a message satisfies `done`; return it."""
        assert self.process.stdout is not None
        with anyio.fail_after(bound):
            while True:
                while b"\n" in self._buffer:
                    line, self._buffer = self._buffer.split(b"\n", 1)
                    if line.strip():
                        message = json.loads(line)
                        self.seen.append(message)
                        if done(message):
                            return message
                self._buffer += await self.process.stdout.receive()

    async def answer(self, rid: Any) -> dict[str, Any]:
        return await self.until(lambda m: m.get("id") == rid and "method" not in m)  # type: ignore[no-any-return]

    async def settle(self, seconds: float) -> None:
        """Wait `seconds` (late answers arrive meanwhile), then a ping round trip."""
        await anyio.sleep(seconds)
        await self.send({"id": "p", "method": "ping"})
        await self.answer("p")

    def leaked(self) -> list[dict[str, Any]]:
        return [m for m in self.seen if SECRET in json.dumps(m) or "late:" in json.dumps(m)]


@asynccontextmanager
async def proxy(
    tmp_path: Path, leak: str = "", config_text: str = "", read_at: str = "initialized"
) -> AsyncIterator[RawHost]:
    config = tmp_path / "guard.toml"
    config.write_text(f"call_timeout_s = {TIMEOUT_S}\n{config_text}")
    cmd = [MTGUARD, "proxy", "--config", str(config), "--audit-log", str(tmp_path / "a.jsonl"),
           "--mount", str(SERVERS), "--env", f"LEAK={leak}", "--env", f"READ_AT={read_at}",
           "--", *SERVER]
    async with raw_host(cmd) as host:
        yield host


@asynccontextmanager
async def raw_host(cmd: list[str]) -> AsyncIterator[RawHost]:
    """`cmd` (an `mtguard proxy` command line) run as a subprocess, driven as a raw host;
    its stdin closed at exit, then it is waited for (bounded) and killed if still running."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # for a dispatch hook in tests.e2e.hooks
    async with await anyio.open_process(cmd, stderr=None, env=env) as process:
        host = RawHost(process)
        try:
            yield host
        finally:
            assert process.stdin is not None
            await process.stdin.aclose()
            with anyio.move_on_after(15):
                await process.wait()
            if process.returncode is None:
                process.kill()


async def handshake(host: RawHost) -> dict[str, Any]:
    await host.send({"id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "red-team", "version": "1"}}})
    answer = await host.answer(0)
    await host.send({"method": "notifications/initialized"})
    return answer  # type: ignore[no-any-return]


def records(tmp_path: Path, tool: str) -> list[dict[str, Any]]:
    path = tmp_path / "a.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["tool"] == tool]


async def wait_record(tmp_path: Path, tool: str) -> list[dict[str, Any]]:
    with anyio.fail_after(BOUND_S):
        while not (found := records(tmp_path, tool)):  # noqa: ASYNC110 - a file, no event
            await anyio.sleep(0.1)
    return found


async def tool_call(host: RawHost, rid: Any, name: str, **args: Any) -> None:
    await host.send({"id": rid, "method": "tools/call",
                     "params": {"name": name, "arguments": args}})


async def test_late_duplicate_and_unsolicited_answers_never_reach_the_host(
    tmp_path: Path,
) -> None:
    # no secret read: a read between calls quarantines the server (every call refused),
    # and what is judged here is the relaying of late, duplicate and unsolicited answers
    async with proxy(tmp_path, read_at="never") as host:
        await handshake(host)
        await host.send({"id": 1, "method": "tools/list"})
        await host.answer(1)
        # a timeout: the host gets the guard's error; the real answer ("late: ...") later
        await tool_call(host, 2, "slow", seconds=TIMEOUT_S + 1.5)
        timed_out = await host.answer(2)
        assert timed_out["error"]["code"] == -32001, timed_out
        # a cancellation: no response at all (the spec), though the server answers anyway
        await tool_call(host, 3, "slow", seconds=1.5)
        await anyio.sleep(0.3)
        await host.send({"method": "notifications/cancelled",
                         "params": {"requestId": 3, "reason": "user"}})
        # an answer, then a duplicate and one under an id nobody sent
        await tool_call(host, 4, "stray")
        fine = await host.answer(4)
        assert fine["result"]["content"][0]["text"] == "fine", fine
        await host.settle(3.0)
        assert [m for m in host.seen if m.get("id") in (2, 3, 4)] == [timed_out, fine]
        assert host.leaked() == []
        assert not [m for m in host.seen if m.get("id") == "never-sent-7"]
    late = await wait_record(tmp_path, "(late-response)")
    ghost = await wait_record(tmp_path, "(unsolicited-response)")
    assert {r["reasons"][0].split("(")[0] for r in late} == {
        "a response to call id 2 after it was handled ",
        "a response to call id 3 after it was handled ",
        "a response to call id 4 after it was handled ",
    }
    assert all(r["decision"] == "deny" and r["rules"] == ["withheld-response"] for r in late)
    assert "'never-sent-7'" in ghost[0]["reasons"][0]
    assert SECRET not in (tmp_path / "a.jsonl").read_text()  # the record keeps the shape only


async def test_an_error_object_carrying_the_secret_is_denied_and_quarantines(
    tmp_path: Path,
) -> None:
    async with proxy(tmp_path) as host:
        await handshake(host)
        await tool_call(host, 1, "fail")
        denied = await host.answer(1)
        assert denied["result"]["isError"] is True, denied
        assert "canary-touched" in denied["result"]["content"][0]["text"]
        await tool_call(host, 2, "echo", text="hello")
        refused = await host.answer(2)
        assert refused["error"]["code"] == -32003 and "quarantined" in refused["error"]["message"]
        await host.send({"id": 3, "method": "tools/list"})
        listed = await host.answer(3)
        assert "quarantined" in listed["error"]["message"], listed
        assert host.leaked() == []
    (call,) = [r for r in records(tmp_path, "fail")]
    assert call["decision"] == "deny" and "canary-touched" in call["rules"]
    (echo,) = records(tmp_path, "echo")
    assert echo["rules"] == ["quarantined"]


async def test_a_server_denied_for_a_canary_read_cannot_hand_it_over_next_call(
    tmp_path: Path,
) -> None:
    async with proxy(tmp_path) as host:
        await handshake(host)
        await tool_call(host, 1, "grab")
        grabbed = await host.answer(1)
        await tool_call(host, 2, "echo", text="hello")
        echoed = await host.answer(2)
        assert host.leaked() == []
    (grab,) = records(tmp_path, "grab")
    assert grab["decision"] == "deny" and "canary-touched" in grab["rules"], grabbed
    assert grabbed["result"]["isError"] is True
    assert "quarantined" in echoed["error"]["message"], echoed
    (echo,) = records(tmp_path, "echo")
    assert echo["rules"] == ["quarantined"]


@pytest.mark.parametrize(
    ("leak", "tool"),
    [
        ("init", "(initialize)"),
        ("list", "(tools/list)"),
        ("notify", "(notification)"),
        ("sample", "(request sampling/createMessage)"),
    ],
)
async def test_a_secret_in_any_server_message_is_withheld(
    tmp_path: Path, leak: str, tool: str
) -> None:
    # the initialize answer can carry only what the server read before it: its start-up
    async with proxy(tmp_path, leak, read_at="import" if leak == "init" else "initialized") as host:
        init = await handshake(host)
        await host.send({"id": 1, "method": "tools/list"})
        listed = await host.answer(1)
        await host.settle(0.5)
        assert host.leaked() == []
        if leak == "init":
            assert init["error"]["code"] == -32003, init
        if leak == "list":
            assert listed["error"]["code"] == -32003, listed
        if leak in ("notify", "sample"):
            assert not [m for m in host.seen if "method" in m], host.seen
    (record,) = await wait_record(tmp_path, tool)
    if leak == "init":  # the start-up read was denied and quarantined before the answer
        assert record["decision"] == "deny" and record["rules"] == ["quarantined"], record
        startup = [r for r in records(tmp_path, "(startup)") if r["decision"] == "deny"]
        assert [r["rules"] for r in startup] == [["canary-touched"]], startup
        return
    assert record["decision"] == "deny", record
    if record["rules"] != ["quarantined"]:  # else the read's between record was cut first
        assert record["rules"] == ["canary-touched"], record
        assert "marker of canary /home/mtguard/.aws/credentials" in record["violations"][0][
            "evidence"][0]
    between = await wait_record(tmp_path, "(between calls)")  # the read: recorded, quarantines
    assert [r["rules"] for r in between if r["decision"] == "deny"] == [["canary-touched"]]


async def test_the_host_gets_the_denial_at_the_kill_and_only_once(tmp_path: Path) -> None:
    """A compromised host swaps the approved call; the server is killed online as it reads
    the swapped request. The host's one answer is the denial, sent at the kill; the final
    verdict (after the tree settled) is recorded, not sent again."""
    hook = 'dispatch_hook = "tests.e2e.hooks:swap_to_read_ssh_key"\n[online]\nmode = "enforce"\n'
    async with proxy(tmp_path, config_text=hook) as host:
        await handshake(host)
        await tool_call(host, 1, "echo", text="hi")
        denial = await host.answer(1)
        await host.send({"id": 2, "method": "ping"})
        await host.answer(2)
        await anyio.sleep(1.0)
        await host.send({"id": 3, "method": "ping"})
        await host.answer(3)
        assert [m for m in host.seen if m.get("id") == 1] == [denial]
    text = denial["result"]["content"][0]["text"]
    assert text.startswith("mtguard denied echo (post-execution): request-mismatch"), text
    assert text.endswith(
        "Terminated online at this event; the full verdict follows in the audit log."
    )
    (record,) = await wait_record(tmp_path, "echo")
    assert record["terminated"] and "request-mismatch" in record["rules"]
