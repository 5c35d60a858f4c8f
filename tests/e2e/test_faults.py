"""Bad input and faults through the real proxy: each gets a clear answer, nothing leaks.

These drive `mtguard proxy` with raw JSON-RPC lines (the SDK client would refuse to send the
malformed ones), speaking the 2025-11-25 initialize handshake.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import Process

from mtguard_rt.sandbox import open_engine
from mtguard_rt.sandbox.lifecycle import OWNER_LABEL, token_of

from .conftest import MTGUARD, SERVERS, server_cmd
from .test_proxy import records

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf]


class RawHost:
    def __init__(self, proc: Process) -> None:
        self.proc = proc
        self.buffer = b""

    async def write(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send(data)

    async def send(self, message: dict[str, Any]) -> None:
        await self.write(json.dumps(message).encode() + b"\n")

    async def recv(self, timeout: float = 60) -> dict[str, Any]:
        assert self.proc.stdout is not None
        with anyio.fail_after(timeout):
            while b"\n" not in self.buffer:
                self.buffer += await self.proc.stdout.receive()
        line, _, self.buffer = self.buffer.partition(b"\n")
        message: dict[str, Any] = json.loads(line)
        return message

    async def request(
        self, rid: int, method: str, params: dict[str, Any], timeout: float = 60
    ) -> dict[str, Any]:
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            message = await self.recv(timeout)
            if message.get("id") == rid:
                return message

    async def call(
        self, rid: int, tool: str, args: dict[str, Any], timeout: float = 60
    ) -> dict[str, Any]:
        return await self.request(rid, "tools/call", {"name": tool, "arguments": args}, timeout)


@asynccontextmanager
async def raw_proxy(server: list[str], *flags: str, audit: Path) -> AsyncIterator[RawHost]:
    cmd = [
        MTGUARD,
        "proxy",
        "--audit-log",
        str(audit),
        "--mount",
        str(SERVERS),
        *flags,
        "--",
        *server,
    ]
    async with await anyio.open_process(cmd, stderr=None) as proc:
        host = RawHost(proc)
        try:
            init = await host.request(
                0,
                "initialize",
                {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw-test", "version": "0"},
                },
            )
            assert init["result"]["serverInfo"]
            await host.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
            yield host
        finally:
            with anyio.CancelScope(shield=True):
                # A host that goes away closes stdin; the proxy then removes its sandbox.
                if proc.stdin is not None:
                    await proc.stdin.aclose()
                with anyio.move_on_after(20):
                    await proc.wait()
                if proc.returncode is None:
                    proc.kill()
                    await proc.wait()


async def no_containers_of(token: str) -> bool:
    """The proxy's own containers are gone (other guards may share the daemon)."""
    async with open_engine() as engine:
        return not await engine.list_containers([f"{OWNER_LABEL}={token}"])


async def test_malformed_lines_get_errors_and_the_proxy_keeps_serving(tmp_path: Path) -> None:
    async with raw_proxy(server_cmd("echo"), audit=tmp_path / "a.jsonl") as host:
        await host.write(b"{this is not json\n")
        assert (await host.recv())["error"]["code"] == -32700
        await host.write(b'{"hello": "world"}\n')
        assert (await host.recv())["error"]["code"] == -32600
        await host.write(
            b'{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": 3}}\n'
        )
        assert (await host.recv())["error"]["code"] == -32602
        # invalid UTF-8 inside a string: replaced, never a crash
        await host.write(
            b'{"jsonrpc":"2.0","id":6,"method":"tools/call","params":'
            b'{"name":"echo","arguments":{"text":"caf\xe9 \xff"}}}\n'
        )
        reply = await host.recv()
        assert reply["id"] == 6 and "caf" in reply["result"]["content"][0]["text"]
        ok = await host.call(7, "echo", {"text": "still here"})
        assert ok["result"]["content"][0]["text"] == "still here"


async def test_sixteen_megabyte_argument(tmp_path: Path) -> None:
    big = "A" * (16 << 20)
    async with raw_proxy(server_cmd("echo"), audit=tmp_path / "a.jsonl") as host:
        reply = await host.call(1, "echo", {"text": big}, timeout=120)
    assert len(reply["result"]["content"][0]["text"]) == len(big)


async def test_unknown_tool_is_the_servers_clear_error(tmp_path: Path) -> None:
    async with raw_proxy(server_cmd("echo"), audit=tmp_path / "a.jsonl") as host:
        reply = await host.call(1, "no_such_tool", {})
    text = json.dumps(reply)
    assert "no_such_tool" in text and ("error" in reply or reply["result"].get("isError"))


async def test_server_garbage_on_stdout_is_dropped(tmp_path: Path) -> None:
    noisy = [
        "sh",
        "-c",
        'echo "not json at all"; echo "{\\"jsonrpc\\": 1}"; exec "$0" "$@"',
        *server_cmd("echo"),
    ]
    async with raw_proxy(noisy, audit=tmp_path / "a.jsonl") as host:
        reply = await host.call(1, "echo", {"text": "clean"})
    assert reply["result"]["content"][0]["text"] == "clean"


async def test_server_crash_mid_call(tmp_path: Path) -> None:
    audit = tmp_path / "a.jsonl"
    async with raw_proxy(server_cmd("terminal"), audit=audit) as host:
        reply = await host.call(1, "run_command", {"command": "kill -9 $PPID"})
        assert reply["error"]["code"] == -32002 and "exited" in reply["error"]["message"]
        again = await host.call(2, "run_command", {"command": "true"})
        assert "error" in again and "exited" in again["error"]["message"]
        token = token_of(host.proc.pid)
    rec = records(audit)[0]
    assert rec.tree is not None  # the crashed call's behavior is still recorded
    assert any(p.argv[:2] == ["sh", "-c"] for p in rec.tree.processes)
    assert await no_containers_of(token)


async def test_call_that_never_returns_times_out(tmp_path: Path) -> None:
    config = tmp_path / "guard.toml"
    config.write_text("call_timeout_s = 2\n[monitor]\nsettle_max_ms = 300\n")
    async with raw_proxy(
        server_cmd("terminal"), "--config", str(config), audit=tmp_path / "a.jsonl"
    ) as host:
        with anyio.fail_after(20):
            reply = await host.call(1, "run_command", {"command": "sleep 25"})
        assert reply["error"]["code"] == -32001 and "did not answer" in reply["error"]["message"]


async def test_host_disconnect_mid_call_leaks_nothing(tmp_path: Path) -> None:
    async with raw_proxy(server_cmd("terminal"), audit=tmp_path / "a.jsonl") as host:
        token = token_of(host.proc.pid)
        await host.send(
            {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "tools/call",
                "params": {"name": "run_command", "arguments": {"command": "sleep 30"}},
            }
        )
        assert host.proc.stdin is not None
        await host.proc.stdin.aclose()
        with anyio.fail_after(30):
            code = await host.proc.wait()
        assert code == 0
    assert await no_containers_of(token)
