"""What a new user runs, for real: a host config wrapped by `mtguard wrap`, started the way the
host starts it, and the README's quick-start command, copied out of README.md.

Both drive the registry's own `@modelcontextprotocol/server-filesystem` (installed, pinned, by
scripts/setup-servers.sh) through the official MCP SDK client: the guard starts, answers
`initialize` through the wrapped command line, and the calls are sandboxed and traced.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt.eval.mcp_client import open_stdio_client
from tests.audit_records import call_records

from ..proxy.mcp_http_server import run_server
from .conftest import MTGUARD, REPO

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("anyio_backend", ["trio"]),  # slow real tests: one backend
]

FILESYSTEM = "node_modules/@modelcontextprotocol/server-filesystem"
SETUP_TIMEOUT_S = 900
SESSION_TIMEOUT_S = 150
CLI_TIMEOUT_S = 60
HOST_VAR = re.compile(r"\$\{env:([A-Za-z_][A-Za-z0-9_]*)\}")
HOST_PATH = "/usr/bin:/bin"  # a host started from a desktop session: no venv on its PATH
QUICKSTART_DIR = Path("/tmp/mtguard-quickstart")  # the README's own scratch project


@pytest.fixture(scope="module")
def node_servers() -> Path:
    """The project's own set-up for the real servers (idempotent: stamps, pinned)."""
    try:
        done = subprocess.run([str(REPO / "scripts/setup-servers.sh")], capture_output=True,
                              text=True, timeout=SETUP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/setup-servers.sh took over {SETUP_TIMEOUT_S} s")
    if done.returncode != 0:
        pytest.fail(f"scripts/setup-servers.sh failed:\n{done.stderr[-2000:]}")
    prefix = REPO / ".servers" / "node"
    assert (prefix / FILESYSTEM / "dist/index.js").is_file()
    return prefix


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


async def cli(*args: str) -> str:
    """The real `mtguard` CLI, run from `/` as a user would; its stderr (the review)."""
    with anyio.fail_after(CLI_TIMEOUT_S):
        done = await anyio.run_process([MTGUARD, *args], cwd="/", check=False)
    assert done.returncode == 0, done.stderr.decode()
    return done.stderr.decode()


def host_env(entry: dict[str, Any], home: Path) -> dict[str, str]:
    """The environment a host gives a server: its own minimal one plus the entry's `env`."""
    return {"PATH": HOST_PATH, "HOME": str(home), "LANG": "C.UTF-8", **entry.get("env", {})}


@pytest.mark.docker
@pytest.mark.bpf
@pytest.mark.parametrize("host", ["claude_code", "claude_desktop", "vscode"])
async def test_a_wrapped_entry_runs_the_server_under_the_guard_as_the_host_starts_it(
    node_servers: Path, tmp_path: Path, host: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("meeting at noon\n")
    os.chmod(tmp_path, 0o755)
    audit = tmp_path / "audit.jsonl"
    if host == "claude_code":  # a project's .mcp.json: the server's "." is the project
        config_path = project / ".mcp.json"
        entry = {"type": "stdio", "command": "node",
                 "args": [str(node_servers / FILESYSTEM / "dist/index.js"), "."], "env": {}}
        config = {"mcpServers": {"files": entry}}
    elif host == "vscode":  # .vscode/mcp.json: VS Code substitutes ${workspaceFolder}
        config_path = project / ".vscode" / "mcp.json"
        config_path.parent.mkdir()
        entry = {"type": "stdio", "command": "node",
                 "args": [str(node_servers / FILESYSTEM / "dist/index.js"), "${workspaceFolder}"]}
        config = {"inputs": [], "servers": {"files": entry}}
    else:  # a user-level config: the installed bin link and an absolute directory
        config_path = tmp_path / "Claude" / "claude_desktop_config.json"
        config_path.parent.mkdir()
        entry = {"command": str(node_servers / "node_modules/.bin/mcp-server-filesystem"),
                 "args": [str(project)]}
        config = {"mcpServers": {"files": entry}, "globalShortcut": "Ctrl+Space"}
    config_path.write_text(json.dumps(config, indent=2) + "\n")
    # the real CLI, from another directory, as a user would run it
    review = await cli("wrap", str(config_path), "--write", "--audit-log", str(audit))
    assert f"--workspace {project}" in review  # printed for review, with the reason
    assert f"--mount {node_servers / 'node_modules'}" in review
    table = "servers" if host == "vscode" else "mcpServers"
    wrapped = json.loads(config_path.read_text())[table]["files"]
    assert os.path.isabs(wrapped["command"]) and wrapped["args"][0] == "proxy"
    args = [a.replace("${workspaceFolder}", str(project)) for a in wrapped["args"]]
    assert json.loads(config_path.with_name(config_path.name + ".bak").read_text()) == config
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with open_stdio_client(
            [wrapped["command"], *args], env=host_env(wrapped, tmp_path / "home"),
            cwd="/", mode="legacy", request_timeout=90,
        ) as client:
            tools = {t["name"] for t in await client.list_tools()}
            read = await client.call_tool("read_text_file", {"path": str(project / "notes.txt")})
            listing = await client.call_tool("list_directory", {"path": str(project)})
    assert {"read_text_file", "list_directory", "write_file"} <= tools
    assert (read.get("isError"), text_of(read)) == (False, "meeting at noon\n")
    assert "[FILE] notes.txt" in text_of(listing).splitlines()
    recs = call_records(audit)
    assert [(r.tool, r.decision) for r in recs] == [("read_text_file", "allow"),
                                                     ("list_directory", "allow")]
    assert recs[0].tree is not None and recs[0].tree.processes  # traced in the sandbox
    # and back: unwrap restores the host's own entry
    await cli("unwrap", str(config_path), "--write")
    assert json.loads(config_path.read_text()) == config


def readme_quickstart() -> str:
    """The first shell block of README.md's "Put it in front of a server" section."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Put it in front of a server", 1)[1].split("\n## ", 1)[0]
    m = re.search(r"```sh\n(.*?)```", section, re.S)
    assert m, "README.md: no ```sh block under 'Put it in front of a server'"
    return m.group(1)


@pytest.mark.docker
@pytest.mark.bpf
async def test_the_readme_quickstart_runs_as_written(node_servers: Path, tmp_path: Path) -> None:
    script = readme_quickstart()
    assert str(QUICKSTART_DIR) in script and ".venv/bin/mtguard proxy" in script
    shutil.rmtree(QUICKSTART_DIR, ignore_errors=True)
    try:
        with anyio.fail_after(SESSION_TIMEOUT_S):
            async with open_stdio_client(
                ["bash", "-euc", script], env={**os.environ, "HOME": str(tmp_path)},
                cwd=REPO, mode="legacy", request_timeout=90,
            ) as client:
                tools = {t["name"] for t in await client.list_tools()}
                hello = await client.call_tool(
                    "read_text_file", {"path": str(QUICKSTART_DIR / "hello.txt")})
                wrote = await client.call_tool(
                    "write_file", {"path": str(QUICKSTART_DIR / "todo.txt"),
                                   "content": "try mtguard wrap\n"})
        assert {"read_text_file", "write_file"} <= tools
        assert (hello.get("isError"), text_of(hello)) == (False, "hello from the sandbox\n")
        assert not wrote.get("isError"), text_of(wrote)
        assert (QUICKSTART_DIR / "todo.txt").read_text() == "try mtguard wrap\n"
    finally:
        shutil.rmtree(QUICKSTART_DIR, ignore_errors=True)


async def test_a_wrapped_remote_entry_reaches_its_server_with_the_token_out_of_argv(
    tmp_path: Path
) -> None:
    secret = "docs-tok-5be2"
    audit = tmp_path / "audit.jsonl"
    config_path = tmp_path / "mcp.json"
    with run_server(token=secret) as server:
        config = {"mcpServers": {"docs": {"url": server.url, "headers": {
            "Authorization": "Bearer ${env:DOCS_TOKEN}"}}}}
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        await cli("wrap", str(config_path), "--write", "--audit-log", str(audit))
        wrapped = json.loads(config_path.read_text())["mcpServers"]["docs"]
        assert wrapped["args"][3:5] == ["--upstream", server.url]
        assert secret not in config_path.read_text()
        # the host substitutes ${env:NAME} in the entry's env, as it did in its headers
        env = {k: HOST_VAR.sub(lambda m: {"DOCS_TOKEN": secret}[m.group(1)], v)
               for k, v in wrapped["env"].items()}
        with anyio.fail_after(SESSION_TIMEOUT_S):
            async with open_stdio_client([wrapped["command"], *wrapped["args"]],
                                         env={"PATH": HOST_PATH, **env}, cwd="/",
                                         request_timeout=30) as client:
                echoed = await client.call_tool("echo", {"text": "through the wrapped entry"})
    assert text_of(echoed) == "through the wrapped entry"
    assert server.seen.calls == ["echo"]
    assert server.seen.requests[0]["authorization"] == f"Bearer {secret}"
    assert secret not in " ".join(wrapped["args"]) and secret not in audit.read_text()


@pytest.mark.docker
@pytest.mark.bpf
async def test_a_wrapped_virtualenv_server_works_in_a_project_owned_by_root(
    node_servers: Path, tmp_path: Path
) -> None:
    """A Claude Code project entry for a PyPI server in its own virtualenv (`--repository .`):
    wrap mounts the venv and the Python it was made from, and makes the project the workspace."""
    venv = REPO / ".servers" / "py"
    assert (venv / "bin/mcp-server-git").is_file()  # installed by scripts/setup-servers.sh
    project = tmp_path / "project"
    project.mkdir()
    for args in (["init", "-q", "-b", "main"], ["config", "user.email", "dev@example.org"],
                 ["config", "user.name", "Dev"]):
        await anyio.run_process(["git", "-C", str(project), *args])
    (project / "README.md").write_text("draft\n")
    entry = {"type": "stdio", "command": str(venv / "bin/mcp-server-git"),
             "args": ["--repository", "."]}
    config_path = project / ".mcp.json"
    config_path.write_text(json.dumps({"mcpServers": {"git": entry}}) + "\n")
    audit = tmp_path / "audit.jsonl"
    review = await cli("wrap", str(config_path), "--write", "--audit-log", str(audit))
    assert f"--workspace {project}" in review and f"--mount {venv}" in review
    wrapped = json.loads(config_path.read_text())["mcpServers"]["git"]
    with anyio.fail_after(SESSION_TIMEOUT_S):
        async with open_stdio_client(
            [wrapped["command"], *wrapped["args"]], env=host_env(wrapped, tmp_path / "home"),
            cwd="/", mode="legacy", request_timeout=90,
        ) as client:
            status = await client.call_tool("git_status", {"repo_path": str(project)})
            added = await client.call_tool("git_add", {"repo_path": str(project),
                                                       "files": ["README.md"]})
    assert "README.md" in text_of(status) and not status.get("isError"), text_of(status)
    assert not added.get("isError"), text_of(added)
    staged = await anyio.run_process(["git", "-C", str(project), "diff", "--cached",
                                      "--name-only"])
    assert staged.stdout.decode().split() == ["README.md"]
    assert (project / ".git").stat().st_uid == 0  # root's project, still root's on the host
