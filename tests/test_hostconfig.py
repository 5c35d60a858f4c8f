"""`mtguard wrap` / `unwrap` on the host config formats in examples/hosts/."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from mtguard_rt.cli import main
from mtguard_rt.commands.proxy import config_from_args
from mtguard_rt.errors import GuardError
from mtguard_rt.hostconfig import (
    backups,
    infer_needs,
    is_wrapped,
    read_host_config,
    strip_jsonc,
    unwrap_config,
    wrap_config,
    write_host_config,
)

HOSTS = Path(__file__).resolve().parents[1] / "examples" / "hosts"
EXAMPLES = sorted(HOSTS.glob("*.json"))


def load(name: str) -> dict:
    return read_host_config(HOSTS / name).config


def test_every_host_format_is_an_example() -> None:
    assert {p.name for p in EXAMPLES} == {
        "claude_desktop_config.json", "cursor_mcp.json", "claude_code.mcp.json", "vscode_mcp.json",
        "claude_code_user.claude.json",
    }


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_wrap_then_unwrap_restores_exactly(path: Path) -> None:
    original = read_host_config(path).config
    wrapped = wrap_config(original, options=["--policy", "strict"]).config
    assert wrapped != original
    restored = unwrap_config(wrapped).config
    assert restored == original
    assert json.dumps(restored) == json.dumps(original)  # key order too


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_wrapping_twice_changes_nothing(path: Path) -> None:
    once = wrap_config(read_host_config(path).config)
    twice = wrap_config(once.config)
    assert twice.config == once.config
    assert not twice.changed
    assert "wrapped" not in {c.action for c in twice.changes}


def test_claude_desktop_server_runs_under_the_proxy_with_env_passed_by_name() -> None:
    rewrite = wrap_config(load("claude_desktop_config.json"), mtguard="/opt/bin/mtguard")
    github = rewrite.config["mcpServers"]["github"]
    assert github["command"] == "/opt/bin/mtguard"
    assert github["args"] == [
        "proxy", "--name", "github", "--env", "GITHUB_PERSONAL_ACCESS_TOKEN", "--",
        "npx", "-y", "@modelcontextprotocol/server-github",
    ]
    assert github["env"] == {"GITHUB_PERSONAL_ACCESS_TOKEN": "<your token>"}
    assert "<your token>" not in json.dumps(github["args"])  # no secret on a command line
    assert [(c.name, c.action) for c in rewrite.changes] == [
        ("filesystem", "wrapped"), ("fetch", "wrapped"), ("github", "wrapped"),
    ]


def test_remote_servers_run_through_the_upstream_proxy_with_the_token_kept_out_of_argv() -> None:
    cursor = wrap_config(load("cursor_mcp.json"), mtguard="/opt/bin/mtguard")
    docs = cursor.config["mcpServers"]["docs"]
    assert docs == {
        "command": "/opt/bin/mtguard",
        "args": ["proxy", "--name", "docs", "--upstream", "https://mcp.example.com/mcp"],
        "env": {"MTGUARD_UPSTREAM_TOKEN": "${env:DOCS_TOKEN}"},  # the host substitutes it
    }
    code = wrap_config(load("claude_code.mcp.json")).config["mcpServers"]
    assert code["sentry"] == {"type": "stdio", "command": "mtguard", "args": [
        "proxy", "--name", "sentry", "--upstream", "https://mcp.sentry.dev/mcp"]}
    assert code["filesystem"]["type"] == "stdio" and is_wrapped(code["filesystem"])
    # a server with no args gets the proxy's, and loses them again on unwrap
    assert code["time"]["args"] == ["proxy", "--name", "time", "--", "uvx"]
    assert unwrap_config({"mcpServers": {"time": code["time"]}}).config == {
        "mcpServers": {"time": {"command": "uvx"}}
    }


def test_other_headers_go_on_the_command_line_and_sse_servers_are_left() -> None:
    config = {"servers": {
        "r": {"type": "http", "url": "https://x.example/mcp",
              "headers": {"X-Api-Key": "k", "Authorization": "Basic abc"}},
        "s": {"type": "sse", "url": "https://x.example/sse"}}}
    rewrite = wrap_config(config)
    r = rewrite.config["servers"]["r"]
    assert r["type"] == "stdio" and "env" not in r
    assert r["args"][-4:] == ["--upstream-header", "X-Api-Key: k",
                              "--upstream-header", "Authorization: Basic abc"]
    assert rewrite.config["servers"]["s"] == config["servers"]["s"]
    assert [(c.name, c.action) for c in rewrite.changes] == [("r", "wrapped"), ("s", "left")]
    assert "streamable HTTP only" in rewrite.changes[1].why
    assert unwrap_config(rewrite.config).config == config


def test_a_server_that_runs_its_own_container_is_left_with_the_reason() -> None:
    config = {"mcpServers": {"gh": {"command": "docker", "args": [
        "run", "-i", "--rm", "-e", "API_TOKEN", "registry.example/mcp-server"]}}}
    rewrite = wrap_config(config)
    assert rewrite.config == config and not rewrite.changed
    assert rewrite.changes[0].action == "left" and "no container engine" in rewrite.changes[0].why


def test_claude_code_user_file_wraps_every_project_table() -> None:
    config = load("claude_code_user.claude.json")
    rewrite = wrap_config(config)
    project = rewrite.config["projects"]["/home/me/project"]
    assert is_wrapped(project["mcpServers"]["git"]) and is_wrapped(project["mcpServers"]["tickets"])
    assert is_wrapped(rewrite.config["mcpServers"]["memory"])
    assert project["allowedTools"] == [] and rewrite.config["numStartups"] == 12
    assert {c.name for c in rewrite.changes} == {"memory", "git", "tickets"}
    assert unwrap_config(rewrite.config).config == config


def test_vscode_jsonc_with_inputs_and_cwd() -> None:
    file = read_host_config(HOSTS / "vscode_mcp.json")
    assert file.had_comments
    finance = wrap_config(file.config).config["servers"]["finance"]
    assert list(finance) == ["type", "command", "args", "env", "cwd"]  # host keys kept in order
    assert finance["args"][-3:] == ["--", "python3", "examples/servers/finance.py"]
    assert finance["env"] == {"FINANCE_API_KEY": "${input:api-key}"}


def test_vscode_settings_nesting_and_only_selected_servers() -> None:
    settings = {"editor.fontSize": 12, "mcp": {"servers": {
        "a": {"command": "a-server"}, "b": {"command": "b-server", "args": ["--x"]}}}}
    rewrite = wrap_config(settings, only=["b"])
    servers = rewrite.config["mcp"]["servers"]
    assert servers["a"] == {"command": "a-server"}
    assert is_wrapped(servers["b"]) and rewrite.config["editor.fontSize"] == 12


def test_a_server_whose_own_args_contain_a_double_dash_round_trips() -> None:
    config = {"mcpServers": {"s": {"command": "node", "args": ["srv.js", "--", "--flag"]}}}
    wrapped = wrap_config(config).config
    assert wrapped["mcpServers"]["s"]["args"][-4:] == ["node", "srv.js", "--", "--flag"]
    assert unwrap_config(wrapped).config == config


def test_strip_jsonc_keeps_comment_lookalikes_inside_strings() -> None:
    text = '{"u": "http://x//y", /* c */ "v": "a,}", // end\n "w": [1,2,],}'
    plain, dropped = strip_jsonc(text)
    assert dropped
    assert json.loads(plain) == {"u": "http://x//y", "v": "a,}", "w": [1, 2]}


def test_cli_prints_by_default_and_leaves_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "claude_desktop_config.json"
    shutil.copy(HOSTS / path.name, path)
    before = path.read_bytes()
    assert main(["wrap", str(path), "--print", "--observe", "--proxy-arg=--network=host"]) == 0
    out, err = capsys.readouterr()
    fetch = json.loads(out)["mcpServers"]["fetch"]
    assert fetch["args"][:6] == ["proxy", "--name", "fetch", "--observe", "--network=host", "--"]
    assert "fetch: wrapped" in err
    # the default is a dry run: the diff --write would apply
    assert main(["wrap", str(path), "--server", "fetch"]) == 0
    out, err = capsys.readouterr()
    assert out.startswith(f"--- {path}\n+++ {path} (after --write)\n")
    assert '-      "command": "uvx",' in out.splitlines()
    assert "dry run: nothing written" in err
    assert path.read_bytes() == before and not backups(path)


def test_cli_write_keeps_numbered_backups_and_unwrap_restores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mcp.json"
    shutil.copy(HOSTS / "claude_code.mcp.json", path)
    os.chmod(path, 0o640)
    original = path.read_text()
    assert main(["wrap", str(path), "--write"]) == 0
    wrapped = path.read_text()
    assert (tmp_path / "mcp.json.bak").read_text() == original
    assert is_wrapped(json.loads(wrapped)["mcpServers"]["filesystem"])
    assert main(["wrap", str(path), "--write"]) == 0
    assert "unchanged" in capsys.readouterr().err
    assert main(["unwrap", str(path), "--write"]) == 0
    assert json.loads(path.read_text()) == json.loads(original)
    assert path.read_text() == original  # same indentation, so the same bytes here
    # every version is kept: the first backup is never overwritten by the unwrap
    assert [p.name for p in backups(path)] == ["mcp.json.bak", "mcp.json.bak.2"]
    assert (tmp_path / "mcp.json.bak").read_text() == original
    assert (tmp_path / "mcp.json.bak.2").read_text() == wrapped
    assert main(["wrap", str(path), "--write"]) == 0
    assert [p.name for p in backups(path)][-1] == "mcp.json.bak.3"
    assert {oct(p.stat().st_mode & 0o777) for p in [path, *backups(path)]} == {"0o640"}


def test_backups_skip_a_taken_number_and_a_symlinked_config_stays_a_link(tmp_path: Path) -> None:
    real = tmp_path / "dotfiles" / "mcp.json"
    real.parent.mkdir()
    shutil.copy(HOSTS / "cursor_mcp.json", real)
    link = tmp_path / "mcp.json"
    link.symlink_to(real)
    (real.parent / "mcp.json.bak").write_text("someone else's\n")
    file = read_host_config(link)
    backup = write_host_config(file, wrap_config(file.config).config)
    assert backup == real.parent / "mcp.json.bak.2"
    assert (real.parent / "mcp.json.bak").read_text() == "someone else's\n"
    assert link.is_symlink() and is_wrapped(json.loads(real.read_text())["mcpServers"]["git"])


def test_cli_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"mcpServers": {"x": ')
    assert main(["wrap", str(bad)]) == 2
    assert capsys.readouterr().err.startswith(f"mtguard: error: {bad}: not JSON")
    empty = tmp_path / "empty.json"
    empty.write_text('{"theme": "dark"}')
    assert main(["unwrap", str(empty)]) == 2
    assert "no MCP server table" in capsys.readouterr().err
    assert main(["wrap", str(HOSTS / "cursor_mcp.json"), "--server", "nope"]) == 2
    assert "no server named nope" in capsys.readouterr().err
    assert main(["wrap", str(HOSTS / "cursor_mcp.json"), "--proxy-arg", "strict"]) == 2


def test_proxy_env_by_name_takes_the_proxy_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from mtguard_rt.cli import build_parser

    monkeypatch.setenv("MTG_TEST_TOKEN", "s3cret")
    monkeypatch.delenv("MTG_TEST_UNSET", raising=False)
    parser = build_parser()
    args = parser.parse_args(["proxy", "--env", "MTG_TEST_TOKEN", "--env", "A=b", "--", "x"])
    assert config_from_args(args).sandbox.env == {"MTG_TEST_TOKEN": "s3cret", "A": "b"}
    args = parser.parse_args(["proxy", "--env", "MTG_TEST_UNSET", "--", "x"])
    with pytest.raises(GuardError, match="MTG_TEST_UNSET is not set"):
        config_from_args(args)


def test_proxy_policy_preset_names_stay_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mtguard_rt.cli import build_parser

    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.toml").write_text("")
    args = build_parser().parse_args(["proxy", "--policy", "strict", "--policy", "mine.toml",
                                      "--", "x"])
    assert config_from_args(args).policies == ["strict", os.path.join(tmp_path, "mine.toml")]


def test_unwrap_after_wrap_brings_back_comments_and_layout(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    shutil.copy(HOSTS / "vscode_mcp.json", path)
    original = path.read_text()
    assert main(["wrap", str(path), "--write"]) == 0
    assert "// VS Code" not in path.read_text()
    assert main(["unwrap", str(path), "--write"]) == 0
    assert path.read_text() == original


def test_cli_makes_policy_files_and_the_audit_log_absolute(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team.toml").write_text("")
    config = str(HOSTS / "cursor_mcp.json")
    assert main(["wrap", config, "--print", "--policy", "strict", "--policy", "team.toml",
                 "--audit-log", "logs/audit.jsonl"]) == 0
    args = json.loads(capsys.readouterr().out)["mcpServers"]["git"]["args"]
    at = args.index("--policy")
    assert args[at:at + 6] == ["--policy", "strict", "--policy", str(tmp_path / "team.toml"),
                               "--audit-log", str(tmp_path / "logs/audit.jsonl")]


# -- what a wrapped server needs from the sandbox ----------------------------------------------


def _tree(root: Path, *files: str) -> Path:
    for name in files:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    return root


def _no_program(_name: str) -> None:
    return None


def test_directory_arguments_become_the_workspace_then_read_only_mounts(tmp_path: Path) -> None:
    docs, notes = tmp_path / "docs", tmp_path / "notes"
    docs.mkdir(), notes.mkdir()
    entry = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
                                        str(docs), f"--extra={notes}", str(docs / "sub"),
                                        "/", str(tmp_path / "gone")]}
    needs = infer_needs(entry, home=str(tmp_path / "home"), which=_no_program, environ={})
    assert needs.workspace == str(docs) and needs.mounts == [str(notes)]
    assert needs.flags()[:4] == ["--workspace", str(docs), "--mount", str(notes)]
    assert any("/ is an argument but is not mounted" in n for n in needs.notes)
    assert any(f"{tmp_path / 'gone'} does not exist here" in n for n in needs.notes)
    assert needs.domains == ["registry.npmjs.org"]  # npx fetches the package
    assert needs.flags()[-2:] == ["--allow-domain", "registry.npmjs.org"]


def test_an_installed_node_server_mounts_its_node_modules_not_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    pkg = "node_modules/@scope/server/dist/index.js"
    _tree(home, pkg, "node_modules/dep/index.js", ".ssh/id_rsa")
    bin_link = home / "node_modules/.bin/server"
    bin_link.parent.mkdir()
    bin_link.symlink_to(home / pkg)
    needs = infer_needs({"command": str(bin_link)}, home=str(home), which=_no_program, environ={})
    assert needs.mounts == [str(home / "node_modules")]  # npm install in ~: not ~ itself
    assert needs.domains == [] and "--allow-domain" not in needs.flags()
    script = infer_needs({"command": "node", "args": [str(home / pkg)]}, home=str(home),
                         which=lambda _: "/usr/bin/node", environ={})
    assert script.mounts == [str(home / "node_modules")]


def test_a_virtualenv_server_mounts_the_venv_and_the_python_it_was_made_from(
    tmp_path: Path
) -> None:
    venv = _tree(tmp_path / "servers" / "py", "bin/mcp-server-x")
    base = _tree(tmp_path / "pythons" / "3.12", "bin/python3.12")
    (venv / "pyvenv.cfg").write_text(f"home = {base}/bin\nversion = 3.12.1\n")
    needs = infer_needs({"command": str(venv / "bin/mcp-server-x"), "args": ["--repository", "."]},
                        home=str(tmp_path / "home"), which=_no_program, environ={})
    assert needs.mounts == [str(venv), str(base)]
    dot = _tree(tmp_path / "home" / ".venv", "bin/mcp-server-x", "pyvenv.cfg") / "bin/mcp-server-x"
    assert infer_needs({"command": str(dot)}, home=str(tmp_path / "home"), which=_no_program,
                       environ={}).mounts == [str(tmp_path / "home" / ".venv")]
    assert needs.workspace is None  # "." with no known base: a note, not a guess
    assert any("'.' is relative" in n for n in needs.notes)
    project = tmp_path / "project"
    project.mkdir()
    based = infer_needs({"command": str(venv / "bin/mcp-server-x"), "args": ["--repository", "."]},
                        base=str(project), home=str(tmp_path / "home"), which=_no_program,
                        environ={})
    assert based.workspace == str(project) and based.flags()[:2] == ["--workspace", str(project)]


def test_a_relative_script_makes_the_hosts_working_directory_the_workspace(
    tmp_path: Path
) -> None:
    project = _tree(tmp_path / "project", "package.json", "srv/server.py")
    entry = {"type": "stdio", "command": "python3", "args": ["srv/server.py"],
             "cwd": "${workspaceFolder}", "env": {"API_BASE": "https://api.example.com/v2"}}
    needs = infer_needs(entry, base=str(project), home=str(tmp_path / "home"),
                        which=lambda _: "/usr/bin/python3", environ={})
    assert needs.workspace == str(project)
    assert needs.mounts == []  # the script is inside the workspace already
    assert needs.domains == ["api.example.com"]
    outside = _tree(tmp_path / "tools" / "finance", "pyproject.toml", "src/finance/server.py")
    expanded = infer_needs(  # the hosts' variables: ${env:X}, ${X}, ${X:-default}, ~
        {"command": "srv", "args": ["${env:DATA}", "${MISSING:-" + str(outside) + "}",
                                    "${NOT_SET}/x"]},
        home=str(tmp_path / "home"), which=_no_program, environ={"DATA": str(project)})
    assert (expanded.workspace, expanded.mounts) == (str(project), [str(outside)])
    script = infer_needs({"command": "python3", "args": [str(outside / "src/finance/server.py")]},
                         home=str(tmp_path / "home"), which=lambda _: "/usr/bin/python3",
                         environ={})
    assert script.mounts == [str(outside)]  # the project the script belongs to


def test_a_pipx_style_link_mounts_its_venv_and_never_the_homes_dot_directories(
    tmp_path: Path
) -> None:
    home = tmp_path / "home"
    venv = _tree(home / ".local/share/pipx/venvs/srv", "pyvenv.cfg", "bin/srv")
    link = home / ".local/bin/srv"
    link.parent.mkdir(parents=True)
    link.symlink_to(venv / "bin/srv")
    mounts = infer_needs({"command": str(link)}, home=str(home), which=_no_program,
                         environ={}).mounts
    assert mounts == [str(home / ".local/bin"), str(venv)]
    assert str(home / ".local") not in mounts and str(home) not in mounts


def test_a_launcher_on_path_is_noted_not_mounted(tmp_path: Path) -> None:
    shim = _tree(tmp_path / "home" / ".pyenv" / "shims", "python3") / "python3"
    needs = infer_needs({"command": "python3", "args": ["-m", "server"]}, home=str(tmp_path /
                        "home"), which=lambda _: str(shim), environ={})
    assert needs.mounts == [] and any(str(shim) in n for n in needs.notes)


def test_cli_prints_each_inferred_flag_with_its_reason_and_the_guards_absolute_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps({"mcpServers": {
        "files": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem",
                                             str(ws)]}}}))
    assert main(["wrap", str(path), "--print"]) == 0
    out, err = capsys.readouterr()
    files = json.loads(out)["mcpServers"]["files"]
    assert os.path.isabs(files["command"]) and os.access(files["command"], os.X_OK)
    assert files["args"][3:5] == ["--workspace", str(ws)]
    assert f"--workspace {ws}" in err and "first directory argument" in err
    assert "registry.npmjs.org" in err
    from mtguard_rt.commands.wrap import proxy_flags

    if "--allow-domain" in proxy_flags():  # emitted only when this proxy has the flag
        assert files["args"][5:7] == ["--allow-domain", "registry.npmjs.org"]
    else:
        assert "--allow-domain" not in files["args"] and "cannot allow single hosts" in err
    assert main(["wrap", str(path), "--print", "--no-infer"]) == 0
    assert "--workspace" not in json.loads(capsys.readouterr().out)["mcpServers"]["files"]["args"]
    assert main(["wrap", str(path), "--print", f"--proxy-arg=--workspace={tmp_path}",
                 "--proxy-arg=--network=host"]) == 0
    args = json.loads(capsys.readouterr().out)["mcpServers"]["files"]["args"]
    assert args.count(f"--workspace={tmp_path}") == 1 and "--workspace" not in args
    assert "--allow-domain" not in args


def test_project_configs_resolve_relative_arguments_in_the_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "project"
    (project / ".vscode").mkdir(parents=True)
    shutil.copy(HOSTS / "vscode_mcp.json", project / ".vscode" / "mcp.json")
    _tree(project, "examples/servers/finance.py")
    assert main(["wrap", str(project / ".vscode" / "mcp.json"), "--print"]) == 0
    finance = json.loads(capsys.readouterr().out)["servers"]["finance"]
    assert finance["args"][5:7] == ["--workspace", str(project)]
    shutil.copy(HOSTS / "claude_code.mcp.json", project / ".mcp.json")
    assert main(["wrap", str(project / ".mcp.json"), "--print", "--server", "filesystem"]) == 0
    filesystem = json.loads(capsys.readouterr().out)["mcpServers"]["filesystem"]
    assert filesystem["args"][3:5] == ["--workspace", str(project)]  # its "." argument


def test_the_guard_path_is_the_running_mtguard_made_absolute(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from mtguard_rt.commands.wrap import guard_command

    script = tmp_path / "bin" / "mtguard"
    script.parent.mkdir()
    script.write_text("#!/bin/sh\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["bin/mtguard", "wrap"])
    assert guard_command() == str(script)
    monkeypatch.setattr(sys, "argv", ["/somewhere/pytest"])  # python -m, or embedded
    assert guard_command() == str(Path(sys.executable).parent / "mtguard")


def test_a_claude_code_project_table_resolves_dot_in_its_own_project(tmp_path: Path) -> None:
    from mtguard_rt.hostconfig import default_infer

    project = tmp_path / "project"
    project.mkdir()
    config = {"mcpServers": {"top": {"command": "uvx", "args": ["mcp-server-git", "."]}},
              "projects": {str(project): {"mcpServers": {
                  "git": {"type": "stdio", "command": "uvx", "args": ["mcp-server-git", "."]}}}}}
    rewrite = wrap_config(config, infer=default_infer)
    git = rewrite.config["projects"][str(project)]["mcpServers"]["git"]
    assert git["args"][3:5] == ["--workspace", str(project)]
    top = rewrite.config["mcpServers"]["top"]  # user scope: started wherever claude is
    assert "--workspace" not in top["args"]
    notes = next(c.needs for c in rewrite.changes if c.name == "top").notes  # type: ignore[union-attr]
    assert any("'.' is relative to the host's working directory" in n for n in notes)


@pytest.mark.root
def test_a_root_run_write_leaves_the_users_file_and_backup_owned_by_the_user(
    tmp_path: Path
) -> None:
    path = tmp_path / "claude_desktop_config.json"
    shutil.copy(HOSTS / path.name, path)
    os.chown(path, 1001, 1001)
    os.chmod(path, 0o600)
    file = read_host_config(path)
    backup = write_host_config(file, wrap_config(file.config).config)
    for p in (path, backup):
        st = p.stat()
        assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (1001, 1001, 0o600)


def test_the_readmes_wrap_example_is_what_wrap_writes(tmp_path: Path) -> None:
    """README.md's "becomes" entry, reproduced with its paths made under tmp_path."""
    import re

    from mtguard_rt.hostconfig import default_infer

    readme = (HOSTS.parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Put it in front of a server", 1)[1].split("\n## ", 1)[0]
    before = json.loads(re.search(r"An entry `(\{.*?\})`\nbecomes:", section, re.S).group(1))
    after = json.loads("{" + re.search(r"becomes:\n\n```json\n(.*?)```", section, re.S).group(1)
                       + "}")["files"]
    root = str(tmp_path)

    def moved(value: str) -> str:
        return value.replace("/opt/", f"{root}/opt/").replace("/home/me", f"{root}/home/me")

    _tree(tmp_path, "opt/mcp/node_modules/@modelcontextprotocol/server-filesystem/dist/index.js")
    (tmp_path / "home/me/project").mkdir(parents=True)
    entry = {"command": before["command"], "args": [moved(a) for a in before["args"]]}
    wrapped = wrap_config({"mcpServers": {"files": entry}}, mtguard=after["command"],
                          infer=default_infer).config["mcpServers"]["files"]
    assert wrapped == {"command": after["command"], "args": [moved(a) for a in after["args"]]}
