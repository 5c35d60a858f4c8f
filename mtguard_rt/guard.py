"""The guard as a library: one `Guard` per process, any number of guarded servers.

    async with open_guard(load_config("mtguard.toml")) as guard:
        async with guard.connect(["python", "server.py"], name="files") as server:
            tools = await server.list_tools()
            result = await server.call_tool("read_file", {"path": "a.txt"}, task="...")
            # raises CallDenied (with the verdict and record) when the guard denies

The guard owns the shared pieces (eBPF monitor, policy engine, tool pins, audit log,
telemetry); `connect()` starts a sandbox, its upstream connection, its monitor watch and a
`Supervisor`. The stdio proxy uses the same pieces with `handshake=False` and relays the
host's own initialize. Runs on asyncio and trio.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import msgspec

from . import __version__
from .agent.report import call_report
from .audit import JudgeConfig, LlmJudge, PolicyEngine, ToolPins, load_policy
from .audit.consent import kernel_write_paths
from .audit.persist_dirs import ACT_ONE_LEVEL, ACT_PTH, kernel_write_dirs, kernel_write_files
from .audit.scope import ServerScope
from .between_calls import run_between
from .config import GuardConfig
from .errors import CallDenied, GuardError, ServerExited
from .model import AuditRecord
from .proxy.upstream import Message, StdioUpstream, Upstream, UpstreamError
from .sandbox import SandboxConfig, open_sandbox
from .sandbox.image import HOME
from .sandbox.peek import SandboxFiles
from .sandbox.rollback import open_rollback
from .startup import end_startup
from .supervisor import DispatchHook, Supervisor
from .telemetry import AuditLog, TelemetryConfig, open_telemetry

_log = logging.getLogger(__name__)

PROTOCOL_VERSION = "2025-11-25"
HANDSHAKE_TIMEOUT_S = 60.0  # server start-up inside the sandbox, e.g. a Python import storm


class GuardedServer:
    """A sandboxed server behind the guard (library view)."""

    def __init__(self, supervisor: Supervisor, upstream: Upstream) -> None:
        self.supervisor = supervisor
        self.upstream = upstream
        self.server_info: Message = {}

    @property
    def name(self) -> str:
        return self.supervisor.name

    async def list_tools(self) -> list[Message]:
        return await self.supervisor.refresh_tools()

    async def call_tool(
        self,
        name: str,
        arguments: Message | None = None,
        *,
        task: str | None = None,
        history: list[dict[str, str]] | None = None,
        meta: Message | None = None,
    ) -> Message:
        """The tool's CallToolResult, or `CallDenied` when the guard withholds it."""
        meta = dict(meta or {})
        if task is not None:
            meta["mtguard/task"] = task
        if history is not None:
            meta["mtguard/history"] = history
        outcome = await self.supervisor.call(name, arguments or {}, meta)
        if outcome.denied:
            raise CallDenied(name, _verdict_of(outcome.record), outcome.record)
        if outcome.error is not None:
            raise UpstreamError(
                int(outcome.error.get("code", -32603)), str(outcome.error.get("message"))
            )
        return outcome.result or {}


def _verdict_of(record: AuditRecord) -> Any:
    from .model import Verdict

    return Verdict(
        decision=record.decision,
        phase=record.phase,
        violations=record.violations,
        llm_used=record.llm_used,
    )


