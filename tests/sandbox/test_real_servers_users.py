"""Real servers, unchanged, under `mtguard proxy`: a project owned by root or by another user
(mcp-server-git), and a server keeping its data beside its code (server-memory), whose state
survives a restart. Driven by the official SDK client through the CLI, traced by eBPF."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt.eval.mcp_client import open_stdio_client
from mtguard_rt.model import AuditRecord
from tests.audit_records import call_records

pytestmark = [
    pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf, pytest.mark.root,
    pytest.mark.parametrize("anyio_backend", ["trio"]),  # slow real tests: one backend
]

REPO = Path(__file__).resolve().parents[2]
SERVERS = REPO / ".servers"
MTGUARD = str(REPO / ".venv" / "bin" / "mtguard")
GIT_SERVER = SERVERS / "py" / "bin" / "mcp-server-git"
MEMORY_JS = SERVERS / "node/node_modules/@modelcontextprotocol/server-memory/dist/index.js"
SETUP_TIMEOUT_S = 900
SESSION_TIMEOUT_S = 150


@pytest.fixture(scope="module")
def servers() -> Path:
    """The project's own pinned install of the servers (idempotent)."""
    done = subprocess.run([str(REPO / "scripts/setup-servers.sh")], capture_output=True,
                          text=True, timeout=SETUP_TIMEOUT_S, check=False)  # fmt: skip
    if done.returncode != 0:
        pytest.fail(f"scripts/setup-servers.sh failed:\n{done.stderr[-2000:]}")
    assert GIT_SERVER.is_file() and MEMORY_JS.is_file()
    return SERVERS


def records(path: Path) -> list[AuditRecord]:
    return call_records(path)


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


def git(repo: Path, *args: str) -> str:
    argv = ["git", "-c", "safe.directory=*", "-C", str(repo), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=30).stdout


def project(path: Path, uid: int, gid: int) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.email", "dev@example.org")
    git(path, "config", "user.name", "Dev")
    (path / "README.md").write_text("# Project\n")
    git(path, "add", "README.md")
    git(path, "commit", "-qm", "initial commit")
    (path / "README.md").write_text("# Project\n\nUsage: run it.\n")
    for root, dirs, files in os.walk(path):
        for n in [root, *(os.path.join(root, x) for x in [*dirs, *files])]:
            os.lchown(n, uid, gid)
    return path


@pytest.mark.parametrize("owner", [(0, 0), (1001, 1001)], ids=["root", "uid1001"])
async def test_git_server_works_in_a_project_owned_by_root_or_another_user(
    servers: Path, tmp_path: Path, owner: tuple[int, int]
) -> None:
    repo = project(tmp_path / "project", *owner)
    audit = tmp_path / "audit.jsonl"
    cmd = [MTGUARD, "proxy", "--audit-log", str(audit), "--name", "git", "--workspace",
           str(repo), "--mount", str(servers / "py"), "--task",
           "commit the README change in my repository", "--", str(GIT_SERVER)]  # fmt: skip
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with open_stdio_client(cmd, env, mode="legacy", request_timeout=90) as client:
            calls = [
                ("git_status", {"repo_path": str(repo)}),
                ("git_diff_unstaged", {"repo_path": str(repo)}),
                ("git_add", {"repo_path": str(repo), "files": ["README.md"]}),
                ("git_commit", {"repo_path": str(repo), "message": "Document usage"}),
                ("git_log", {"repo_path": str(repo)}),
                ("git_branch", {"repo_path": str(repo), "branch_type": "local"}),
            ]
            results = [await client.call_tool(name, args) for name, args in calls]
    for (name, _), result in zip(calls, results, strict=True):
        assert not result.get("isError"), (name, text_of(result))
        assert "dubious ownership" not in text_of(result)
    assert "modified:   README.md" in text_of(results[0])
    assert "+Usage: run it." in text_of(results[1])
    assert "Document usage" in text_of(results[4]) and "main" in text_of(results[5])
    assert git(repo, "log", "-1", "--format=%s").strip() == "Document usage"
    for path in (repo / ".git" / "index", repo / ".git" / "refs" / "heads" / "main"):
        st = path.stat()
        assert (st.st_uid, st.st_gid) == owner, path  # the host's ownership is the owner's
    recs = records(audit)
    assert [r.decision for r in recs] == ["allow"] * len(calls), [r.reasons for r in recs]
    assert not (tmp_path / "project" / ".mtguard").exists()  # the guard's files stay out


