"""Egress accounting through the whole guard: the real MCP client, `mtguard proxy`, the
terminal server in Docker (`--network host`), test hosts in a netns of our own
(tests/netns_hosts.py), never an outside address.

Port 53 is exempt only to the resolvers the sandbox really uses (its /etc/resolv.conf as
mounted, and `[sandbox] dns`): a DNS query to the configured resolver passes, the same
datagram to port 53 of another address is egress like any other and denies the call.
The addresses travel in the environment, so nothing in the call derives them. An AF_UNIX
connect to a host socket mounted into the sandbox is another program's door (denied); one
to a socket the command made itself under /tmp is not.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from mtguard_rt.model import AuditRecord, record_decoder
from tests.netns_hosts import open_test_hosts

from .conftest import ProxyFactory

pytestmark = [pytest.mark.anyio, pytest.mark.docker, pytest.mark.bpf, pytest.mark.root]

# one DNS query for `name` to `$NS:53`; prints the answer's first address (or "none")
QUERY = (
    "import os, socket; from dnslib import DNSRecord; "
    "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(3); "
    "q = DNSRecord.question('api.example.test', 'A').pack(); "
    "s.sendto(q, (os.environ[os.environ['TO']], 53)); "
    "r = s.recvfrom(4096)[0] if os.environ['TO'] == 'NS' else b''; "
    "print(str(DNSRecord.parse(r).rr[0].rdata) if r else 'none')"
)


@pytest.fixture
async def test_hosts() -> AsyncIterator[tuple[str, str]]:
    async with open_test_hosts() as hosts:
        yield hosts


def records(path: Path) -> list[AuditRecord]:
    return [record_decoder.decode(line) for line in path.read_bytes().splitlines() if line]


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in result.get("content", []))


async def test_port_53_only_to_the_sandbox_resolver(
    proxy: ProxyFactory, audit_path: Path, tmp_path: Path, test_hosts: tuple[str, str]
) -> None:
    dns_ip, other_ip = test_hosts
    config = tmp_path / "guard.toml"
    config.write_text(f'[sandbox]\ndns = ["{dns_ip}"]\n')
    flags = ("--config", str(config), "--network", "host")
    flags += ("--env", f"NS={dns_ip}", "--env", f"OTHER={other_ip}")
    flags += ("--env", f"SCRIPT={QUERY}")
    run = f'{sys.executable} -c "$SCRIPT"'
    async with proxy("terminal", *flags) as client:
        to_resolver = await client.call_tool("run_command", {"command": f"TO=NS {run}"})
        to_other = await client.call_tool("run_command", {"command": f"TO=OTHER {run}"})
    assert not to_resolver.get("isError"), text_of(to_resolver)
    assert json.loads(text_of(to_resolver))["stdout"].strip() == dns_ip  # really answered
    assert to_other["isError"] is True and "mtguard denied" in text_of(to_other)
    first, second = [r for r in records(audit_path) if r.tool == "run_command"]

    assert first.tree is not None and dns_ip in first.tree.resolvers
    assert first.decision == "allow"
    # the name looked up is recorded (observe), the datagram to the resolver is not egress
    assert [v.mode for v in first.violations] in ([], ["observe"])
    sent = [n for p in first.tree.processes for n in p.net if n.port == 53]
    assert [(n.address, n.sent) for n in sent] == [(dns_ip, 1)]

    assert second.decision == "deny"
    (v,) = [v for v in second.violations if v.rule == "unexpected-network"]
    assert v.mode == "enforce"
    assert any(f"sent 1 udp datagram to {other_ip}:53" in e for e in v.evidence), v.evidence


# connect to the AF_UNIX socket $SOCK (a host socket mounted into the sandbox), or to one
# the command makes itself under /tmp (OWN=1); prints 0 or the errno
UNIX = (
    "import os, socket; s = socket.socket(socket.AF_UNIX); own = os.environ.get('OWN'); "
    "p = '/tmp/own.sock' if own else os.environ['SOCK']; "
    "l = socket.socket(socket.AF_UNIX) if own else None; "
    "l and (l.bind(p), l.listen(1)); "
    "print(s.connect_ex(p))"
)


@pytest.fixture
def host_socket() -> Iterator[Path]:
    """A listening AF_UNIX socket in a host directory outside the sandbox's own places."""
    d = Path(f"/run/mtg-door-{secrets.token_hex(4)}")
    d.mkdir(mode=0o755)
    path = d / "daemon.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as door:
        door.bind(str(path))
        os.chmod(path, 0o777)  # the sandbox's user (1000) may connect
        door.listen(8)
        try:
            yield path
        finally:
            path.unlink()
            d.rmdir()


async def test_unix_connect_to_a_mounted_host_socket_denied_own_socket_allowed(
    proxy: ProxyFactory, audit_path: Path, host_socket: Path
) -> None:
    flags = ("--mount", str(host_socket.parent), "--env", f"SOCK={host_socket}")
    flags += ("--env", f"SCRIPT={UNIX}")
    run = f'{sys.executable} -c "$SCRIPT"'
    async with proxy("terminal", *flags) as client:
        own = await client.call_tool("run_command", {"command": f"OWN=1 {run}"})
        door = await client.call_tool("run_command", {"command": run})
    assert not own.get("isError"), text_of(own)
    assert json.loads(text_of(own))["stdout"].strip() == "0"
    assert door["isError"] is True and "mtguard denied" in text_of(door)
    first, second = [r for r in records(audit_path) if r.tool == "run_command"]
    assert first.decision == "allow" and "unexpected-network" not in first.rules
    assert first.tree is not None
    assert [u.path for p in first.tree.processes for u in p.unix] == ["/tmp/own.sock"]
    assert (second.decision, second.phase) == ("deny", "post")
    (v,) = [v for v in second.violations if v.rule == "unexpected-network"]
    assert any(f"connected to unix socket {host_socket}" in e for e in v.evidence), v.evidence
