"""`mtguard proxy --allow-domain`: the real MCP client, the proxy, the fetch server in Docker.

The sandbox reaches a name under the allowed one (its resolver is a test host in a netns of
our own, tests/netns_hosts.py); a redirect to an unlisted address is refused in the kernel
(the server sees EPERM, not a hang), and the refusal is in the tree and the audit log.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from mtguard_rt.model import AuditRecord
from tests.audit_records import call_records
from tests.netns_hosts import open_test_hosts

from .conftest import ProxyFactory

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf, pytest.mark.root]


@pytest.fixture
async def test_hosts() -> AsyncIterator[tuple[str, str]]:
    async with open_test_hosts() as hosts:
        yield hosts


def records(path: Path) -> list[AuditRecord]:
    return call_records(path)


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


async def test_allowed_name_reachable_unlisted_address_refused_and_reported(
    proxy: ProxyFactory, audit_path: Path, tmp_path: Path, test_hosts: tuple[str, str]
) -> None:
    dns_ip, other_ip = test_hosts
    config = tmp_path / "guard.toml"
    config.write_text(f'[sandbox]\ndns = ["{dns_ip}"]\n')
    flags = ("--config", str(config), "--allow-domain", "allowed.test")
    url = "http://api.allowed.test:8080"
    async with proxy("fetch", *flags) as client:
        ok = await client.call_tool("fetch_url", {"url": f"{url}/"})
        redirected = await client.call_tool("fetch_url", {"url": f"{url}/to-other"})
    assert not ok.get("isError") and text_of(ok) == f"hello from {dns_ip}"
    assert redirected["isError"] is True and "mtguard denied" in text_of(redirected)
    first, second = records(audit_path)

    assert (first.decision, first.rules) == ("allow", [])
    assert first.tree is not None and first.tree.network_policy == ["allowed.test"]
    reached = [n for p in first.tree.processes for n in p.net if n.port == 8080]
    assert [(n.address, n.refused) for n in reached] == [(dns_ip, 0)]

    assert (second.decision, second.phase) == ("deny", "post")
    assert "unexpected-network" in second.rules
    (violation,) = [v for v in second.violations if v.rule == "unexpected-network"]
    assert any(
        f"connect to {other_ip}:8080 (tcp) refused by network policy" in e
        for e in violation.evidence
    ), violation.evidence
    assert second.tree is not None
    refused = [n for p in second.tree.processes for n in p.net if n.refused]
    assert [(n.op, n.address, n.port, n.result) for n in refused] == [
        ("connect", other_ip, 8080, -1)  # EPERM at once
    ]
    followed = [n for p in second.tree.processes for n in p.net if n.address == dns_ip]
    assert any(n.port == 8080 and not n.refused for n in followed)  # the allowed first hop


async def test_an_allowed_host_the_call_never_named_is_not_killed_online(
    proxy: ProxyFactory, audit_path: Path, tmp_path: Path, test_hosts: tuple[str, str]
) -> None:
    """Online rules (enforce) would kill a connect to an address nothing in the call names;
    under the allowlist the kernel has decided: the call completes and is allowed."""
    dns_ip, _ = test_hosts
    config = tmp_path / "guard.toml"
    config.write_text(f'[sandbox]\ndns = ["{dns_ip}"]\n[online]\nmode = "enforce"\n')
    flags = ("--config", str(config), "--allow-domain", "allowed.test")
    # the URL and the code are in the environment: nothing in the call names a host
    script = "import os, urllib.request as u; print(u.urlopen(os.environ['API']).read().decode())"
    flags += ("--env", "API=http://api.allowed.test:8080/", "--env", f"SCRIPT={script}")
    fetch = f'{sys.executable} -c "$SCRIPT"'
    async with proxy("terminal", *flags) as client:
        result = await client.call_tool("run_command", {"command": fetch})
    assert not result.get("isError"), text_of(result)
    assert json.loads(text_of(result))["stdout"].strip() == f"hello from {dns_ip}"
    (rec,) = records(audit_path)
    assert (rec.decision, rec.terminated) == ("allow", False)
    assert "unexpected-network" not in rec.rules
