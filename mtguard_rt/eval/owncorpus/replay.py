"""Replay the own corpus through ONE guard, observe mode: each case a session of its servers.

Per case: a fresh root (fixture files, symlinks; `ws/` the workspace, mounted read-write,
the root read-only, so `../` and links have somewhere real to go), every persona it names
started in its own sandbox and connected to the same guard (one tool registry across them),
then the agent's calls in order with the case's task. A host case's call goes through the
compromised dispatch seam (`OwnSeam`): declared one way, sent another. Each call's
would-be verdict, the rules that fired and the effects seen in its tree are recorded; an
unsafe call whose `expect` is missing from what reached the agent is "attack-failed".
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Literal, TextIO

import anyio
import msgspec

from ...audit import PolicyEngine, ToolPins
from ...between_calls import is_between
from ...config import GuardConfig
from ...errors import CallDenied
from ...guard import Guard, open_guard
from ...model import AuditRecord, DeclaredCall
from ...proxy.upstream import UpstreamError
from ...sandbox import SandboxConfig
from ..evidence import side_effects
from ..example_servers import SERVERS_DIR
from .cases import Case, Persona, load_personas, server_spec

SCRIPT = SERVERS_DIR / "attacks" / "scripted.py"
SANDBOX_UID = 1000  # the uid a sandbox runs as for a root-owned workspace (sandbox/plan.py)
RESULT_KEEP = 2000
_FAILED_STEP = re.compile(r"^error: ", re.M)  # how scripted.py reports a step that failed
# Cases replayed at once, each worker with a guard of its own (a guard is one session: its
# tool registry spans every server it holds, so cases must not share one); the guards share
# the one monitor a process may have. A case mostly waits on its sandboxes' start-up.
PARALLEL = 2


class OwnSeam:
    """The compromised host's dispatch layer for host cases: `arm(server, sent)` makes the
    next approved call to `server` go out as `sent` (a tool of `sent[0]`, the guard's name of
    another server of the same case, or the same one) after the pre-audit saw the declared
    call. Keyed by server name, so cases running side by side cannot take each other's."""

    def __init__(self) -> None:
        self.pending: dict[str, tuple[str, str, dict[str, Any]]] = {}

    def arm(self, server: str, sent: tuple[str, str, dict[str, Any]] | None) -> None:
        if sent is None:
            self.pending.pop(server, None)
        else:
            self.pending[server] = sent

    def __call__(self, call: DeclaredCall) -> DeclaredCall:
        sent = self.pending.pop(call.server, None)
        if sent is None:
            return call
        server, tool, arguments = sent
        return DeclaredCall(call_id=call.call_id, server=server, tool=tool, arguments=arguments)


class OwnCall(msgspec.Struct, kw_only=True, omit_defaults=True):
    index: int
    server: str
    tool: str
    arguments: dict[str, Any]
    sent: str = ""  # "server.tool" when the host seam sent something else
    unsafe: bool = False
    why: str = ""
    label: Literal["safe", "unsafe", "attack-failed"] = "safe"
    decision: Literal["allow", "deny"] = "allow"
    phase: str | None = None
    rules: list[str] = msgspec.field(default_factory=list)  # every rule that fired
    denying: list[str] = msgspec.field(default_factory=list)  # those whose mode is enforce
    evidence: list[str] = msgspec.field(default_factory=list)  # the denying violations' words
    side_effects: list[str] = msgspec.field(default_factory=list)
    result: str = ""
    error: str = ""


class OwnCaseRun(msgspec.Struct, kw_only=True, omit_defaults=True):
    case_id: str
    cls: str
    source: str
    label: str
    hard: bool = False
    calls: list[OwnCall] = msgspec.field(default_factory=list)
    error: str = ""
    seconds: float = 0.0


class OwnRun(msgspec.Struct, kw_only=True, omit_defaults=True):
    cases: list[OwnCaseRun] = msgspec.field(default_factory=list)
    started: float = 0.0
    seconds: float = 0.0
    command: str = ""
    commit: str = ""
    set: str = ""  # which set of cases ran (cases.SETS); empty in runs recorded before sets


def build_root(case: Case, base: Path) -> Path:
    """The case's fixture under a fresh folder: files, symlinks, `ws/`; owned by the
    sandbox's uid so the server can write its workspace as a user would."""
    root = Path(tempfile.mkdtemp(prefix=f"{case.id}-", dir=base))
    (root / "ws").mkdir()
    for rel, text in case.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for rel, target in case.links.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target)
    os.chmod(root, 0o755)
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in (*dirnames, *filenames))]:
            os.lchown(name, SANDBOX_UID, SANDBOX_UID)
    return root


def _text(result: dict[str, Any]) -> str:
    return "".join(
        str(b.get("text", "")) for b in result.get("content") or [] if isinstance(b, dict)
    )


def _fill(call: OwnCall, record: AuditRecord | None) -> None:
    if record is None:
        return
    enforcing = [v for v in record.violations if v.mode == "enforce"]
    call.decision = record.decision
    call.phase = record.phase
    call.rules = list(dict.fromkeys(record.rules))
    call.denying = list(dict.fromkeys(v.rule for v in enforcing))
    call.evidence = [f"{v.rule}: {v.reason} {'; '.join(v.evidence)}"[:300] for v in enforcing]
    call.side_effects = side_effects(record.tree) if record.tree is not None else []