async def test_memory_server_keeps_its_graph_across_two_proxy_runs(
    servers: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = {**os.environ, "XDG_STATE_HOME": str(state)}
    audit = tmp_path / "audit.jsonl"
    cmd = [MTGUARD, "proxy", "--audit-log", str(audit), "--name", "memory", "--mount",
           str(servers / "node"), "--task", "remember what I tell you about my team", "--",
           "node", str(MEMORY_JS)]  # fmt: skip
    alice = {"name": "Alice", "entityType": "person", "observations": ["leads the API team"]}
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with open_stdio_client(cmd, env, mode="legacy", request_timeout=90) as client:
            created = await client.call_tool("create_entities", {"entities": [alice]})
            seen = await client.call_tool("read_graph", {})
        async with open_stdio_client(cmd, env, mode="legacy", request_timeout=90) as client:
            again = await client.call_tool("read_graph", {})
            found = await client.call_tool("search_nodes", {"query": "API team"})
    assert not created.get("isError"), text_of(created)
    for result in (seen, again, found):
        assert not result.get("isError"), text_of(result)
        graph = json.loads(text_of(result))
        assert [e["name"] for e in graph["entities"]] == ["Alice"], graph
    # the package on the host is untouched; the graph lives in the server's own state
    assert not list(MEMORY_JS.parent.glob("memory.json*"))
    kept = list((state / "mtguard" / "servers" / "memory" / "package").rglob("memory.json*"))
    assert len(kept) == 1 and "Alice" in kept[0].read_text()
    recs = records(audit)
    assert [r.decision for r in recs] == ["allow"] * 4, [r.reasons for r in recs]
    write = recs[0]
    assert write.tree is not None  # the write beside the code is in the tree like any other
    events = [f for p in write.tree.processes for f in p.files]
    dist = str(MEMORY_JS.parent)
    assert any(f.op == "open" and "write" in f.flags and f.path.startswith(dist) and
               f.result >= 0 for f in events), events  # fmt: skip
    assert any(f.op == "rename" and f.target == f"{dist}/{kept[0].name}" for f in events), events


async def test_rollback_covers_the_memory_servers_writes_beside_its_code(
    servers: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
    audit = tmp_path / "audit.jsonl"
    cmd = [MTGUARD, "proxy", "--audit-log", str(audit), "--name", "memory", "--workspace",
           str(ws), "--rollback", "tree", "--mount", str(servers / "node"), "--task",
           "remember what I tell you about my team", "--", "node", str(MEMORY_JS)]  # fmt: skip
    bob = {"name": "Bob", "entityType": "person", "observations": ["runs the release"]}
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with open_stdio_client(cmd, env, mode="legacy", request_timeout=90) as client:
            created = await client.call_tool("create_entities", {"entities": [bob]})
    assert not created.get("isError"), text_of(created)
    (rec,) = records(audit)
    assert rec.decision == "allow" and rec.rollback is not None
    assert rec.rollback.action == "committed", rec.rollback
    dist = str(MEMORY_JS.parent)
    assert any(p.startswith(f"{dist}/memory.json") for p in rec.rollback.paths), rec.rollback
    mounts = Path("/proc/self/mounts").read_text()  # noqa: ASYNC240 - procfs
    assert str(tmp_path / "state") not in mounts  # the overlay's host mount went with it