class Guard:
    def __init__(
        self,
        config: GuardConfig,
        engine: PolicyEngine,
        pins: ToolPins,
        monitor: Any,
        telemetry: Any,
        audit_log: AuditLog | None,
        dispatch_hook: DispatchHook | None,
    ) -> None:
        self.config = config
        self.engine = engine
        self.pins = pins
        self.monitor = monitor
        # which monitor (the host's agent, or this process's own), for the log line
        self.monitor_mode = "monitor: off" if monitor is None else "monitor: in-process"
        self.telemetry = telemetry
        self.audit_log = audit_log
        self.agent: Any = None  # the host agent's connection, which counts our calls
        self.session: Any = None  # the agent's session its servers join (AgentSession)
        self.dispatch_hook = dispatch_hook
        self.observe = config.observe
        self.servers: dict[str, Supervisor] = {}
        self.records: list[AuditRecord] = []  # the last few, for embedding hosts and tests
        self.keep_records = 1000
        self.records_total = 0  # every record emitted (`records` keeps only the last few)

    def tools_by_server(self) -> dict[str, list[str]]:
        return {name: list(s.tools) for name, s in self.servers.items()}

    def sink(self, record: AuditRecord, traceparent: str | None, alert: str | None) -> None:
        if self.telemetry is not None:
            record.trace_id = self.telemetry.emit(record, traceparent=traceparent, alert=alert)
        if self.audit_log is not None:
            self.audit_log.write_sync(record)
        if self.agent is not None:
            self.agent.report(call_report(record))
        self.records.append(record)
        self.records_total += 1
        del self.records[: -self.keep_records]

    def records_since(self, mark: int) -> list[AuditRecord]:
        """The records emitted since `records_total` was `mark` (those still kept): unlike
        a length, the count still moves once `records` is full."""
        n = min(self.records_total - mark, len(self.records))
        return self.records[-n:] if n > 0 else []

    def _protect(self, watch: Any, canaries: dict[str, str]) -> None:
        """Push the sandbox's protected paths into the kernel: canaries wake the reader at
        once (online rules); in enforce mode with `kill_on_touch`, canaries, the policy's
        protected paths and forbidden executables are SIGKILLed on open / exec; the
        write-only canaries (shell rc files: shells read them) only on an open for writing,
        which `canary-touched` denies unless the user asked this call for it (`WriteConsent`:
        the supervisor then lifts that kill for the call's window); every canary and protected
        path also on unlink or rename (from or onto it). The policy's exact persistence files
        in the sandbox home (`kernel_write_paths`: ~/.ssh/authorized_keys, ~/.zshenv, ...)
        are killed on write and modify like write-only canaries, lifted per call the same way
        (`may_write`): a one-line append finishes before a user-space kill."""
        from .monitor.kinds import (
            ACT_KILL_EXEC,
            ACT_KILL_MODIFY,
            ACT_KILL_OPEN,
            ACT_KILL_WRITE,
            ACT_WAKE,
        )

        online = self.config.online
        if online.mode == "off":
            return
        policy = self.engine.policy
        kill = online.mode == "enforce" and online.kill_on_touch and not self.observe
        acts: dict[str, int] = {}
        for path in canaries:
            write_only = policy.canary_write_only.matches(path)
            on_open = ACT_KILL_WRITE if write_only else ACT_KILL_OPEN
            acts[path] = ACT_WAKE | (on_open if kill else 0)
            acts[path] |= ACT_KILL_MODIFY if kill else 0
        if kill and canaries:  # our image: its home is HOME
            dirs = kernel_write_dirs(HOME)  # the class's directories (`kill_in_pdir`)
            for path in self._kernel_writes():
                bits = dirs.get(path, ACT_WAKE | ACT_KILL_WRITE | ACT_KILL_MODIFY)
                acts[path] = acts.get(path, 0) | bits
        if kill:
            for path in policy.spec.lists.protected_paths:
                acts[path] = acts.get(path, 0) | ACT_WAKE | ACT_KILL_OPEN | ACT_KILL_MODIFY
            for path in policy.spec.lists.forbidden_executables:
                acts[path] = acts.get(path, 0) | ACT_KILL_EXEC
        # and the MCP stdin is gated: each read stops the server until the online integrity
        # rules have checked it (a swapped or replayed call dies before it is acted on)
        watch.gate_stdin = kill
        refused = watch.protect(acts)
        if refused:
            raise GuardError(f"cannot protect {refused}: not absolute or too long")

    def _kernel_writes(self) -> list[str]:
        """The persistence files `_protect` kills writers of (when it kills at all), and the
        persistence directories (ending in '/') it kills writers under."""
        files = kernel_write_paths(self.engine.policy, HOME) + kernel_write_files(HOME)
        return list(dict.fromkeys(files)) + list(kernel_write_dirs(HOME))

    def _home_dirs(self) -> dict[str, bool]:
        """The class's home directories made mounts of their own when the kernel kills
        writers there (`_protect`): read-only where every file runs later (`**`), writable
        for the one-level ones (a subdirectory is not persistence; a rename from elsewhere
        is still refused). Not the site-packages (pip writes there)."""
        online = self.config.online
        if not (online.mode == "enforce" and online.kill_on_touch and not self.observe):
            return {}
        dirs = kernel_write_dirs(HOME)
        return {d: not bits & ACT_ONE_LEVEL for d, bits in dirs.items() if not bits & ACT_PTH}

    def _unique(self, name: str) -> str:
        base, n = name, 1
        while name in self.servers:
            n += 1
            name = f"{base}-{n}"
        return name

    @asynccontextmanager
    async def connect(
        self,
        command: list[str],
        name: str | None = None,
        *,
        sandbox: SandboxConfig | None = None,
        handshake: bool = True,
        on_message: Callable[[Message], Awaitable[None]] | None = None,
    ) -> AsyncIterator[GuardedServer]:
        name = self._unique(name or default_name(command))
        async with AsyncExitStack() as stack:
            box = sandbox or self.config.sandbox
            # the workspace's baseline, taken before the server can run (issue 8: rollback)
            rollback = await stack.enter_async_context(
                open_rollback(box, observe=self.observe, name=name)
            )
            sb = await stack.enter_async_context(
                open_sandbox(command, box, name=name, gated=True, home_dirs=self._home_dirs())
            )
            watch = None
            if self.monitor is not None:
                watch = await stack.enter_async_context(
                    self.monitor.watch(
                        sb.cgroup_id, sb.cgroup_path, eager=self.config.online.mode != "off"
                    )
                )
                self._protect(watch, sb.canaries)  # before the server runs a single instruction
                _ = watch.between  # fed from the release on: the start-up records (startup.py)
                from .monitor.egress import sandbox_resolvers

                watch.resolvers = sandbox_resolvers(sb.pid, box.dns)  # port 53: these only
                watch.host_network = box.network == "host" or bool(box.allow_domains)
            if box.allow_domains:  # the kernel's allowlist, attached before the server runs
                if watch is None:
                    raise GuardError("--allow-domain needs the eBPF monitor: it enforces it")
                from .monitor.egress import open_network_policy

                await stack.enter_async_context(
                    open_network_policy(watch, box.allow_domains, box.dns)
                )
            if rollback is not None:  # its package overlays' baseline, as installed
                for layer in sb.overlays:
                    await rollback.add_overlay(*layer)
            await sb.release()
            relay = on_message or _library_messages
            supervisors: list[Supervisor] = []  # this server's, once made (just below)

            async def deliver(message: Message) -> None:
                # A list_changed re-checks the pins before the next call, in library mode too
                # (a rug pull announces itself this way; the proxy relays it to the host).
                if message.get("method") == "notifications/tools/list_changed":
                    for each in supervisors:
                        each.tools_stale = True
                await relay(message)

            upstream = StdioUpstream(sb, deliver)
            tg = await stack.enter_async_context(anyio.create_task_group())
            tg.start_soon(upstream.run)
            stack.callback(tg.cancel_scope.cancel)
            sup = Supervisor(
                name=name,
                upstream=upstream,
                engine=self.engine,
                pins=self.pins,
                watch=watch,
                sink=self.sink,
                tools_by_server=self.tools_by_server,
                canaries=sb.canaries,
                observe=self.observe,
                default_task=self.config.task,
                call_timeout_s=self.config.call_timeout_s,
                dispatch_hook=self.dispatch_hook,
                route=self.servers.get,
                online=self.config.online.mode,
                rollback=rollback,
                files=SandboxFiles(sb.pid),
                kernel_writes=self._kernel_writes() if sb.canaries else [],
                scope=ServerScope.create(box.workspace, command, box.mounts, box.env),
                writable=sb.writable,
            )
            sup.peers = self.session
            self.servers[name] = sup
            supervisors.append(sup)
            if watch is not None:  # its between-call records, for as long as it is connected
                await tg.start(run_between, sup)
            stack.callback(self.servers.pop, name, None)
            server = GuardedServer(sup, upstream)
            if handshake:
                server.server_info = await _handshake(upstream, " ".join(command))
                await end_startup(sup)  # it answered: its start-up is judged (startup.py)
                await sup.refresh_tools()
            yield server


