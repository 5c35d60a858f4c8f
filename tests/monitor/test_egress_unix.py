"""Real eBPF: AF_UNIX connects are in the tree, by path (relative ones made absolute) or
abstract name, with their result; the post rule judges them (a socket the sandbox did not
make is another program's door, one in its own temp dir is not).

The listeners are this test's own (a path socket in a directory outside the sandbox's own
places, an abstract one); the script connects to each, to a missing path and to a socket
it made itself under /tmp.
"""

from __future__ import annotations

import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from monitor_harness import traced

from mtguard_rt.audit import CallContext, load_policy
from mtguard_rt.audit.rules_net import unexpected_network
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import DeclaredCall

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.anyio]

SCRIPT = """
import os, socket, sys
host_dir, abstract, own = sys.argv[1:4]
def connect(addr):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(addr)
        return 0
    except OSError as e:
        return e.errno
    finally:
        s.close()
pid = os.fork()
if pid == 0:  # a child: the server's own cwd (its workspace) stays where it is
    os.chdir(host_dir)
    connect("door.sock")
    os._exit(0)
os.waitpid(pid, 0)
print(connect("\\0" + abstract), connect(host_dir + "/missing.sock"))
l = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); l.bind(own); l.listen(1)
print(connect(own))
"""


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A directory outside the sandbox's own places (not /tmp, not a home)."""
    d = Path(f"/run/mtg-unix-{secrets.token_hex(4)}")
    d.mkdir(mode=0o755)
    try:
        yield d
    finally:
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


@pytest.fixture
def own() -> Iterator[str]:
    """Where the script makes its own socket (under /tmp: the sandbox's own place)."""
    path = Path(f"/tmp/mtg-own-{secrets.token_hex(4)}.sock")
    yield str(path)
    path.unlink(missing_ok=True)


async def test_unix_connects_recorded_and_a_foreign_socket_is_egress(
    host_dir: Path, own: str
) -> None:
    abstract = f"mtg-test-{secrets.token_hex(4)}"
    with (
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as door,
        socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as abs_l,
    ):
        door.bind(str(host_dir / "door.sock"))
        abs_l.bind("\0" + abstract)
        door.listen(4)
        abs_l.listen(4)
        cmd = [sys.executable, "-c", SCRIPT, str(host_dir), abstract, own]
        with anyio.fail_after(60):
            tree = await traced(cmd)
    unix = [u for p in tree.processes for u in p.unix]
    got = sorted((u.path, u.abstract, u.result) for u in unix)
    assert got == sorted(
        [
            (f"{host_dir}/door.sock", False, 0),  # relative to the cwd, made absolute
            (f"@{abstract}", True, 0),
            (f"{host_dir}/missing.sock", False, -2),  # ENOENT: reached nothing
            (own, False, 0),
        ]
    )

    policy = load_policy()
    call = DeclaredCall(call_id="t", server="s", tool="read_file", arguments={"path": "a"})
    [v] = unexpected_network(CallContext(call=call), TreeView.build(tree, policy, {}), {}, policy)
    assert v.mode == "enforce"
    unix_lines = [e for e in v.evidence if "unix socket" in e]
    assert len(unix_lines) == 1 and unix_lines[0].endswith(
        f"connected to unix socket {host_dir}/door.sock (not the sandbox's own)"
    )
