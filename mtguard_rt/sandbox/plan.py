"""What a sandbox is made of, decided before anything runs: user, mounts, PATH, state.

`plan_sandbox()` turns a command and its `SandboxConfig` into a `SandboxPlan`: the user the
server runs as (users.py), each bind (read-only host runtime, the command's interpreter, the
user's mounts, the workspace: idmapped when its owner is not that user, the package
directory: an overlay whose writes go to the server's state), the server's persistent state
directory (`<state dir>/servers/<name>/`), PATH and shell (interp.py), and the guard's own
state directory hidden when a mount would expose it. `realize()` makes the host-side mounts
(mounts.py) and returns Docker's bind list. Checks fail here with one clear message.
"""

from __future__ import annotations

import hashlib
import os
import re
from typing import Literal

import msgspec

from ..errors import CommandNotFound, SandboxError
from ..paths import state_home
from .image import HOME
from .interp import (
    STANDARD_PATH,
    guard_prefixes,
    interpreter_roots,
    is_guard_python,
    sandbox_path,
    under,
    user_interpreters,
    user_shell,
    which,
)
from .mounts import MountSet
from .settings import SandboxConfig
from .users import SandboxUser, check_reachable, sandbox_user

HOST_CONFIG = ["/etc/fonts"]  # read-only, when the host has them
# Host directories under the /usr bind a server does not need: the host's own tools and
# their configs (/usr/local/bin, a world-readable /usr/local/etc/npmrc, other interpreters'
# packages in /usr/local/lib): an empty read-only tmpfs covers each, unless `needs` it.
MASKED = ["/usr/local"]
# Set in a sandbox without network unless the user sets them: a package manager that cannot
# reach its registry fails at once instead of retrying for a minute (npm: ~70 s of backoff).
OFFLINE_ENV = {"npm_config_fetch_retries": "0", "UV_OFFLINE": "1"}


class Bind(msgspec.Struct, frozen=True):
    source: str  # host path
    target: str  # path inside (the same as `source` except for staged mounts)
    mode: Literal["ro", "rw"]
    kind: Literal["plain", "idmap", "overlay"] = "plain"


class SandboxPlan(msgspec.Struct, kw_only=True):
    user: SandboxUser
    binds: list[Bind]
    path: list[str]
    shell: str
    server_state: str | None  # the server's persistent state directory on the host
    hidden: list[str]  # host directories a tmpfs covers inside (the guard's own state)
    env: dict[str, str]
    masked: list[str] = msgspec.field(default_factory=list)  # host dirs shown empty inside


def safe_name(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_.-]+", "-", name).strip("-.")[:40] or "server"


def server_state_dir(state_dir: str | None, name: str) -> str:
    base = os.path.realpath(state_dir) if state_dir else str(state_home())
    return os.path.join(base, "servers", safe_name(name))


def package_state(server_state: str, package: str) -> str:
    """The overlay state of one package directory: its name and a hash of its path, so a
    server started from another directory never sees this one's writes."""
    digest = hashlib.sha256(package.encode()).hexdigest()[:12]
    return os.path.join(server_state, "package", f"{safe_name(os.path.basename(package))}-{digest}")


def package_dir(command: list[str], mounts: list[str], dirs: list[str]) -> str | None:
    """The --mount holding the server's code: its program or the first script argument."""
    program = command[0] if "/" in command[0] else which(command[0], dirs)
    entries = [os.path.realpath(program)] if program else []
    entries += [os.path.realpath(a) for a in command[1:] if os.path.isabs(a) and os.path.isfile(a)]
    for entry in entries:
        for m in sorted(mounts, key=len, reverse=True):
            if under(entry, [m]):
                return m
    return None


