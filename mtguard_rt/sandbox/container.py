"""Run one server command in a Docker container the guard controls.

`open_sandbox()` creates the container (no network by default, all capabilities dropped,
no-new-privileges, non-root, memory/pids/CPU limits), attaches stdin/stdout/stderr over one
hijacked connection *before* starting it so no byte is lost, starts it and resolves its cgroup.
stdout is demultiplexed into a bounded byte stream (back-pressure, never a silent drop);
stderr goes to a bounded tail. On exit (normal, cancelled or crashed) the container is removed
under a shielded, bounded wait; containers left by a guard that died are pruned at start.
With `gated=True` the command waits for `release()`, so a monitor can attach first.
"""

from __future__ import annotations

import os
import socket
import struct
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from ..errors import CommandNotFound, DockerApiError, SandboxError
from .cgroups import Cgroup, cgroup_of_pid
from .engine import DockerEngine, open_engine
from .homedirs import HomeMounts, home_parents, home_tmpfs
from .image import HOME, canaries_of, ensure_image, home_archive
from .lifecycle import OWNER_LABEL, owner_token, prune_stale
from .mounts import MountSet, Overlay, prune_mounts
from .plan import SandboxPlan, plan_sandbox, realize, safe_name
from .seccomp import seccomp_option
from .settings import SandboxConfig as SandboxConfig

# Removing a container is local work; if the daemon hangs we give up rather than hang too.
REMOVE_TIMEOUT_S = 15.0
STDOUT_BUFFER_CHUNKS = 64  # chunks (each <= one attach frame) buffered before back-pressure
READ_SIZE = 65536
INIT = "/usr/bin/docker-init"  # Debian's docker.io ships tini-static under this name


def uses_runtime_mounts(config: SandboxConfig) -> bool:
    return config.runtime_mounts if config.runtime_mounts is not None else config.image is None


def security_opts(config: SandboxConfig) -> list[str]:
    option = seccomp_option(config.seccomp)
    return [option] if option is not None else []


def container_spec(
    command: list[str],
    config: SandboxConfig,
    image: str,
    plan: SandboxPlan,
    binds: list[str],
    *,
    name: str,
    gated: bool,
    home_dirs: Mapping[str, bool] | None = None,
) -> dict[str, Any]:
    cmd = list(command)
    if gated:
        # `read` consumes exactly one line from the pipe; the server then owns stdin.
        cmd = ["/bin/sh", "-c", 'read -r _ || exit 0; exec "$@"', "mtguard-gate", *cmd]
    if uses_runtime_mounts(config) and os.path.exists(INIT):
        # tini as pid 1 (from the host's /usr): the server gets normal signal semantics (a
        # pid 1 ignores SIGKILL from inside) and orphaned grandchildren are reaped.
        cmd = [INIT, "--", *cmd]
    tmpfs = {"/tmp": "rw,nosuid,nodev,size=256m"}
    for hidden in plan.hidden:  # the guard's own state, were a mount to expose it
        tmpfs[hidden] = "rw,nosuid,nodev,noexec,size=64k,mode=0755"
    tmpfs.update(home_tmpfs(home_dirs or {}, plan.user.uid, plan.user.gid))  # homedirs.py
    for masked in plan.masked:  # host directories the server does not need (plan.MASKED)
        tmpfs[masked] = "ro,nosuid,nodev,noexec,size=4k,mode=0755"
    return {
        "Image": image,
        "Cmd": cmd,
        "User": plan.user.spec,
        "WorkingDir": config.workspace or HOME,
        "Env": [f"{k}={v}" for k, v in plan.env.items()],
        "OpenStdin": True,
        "StdinOnce": True,  # our EOF on the attach stream closes the server's stdin
        "AttachStdin": True,
        "AttachStdout": True,
        "AttachStderr": True,
        "Tty": False,
        "Labels": {OWNER_LABEL: owner_token(), "io.mtguard.server": name},
        "HostConfig": {
            # an allowlist needs connectivity: the host's network, filtered in the kernel
            "NetworkMode": "host" if config.allow_domains else config.network,
            **({"Dns": list(config.dns)} if config.allow_domains and config.dns else {}),
            "Binds": binds,
            "Memory": config.memory_mb * 1024 * 1024,
            "PidsLimit": config.pids_limit,
            "NanoCpus": int(config.cpus * 1e9),
            "CapDrop": ["ALL"],
            "SecurityOpt": ["no-new-privileges", *security_opts(config)],
            "Tmpfs": tmpfs,
        },
    }


