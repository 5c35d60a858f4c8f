"""Config files fail with file and line; the CLI prints one line, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from mtguard_rt.config import GuardConfig, load_config
from mtguard_rt.errors import PolicyError

MTGUARD = [sys.executable, "-m", "mtguard_rt"]


def test_defaults_without_a_file() -> None:
    config = load_config(None)
    assert config == GuardConfig()
    assert config.sandbox.network == "none" and not config.observe


def test_values_and_relative_policy_paths(tmp_path: Path) -> None:
    (tmp_path / "guard.toml").write_text(
        'observe = true\npolicies = ["p/strict.toml"]\n[sandbox]\nnetwork = "host"\n'
        "[monitor]\nsettle_max_ms = 250\n"
    )
    config = load_config(tmp_path / "guard.toml")
    assert config.observe and config.sandbox.network == "host"
    assert config.monitor.settle_max_ms == 250
    assert config.policies == [str(tmp_path / "p" / "strict.toml")]


def test_typo_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "guard.toml"
    path.write_text('observe = false\n[sandbox]\nimage = "x"\nnetwrk = "host"\n')
    with pytest.raises(PolicyError) as info:
        load_config(path)
    assert info.value.line == 4 and "netwrk" in str(info.value)
    assert str(info.value).startswith(f"{path}:4:")


def test_bad_toml_and_missing_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("observe = \n")
    with pytest.raises(PolicyError, match=r"bad\.toml:1"):
        load_config(bad)
    with pytest.raises(PolicyError, match="cannot read"):
        load_config(tmp_path / "absent.toml")


def test_cli_error_is_one_line_without_traceback(tmp_path: Path) -> None:
    env = {"DOCKER_HOST": f"unix://{tmp_path}/no.sock", "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [*MTGUARD, "image", "build"], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 2
    assert done.stderr.startswith("mtguard: error: Docker is not reachable")
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_cli_rejects_a_proxy_without_a_server_command() -> None:
    done = subprocess.run([*MTGUARD, "proxy"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "no server command" in done.stderr
