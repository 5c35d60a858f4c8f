"""One guarded tool call, end to end: pre-audit, monitored dispatch, post-verification.

A `Supervisor` owns one sandboxed server's connection, monitor watch, tool pins and a lock
(one in-flight call per sandbox: attribution is by cgroup). `call()` never raises for a
verdict: it returns a `CallOutcome` holding what the agent may see (the result, a denial, or a
JSON-RPC error) and the audit record. In observe mode every verdict is recorded and nothing
is blocked (the paper's counterfactual evaluation). Telemetry and the audit log are written
through `sink`, off the call's critical path. Online rules (`audit.online`) see each event as
the monitor builds it; in enforce mode a deny kills the call's processes at once, stops waiting
for the response and withholds the result (`record.terminated`).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    ExitStack,
    asynccontextmanager,
    nullcontext,
)
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import msgspec

from .audit import CallContext, PolicyEngine, ToolPins, strip_descriptions
from .audit.consent import before_candidates, written_paths
from .audit.online import OnlineEvent, OnlineMode, OnlineRules
from .audit.provenance import UntrustedLog, gather
from .audit.rules_integrity import DispatchLedger, stamp_stdio
from .audit.rules_secrets import secret_sources
from .audit.scope import ServerScope
from .audit.session import SessionLog, result_text, session_view
from .errors import ServerExited
from .model import (
    AuditRecord,
    BehaviorTree,
    Decision,
    DeclaredCall,
    Phase,
    StdioMessage,
    Timings,
    Verdict,
    Violation,
)
from .proxy.upstream import Message, RequestCancelled, Upstream, UpstreamError
from .sandbox.rollback import WorkspaceRollback
from .startup import end_startup

RECENT_CALLS = 20  # history kept for the repeated-call rule
# rules whose deny means the server held a secret: it is quarantined (`Supervisor.quarantine`)
CONFIDENTIALITY = frozenset(
    {"canary-touched", "sensitive-file-read", "secret-in-message", "secret-in-result"}
)
RECENT_KILLS = 100  # online kills remembered (rule, event-to-kill latency) for benchmarks
TASK_KEY, HISTORY_KEY = "mtguard/task", "mtguard/history"


@dataclass(frozen=True)
class SeamAction:
    """What a dispatch seam (the host's layer between the pre-audit and the server) does with
    an approved call: send `call` (possibly another tool, arguments or server), then the same
    request `replays` more times under fresh ids in the same window (answers dropped), and
    hand the server's result through `on_result` before the guard verifies and returns it.
    It models a compromised host (evaluation, fault-injection tests); a hook returning a bare
    `DeclaredCall` only swaps."""

    call: DeclaredCall
    replays: int = 0
    on_result: Callable[[Message], Message] | None = None


DispatchHook = Callable[[DeclaredCall], DeclaredCall | SeamAction]
RecordSink = Callable[[AuditRecord, str | None, str | None], None]


class Window(Protocol):
    tree: BehaviorTree

    def response_arrived(self) -> None: ...

    def terminate(self, offender: int, rule: str) -> list[int]: ...


EventHook = Callable[[Any, Any, OnlineEvent], None]
# told the host's answer the moment a call is killed online (the verdict follows later)
KillNotice = Callable[[Message], Awaitable[None]]


class SandboxPeek(Protocol):
    """Reads small files inside the sandbox from the host (`sandbox.peek.SandboxFiles`)."""

    def read(self, paths: Iterable[str]) -> dict[str, str | None]: ...


# a sandbox's read-only persistence directories writable for a block (Sandbox.writable)
Writable = Callable[[list[str]], AbstractAsyncContextManager[object]]


class Watch(Protocol):
    def window(
        self, call: DeclaredCall, on_event: EventHook | None = None
    ) -> AbstractAsyncContextManager[Window]: ...

    def consent(self, paths: Iterable[str]) -> AbstractContextManager[list[str]]: ...


@asynccontextmanager
async def _consenting(
    watch: Watch,
    online: OnlineRules | None,
    window: AbstractAsyncContextManager[Window],
    kernel_writes: list[str] | None = None,
    writable: Writable | None = None,
) -> AsyncIterator[Window]:
    """The call's window, with the kernel's kill on write lifted, until it has settled, for
    the write-only canaries and persistence files (`kernel_writes`) the user asked this
    very call to edit (`WriteConsent`); its read-only persistence directories (`writable`:
    the sandbox's mounts) writable as long."""
    paths = online.kernel_consent(kernel_writes) if online is not None else []
    dirs = [p for p in paths if p.endswith("/")]
    with ExitStack() as stack:
        if paths:
            stack.enter_context(watch.consent(paths))
        async with writable(dirs) if writable and dirs else nullcontext(), window as win:
            yield win


class OnlineKill(msgspec.Struct, kw_only=True):
    call_id: str
    rule: str
    pids: list[int]
    latency_ns: int  # kernel event timestamp -> kill() returned (CLOCK_MONOTONIC)


class CallOutcome(msgspec.Struct, kw_only=True):
    record: AuditRecord
    result: Message | None = None  # CallToolResult for the agent (possibly the denial)
    error: Message | None = None  # JSON-RPC error object instead of a result
    denied: bool = False


def denial_result(tool: str, verdict: Verdict) -> Message:
    rules = ", ".join(v.rule for v in verdict.denying) or "policy"
    reasons = "; ".join(v.reason for v in verdict.denying)
    text = f"mtguard denied {tool} ({verdict.phase}-execution): {rules}. {reasons}".strip()
    # resultType: required by the 2026-07-28 schema, ignored as an extra key by older ones.
    return {"content": [{"type": "text", "text": text}], "isError": True, "resultType": "complete"}


def _ms(start: float, end: float) -> float:
    return round((end - start) * 1000, 3)


class _UntracedWindow:
    def __init__(self, call: DeclaredCall) -> None:
        self.tree = BehaviorTree(
            call=call,
            traced=False,
            complete=False,
            incomplete_reasons=["not traced: no monitor for this server"],
        )

    def response_arrived(self) -> None:
        pass

    def terminate(self, offender: int, rule: str) -> list[int]:
        return []


class Supervisor:
    def __init__(
        self,
        *,
        name: str,
        upstream: Upstream,
        engine: PolicyEngine,
        pins: ToolPins,
        watch: Watch | None,
        sink: RecordSink,
        tools_by_server: Callable[[], dict[str, list[str]]],
        canaries: dict[str, str],
        observe: bool = False,
        default_task: str | None = None,
        call_timeout_s: float = 120.0,
        dispatch_hook: DispatchHook | None = None,
        route: Callable[[str], Supervisor | None] | None = None,
        online: OnlineMode = "enforce",
        rollback: WorkspaceRollback | None = None,
        files: SandboxPeek | None = None,
        kernel_writes: list[str] | None = None,
        scope: ServerScope | None = None,
        writable: Writable | None = None,
    ) -> None:
        self.name = name
        self.upstream = upstream
        self.engine = engine
        self.pins = pins
        self.watch = watch
        self.sink = sink
        self.tools_by_server = tools_by_server
        self.canaries = canaries
        self.observe = observe
        self.default_task = default_task
        self.call_timeout_s = call_timeout_s
        self.dispatch_hook = dispatch_hook
        # A hooked call naming another guarded server is dispatched there (under that
        # server's lock and monitor watch): a compromised host can route anywhere.
        self.route = route
        self.online = online
        # Workspace rollback (sandbox/rollback.py): begin/capture under the lock around the
        # window, settle once the verdict is known; the next call's begin waits for it.
        self.rollback = rollback
        # What a call wrote to persistence files (consent judges the content): read back
        # from the sandbox; the last content seen is the next call's "before" (no read per
        # call: only the first, and after a call that wrote one).
        self.files = files
        self.kernel_writes = kernel_writes or []  # persistence files killed on write (kernel)
        self.writable = writable  # read-only persistence dirs, writable per consented call
        self._persisted: dict[str, str | None] = {}
        self._ws_listed = False  # the workspace's class files read (`before_candidates`)
        self._written: dict[str, dict[str, tuple[str | None, str | None]]] = {}
        self.scope = scope  # its workspace and roots, for `scope-escape`
        self.kills: deque[OnlineKill] = deque(maxlen=RECENT_KILLS)
        self.tools: dict[str, Message] = {}
        self.tools_stale = False  # set on list_changed: re-check the pins before the next call
        # The host's protocol stamps (`io.modelcontextprotocol/*` in `_meta`), copied onto the
        # guard's own requests so they speak the revision the host negotiated.
        self.protocol_meta: Message = {}
        self.recent: deque[DeclaredCall] = deque(maxlen=RECENT_CALLS)
        # What this server said (descriptions, recent results) for the provenance rules.
        self.untrusted = UntrustedLog(name)
        # Its finished calls and what the agent read of them, for the judge's session view.
        self.session = SessionLog(name)
        # The agent's session (agent/session_client.AgentSession), when the guard joined one:
        # the other proxies' servers, read before the audits, this one's calls published.
        self.peers: Any = None
        # every tools/call sent to this sandbox until read: the guard's own are declared
        # even when the server reads them late (a later window, between calls)
        self.ledger = DispatchLedger(name)
        self._lock = anyio.Lock()
        self._serial = 0
        self.last_task: str | None = None
        # set after a confidentiality deny: every later call and request is refused and
        # nothing the server sends reaches the host (a server denied for a secret must not
        # hand it over next call; docs/BYPASSES.md)
        self.quarantined: str | None = None

    def quarantine(self, why: str) -> None:
        if self.quarantined is None and not self.observe:
            self.quarantined = why

    def _quarantine_after(self, verdict: Verdict) -> None:
        """Quarantine on a confidentiality deny: a secret was read or carried. A kernel kill
        on touch, or a canary rule, counts when it names a readable canary or its marker; a
        write-only canary (~/.bashrc: an integrity target, denied and rolled back) or a
        forbidden exec alone does not."""
        write_only = self.engine.policy.canary_write_only
        secrets = [path for path in self.canaries if not write_only.matches(path)]
        for v in verdict.denying:
            if v.rule not in CONFIDENTIALITY and v.rule != "kill-on-touch":
                continue
            if v.rule in ("canary-touched", "kill-on-touch") and not any(
                path in line or "marker" in line for path in secrets for line in v.evidence
            ):
                continue
            self.quarantine(f"{v.rule} on {v.phase}-execution")
            return

    # -- tools and pins -------------------------------------------------------------------
    def observe_tools(self, tools: list[Message]) -> list[Any]:
        """Record a tools/list answer: cache schemas, compare with the pins."""
        self.tools = {str(t.get("name")): t for t in tools}
        self.untrusted.listing(tools)
        if self.peers is not None:
            self.peers.listing(self.name, tools)
        changes = self.pins.check(self.name, tools)
        for change in changes:
            self.sink(self._pin_record(change), None, "pinning-change")
        return list(changes)

    async def refresh_tools(self) -> list[Message]:
        tools: list[Message] = []
        cursor: str | None = None
        while True:
            params: Message = {"cursor": cursor} if cursor else {}
            if self.protocol_meta:  # 2026-07-28 has no session: each request carries its stamps
                params["_meta"] = dict(self.protocol_meta)
            result = await self.upstream.request("tools/list", params or None, self.call_timeout_s)
            tools += result.get("tools") or []
            cursor = result.get("nextCursor")
            if not cursor:
                break
        self.observe_tools(tools)
        return tools

    def _pin_record(self, change: Any) -> AuditRecord:
        return AuditRecord(
            call_id=f"{self.name}:tools/list",
            server=self.name,
            tool=str(change.tool),
            arguments={},
            decision="allow",
            phase=None,
            rules=["tool-pinning"],
            reasons=[change.describe()],
            mode="observe" if self.observe else "enforce",
            timings_ms=Timings(),
            tree_complete=True,
            llm_used=False,
            tree=None,
            ts=time.time(),
        )

    # -- one call -------------------------------------------------------------------------
    async def call(
        self,
        tool: str,
        arguments: Message,
        meta: Message | None = None,
        request_id: Any = None,
        params: Message | None = None,
        on_kill: KillNotice | None = None,
    ) -> CallOutcome:
        """Guard one call. `params` is the host's raw request params, forwarded (minus our
        `mtguard/*` meta keys) so protocol stamps reach the server. `on_kill` gets the
        denial at the moment an online rule kills the call (the proxy answers the host
        then, not after the tree settled)."""
        t0 = time.perf_counter()
        self._serial += 1
        call = DeclaredCall(
            call_id=f"{self.name}-{self._serial}-{int(time.time() * 1000)}",
            server=self.name,
            tool=tool,
            arguments=arguments,
        )
        meta = meta or {}
        task = meta.get(TASK_KEY) if isinstance(meta.get(TASK_KEY), str) else self.default_task
        self.last_task = task  # the session's task, for the between-call records
        await end_startup(self)  # the start-up judged first: its deny refuses this call too
        if self.quarantined is not None:
            why = f"the server is quarantined after a confidentiality deny ({self.quarantined})"
            refused = Verdict(
                decision="deny",
                phase="pre",
                violations=[Violation(rule="quarantined", phase="pre", mode="enforce", reason=why)],
            )
            record = self._record(call, task, refused, None, Timings(), t0)
            self.sink(record, meta.get("traceparent"), None)
            refusal: Message = {"code": -32003, "message": f"mtguard: {call.tool} refused: {why}"}
            return CallOutcome(record=record, error=refusal, denied=True)
        history = _history(meta.get(HISTORY_KEY))
        if (self.tools_stale or tool not in self.tools) and not self.upstream.closed.is_set():
            self.tools_stale = False
            try:
                await self.refresh_tools()
            except (UpstreamError, ServerExited, TimeoutError):
                pass
        schema = strip_descriptions(self.tools.get(tool, {}).get("inputSchema") or {})
        servers, look, note = await self._session_view()
        ctx = CallContext(
            call=call,
            task=task,
            history=history,
            input_schema=schema,
            annotations=dict(self.tools.get(tool, {}).get("annotations") or {}),
            tools_by_server=servers,
            recent_calls=list(self.recent),
            canaries=self.canaries,
            untrusted=gather(self.untrusted, servers, look),
            session=session_view(self, servers, look),
            scope=self.scope,
        )
        self.recent.append(call)

        pre = await self._pre_audit(ctx)
        t_pre = time.perf_counter()
        timings = Timings(pre=_ms(t0, t_pre))
        if pre.decision == "deny" and not self.observe:
            self.session.record(call, "deny")
            await self._publish(None)
            record = self._record(call, task, pre, None, timings, t0)
            _local_only(record, note)
            self.sink(record, meta.get("traceparent"), None)
            return CallOutcome(record=record, result=denial_result(tool, pre), denied=True)

        seam = self.dispatch_hook(call) if self.dispatch_hook else call
        action = seam if isinstance(seam, SeamAction) else SeamAction(call=seam)
        dispatched = action.call
        wire = {k: v for k, v in (params or {}).items() if k not in ("name", "arguments", "_meta")}
        forwarded_meta = {k: v for k, v in meta.items() if not k.startswith("mtguard/")}
        if forwarded_meta:
            wire["_meta"] = forwarded_meta
        wire |= {"name": dispatched.tool, "arguments": dispatched.arguments}
        target = self
        if dispatched.server != self.name and self.route is not None:
            target = self.route(dispatched.server) or self
        online = OnlineRules(self.engine.policy, ctx) if self.online != "off" else None
        if online is not None:  # a kernel allowlist on the sandbox (monitor.Watch; fakes: none)
            online.network_policy = bool(getattr(self.watch, "network_policy", None))
            online.resolvers = getattr(self.watch, "resolvers", None)
        response, error, tree, t_resp, terminated = await target._dispatch(
            call, wire, request_id, online, action.replays, on_kill
        )
        t_settled = time.perf_counter()
        ctx.written = target._written.pop(call.call_id, {})
        ctx.read_back = await target._read_files(secret_sources(tree)) or {}
        result = (response or {}).get("result") if response else None
        if action.on_result is not None and result is not None:
            result = action.on_result(result)  # the seam's forgery (evaluation, tests)
        try:
            # a JSON-RPC error object is what the agent reads then: judged like a result
            failed = response.get("error") if response and result is None else None
            judged = {"error": failed} if isinstance(failed, dict) else result or {}
            if self.peers is not None:  # what the others published meanwhile
                servers, look, again = await self._session_view()
                ctx.untrusted = gather(self.untrusted, servers, look)
                note = note or again
            post = await self.engine.post_verify(ctx, tree, judged)
        except BaseException:  # no verdict: a rollback pending for this call fails closed
            if target.rollback is not None:
                await target.rollback.settle(call.call_id, deny=True)
            raise
        if online is not None:
            post = _merge_online(post, online.fired)
        t_post = time.perf_counter()
        timings.exec = _ms(t_pre, t_resp)
        timings.settle = _ms(t_resp, t_settled)
        timings.post = _ms(t_settled, t_post)
        verdict = _combine(pre, post)
        if result and (verdict.decision != "deny" or self.observe):  # what the agent reads
            names = (n for ns in servers.values() for n in ns)
            self.untrusted.result(tool, result, names, call.arguments)
        reached = bool(result) and (verdict.decision != "deny" or self.observe)
        self.session.record(call, verdict.decision, result if reached else None)
        await self._publish(result if reached else None)
        rolled = None
        if target.rollback is not None:
            rolled = await target.rollback.settle(call.call_id, deny=verdict.decision == "deny")
        record = self._record(call, task, verdict, tree, timings, t0, error)
        record.request_id = None if request_id is None else str(request_id)
        record.terminated = terminated
        record.rollback = rolled
        _local_only(record, note)
        alert = None
        if rolled is not None and rolled.error:  # in the record's reasons: the alert shows them
            alert = "rollback-failed"
            record.reasons.append(f"workspace rollback failed: {rolled.error}")
        self.sink(record, meta.get("traceparent"), alert)
        if verdict.decision == "deny" and not self.observe:
            self._quarantine_after(verdict)
            return CallOutcome(record=record, result=denial_result(tool, verdict), denied=True)
        if error is not None:
            return CallOutcome(record=record, error=error)
        if response is not None and "error" in response:
            return CallOutcome(record=record, error=response["error"])
        return CallOutcome(record=record, result=result or {})

    async def _session_view(self) -> tuple[dict[str, list[str]], Any, str]:
        """This guard's servers, with the agent session's other members when it joined one
        (`route` over both, for the views only), and why the view is local when it is."""
        servers = self.tools_by_server()
        if self.peers is None:
            return servers, self.route, ""
        view = await self.peers.read(servers)
        merged, look = view.merged(servers, self.route)
        return merged, look, view.note

    async def _publish(self, result: Any) -> None:
        """The call just recorded in `session`, to the agent's session (bounded wait)."""
        if self.peers is not None and self.session.calls:
            text = None if result is None else result_text(result)
            await self.peers.publish(self.name, self.session.calls[-1], text)

    async def _pre_audit(self, ctx: CallContext) -> Verdict:
        change = self.pins.is_blocked(self.name, ctx.call.tool)
        pinned = self.engine.pinning_verdict(change) if change is not None else None
        if pinned is not None and pinned.decision == "deny":
            return pinned
        verdict = await self.engine.pre_audit(ctx)
        if pinned is not None and pinned.violations:
            verdict.violations = pinned.violations + verdict.violations
        return verdict

    def _online_hook(
        self, call_id: str, rules: OnlineRules, stop: anyio.CancelScope, killed: list[str]
    ) -> EventHook:
        """The window's per-event hook: run the online rules; on an enforced deny kill the
        call's processes and stop waiting for its response (`stop`)."""
        enforce = self.online == "enforce" and not self.observe

        def hook(window: Any, proc: Any, event: OnlineEvent) -> None:
            try:
                found = rules.check(proc, event)
            except Exception as exc:  # a broken online rule must not break monitoring
                if not any(v.rule == "online" for v in rules.fired):
                    why = f"online rule failed: {exc!r}"
                    failed = Violation(rule="online", phase="post", mode="observe", reason=why)
                    rules.fired.append(failed)
                return
            if found is None:
                return
            if not (enforce and found.mode == "enforce"):
                found.evidence.append("seen online; not terminated (online mode observe)")
                return
            pids = window.terminate(proc.pid, found.rule)
            latency = time.monotonic_ns() - event.ts_ns
            stop.cancel()
            killed.append(found.rule)
            self.kills.append(
                OnlineKill(call_id=call_id, rule=found.rule, pids=pids, latency_ns=latency)
            )
            what = "the server read it" if isinstance(event, StdioMessage) else "the event"
            found.evidence.append(
                f"terminated online: SIGKILL to pid(s) {pids or 'none left'} "
                f"{latency / 1e6:.3f} ms after {what}"
            )

        return hook

    async def _dispatch(
        self,
        declared: DeclaredCall,
        params: Message,
        request_id: Any,
        online: OnlineRules | None = None,
        replays: int = 0,
        on_kill: KillNotice | None = None,
    ) -> tuple[Message | None, Message | None, BehaviorTree, float, bool]:
        """Forward under the monitor; returns (response, error, tree, response time,
        terminated online)."""
        request_id = request_id if request_id is not None else f"mtguard-call-{declared.call_id}"
        response: Message | None = None
        error: Message | None = None
        stop = anyio.CancelScope()
        killed: list[str] = []
        hook = None
        if online is not None and self.watch is not None:
            online.expect(request_id, self.name, self.ledger)  # online integrity: it reads it
            hook = self._online_hook(declared.call_id, online, stop, killed)
        async with self._lock:
            if self.rollback is not None:
                await self.rollback.begin(declared.call_id)
            before = await self._persistence_before()
            window_cm = (
                _consenting(
                    self.watch,
                    online,
                    self.watch.window(declared, hook),
                    self.kernel_writes,
                    self.writable,
                )
                if self.watch
                else nullcontext(_UntracedWindow(declared))
            )
            async with window_cm as window:
                slot = self.upstream.expect(request_id)
                self.ledger.sent(request_id, declared)
                try:
                    await self.upstream.send(
                        {
                            "jsonrpc": "2.0",
                            "id": request_id,
                            "method": "tools/call",
                            "params": params,
                        }
                    )
                    with stop, anyio.fail_after(self.call_timeout_s):
                        response = await slot.wait()
                    if replays and not killed:
                        await self._replay(params, request_id, replays)
                    if killed:
                        response = None
                        self.upstream.tombstone(request_id, f"terminated online ({killed[0]})")
                        if on_kill is not None and online is not None:
                            fired = [v for v in online.fired if v.rule == killed[0]][:1]
                            now = Verdict(decision="deny", phase="post", violations=fired)
                            denial = denial_result(declared.tool, now)
                            denial["content"][0]["text"] += (
                                " Terminated online at this event; the full verdict follows "
                                "in the audit log."
                            )
                            await on_kill(denial)
                        error = {
                            "code": -32003,
                            "message": f"mtguard: {params['name']} was terminated online "
                            f"({killed[0]}); its result is withheld",
                        }
                except TimeoutError:
                    error = {
                        "code": -32001,
                        "message": f"mtguard: {params['name']} did not answer "
                        f"within {self.call_timeout_s:g} s; its result is withheld",
                    }
                except ServerExited as exc:
                    error = {"code": -32002, "message": f"mtguard: {exc}"}
                    if killed:
                        error["message"] += f" (terminated online: {killed[0]})"
                except RequestCancelled as exc:
                    error = {"code": -32800, "message": f"mtguard: {exc}"}
                finally:
                    self.upstream.forget(request_id)
                    t_resp = time.perf_counter()
                    window.response_arrived()
            if self.rollback is not None:  # settled: the call's processes are done
                await self.rollback.capture(declared.call_id, window.tree)
            if before is not None:
                self._written[declared.call_id] = await self._written_by(window.tree, before)
        kernel = list(getattr(window, "kernel_kills", []))
        if kernel and online is not None:
            why = "a protected path or program was touched: SIGKILLed in the kernel"
            kill = Violation(rule="kill-on-touch", phase="post", mode="enforce", reason=why)
            kill.evidence = kernel
            online.fired.append(kill)
        stamp_stdio(window.tree, self.name, request_id, response is not None, self.ledger)
        return response, error, window.tree, t_resp, bool(killed or kernel)

    async def _persistence_before(self) -> dict[str, str | None] | None:
        """The persistence files as the last call left them (what a call's additions are
        taken against): the write-only canaries and the workspace's class files (build
        files, a repo's config: `before_candidates`), read once, then every file a call
        wrote, read back after it. A write by the server between calls is not in it, so it counts
        as the next writing call's own (no consent for it). None: no sandbox to read."""
        if self.files is None:
            return None
        only = self.engine.policy.canary_write_only
        new = [p for p in self.canaries if only.matches(p) and p not in self._persisted]
        ws = self.scope.workspace if self.scope is not None else None
        if ws and not self._ws_listed:  # the workspace's build files, hooks' config: once
            self._ws_listed = True
            subdirs = getattr(self.files, "subdirs", None)  # a peek that can list (SandboxFiles)
            dirs = [ws, *(await anyio.to_thread.run_sync(subdirs, ws) if subdirs else [])]
            new += [p for p in before_candidates(dirs) if p not in self._persisted]
        if new:
            self._persisted.update(await self._read_files(new) or {})
        return dict(self._persisted)

    async def _read_files(self, paths: list[str]) -> dict[str, str | None] | None:
        """`paths` as the sandbox holds them now (None: no sandbox to read); a path it could
        not read safely is left out."""
        if self.files is None:
            return None
        if not paths:  # nothing to read: no worker-thread hop
            return {}
        return await anyio.to_thread.run_sync(self.files.read, paths)

    async def _written_by(
        self, tree: BehaviorTree, before: dict[str, str | None]
    ) -> dict[str, tuple[str | None, str | None]]:
        """(before, after) of each persistence file the call wrote to; a file not read
        before (a new one) counts as empty before, one not readable after is left out."""
        paths = written_paths(tree, self.engine.policy)
        if not paths:
            return {}
        after = await self._read_files(paths) or {}
        self._persisted.update(after)
        return {p: (before.get(p), text) for p, text in after.items()}

    async def _replay(self, params: Message, request_id: Any, times: int) -> None:
        """A seam's replays (`SeamAction.replays`): the same request again under fresh ids,
        inside the call's window; each answer is awaited (bounded) and dropped."""
        for i in range(1, times + 1):
            rid = f"{request_id}~replay-{i}"
            slot = self.upstream.expect(rid)
            try:
                message = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
                await self.upstream.send(message)
                with anyio.move_on_after(self.call_timeout_s):
                    await slot.wait()
            except (ServerExited, RequestCancelled):
                return
            finally:
                self.upstream.forget(rid)

    def _record(
        self,
        call: DeclaredCall,
        task: str | None,
        verdict: Verdict,
        tree: BehaviorTree | None,
        timings: Timings,
        t0: float,
        error: Message | None = None,
    ) -> AuditRecord:
        timings.total = _ms(t0, time.perf_counter())
        reasons = [v.reason for v in verdict.violations] + [f"skipped {s}" for s in verdict.skipped]
        if error is not None:
            reasons.append(str(error.get("message")))
        return AuditRecord(
            call_id=call.call_id,
            server=call.server,
            tool=call.tool,
            arguments=call.arguments,
            decision=verdict.decision,
            phase=verdict.phase if verdict.decision == "deny" else None,
            rules=verdict.rules,
            reasons=reasons,
            mode="observe" if self.observe else "enforce",
            timings_ms=timings,
            tree_complete=tree.complete if tree else True,
            llm_used=verdict.llm_used,
            tree=tree,
            ts=time.time() - (time.perf_counter() - t0),
            task=task,
            violations=verdict.violations,
        )


def _local_only(record: AuditRecord, note: str) -> None:
    """The record says so when the agent's session could not be read for this call."""
    if note:
        record.reasons.append(f"session: judged on the local view only ({note})")


def _history(raw: Any) -> list[dict[str, str]]:
    """`_meta["mtguard/history"]` as role/content strings; anything malformed is dropped."""
    if not isinstance(raw, list):
        return []
    return [
        {"role": str(m.get("role", "")), "content": str(m.get("content", ""))}
        for m in raw
        if isinstance(m, dict)
    ]


def _merge_online(post: Verdict, fired: list[Violation]) -> Verdict:
    """Fold what the online rules found into the post verdict: their evidence (and the kill)
    leads the same rule's post evidence, or stands as the rule's violation."""
    if not fired:
        return post
    violations = list(post.violations)
    for v in fired:
        same = next((x for x in violations if x.rule == v.rule), None)
        if same is None:
            violations.append(v)
            continue
        mode = "enforce" if "enforce" in (v.mode, same.mode) else same.mode
        violations[violations.index(same)] = msgspec.structs.replace(
            same,
            evidence=[*v.evidence, *(e for e in same.evidence if e not in v.evidence)],
            mode=mode,
        )
    deny = any(v.mode == "enforce" for v in violations)
    return Verdict(
        decision="deny" if deny else "allow",
        phase="post" if deny else post.phase,
        violations=violations,
        skipped=post.skipped,
        llm_used=post.llm_used,
    )


def _combine(pre: Verdict, post: Verdict) -> Verdict:
    """The call's verdict: deny if either phase denied; the first denying phase names it."""
    decision: Decision = "deny" if "deny" in (pre.decision, post.decision) else "allow"
    phase: Phase | None = (
        "pre" if pre.decision == "deny" else ("post" if post.decision == "deny" else None)
    )
    return Verdict(
        decision=decision,
        phase=phase,
        violations=pre.violations + post.violations,
        skipped=pre.skipped + post.skipped,
        llm_used=pre.llm_used or post.llm_used,
    )