class SandboxStdin:
    """The server's stdin: raw writes on the attach connection; `send_eof()` closes it."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._lock = anyio.Lock()

    async def send(self, data: bytes) -> None:
        async with self._lock:
            await self._stream.write(data)

    async def send_eof(self) -> None:
        # A plain socket on asyncio, a trio socket on trio: both have shutdown().
        sock = self._stream.get_extra_info("socket")
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass


class Sandbox:
    """A running container. Create with `open_sandbox()`."""

    def __init__(
        self,
        engine: DockerEngine,
        container_id: str,
        name: str,
        image: str,
        command: list[str],
        stdin: SandboxStdin,
        stdout: MemoryObjectReceiveStream[bytes],
        canaries: dict[str, str],
    ) -> None:
        self.engine = engine
        self.container_id = container_id
        self.name = name
        self.image = image
        self.command = command
        self.stdin = stdin
        self.stdout = stdout
        self.canaries = canaries
        # package overlays (mounts.py): kept mounted on the host while the sandbox lives when
        # a rollback needs to see them, else detached at start (the container keeps its own)
        self.overlays: list[Overlay] = []
        self.pid = 0
        self.cgroup = Cgroup(path="", id=0)
        self.home: HomeMounts | None = None  # read-only persistence dirs (homedirs.py)
        self._stderr = bytearray()
        self._stderr_limit = 65536
        self.exited = anyio.Event()

    @property
    def cgroup_id(self) -> int:
        return self.cgroup.id

    @property
    def cgroup_path(self) -> str:
        return self.cgroup.path

    def pids(self) -> list[int]:
        return self.cgroup.pids()

    def stderr_tail(self) -> str:
        return self._stderr.decode("utf-8", "replace")

    def add_stderr(self, data: bytes) -> None:
        self._stderr += data
        if len(self._stderr) > self._stderr_limit:
            del self._stderr[: len(self._stderr) - self._stderr_limit]

    async def release(self) -> None:
        """Let a gated command start."""
        await self.stdin.send(b"\n")

    @asynccontextmanager
    async def writable(self, dirs: Iterable[str]) -> AsyncIterator[list[str]]:
        """These persistence directories writable (read-only ones) or exec (noexec ones)
        for a call with consent for them (homedirs.py); a sandbox without any: nothing."""
        if self.home is None:
            yield []
            return
        async with self.home.writable(dirs) as opened:
            yield opened

    async def wait(self) -> int:
        return await self.engine.wait(self.container_id)

    async def exit_code(self) -> int | None:
        state = (await self.engine.inspect(self.container_id)).get("State", {})
        return None if state.get("Running") else int(state.get("ExitCode", -1))

    async def _pump(self, stream: Any, out: MemoryObjectSendStream[bytes]) -> None:
        """Demultiplex Docker's attach frames: 8-byte header (kind, 0, 0, 0, size BE)."""
        buf = bytearray()
        async with out:
            try:
                while True:
                    chunk = await stream.read(READ_SIZE)
                    if not chunk:
                        break
                    buf += chunk
                    while len(buf) >= 8:
                        kind, size = buf[0], struct.unpack(">I", buf[4:8])[0]
                        if len(buf) < 8 + size:
                            break
                        payload = bytes(buf[8 : 8 + size])
                        del buf[: 8 + size]
                        if kind == 1:
                            await out.send(payload)
                        elif kind == 2:
                            self.add_stderr(payload)
            except (OSError, anyio.BrokenResourceError, anyio.ClosedResourceError):
                pass
            except Exception as exc:  # httpcore.ReadError and friends: the connection ended
                if not type(exc).__module__.startswith("httpcore"):
                    raise
            finally:
                self.exited.set()


