"""The SDK client wrapper against a real stdio server: _meta, isError, JSON-RPC errors, exit."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt.eval.mcp_client import McpRpcError, open_stdio_client

pytestmark = pytest.mark.anyio
PROBE = [sys.executable, str(Path(__file__).with_name("probe_server.py"))]
BOUND_S = 30  # generous for a noisy 2-core CI machine; a healthy run takes ~1 s


def text(result: dict[str, Any]) -> str:
    return "".join(block["text"] for block in result["content"] if block["type"] == "text")


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_meta_errors_and_shutdown(mode: str) -> None:
    meta = {"mtguard/task": "Compare MSFT and AAPL", "mtguard/call": 7}
    with anyio.fail_after(BOUND_S):
        async with open_stdio_client(PROBE, mode=mode) as client:  # type: ignore[arg-type]
            version = client.protocol_version
            names = [t["name"] for t in await client.list_tools()]
            shown = json.loads(text(await client.call_tool("show_meta", {}, meta=meta)))
            plain = json.loads(text(await client.call_tool("show_meta")))
            failed = await client.call_tool("tool_error")
            unknown = await client.call_tool("no_such_tool")
            with pytest.raises(McpRpcError) as rpc:
                await client.call_tool("rpc_error")
            big = await client.call_tool("many", {"count": 200_000})
    assert version == ("2026-07-28" if mode == "auto" else "2025-11-25")
    assert names == ["show_meta", "tool_error", "rpc_error", "many"]
    assert shown["meta"]["mtguard/task"] == "Compare MSFT and AAPL"
    assert shown["meta"]["mtguard/call"] == 7
    assert "mtguard/task" not in (plain["meta"] or {})
    assert failed["isError"] is True and "tool_error" in text(failed)
    assert unknown["isError"] is True and "Unknown tool" in text(unknown)
    assert (rpc.value.code, rpc.value.message, rpc.value.data) == (
        -32042,
        "refused by probe",
        {"why": "test"},
    )
    assert rpc.value.method == "tools/call"
    assert len(text(big)) == 200_000 and big["isError"] is False
    assert not alive(shown["pid"])  # leaving the block stopped the server


async def test_cancelled_caller_leaves_no_process() -> None:
    pids: list[int] = []
    with anyio.move_on_after(BOUND_S):
        with anyio.CancelScope() as scope:
            async with open_stdio_client(PROBE) as client:
                pids.append(json.loads(text(await client.call_tool("show_meta")))["pid"])
                scope.cancel()
                await anyio.sleep_forever()
    assert pids and not alive(pids[0])


async def test_missing_command_fails_fast(tmp_path: Path) -> None:
    with anyio.fail_after(BOUND_S), pytest.raises(OSError):
        async with open_stdio_client([str(tmp_path / "no-such-server")]):
            pass
