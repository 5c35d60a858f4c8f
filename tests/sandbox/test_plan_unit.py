"""The sandbox plan without Docker: who the server runs as, what it can reach, its PATH."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from mtguard_rt.errors import CommandNotFound, SandboxError, ServerExited, no_network_hint
from mtguard_rt.paths import default_audit_log, state_home
from mtguard_rt.sandbox import SandboxConfig
from mtguard_rt.sandbox.interp import interpreter_roots, sandbox_path, shebang
from mtguard_rt.sandbox.plan import package_dir, plan_sandbox, server_state_dir
from mtguard_rt.sandbox.users import SandboxUser, check_reachable, parse_user, sandbox_user

NPM_STDERR = """npm error code EAI_AGAIN
npm error syscall getaddrinfo
npm error errno EAI_AGAIN
npm error request to https://registry.npmjs.org/@modelcontextprotocol%2fserver-filesystem failed, \
reason: getaddrinfo EAI_AGAIN registry.npmjs.org
npm error A complete log of this run can be found in: /home/mtguard/.npm/_logs/x-debug-0.log
"""


def owned(path: Path, uid: int, gid: int, mode: int = 0o755) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chown(path, uid, gid)
    path.chmod(mode)
    return path


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_the_user_is_the_workspace_owner_and_never_root(tmp_path: Path) -> None:
    mine = owned(tmp_path / "u1001", 1001, 1002)
    roots = owned(tmp_path / "root", 0, 0, 0o700)
    assert sandbox_user(None, str(mine)) == SandboxUser(1001, 1002, None)
    # root's project: the default user, the workspace idmapped from root to it
    assert sandbox_user(None, str(roots)) == SandboxUser(1000, 1000, (0, 0))
    assert sandbox_user(None, None) == SandboxUser(1000, 1000, None)
    # an explicit user: the workspace is mapped to it when someone else owns it
    assert sandbox_user("2000", str(mine)) == SandboxUser(2000, 2000, (1001, 1002))
    assert sandbox_user("1001", str(mine)) == SandboxUser(1001, 1002, None)  # the owner's gid
    assert sandbox_user("1001:5", str(mine)) == SandboxUser(1001, 5, (1001, 1002))
    assert sandbox_user("2000:3000", None) == SandboxUser(2000, 3000, None)
    for bad, why in (("0", "never runs as root"), ("0:0", "never runs as root"),
                     ("abc", "expected UID"), ("1000:x", "expected UID")):  # fmt: skip
        with pytest.raises(SandboxError, match=why):
            parse_user(bad)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_directory_the_user_cannot_enter_is_named_with_the_fix(tmp_path: Path) -> None:
    data = owned(tmp_path / "data", 0, 0)
    private = owned(data / "private", 0, 0, 0o700)
    ws = owned(private / "proj", 1000, 1000)
    user = sandbox_user(None, str(ws))
    assert user == SandboxUser(1000, 1000, None)
    with pytest.raises(SandboxError) as err:  # /data is mounted: its 0700 child blocks the way
        check_reachable(str(ws), user, [str(data), str(ws)], "workspace")
    assert f"cannot enter {private}" in str(err.value) and f"chmod o+x {private}" in str(err.value)
    check_reachable(str(ws), user, [str(ws)], "workspace")  # alone: its parents are the image's
    # through the idmapped workspace its owner's entries are the user's
    rooted = owned(tmp_path / "r", 0, 0, 0o700)
    mapped = sandbox_user(None, str(rooted))
    check_reachable(str(rooted), mapped, [str(rooted)], "workspace", idmapped=str(rooted))
    with pytest.raises(SandboxError, match="cannot enter"):
        check_reachable(str(rooted), mapped, [str(rooted)], "workspace")
    mounted = tmp_path / "gitconfig"  # a mounted file needs no search permission
    mounted.write_text("[user]\n")
    mounted.chmod(0o644)
    check_reachable(str(mounted), user, [str(mounted)], "mount")


def test_path_is_the_users_without_invisible_dirs_or_the_guards_python(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hidden = tmp_path / "shims"
    monkeypatch.setenv("PATH", f"{hidden}:{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin")
    path = sandbox_path(["/usr"], guard=False)
    assert str(hidden) not in path and f"{sys.prefix}/bin" not in path
    assert path[:3] == ["/usr/local/bin", "/usr/bin", "/bin"]
    assert sandbox_path(["/usr", str(hidden)], guard=False)[0] == str(hidden)
    assert sandbox_path(["/usr"], guard=True)[0] == f"{sys.prefix}/bin"  # the guard's own server


def test_a_venv_script_brings_its_base_python(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    base = tmp_path / "base"
    (base / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text(f"home = {base}/bin\ninclude-system-site-packages = false\n")
    script = venv / "bin" / "tool"
    script.write_text(f"#!{venv}/bin/python\nimport tool\n")
    script.chmod(0o755)
    assert shebang(str(script)) == f"{venv}/bin/python"
    assert interpreter_roots([str(script)], []) == [str(venv), str(base)]
    assert interpreter_roots(["tool"], [str(venv / "bin")]) == [str(venv), str(base)]
    assert interpreter_roots(["/usr/bin/env"], []) == []
    env_script = tmp_path / "e"
    env_script.write_text("#!/usr/bin/env python3\n")
    assert shebang(str(env_script)) == "python3"


def test_plan_of_a_plain_command(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    pkg = tmp_path / "pkg"
    (pkg / "dist").mkdir(parents=True)
    (pkg / "dist" / "index.js").write_text("")
    config = SandboxConfig(mounts=[str(pkg)])
    plan = plan_sandbox(["node", str(pkg / "dist/index.js")], config, "mem", "img", runtime=True)
    kinds = {b.source: (b.kind, b.mode) for b in plan.binds}
    assert kinds[str(pkg)] == ("overlay", "rw")  # its code's directory: an overlay
    assert kinds["/usr"] == ("plain", "ro")
    assert sys.prefix not in kinds  # the guard's Python is not the server's
    state = server_state_dir(None, "mem")
    assert state == str(tmp_path / "state" / "mtguard" / "servers" / "mem")
    assert kinds[f"{state}/data"] == ("plain", "rw")
    assert plan.env["MTGUARD_STATE_DIR"] == f"{state}/data"
    assert plan.env["npm_config_fetch_retries"] == "0"  # no network: fail fast, not in 70 s
    assert package_dir(["node", "-e", "1"], [str(pkg)], []) is None
    off = SandboxConfig(mounts=[str(pkg)], package_overlay=False, network="host")
    plan = plan_sandbox(["node", str(pkg / "dist/index.js")], off, "mem", "img", runtime=True)
    assert {b.source: b.kind for b in plan.binds}[str(pkg)] == "plain"
    assert "npm_config_fetch_retries" not in plan.env
    allowed = SandboxConfig(allow_domains=["registry.npmjs.org"])
    plan = plan_sandbox(["sh"], allowed, "npx", "img", runtime=True)
    assert "npm_config_fetch_retries" not in plan.env and "UV_OFFLINE" not in plan.env
    with pytest.raises(CommandNotFound):
        plan_sandbox(["no-such-program-x"], SandboxConfig(), "x", "img", runtime=True)


def test_guard_state_is_per_user_and_hidden_from_a_workspace_holding_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "home/.local/state"))
    assert default_audit_log() == str(tmp_path / "home/.local/state/mtguard/audit.jsonl")
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    assert state_home() == Path.home() / ".local/state/mtguard"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "home/.local/state"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    ws = tmp_path / "home"
    config = SandboxConfig(workspace=str(ws), user="1000:1000")
    ws.mkdir(exist_ok=True)
    plan = plan_sandbox(["sh"], config, "s", "img", runtime=True)
    assert plan.hidden == [str(tmp_path / "home/.local/state/mtguard")]
    elsewhere = tmp_path / "proj"
    elsewhere.mkdir()
    config = SandboxConfig(workspace=str(elsewhere), user="1000:1000")
    assert plan_sandbox(["sh"], config, "s", "img", runtime=True).hidden == []


def test_a_start_without_network_says_so_in_one_line() -> None:
    hint = no_network_hint(NPM_STDERR)
    assert hint == (
        "the sandbox has no network: the server could not reach registry.npmjs.org "
        "(EAI_AGAIN); use --allow-domain registry.npmjs.org or install the server first"
    )
    message = str(ServerExited("npx -y @modelcontextprotocol/server-filesystem", 1, NPM_STDERR))
    assert "\n" not in message and message.endswith(hint) and "_logs" not in message
    uv = "error: Failed to fetch: `https://pypi.org/simple/mcp-server-git/`\n  Caused by: dns error"
    assert "--allow-domain pypi.org" in (no_network_hint(uv) or "")
    assert no_network_hint("Traceback ...\nKeyError: 'x'\n") is None
    plain = str(ServerExited("python s.py", 1, "Traceback ...\nKeyError: 'x'\n"))
    assert plain.endswith("last stderr line: \"KeyError: 'x'\"")


def test_a_launcher_naming_a_venv_python_brings_it() -> None:
    guard_python = f"{sys.prefix}/bin/python"
    wrapped = ["sh", "-c", 'exec "$0" "$@"', guard_python, "server.py"]
    config = SandboxConfig()
    plan = plan_sandbox(wrapped, config, "w", "img", runtime=True)
    assert sys.prefix in {b.source for b in plan.binds}  # the guard's own, named by path
    plan = plan_sandbox(["sh", "-c", "true"], config, "w", "img", runtime=True)
    assert sys.prefix not in {b.source for b in plan.binds}
