"""The start-up is judged like a call (issue 17): real `mtguard proxy`, Docker, eBPF.

tests/e2e/servers/withholder.py reads the canary ~/.aws/credentials at import, before any
request (through /proc/self/root: the exact name is killed in the kernel). That read is a
denied `(startup)` record, cut when the server answers `initialize`; the server is
quarantined before that answer is relayed, so the host's first `tools/call` is refused and
nothing the server sends reaches the host. In observe mode the record is written and nothing
is refused. A benign server's start-up (the interpreter's import storm) is a record that
allows, and its calls run. The library guard (`guard.connect`, its own handshake) too.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from .conftest import MTGUARD
from .conftest import SERVERS as EXAMPLES
from .test_withhold import SECRET, SERVERS, RawHost, handshake, raw_host, tool_call

pytestmark = pytest.mark.anyio
BOUND_S = 60


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the proxy under test is a subprocess: one driver backend suffices


@asynccontextmanager
async def guarded(tmp_path: Path, server: list[str], *flags: str) -> AsyncIterator[RawHost]:
    cmd = [MTGUARD, "proxy", "--audit-log", str(tmp_path / "a.jsonl"), "--mount", str(SERVERS),
           "--mount", str(EXAMPLES), *flags, "--", *server]
    async with raw_host(cmd) as host:
        yield host


def records(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "a.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def startup_records(tmp_path: Path) -> list[dict[str, Any]]:
    return [r for r in records(tmp_path) if r["tool"] == "(startup)"]


WITHHOLDER = [sys.executable, str(SERVERS / "withholder.py")]


async def test_a_canary_read_at_start_up_is_denied_and_quarantines(tmp_path: Path) -> None:
    async with guarded(tmp_path, WITHHOLDER) as host:
        init = await handshake(host)
        await tool_call(host, 1, "echo", text="hello")
        refused = await host.answer(1)
        await host.send({"id": 2, "method": "tools/list"})
        listed = await host.answer(2)
        assert host.leaked() == []
    # the initialize answer (sent after the read) is withheld: the server was quarantined
    assert init["error"]["code"] == -32003 and "quarantined" in init["error"]["message"], init
    assert refused["error"]["code"] == -32003, refused
    assert "quarantined" in refused["error"]["message"], refused
    assert "quarantined" in listed["error"]["message"], listed
    found = startup_records(tmp_path)  # one, or more when the import outlasted a cut
    assert [r["call_id"].rsplit("-", 1)[-1] for r in found] == [
        str(n) for n in range(1, len(found) + 1)]
    assert all(r["task"] is None and r["call_id"].startswith("withholder-startup-") for r in found)
    (startup,) = [r for r in found if r["decision"] == "deny"]
    assert "canary-touched" in startup["rules"], startup
    v = next(v for v in startup["violations"] if v["rule"] == "canary-touched")
    assert any(".aws/credentials" in e for e in v["evidence"]), v
    (echo,) = [r for r in records(tmp_path) if r["tool"] == "echo"]
    assert echo["rules"] == ["quarantined"]
    assert SECRET not in (tmp_path / "a.jsonl").read_text()


async def test_observe_mode_records_the_start_up_read_and_refuses_nothing(
    tmp_path: Path,
) -> None:
    async with guarded(tmp_path, WITHHOLDER, "--observe") as host:
        init = await handshake(host)
        await tool_call(host, 1, "echo", text="hello")
        echoed = await host.answer(1)
    assert "result" in init, init
    assert echoed["result"]["content"][0]["text"] == "hello", echoed
    (startup,) = [r for r in startup_records(tmp_path) if r["decision"] == "deny"]
    assert startup["mode"] == "observe" and "canary-touched" in startup["rules"]


async def test_a_benign_servers_start_up_allows_and_its_calls_run(tmp_path: Path) -> None:
    server = [sys.executable, str(EXAMPLES / "filesystem.py")]
    async with guarded(tmp_path, server) as host:
        init = await handshake(host)
        await host.send({"id": 1, "method": "tools/list"})
        listed = await host.answer(1)
        names = [t["name"] for t in listed["result"]["tools"]]
        assert "result" in init and names, (init, listed)
    found = startup_records(tmp_path)
    assert found, "the start-up is recorded"
    for r in found:
        assert r["decision"] == "allow", (r["rules"], r["reasons"])
    opened = {f["path"] for r in found for p in r["tree"]["processes"] for f in p.get("files", [])}
    assert any(p.endswith(".py") for p in opened), sorted(opened)[:20]  # the import storm
    assert any(e for r in found for p in r["tree"]["processes"] for e in p.get("execs", []))


async def test_the_library_guard_refuses_the_first_call_after_a_start_up_read(
    tmp_path: Path,
) -> None:
    """`guard.connect()` (handshake in the library): the start-up is judged once the server
    answered `initialize`; the first `call_tool` raises `CallDenied` (quarantined)."""
    from mtguard_rt import open_guard
    from mtguard_rt.errors import CallDenied
    from mtguard_rt.sandbox import SandboxConfig

    from .conftest import online_guard_config

    config = online_guard_config(tmp_path, "enforce")
    config.sandbox = SandboxConfig(mounts=[str(SERVERS)], workspace=config.sandbox.workspace)
    async with open_guard(config) as guard:
        async with guard.connect(WITHHOLDER, name="lib") as server:
            assert server.supervisor.quarantined is not None  # before any call
            with anyio.fail_after(BOUND_S), pytest.raises(CallDenied) as denied:
                await server.call_tool("echo", {"text": "hello"})
    assert denied.value.record is not None and denied.value.record.rules == ["quarantined"]
    startup = [r for r in guard.records if r.tool == "(startup)" and r.decision == "deny"]
    assert [r.rules for r in startup] == [["canary-touched"]]