def plan_sandbox(
    command: list[str], config: SandboxConfig, name: str, image: str, *, runtime: bool
) -> SandboxPlan:
    workspace = config.workspace
    user = sandbox_user(config.user, workspace)
    mounts = [os.path.realpath(m) for m in config.mounts]
    host_dirs = [d for d in os.environ.get("PATH", "").split(":") if os.path.isabs(d)]
    guard = runtime and is_guard_python(command)
    visible = ["/usr", *mounts, *([workspace] if workspace else [])]
    binds: list[Bind] = []
    if runtime:
        binds.append(Bind("/usr", "/usr", "ro"))
        # host configuration programs need and that holds no secrets (fontconfig: without
        # it a browser renders every page in a fallback serif face)
        binds += [Bind(d, d, "ro") for d in HOST_CONFIG if os.path.isdir(d)]
        extra = guard_prefixes() if guard else interpreter_roots(command, host_dirs)
        for root in extra:
            if os.path.isdir(root) and not under(root, visible):
                binds.append(Bind(root, root, "ro"))
                visible.append(root)
    state = server_state_dir(config.state_dir, name)
    package = package_dir(command, mounts, host_dirs) if config.package_overlay else None
    for given, m in zip(config.mounts, mounts, strict=True):  # inside: the path as given
        target = os.path.abspath(given)
        binds.append(Bind(m, target, "rw", "overlay") if m == package else Bind(m, target, "ro"))
    if workspace:
        mapped = os.path.realpath(workspace) if user.workspace_owner else None
        check_reachable(workspace, user, [*mounts, workspace], "workspace", idmapped=mapped)
        kind: Literal["plain", "idmap"] = "idmap" if user.workspace_owner else "plain"
        binds.append(Bind(workspace, workspace, "rw", kind))
    for m in mounts:
        check_reachable(m, user, mounts, "mount")
    data = os.path.join(state, "data")
    binds.append(Bind(data, data, "rw"))
    guard_state = str(state_home())
    exposed = under(guard_state, [*mounts, *([workspace] if workspace else [])])
    hidden = [guard_state] if exposed else []
    path = sandbox_path(visible, guard)
    if runtime and not guard:  # interpreters the server may run for its user, by name
        for root, bin_dir in user_interpreters(path, host_dirs):
            if os.path.isdir(root) and not under(root, visible):
                binds.append(Bind(root, root, "ro"))
                visible.append(root)
            path += [bin_dir] if bin_dir not in path else []
    if runtime:
        check_command(command, path, visible, workspace, image)
    masked = [d for d in MASKED if runtime and not needs(d, command, path, binds)]
    env = {"HOME": HOME, "USER": "mtguard", "PATH": ":".join(path), "LANG": "C.UTF-8",
           "SHELL": user_shell(visible), "MTGUARD_STATE_DIR": data}  # fmt: skip
    if config.network == "none" and not config.allow_domains:  # no network at all
        env.update({k: v for k, v in OFFLINE_ENV.items() if k not in config.env})
    env.update(config.env)
    return SandboxPlan(user=user, binds=binds, path=path, shell=env["SHELL"],
                       server_state=state, hidden=hidden, env=env, masked=masked)  # fmt: skip


def needs(masked: str, command: list[str], path: list[str], binds: list[Bind]) -> bool:
    """Does this server need the host directory `masked` (so it stays visible)? A bind in
    it (a mount on purpose), its program or a script argument there, or its PATH through
    it beyond the standard entries (an interpreter installed there)."""
    if any(under(b.source, [masked]) or under(b.target, [masked]) for b in binds):
        return True
    program = command[0] if "/" in command[0] else which(command[0], path)
    named = [program or "", *(a for a in command[1:] if os.path.isabs(a))]
    if any(under(os.path.realpath(n), [masked]) or under(n, [masked]) for n in named if n):
        return True
    return any(under(d, [masked]) for d in path if d not in STANDARD_PATH)


def check_command(
    command: list[str], path: list[str], visible: list[str], workspace: str | None, image: str
) -> None:
    """With host mounts, what the sandbox can run is what the host has: check it up front
    (inside, a missing program would only surface as the server exiting)."""
    program = command[0]
    if "/" in program:
        base = workspace or HOME
        candidates = [program if os.path.isabs(program) else os.path.join(base, program)]
    else:
        candidates = [os.path.join(d, program) for d in path]
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if os.path.isfile(real) and os.access(real, os.X_OK):
            if under(real, visible):
                return
            raise CommandNotFound(
                program,
                image,
                f"{real} is not under a mounted directory; add its directory with --mount",
            )
    raise CommandNotFound(program, image)


def realize(plan: SandboxPlan, mounts: MountSet) -> list[str]:
    """Make the plan's host-side mounts; Docker's `Binds`. Blocking: run in a worker thread."""
    assert plan.server_state is not None
    user = (plan.user.uid, plan.user.gid)
    data = os.path.join(plan.server_state, "data")
    os.makedirs(data, mode=0o700, exist_ok=True)
    os.chown(data, *user)  # the server's own; its parents stay the guard's (0700 on top)
    out = []
    for b in plan.binds:
        source = b.source
        try:
            if b.kind == "idmap":
                assert plan.user.workspace_owner is not None
                source = mounts.idmapped(b.source, plan.user.workspace_owner, user)
            elif b.kind == "overlay":
                st = os.stat(b.source)
                source = mounts.package_overlay(
                    b.source, package_state(plan.server_state, b.source),
                    (st.st_uid, st.st_gid), user, b.target,
                )  # fmt: skip
        except OSError as exc:
            raise SandboxError(
                f"cannot prepare the {b.kind} mount of {b.source}: {exc.strerror}"
            ) from exc
        out.append(f"{source}:{b.target}:{b.mode}")
    return out
