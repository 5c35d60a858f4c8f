"""`--allow-domain` and `[sandbox] allow_domains` / `dns`: from the command line and the config
file to the container's spec (the host's network, filtered; the resolvers given)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

from mtguard_rt.commands.proxy import config_from_args, register, upstream_from_args
from mtguard_rt.errors import GuardError
from mtguard_rt.sandbox import SandboxConfig
from mtguard_rt.sandbox.container import container_spec
from mtguard_rt.sandbox.plan import plan_sandbox


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    return parser.parse_args(["proxy", *argv])


def spec(config: SandboxConfig) -> dict[str, object]:
    cmd = [sys.executable, "-c", "pass"]
    plan = plan_sandbox(cmd, config, "srv", "img", runtime=True)
    host = container_spec(cmd, config, "img", plan, [], name="srv", gated=True)["HostConfig"]
    assert isinstance(host, dict)
    return host


def test_flags_and_file_add_up(tmp_path: Path) -> None:
    conf = tmp_path / "guard.toml"
    conf.write_text('[sandbox]\nallow_domains = ["pypi.org"]\ndns = ["10.0.0.53"]\n')
    args = parse("--config", str(conf), "--allow-domain", "registry.npmjs.org", "--", "x")
    config = config_from_args(args)
    assert config.sandbox.allow_domains == ["pypi.org", "registry.npmjs.org"]
    assert config.sandbox.dns == ["10.0.0.53"]


def test_an_allowlist_gives_the_filtered_host_network_and_its_resolvers() -> None:
    assert spec(SandboxConfig())["NetworkMode"] == "none"
    assert "Dns" not in spec(SandboxConfig(dns=["10.0.0.53"]))  # no policy: no network at all
    host = spec(SandboxConfig(allow_domains=["pypi.org"], dns=["10.0.0.53"]))
    assert (host["NetworkMode"], host["Dns"]) == ("host", ["10.0.0.53"])
    assert "Dns" not in spec(SandboxConfig(allow_domains=["pypi.org"]))  # Docker's copy


def test_allow_domain_configures_a_sandbox_an_upstream_has_none() -> None:
    args = parse("--upstream", "http://127.0.0.1:9/mcp", "--allow-domain", "pypi.org")
    with pytest.raises(GuardError, match="--allow-domain"):
        upstream_from_args(args)
