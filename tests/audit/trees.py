"""Builders for realistic behavior trees and call contexts used by the audit tests.

`server_tree()` is what a call to a Python MCP server looks like before anything malicious:
the long-lived (seeded) interpreter touching hundreds of library, locale, /proc and
certificate files. Tests add the events under test to it.
"""

from __future__ import annotations

from typing import Any

from mtguard_rt.audit import CallContext
from mtguard_rt.model import (
    BehaviorTree,
    DeclaredCall,
    DnsEvent,
    ExecEvent,
    FileEvent,
    NetEvent,
    ProcessNode,
)

HOME = "/home/mtguard"
CANARIES = {
    f"{HOME}/.ssh/id_rsa": "MTG-CANARY-7f3a9c2e-ssh",
    f"{HOME}/.aws/credentials": "MTG-CANARY-0b8d1e44-aws",
    f"{HOME}/.env": "MTG-CANARY-5c6e7a10-env",
    f"{HOME}/.bashrc": "MTG-CANARY-9d2f4b33-rc",
}
SERVER_KEY = "100@1000"

_NOISE_FILES = [
    "/etc/ld.so.cache",
    "/usr/lib/x86_64-linux-gnu/libc.so.6",
    "/usr/lib/x86_64-linux-gnu/libm.so.6",
    "/usr/lib/x86_64-linux-gnu/libz.so.1",
    "/usr/lib/x86_64-linux-gnu/libssl.so.3",
    "/usr/lib/locale/locale-archive",
    "/usr/share/locale/locale.alias",
    "/proc/self/maps",
    "/proc/self/status",
    "/proc/100/stat",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/localtime",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/ssl/openssl.cnf",
    "/dev/urandom",
    "/dev/null",
    "/tmp/tmpa1b2c3",
    f"{HOME}/.cache/pip/selfcheck.json",
    "/workspace",
    "/workspace/README.md",
]


def _noise(count: int) -> list[FileEvent]:
    events: list[FileEvent] = []
    for i in range(count):
        if i < len(_NOISE_FILES):
            path = _NOISE_FILES[i]
        else:
            mod = f"mod{i}"
            path = (
                f"/usr/lib/python3.11/{mod}/__init__.py"
                if i % 3
                else f"/opt/venv/lib/python3.11/site-packages/pkg{i}/{mod}.cpython-311.pyc"
            )
        events.append(FileEvent(ts_ns=2000 + i, op="open", path=path, flags=["read"], result=3))
    events.append(
        FileEvent(
            ts_ns=9000,
            op="open",
            path="/opt/venv/lib/python3.11/site-packages/certifi/cacert.pem",
            flags=["read"],
        )
    )
    return events


def server_tree(call: DeclaredCall, noise: int = 250) -> BehaviorTree:
    server = ProcessNode(
        key=SERVER_KEY,
        pid=100,
        ppid=1,
        exe="/usr/bin/python3.11",
        argv=["python3", "-m", "example_server"],
        cwd="/workspace",
        uid=1000,
        start_ns=1000,
        learned="seeded",
        still_running=True,
        files=_noise(noise),
    )
    return BehaviorTree(call=call, processes=[server], window_start_ns=1500, window_end_ns=99000)


def child(
    tree: BehaviorTree,
    pid: int,
    argv: list[str],
    exe: str | None = None,
    parent: str = SERVER_KEY,
    files: list[FileEvent] | None = None,
    net: list[NetEvent] | None = None,
    dns: list[DnsEvent] | None = None,
    still_running: bool = False,
) -> ProcessNode:
    """Append an observed child process (one successful exec) to `tree` and return it."""
    path = exe or f"/usr/bin/{argv[0].rsplit('/', 1)[-1]}"
    parent_node = next(p for p in tree.processes if p.key == parent)
    node = ProcessNode(
        key=f"{pid}@{5000 + pid}",
        pid=pid,
        ppid=parent_node.pid,
        parent=parent,
        exe=path,
        argv=argv,
        start_ns=5000 + pid,
        still_running=still_running,
        execs=[ExecEvent(ts_ns=5001 + pid, path=path, argv=argv)],
        files=files or [],
        net=net or [],
        dns=dns or [],
    )
    tree.processes.append(node)
    return node


def opened(path: str, *flags: str, result: int = 3) -> FileEvent:
    return FileEvent(ts_ns=7000, op="open", path=path, flags=list(flags) or ["read"], result=result)


def ctx_for(
    tool: str,
    arguments: dict[str, Any],
    *,
    task: str | None = "Summarize the project README",
    server: str = "srv",
    input_schema: dict[str, Any] | None = None,
    tools_by_server: dict[str, list[str]] | None = None,
    recent: list[DeclaredCall] | None = None,
    history: list[dict[str, str]] | None = None,
    call_id: str = "c1",
) -> CallContext:
    call = DeclaredCall(call_id=call_id, server=server, tool=tool, arguments=arguments)
    return CallContext(
        call=call,
        task=task,
        history=history or [],
        input_schema=input_schema or {"type": "object", "properties": {}},
        tools_by_server=tools_by_server or {server: [tool]},
        recent_calls=recent or [],
        canaries=dict(CANARIES),
    )