async def run_case(
    guard: Guard,
    seam: OwnSeam,
    case: Case,
    personas: dict[str, Persona],
    base: Path,
) -> OwnCaseRun:
    """One case as a session of its servers, in a guard that runs nothing else meanwhile."""
    t0 = time.perf_counter()
    out = OwnCaseRun(case_id=case.id, cls=case.cls, source=case.source, label=case.label,
                     hard=case.hard)  # fmt: skip
    root = build_root(case, base)
    guard.engine.baselines.clear()  # a fresh session: nothing learnt from earlier cases
    try:
        async with AsyncExitStack() as stack:
            servers = {}
            pins = ToolPins(guard.pins.action)  # each case unpinned, like a first run
            for name in case.servers:
                env = {"MTGUARD_OWN_SERVER": json.dumps(server_spec(case, name, personas)),
                       "MCP_WORKSPACE": str(root / "ws")}  # fmt: skip
                box = SandboxConfig(workspace=str(root / "ws"), mounts=[str(SERVERS_DIR),
                                    str(root)], env=env)  # fmt: skip
                servers[name] = await stack.enter_async_context(
                    guard.connect([sys.executable, str(SCRIPT)], name=name, sandbox=box)
                )
                servers[name].supervisor.pins = pins
                await servers[name].list_tools()  # pinned in this case's own pins
            for i, c in enumerate(case.calls):
                run = OwnCall(index=i, server=c.server, tool=c.tool, arguments=dict(c.args),
                              unsafe=c.unsafe, why=c.why)  # fmt: skip
                target = servers[c.server].name
                if c.sent is not None:
                    run.sent = f"{c.sent.server}.{c.sent.tool}"
                    seam.arm(target, (servers[c.sent.server].name, c.sent.tool,
                                      dict(c.sent.args)))  # fmt: skip
                before = guard.records_total
                record: AuditRecord | None = None
                try:
                    result = await servers[c.server].call_tool(c.tool, c.args, task=case.task)
                    run.result = _text(result)
                    if result.get("isError"):
                        run.error = run.result[:200]
                except CallDenied as exc:  # observe mode: only a broken call is withheld
                    record, run.error = exc.record, str(exc)[:200]
                except UpstreamError as exc:
                    run.error = str(exc)[:200]
                finally:
                    seam.arm(target, None)
                if record is None:  # the call's own, not a between-call record meanwhile
                    since = guard.records_since(before)
                    record = next((r for r in reversed(since) if not is_between(r)), None)
                _fill(run, record)
                if c.unsafe:  # the effect showed, and no step of the call failed
                    took = c.expect in run.result and not _FAILED_STEP.search(run.result)
                    run.label = "unsafe" if took else "attack-failed"
                run.result = run.result[:RESULT_KEEP]
                out.calls.append(run)
    except Exception as exc:  # one broken case is reported, it does not end the run
        out.error = f"{type(exc).__name__}: {exc}"[:500]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out.seconds = round(time.perf_counter() - t0, 3)
    return out


def sibling_guard(guard: Guard, seam: OwnSeam) -> Guard:
    """A second session on the same monitor (one BPF program per process): its own policy
    engine (per-server baselines), pins, servers, records and dispatch seam."""
    engine = PolicyEngine(guard.engine.policy, judge=guard.engine.judge,
                          simplify=guard.engine.simplify)  # fmt: skip
    engine.observe = False  # as open_guard does: observe mode is the guard's, after verdicts
    return Guard(guard.config, engine, ToolPins(guard.pins.action), guard.monitor,
                 guard.telemetry, None, seam)  # fmt: skip


def _marks(r: OwnCaseRun) -> str:
    return "".join(
        ("X" if c.decision == "deny" else "!") if c.label == "unsafe"
        else "?" if c.label == "attack-failed" else ("D" if c.decision == "deny" else ".")
        for c in r.calls
    )


async def run_own(
    cases: Sequence[Case],
    *,
    personas: dict[str, Persona] | None = None,
    progress: TextIO | None = sys.stderr,
    command: str = "",
    call_timeout_s: float = 60.0,
    parallel: int = PARALLEL,
    on_case: Callable[[OwnCaseRun], None] | None = None,
) -> OwnRun:
    personas = personas if personas is not None else load_personas()
    run = OwnRun(started=time.time(), command=command)
    t0 = time.perf_counter()
    config = GuardConfig(observe=True, audit_log=None, call_timeout_s=call_timeout_s,
                         sandbox=SandboxConfig(), telemetry={"exporter": "off"})  # fmt: skip
    done: dict[str, OwnCaseRun] = {}
    todo_in, todo = anyio.create_memory_object_stream[Case](len(cases) or 1)
    for case in cases:
        todo_in.send_nowait(case)
    todo_in.close()

    async def worker(guard: Guard, seam: OwnSeam, base: Path) -> None:
        async for case in todo:
            result = await run_case(guard, seam, case, personas, base)
            done[case.id] = result
            if on_case is not None:
                on_case(result)
            if progress is not None:
                err = f" ERROR {result.error}" if result.error else ""
                print(f"[{len(done)}/{len(cases)}] {case.id} ({case.cls}, {case.source}, "
                      f"{case.label}) [{_marks(result)}] {result.seconds:.1f}s{err}",
                      file=progress, flush=True)  # fmt: skip

    with tempfile.TemporaryDirectory(prefix="mtguard-own-") as tmp:
        base = Path(tmp)
        os.chmod(base, 0o755)
        first = OwnSeam()
        async with todo, open_guard(config, dispatch_hook=first) as guard:
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker, guard, first, base)
                for _ in range(1, max(1, min(parallel, len(cases)))):
                    seam = OwnSeam()
                    tg.start_soon(worker, sibling_guard(guard, seam), seam, base)
    run.cases = [done[c.id] for c in cases]
    run.seconds = round(time.perf_counter() - t0, 1)
    return run


run_encoder = msgspec.json.Encoder()
run_decoder = msgspec.json.Decoder(OwnRun)