def _start_error(exc: DockerApiError, command: list[str], image: str) -> SandboxError:
    msg = exc.message
    if "executable file not found" in msg or f'exec: "{command[0]}"' in msg:
        return CommandNotFound(command[0], image, msg.rsplit(":", 1)[-1].strip())
    return exc


@asynccontextmanager
async def open_sandbox(
    command: list[str],
    config: SandboxConfig | None = None,
    *,
    name: str = "server",
    gated: bool = False,
    engine: DockerEngine | None = None,
    home_dirs: Mapping[str, bool] | None = None,
) -> AsyncIterator[Sandbox]:
    """`home_dirs`: persistence directories of our image's home made mounts of their own,
    read-only when True (homedirs.py); ignored for a foreign image."""
    if not command:
        raise SandboxError("no server command given")
    config = config or SandboxConfig()
    if engine is None:
        async with open_engine() as own:
            async with open_sandbox(
                command, config, name=name, gated=gated, engine=own, home_dirs=home_dirs
            ) as sb:
                yield sb
        return
    await prune_stale(engine)
    await anyio.to_thread.run_sync(prune_mounts)
    if config.image is None:
        image, _ = await ensure_image(engine)
    else:
        image = config.image
    canaries = canaries_of(await engine.image_inspect(image))
    plan = plan_sandbox(command, config, name, image, runtime=uses_runtime_mounts(config))
    home_dirs = dict(home_dirs or {}) if canaries else {}  # our image: its home is HOME
    mounts = MountSet(f"{safe_name(name)}-{os.urandom(4).hex()}")
    try:
        binds = await anyio.to_thread.run_sync(realize, plan, mounts)
        spec = container_spec(
            command, config, image, plan, binds, name=name, gated=gated, home_dirs=home_dirs
        )
        cid = await engine.create_container(f"mtguard-{mounts.root.name}", spec)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(mounts.close)
        raise
    try:
        if canaries:  # our image: the home and canaries belong to the user the server runs as
            tar = home_archive(
                plan.user.uid, plan.user.gid, canaries, plan.shell, home_parents(home_dirs, HOME)
            )
            await engine.put_archive(cid, "/", tar)
        async with engine.attach(cid) as stream:
            send, receive = anyio.create_memory_object_stream[bytes](STDOUT_BUFFER_CHUNKS)
            sb = Sandbox(engine, cid, name, image, command, SandboxStdin(stream), receive, canaries)
            sb._stderr_limit = config.stderr_tail_bytes
            with receive:
                async with _unwrapped_group() as tg:
                    tg.start_soon(sb._pump, stream, send)
                    try:
                        await engine.start(cid)
                        if config.rollback == "off":  # the container holds its own copies
                            await anyio.to_thread.run_sync(mounts.close)
                        sb.overlays = list(mounts.overlays)
                        await _resolve(sb)
                        if home_dirs and sb.pid:
                            sb.home = await anyio.to_thread.run_sync(HomeMounts, sb.pid, home_dirs)
                    except DockerApiError as exc:
                        tg.cancel_scope.cancel()
                        raise _start_error(exc, command, image) from exc
                    try:
                        yield sb
                    finally:
                        tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True), anyio.move_on_after(REMOVE_TIMEOUT_S):
            await anyio.to_thread.run_sync(mounts.close)
            await engine.remove(cid)


async def _resolve(sb: Sandbox) -> None:
    state = (await sb.engine.inspect(sb.container_id)).get("State", {})
    sb.pid = int(state.get("Pid") or 0)
    if sb.pid:
        try:
            sb.cgroup = cgroup_of_pid(sb.pid)
        except SandboxError:
            if os.path.exists(f"/proc/{sb.pid}"):  # noqa: ASYNC240 - procfs, never blocks
                raise  # alive but not in a cgroup v2: the monitor could not filter it


@asynccontextmanager
async def _unwrapped_group() -> AsyncIterator[anyio.abc.TaskGroup]:
    """A task group whose lone failure surfaces as itself, not as an ExceptionGroup.

    The only child (the pump) never raises, so a group holds just the body's exception;
    callers of `open_sandbox` should see `CommandNotFound`, not a group around it.
    """
    try:
        async with anyio.create_task_group() as tg:
            yield tg
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from group.exceptions[0].__cause__
        raise
