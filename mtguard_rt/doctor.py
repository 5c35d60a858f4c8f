"""`mtguard doctor`: check every prerequisite and say how to fix each failure.

Required checks gate the exit code; optional features (fentry and LSM programs) only inform.
Each check is a small function returning (ok, detail); the fix text is fixed per check.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import msgspec

from .errors import GuardError, MonitorLost
from .monitor.probe import probe
from .sandbox.cgroups import cgroup2_mount
from .sandbox.engine import DockerEngine, open_engine
from .sandbox.image import DEFAULT_IMAGE, canaries_of
from .sandbox.seccomp import describe
from .sandbox.settings import SandboxConfig


class Check(msgspec.Struct):
    name: str
    ok: bool
    detail: str
    fix: str
    required: bool = True


def _caps_bpf() -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) & (1 << 39))  # CAP_BPF
    return False


def _privileges() -> tuple[bool, str]:
    if os.geteuid() == 0:
        return True, "running as root"
    return (True, "CAP_BPF present") if _caps_bpf() else (False, f"uid {os.geteuid()}, no CAP_BPF")


def _btf() -> tuple[bool, str]:
    ok = Path("/sys/kernel/btf/vmlinux").exists()
    return ok, "/sys/kernel/btf/vmlinux" if ok else "no /sys/kernel/btf/vmlinux"


def _tracefs() -> tuple[bool, str]:
    ok = Path("/sys/kernel/tracing/events/syscalls").is_dir()
    return ok, "/sys/kernel/tracing mounted" if ok else "tracefs is not mounted"


def _bcc() -> tuple[bool, str]:
    try:
        import bcc  # type: ignore[import-untyped]
    except Exception as exc:
        return False, f"bcc does not import: {exc}"
    why = probe("canary")
    return (why is None), (
        f"bcc {getattr(bcc, '__version__', '?')}; canary fired" if why is None else why
    )


def _cgroup2() -> tuple[bool, str]:
    try:
        return True, cgroup2_mount()
    except GuardError as exc:
        return False, str(exc)


async def _seccomp(engine: DockerEngine) -> Check:
    """The daemon must apply seccomp profiles: the sandbox passes its own (sandbox/seccomp.py)."""
    options = (await engine.info()).get("SecurityOptions") or []
    ok = any("name=seccomp" in str(o) for o in options)
    detail = describe(SandboxConfig().seccomp) + " (default; `[sandbox] seccomp` changes it)"
    fix = "use a Docker built with seccomp (libseccomp) on a kernel with CONFIG_SECCOMP_FILTER"
    return Check("seccomp", ok, detail if ok else "the daemon reports no seccomp support", fix)


async def _docker() -> tuple[Check, ...]:
    try:
        with anyio.fail_after(10):
            async with open_engine() as engine:
                version = await engine.version()
                docker = Check(
                    "docker",
                    True,
                    f"Docker {version.get('Version')} (API "
                    f"{version.get('ApiVersion')}) at {engine.socket}",
                    "",
                )
                try:
                    info = await engine.image_inspect(DEFAULT_IMAGE)
                    n = len(canaries_of(info))
                    image = Check(
                        "sandbox image",
                        n > 0,
                        f"{DEFAULT_IMAGE} ({n} canaries)",
                        "mtguard image build",
                    )
                except GuardError as exc:
                    image = Check(
                        "sandbox image", False, str(exc).split(";")[0], "mtguard image build"
                    )
                return docker, image, await _seccomp(engine)
    except (GuardError, TimeoutError) as exc:
        detail = str(exc).split(". ")[0] or "no answer within 10 s"
        fix = "dockerd --bridge=none --iptables=false --ip6tables=false &  (or: make demo)"
        return (
            Check("docker", False, detail, fix),
            Check("sandbox image", False, "Docker unreachable", "start Docker first"),
            Check("seccomp", False, "Docker unreachable", "start Docker first"),
        )


def run_checks() -> list[Check]:
    simple: list[tuple[str, Callable[[], tuple[bool, str]], str]] = [
        ("privileges", _privileges, "run as root (sudo) or grant CAP_BPF and CAP_PERFMON"),
        ("kernel BTF", _btf, "use a kernel built with CONFIG_DEBUG_INFO_BTF=y"),
        ("tracefs", _tracefs, "mount -t tracefs tracefs /sys/kernel/tracing"),
        (
            "bcc + canary BPF",
            _bcc,
            "apt-get install python3-bpfcc linux-headers-amd64; "
            "scripts/setup-host.sh links the headers",
        ),
        ("cgroup v2", _cgroup2, "mount -t cgroup2 none /sys/fs/cgroup/unified"),
    ]
    checks = [Check(name, *fn(), fix) for name, fn, fix in simple]
    checks += list(anyio.run(_docker))
    for feature, label in (("fentry", "fentry programs"), ("lsm", "BPF LSM programs")):
        why = probe(feature)
        checks.append(
            Check(
                label,
                why is None,
                "load and attach work" if why is None else why,
                "optional: the guard uses tracepoints instead",
                required=False,
            )
        )
    checks.append(_agent())
    return checks


def _agent() -> Check:
    """Which monitor a guard started now would use: the host's agent, or its own."""
    from .agent.client import agent_on_demand, open_agent_program

    remote, mode = open_agent_program()  # doctor starts none, even with MTGUARD_AGENT=auto
    if remote is not None:
        try:
            mode += "; " + sessions_line(remote.status().get("session_list"))
        except MonitorLost as exc:  # it answered hello, then went: the mode line stands
            mode += f"; its sessions unknown ({exc})"
        finally:
            remote.close()
    elif agent_on_demand():
        mode += "; a guard would start one (MTGUARD_AGENT=auto)"
    fix = ("optional: `mtguard agent run`, its systemd unit (`mtguard agent install-unit`) or "
           "MTGUARD_AGENT=auto shares one BPF program among all guards")  # fmt: skip
    return Check("monitor mode", remote is not None, mode, fix, required=False)


def sessions_line(sessions: Any) -> str:
    """The agent's sessions of this user, from its status: `host-41 (fs pid 42, git pid 43;
    1 left)`; an agent too old to list them says so."""
    if not isinstance(sessions, list):
        return "sessions: not listed by this agent"
    if not sessions:
        return "sessions: none"
    parts = []
    for s in sessions:
        servers = ", ".join(f"{name} pid {pid}" for name, pid in s.get("servers") or [])
        left = f"; {s['left']} left" if s.get("left") else ""
        parts.append(f"{s.get('name')} ({servers or 'no live server'}{left})")
    return f"sessions: {'; '.join(parts)}"


def render(checks: list[Check], color: bool) -> str:
    def paint(text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if color else text

    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        mark = (
            paint("ok  ", "32")
            if c.ok
            else (paint("FAIL", "31") if c.required else paint("off ", "33"))
        )
        lines.append(f"{mark} {c.name:<{width}}  {c.detail}")
        if not c.ok:
            lines.append(f"     {'':<{width}}  fix: {c.fix}")
    failed = [c.name for c in checks if c.required and not c.ok]
    lines.append(
        "all required checks passed"
        if not failed
        else f"{len(failed)} required check(s) failed: {', '.join(failed)}"
    )
    return "\n".join(lines)
