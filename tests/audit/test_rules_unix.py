"""AF_UNIX connects in `unexpected-network`: a socket the sandbox did not make (outside its
temp dirs, home and workspace) is another program's door, unless the call names it or the
policy allows it; refused connects and abstract names are recorded only."""

from __future__ import annotations

from typing import Any

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.policy import Policy
from mtguard_rt.audit.rules_net import unexpected_network
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import UnixEvent, Violation

from .trees import ctx_for, server_tree

POLICY = load_policy()


def judge(paths: list[str | tuple[str, int]], policy: Policy = POLICY, **args: Any) -> list[str]:
    ctx = ctx_for("read_file", args or {"path": "notes.txt"}, task="Summarise my notes")
    tree = server_tree(ctx.call, noise=0)
    srv = tree.processes[0]
    for i, p in enumerate(paths):
        path, result = (p, 0) if isinstance(p, str) else p
        abstract = path.startswith("@")
        srv.unix.append(UnixEvent(ts_ns=i, path=path, abstract=abstract, result=result))
    found: list[Violation] = unexpected_network(
        ctx, TreeView.build(tree, policy, ctx.canaries), {}, policy
    )
    return [e for v in found if v.mode == "enforce" for e in v.evidence]


def test_a_mounted_host_socket_is_egress() -> None:
    assert judge(["/var/run/docker.sock"]) == [
        "pid 100 /usr/bin/python3.11 connected to unix socket /var/run/docker.sock "
        "(not the sandbox's own)"
    ]


def test_the_sandbox_own_sockets_pass() -> None:
    own = [
        "/tmp/chromium-abc/SingletonSocket",
        "/dev/shm/x.sock",
        "/run/user/1000/bus",
        "/home/mtguard/.cache/app.sock",
        "/workspace/.git/fsmonitor--daemon.ipc",  # the server's workspace (its cwd)
        "@chromium-ipc-1234",  # abstract: recorded, not judged
        ("/var/run/nscd/socket", -2),  # refused or missing: reached nothing
    ]
    assert judge(own) == []


def test_a_socket_the_call_names_or_the_policy_allows_passes() -> None:
    assert judge(["/srv/app/api.sock"], socket="/srv/app/api.sock") == []
    allowing = load_policy()
    assert allowing is not POLICY
    allowing.spec.rules.unexpected_network.allowed_unix = ["/srv/*/api.sock"]
    assert judge(["/srv/app/api.sock"], allowing) == []
    assert judge(["/srv/app/other.sock"], allowing) != []
    assert judge(["/srv/app/api.sock"]) != []  # the default policy allows none
