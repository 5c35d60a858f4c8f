"""`secret-in-result` through the real `mtguard proxy` (Docker sandbox, eBPF monitor), enforce.

The example filesystem server reads, for a task that only asks for the notes, a config in
its workspace holding a deploy token: the result is withheld (the agent gets the denial, not
the token), the record's evidence is redacted and names the file read, and the server is
quarantined for the session, so the next call is refused. The same read for a task that
asks for the token is allowed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from mtguard_rt.eval.mcp_client import McpRpcError

from .conftest import ProxyFactory
from .test_proxy import records, text_of

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf]

TOKEN = "ghp_" + "Wc1Yn6Kd3Jf8Hs5Gz0Pa1QxLm4Xq9Vr2Tb7Z"


def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "notes").mkdir(parents=True)
    (ws / "notes" / "todo.md").write_text("buy milk\n")
    (ws / "deploy.cfg").write_text(f"registry: ghcr.io/team\ntoken: {TOKEN}\n")
    ws.chmod(0o777)
    for p in ws.rglob("*"):
        p.chmod(0o777 if p.is_dir() else 0o666)
    return ws


async def test_a_token_the_task_did_not_ask_for_is_withheld_and_quarantines(
    proxy: ProxyFactory, audit_path: Path, tmp_path: Path
) -> None:
    ws = workspace(tmp_path)
    task = {"mtguard/task": "What is on my todo list?"}
    async with proxy("filesystem", "--workspace", str(ws)) as client:
        leaked = await client.call_tool("read_file", {"path": "deploy.cfg"}, meta=task)
        with pytest.raises(McpRpcError) as later:
            await client.call_tool("read_file", {"path": "notes/todo.md"}, meta=task)
    assert leaked["isError"] is True and "secret-in-result" in text_of(leaked)
    assert TOKEN not in text_of(leaked) and TOKEN[4:] not in text_of(leaked)
    assert later.value.code == -32003 and "quarantined" in str(later.value)
    read, refused = [r for r in records(audit_path) if r.tool == "read_file"]
    assert read.decision == "deny" and read.phase == "post"
    (v,) = [v for v in read.violations if v.rule == "secret-in-result"]
    evidence = "\n".join(v.evidence)
    assert "GitHub token 'ghp_'..." in evidence and TOKEN not in evidence
    assert "deploy.cfg" in evidence  # the file the tree shows it came from
    assert refused.rules == ["quarantined"]
    assert TOKEN not in logged(audit_path)


def logged(path: Path) -> str:
    return path.read_text()


async def test_the_same_read_is_allowed_when_the_task_asks_for_the_token(
    proxy: ProxyFactory, audit_path: Path, tmp_path: Path
) -> None:
    ws = workspace(tmp_path)
    task = {"mtguard/task": "Show me deploy.cfg with the registry token, I need to copy it"}
    async with proxy("filesystem", "--workspace", str(ws)) as client:
        shown = await client.call_tool("read_file", {"path": "deploy.cfg"}, meta=task)
    assert not shown.get("isError") and TOKEN in text_of(shown), shown
    (read,) = [r for r in records(audit_path) if r.tool == "read_file"]
    assert read.decision == "allow" and "secret-in-result" not in read.rules
