"""Rollback covers the server's own persistent state directory as well as the workspace."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mtguard_rt.model import BehaviorTree, DeclaredCall, FileEvent, ProcessNode
from mtguard_rt.sandbox import SandboxConfig
from mtguard_rt.sandbox.mounts import detach, overlay
from mtguard_rt.sandbox.plan import server_state_dir
from mtguard_rt.sandbox.rollback import open_rollback

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["trio"])]


def tree(*paths: str) -> BehaviorTree:
    events = [FileEvent(ts_ns=n, op="open", path=p, flags=["write", "create"])
              for n, p in enumerate(paths)]  # fmt: skip
    call = DeclaredCall(call_id="c", server="memory", tool="t")
    return BehaviorTree(call=call, processes=[ProcessNode(key="1@1", pid=1, files=events)])


@pytest.mark.parametrize("mode", ["tree", "scan"])
async def test_a_denied_calls_writes_to_the_server_state_are_undone(
    tmp_path: Path, mode: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    state = tmp_path / "state"
    data = Path(server_state_dir(str(state), "memory")) / "data"
    data.mkdir(parents=True)
    (data / "graph.json").write_text("[]\n")
    config = SandboxConfig(workspace=str(ws), rollback=mode, state_dir=str(state))  # type: ignore[arg-type]
    with anyio.fail_after(30):
        async with open_rollback(config, name="memory") as rb:
            assert rb is not None
            await rb.begin("1")
            (data / "graph.json").write_text('["kept"]\n')
            await rb.capture("1", tree(str(data / "graph.json")))
            allowed = await rb.settle("1", deny=False)
            await rb.begin("2")
            (data / "graph.json").write_text('["poisoned"]\n')
            (data / "implant").write_text("x")
            (ws / "evil.txt").write_text("x")
            await rb.capture("2", tree(str(data / "graph.json"), str(data / "implant"),
                                       str(ws / "evil.txt")))  # fmt: skip
            denied = await rb.settle("2", deny=True)
    assert allowed is not None and (allowed.action, allowed.modified) == ("committed", 1)
    assert denied is not None and denied.action == "restored", denied
    assert (denied.created, denied.modified) == (2, 1)
    assert {str(data / "implant"), str(ws / "evil.txt"), str(data / "graph.json")} <= set(
        denied.paths)
    assert (data / "graph.json").read_text() == '["kept"]\n'  # the allowed call's write stays
    assert not (data / "implant").exists() and not (ws / "evil.txt").exists()


async def test_without_a_name_only_the_workspace_is_covered(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    config = SandboxConfig(workspace=str(ws), rollback="scan", state_dir=str(tmp_path / "s"))
    async with open_rollback(config) as rb:
        assert rb is not None and rb.extra == []
    assert not (tmp_path / "s").exists()


@pytest.mark.root
async def test_a_denied_calls_writes_beside_the_code_are_undone(tmp_path: Path) -> None:
    """The package overlay: files still in the lower layer are indexed without a copy and
    restored from it; files the server wrote (upper) from the shadow's own copy."""
    lower, upper, work, merged = (tmp_path / n for n in ("pkg", "upper", "work", "merged"))
    for d in (lower / "dist", upper, work, merged):
        d.mkdir(parents=True)
    (lower / "dist" / "index.js").write_text("console.log('server')\n")
    (lower / "dist" / "big.bin").write_bytes(b"\x00" * 1_000_000)
    overlay(str(lower), str(upper), str(work), str(merged))
    ws = tmp_path / "ws"
    ws.mkdir()
    config = SandboxConfig(workspace=str(ws), rollback="tree", state_dir=str(tmp_path / "s"))
    code, mem = f"{lower}/dist/index.js", f"{lower}/dist/memory.json"
    try:
        with anyio.fail_after(30):
            async with open_rollback(config, name="memory") as rb:
                assert rb is not None
                await rb.add_overlay(str(merged), str(lower), str(upper))
                shadow = rb.extra[-1].shadow
                assert shadow.bytes == 0  # nothing copied: the lower layer is the baseline
                await rb.begin("1")
                (merged / "dist" / "memory.json").write_text('{"kept": 1}\n')
                await rb.capture("1", tree(mem))
                allowed = await rb.settle("1", deny=False)
                await rb.begin("2")
                (merged / "dist" / "index.js").write_text("require('evil')\n")
                (merged / "dist" / "memory.json").write_text('{"poisoned": 1}\n')
                (merged / "dist" / "implant.js").write_text("x")
                await rb.capture("2", tree(code, mem, f"{lower}/dist/implant.js"))
                denied = await rb.settle("2", deny=True)
                seen = {p.name: p.read_text() for p in (merged / "dist").glob("*.js*")}
                mem_now = (merged / "dist" / "memory.json").read_text()
    finally:
        detach(str(merged))
    assert allowed is not None and (allowed.action, allowed.created) == ("committed", 1)
    assert denied is not None and denied.action == "restored", denied
    assert (denied.created, denied.modified) == (1, 2)
    assert f"{lower}/dist/implant.js" in denied.paths
    assert seen == {"index.js": "console.log('server')\n", "memory.json": '{"kept": 1}\n'}
    assert mem_now == '{"kept": 1}\n'
    assert (lower / "dist" / "index.js").read_text() == "console.log('server')\n"  # never written
