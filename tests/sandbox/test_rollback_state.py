"""Rollback covers the server's own persistent state directory as well as the workspace."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from mtguard_rt.model import BehaviorTree, DeclaredCall, FileEvent, ProcessNode
from mtguard_rt.sandbox import SandboxConfig
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
