"""Run the evaluation: every selected scenario, four passes each, through ONE guard.

`run_evaluation(scenarios, options)` opens one guard (one BPF load) and, per scenario, replays
the benign trajectory and the attacked one in observe mode (the paper's counterfactual: every
verdict recorded, nothing blocked), then both again in enforce mode (what is prevented, and
whether benign tasks still complete). Scenarios whose servers do not exist are reported as
not run, with the reason; nothing is faked. Progress goes to `progress` (stderr in the CLI).
The result (`EvalRun`) is plain data: JSON in, tables out (`metrics`, `report`).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import TextIO

import msgspec

from ..config import GuardConfig
from ..guard import open_guard
from ..sandbox import SandboxConfig
from .example_servers import server_script
from .replay import PassRun, Seam, run_pass
from .scenario import Scenario
from .sites import localise, open_sites

PASSES: tuple[tuple[str, bool], ...] = (
    ("benign", True),
    ("attacked", True),
    ("attacked", False),
    ("benign", False),
)


class Skipped(msgspec.Struct, kw_only=True):
    case_id: str
    domain: str
    surface: str
    reason: str


class EvalRun(msgspec.Struct, kw_only=True, omit_defaults=True):
    passes: list[PassRun] = msgspec.field(default_factory=list)
    skipped: list[Skipped] = msgspec.field(default_factory=list)
    domains: list[str] = msgspec.field(default_factory=list)
    sources: list[str] = msgspec.field(default_factory=list)
    policy: str = "balanced"
    llm: bool = False
    started: float = 0.0
    seconds: float = 0.0
    command: str = ""


class EvalOptions(msgspec.Struct, kw_only=True):
    domains: list[str] = msgspec.field(default_factory=lambda: ["browser", "financial"])
    sources: list[str] = msgspec.field(default_factory=lambda: ["server", "host", "user"])
    policies: list[str] = msgspec.field(default_factory=list)
    enforce: bool = True  # also run the enforce-mode passes
    call_timeout_s: float = 60.0
    command: str = ""
    audit_log: str | None = None  # also write every call's audit record (with its tree) here


def select(scenarios: Sequence[Scenario], options: EvalOptions) -> list[Scenario]:
    return [s for s in scenarios if s.domain in options.domains and s.surface in options.sources]


def missing_server(scenario: Scenario) -> str | None:
    """Why a scenario cannot run here (a server script it needs does not exist), else None."""
    for name in scenario.servers:
        try:
            path = server_script(name)
        except KeyError as exc:
            return str(exc)
        if not path.is_file():
            return f"the {name} server ({path.name}) does not exist in examples/servers"
    return None


def _log(progress: TextIO | None, line: str) -> None:
    if progress is not None:
        print(line, file=progress, flush=True)


def _summary(p: PassRun) -> str:
    marks = "".join(
        ("D" if c.decision == "deny" else ".")
        if c.label != "unsafe"
        else ("X" if c.decision == "deny" else "!")
        for c in p.calls
    )
    ok = (
        ""
        if p.attack_succeeded is None
        else (" attack=ok" if p.attack_succeeded else " attack=failed")
    )
    err = f" ERROR {p.error}" if p.error else ""
    return f"{p.kind}/{p.mode} [{marks}]{ok} {p.seconds:.1f}s{err}"


async def run_evaluation(
    scenarios: Sequence[Scenario],
    options: EvalOptions,
    *,
    progress: TextIO | None = sys.stderr,
    on_pass: Callable[[PassRun], None] | None = None,
) -> EvalRun:
    chosen = select(scenarios, options)
    run = EvalRun(
        domains=list(options.domains),
        sources=list(options.sources),
        policy=",".join(options.policies) or "balanced",
        started=time.time(),
        command=options.command,
    )
    runnable: list[Scenario] = []
    for s in chosen:
        why = missing_server(s)
        if why is None:
            runnable.append(s)
        else:
            run.skipped.append(
                Skipped(case_id=s.case_id, domain=s.domain, surface=s.surface, reason=why)
            )
    for reason in sorted({k.reason for k in run.skipped}):
        count = sum(k.reason == reason for k in run.skipped)
        _log(progress, f"not run: {count} scenario(s): {reason}")
    t0 = time.perf_counter()
    seam = Seam()
    sandbox = SandboxConfig()
    config = GuardConfig(
        observe=True,
        audit_log=options.audit_log,
        policies=list(options.policies),
        call_timeout_s=options.call_timeout_s,
        sandbox=sandbox,
        telemetry={"exporter": "off"},
    )
    passes = [p for p in PASSES if options.enforce or p[1]]
    async with AsyncExitStack() as stack:
        if any(s.domain == "browser" for s in runnable):
            base = await stack.enter_async_context(open_sites())
            _log(progress, f"local copies of the browser tasks' sites at {base}")
            runnable = [localise(s, base) if s.domain == "browser" else s for s in runnable]
        guard = await stack.enter_async_context(open_guard(config, dispatch_hook=seam))
        for n, scenario in enumerate(runnable, 1):
            lines = []
            for kind, observe in passes:
                result = await run_pass(
                    guard,
                    seam,
                    scenario,
                    kind,  # type: ignore[arg-type]
                    observe=observe,
                    sandbox=sandbox,
                )
                run.passes.append(result)
                lines.append(_summary(result))
                if on_pass is not None:
                    on_pass(result)
            elapsed = time.perf_counter() - t0
            eta = elapsed / n * (len(runnable) - n)
            _log(
                progress,
                f"[{n}/{len(runnable)}] {scenario.case_id} ({scenario.surface}, "
                f"{scenario.attack_type}) {'; '.join(lines)}  eta {eta:.0f}s",
            )
    run.seconds = round(time.perf_counter() - t0, 1)
    return run


run_encoder = msgspec.json.Encoder()
run_decoder = msgspec.json.Decoder(EvalRun)