_LAUNCHERS = {"python", "python3", "node", "npx", "uvx", "uv", "sh", "bash", "deno", "bun", "env"}


def default_name(command: list[str]) -> str:
    """A server's name from its command: the script or package a launcher runs, else the
    program (`python x/fin.py` -> fin, `npx -y @s/server-fs /d` -> server-fs, `git-mcp -v`
    -> git-mcp)."""
    program = Path(command[0]).name
    if program.rstrip("0123456789.") in _LAUNCHERS and "-c" not in command[1:2]:
        for arg in command[1:]:
            if not arg.startswith("-") and arg not in ("run", "exec"):
                return Path(arg.lstrip("@").split("@")[0]).stem or program
    return program or "server"


async def _library_messages(message: Message) -> None:
    """Server-initiated traffic in library mode: nothing to relay to, so it is dropped."""


async def _handshake(upstream: Upstream, command: str) -> Message:
    params = {
        "protocolVersion": PROTOCOL_VERSION,
        "capabilities": {},
        "clientInfo": {"name": "mtguard-rt", "version": __version__},
    }
    try:
        result = await upstream.request("initialize", params, HANDSHAKE_TIMEOUT_S)
    except TimeoutError as exc:
        raise ServerExited(
            command, None, f"no answer to initialize within {HANDSHAKE_TIMEOUT_S:g} s"
        ) from exc
    except UpstreamError as exc:
        raise GuardError(f"server {command!r} refused initialize: {exc}") from exc
    await upstream.notify("notifications/initialized")
    return result


