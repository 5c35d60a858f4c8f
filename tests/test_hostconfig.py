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
    is_wrapped,
    read_host_config,
    strip_jsonc,
    unwrap_config,
    wrap_config,
)

HOSTS = Path(__file__).resolve().parents[1] / "examples" / "hosts"
EXAMPLES = sorted(HOSTS.glob("*.json"))


def load(name: str) -> dict:
    return read_host_config(HOSTS / name).config


def test_every_host_format_is_an_example() -> None:
    assert {p.name for p in EXAMPLES} == {
        "claude_desktop_config.json", "cursor_mcp.json", "claude_code.mcp.json", "vscode_mcp.json",
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


def test_remote_servers_are_left_alone() -> None:
    cursor = wrap_config(load("cursor_mcp.json"))
    assert cursor.config["mcpServers"]["docs"] == load("cursor_mcp.json")["mcpServers"]["docs"]
    code = wrap_config(load("claude_code.mcp.json")).config["mcpServers"]
    assert code["sentry"] == {"type": "http", "url": "https://mcp.sentry.dev/mcp"}
    assert code["filesystem"]["type"] == "stdio" and is_wrapped(code["filesystem"])
    # a server with no args gets the proxy's, and loses them again on unwrap
    assert code["time"]["args"] == ["proxy", "--name", "time", "--", "uvx"]
    assert unwrap_config({"mcpServers": {"time": code["time"]}}).config == {
        "mcpServers": {"time": {"command": "uvx"}}
    }


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
    assert main(["wrap", str(path), "--observe", "--proxy-arg=--network=host"]) == 0
    out, err = capsys.readouterr()
    fetch = json.loads(out)["mcpServers"]["fetch"]
    assert fetch["args"][:6] == ["proxy", "--name", "fetch", "--observe", "--network=host", "--"]
    assert "fetch: wrapped" in err
    assert path.read_bytes() == before and not (tmp_path / f"{path.name}.bak").exists()


def test_cli_write_keeps_a_backup_and_unwrap_restores(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mcp.json"
    shutil.copy(HOSTS / "claude_code.mcp.json", path)
    original = path.read_text()
    assert main(["wrap", str(path), "--write"]) == 0
    assert (tmp_path / "mcp.json.bak").read_text() == original
    assert is_wrapped(json.loads(path.read_text())["mcpServers"]["filesystem"])
    assert main(["wrap", str(path), "--write"]) == 0
    assert "unchanged" in capsys.readouterr().err
    assert main(["unwrap", str(path), "--write"]) == 0
    assert json.loads(path.read_text()) == json.loads(original)
    assert path.read_text() == original  # same indentation, so the same bytes here


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
    assert main(["wrap", config, "--policy", "strict", "--policy", "team.toml",
                 "--audit-log", "logs/audit.jsonl"]) == 0
    args = json.loads(capsys.readouterr().out)["mcpServers"]["git"]["args"]
    assert args[3:9] == ["--policy", "strict", "--policy", str(tmp_path / "team.toml"),
                         "--audit-log", str(tmp_path / "logs/audit.jsonl")]