@asynccontextmanager
async def open_guard(
    config: GuardConfig | None = None,
    *,
    dispatch_hook: DispatchHook | None = None,
    monitor: bool = True,
    session: str | None = None,
) -> AsyncIterator[Guard]:
    """`session` (else `config.session`): the agent session this guard's servers join, so
    the cross-server rules also see the servers of other guards in it (proxies); none, or
    "off": this guard's own servers only."""
    config = config or GuardConfig()
    policy = load_policy([Path(p) for p in config.policies] or None)
    if config.profile is not None:  # the config's learned profile overrides the policy's
        policy.use_profile(config.profile.path, config.profile.mode)
    judge = None
    if config.llm:
        judge = LlmJudge(msgspec.convert(config.llm, JudgeConfig))
    hook = dispatch_hook or _load_hook(config.dispatch_hook)
    async with AsyncExitStack() as stack:
        mon = None
        if monitor:
            from .agent.client import open_agent_program
            from .monitor import MonitorConfig, open_monitor
            from .monitor.between import BetweenPolicy

            # the host's agent (started here with MTGUARD_AGENT=auto), else our own
            remote, mode = await anyio.to_thread.run_sync(lambda: open_agent_program(spawn=True))
            _log.info("%s", mode)
            if remote is not None:
                stack.callback(remote.close)
            mon = await stack.enter_async_context(
                open_monitor(
                    MonitorConfig(
                        settle_max_ms=config.monitor.settle_max_ms,
                        ring_pages=config.monitor.ring_pages,
                        workers=config.monitor.workers,  # settle without waiting for them
                        between=BetweenPolicy(**msgspec.structs.asdict(config.between)),
                    ),
                    program=remote,
                )
            )
        from .monitor.simplify import load_noise, simplify

        noise = load_noise()
        engine = PolicyEngine(policy, judge=judge, simplify=lambda tree: simplify(tree, noise))
        # Observe mode (flag or policy) is applied by the supervisor, after the verdict: the
        # record keeps the would-be decision (the paper's counterfactual), nothing is blocked.
        observe = config.observe or engine.observe
        engine.observe = False
        tel_config = msgspec.convert(config.telemetry or {}, TelemetryConfig)
        telemetry = await stack.enter_async_context(open_telemetry(tel_config))
        audit_log = None
        if config.audit_log:
            audit_log = stack.enter_context(AuditLog(config.audit_log))
        if judge is not None:
            stack.push_async_callback(judge.aclose)
        config = msgspec.structs.replace(config, observe=observe)
        guard = Guard(
            config, engine, ToolPins(policy.pinning_action), mon, telemetry, audit_log, hook
        )
        if mon is not None:
            guard.monitor_mode = mode
            guard.agent = remote
        await _join_session(stack, guard, session or config.session)
        yield guard


async def _join_session(stack: AsyncExitStack, guard: Guard, name: str | None) -> None:
    """Join the agent's session `name` when an agent listens (its sender task runs for as
    long as the guard); the mode line says which session."""
    from .agent.protocol import agent_socket_path

    path = agent_socket_path()
    if not name or name == "off" or not path.exists():
        return
    from .agent.session_client import AgentSession

    peers = AgentSession(path, name)
    stack.push_async_callback(peers.aclose)
    tg = await stack.enter_async_context(anyio.create_task_group())
    stack.callback(tg.cancel_scope.cancel)
    await tg.start(peers.serve)
    guard.session = peers
    guard.monitor_mode += f", session {name!r} in the agent"


def _load_hook(spec: str | None) -> DispatchHook | None:
    """`module:function` naming a dispatch hook (a test/eval seam simulating a bad host)."""
    if not spec:
        return None
    module, _, attr = spec.partition(":")
    try:
        hook: DispatchHook = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        raise GuardError(f"cannot load dispatch_hook {spec!r}: {exc}") from exc
    return hook
