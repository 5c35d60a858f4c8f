"""Run real-server sessions unguarded, then guarded, and compare them call by call.

`run_suite(sessions)` serves the local test sites when a session needs them, then for each
session: builds its fixture at a fixed workspace W, runs the server directly on the host
(`open_stdio_client`, as the user running the suite, HOME a fresh temp home), rebuilds the
fixture at the same W (owned by the sandbox user) and runs the same calls through
`mtguard proxy --name S --workspace W --mount .servers ... --audit-log ...` (enforce, default
policy, no per-server policy), the task sent in `params._meta["mtguard/task"]`. Each call is
classified by `compare.classify`; the guard's audit record gives a denial's rules and
evidence. Every wait is bounded; a session that fails is reported with its reason, and the
suite goes on with the next.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TextIO

import anyio
import msgspec

from ...model import AuditRecord, record_decoder
from ...sandbox.image import HOME as SANDBOX_HOME
from ...sandbox.image import UID as SANDBOX_UID
from ...sandbox.image import USER as SANDBOX_USER
from ..mcp_client import McpRpcError, open_stdio_client
from ..sites import open_sites
from .compare import Status, classify, is_denial
from .session import Session, SessionError, placeholders, resolve

REPO = Path(__file__).resolve().parents[3]
# where scripts/setup-servers.sh installed the pinned servers; $MTGUARD_SERVERS_DIR points a
# run from another checkout (a worktree of an older commit) at the same installs
SERVERS_DIR = Path(os.environ.get("MTGUARD_SERVERS_DIR") or REPO / ".servers")
TASK_KEY = "mtguard/task"
SETUP_TIMEOUT_S = 60.0  # one fixture command (git init/commit, a small sqlite script)
START_TIMEOUT_S = 120.0  # sandbox start, BPF compile and server start under a loaded machine
EVIDENCE_ITEMS = 4  # evidence lines kept per violation
STDERR_LINES = 3  # a failed session's note quotes this many last stderr lines


class CallRun(msgspec.Struct, kw_only=True, omit_defaults=True):
    index: int
    tool: str
    arguments: dict[str, Any]
    task: str = ""  # the task the call was sent with (resolved)
    status: Status | None = None  # None: not run (the session failed before it)
    detail: str = ""  # a broken call's diff, a session error's reason, a denial's text
    decision: str | None = None  # the guard's audit record
    phase: str | None = None
    rules: list[str] = msgspec.field(default_factory=list)
    evidence: list[str] = msgspec.field(default_factory=list)  # "rule: reason | evidence"
    unguarded_ms: float | None = None
    guarded_ms: float | None = None
    guard_ms: float | None = None  # the guard's own stages (pre + settle + post), its record
    unguarded: dict[str, Any] | None = None
    guarded: dict[str, Any] | None = None
    after_fp: int | None = None  # broken after this earlier denied call: may follow from it


class ServerRun(msgspec.Struct, kw_only=True, omit_defaults=True):
    server: str
    package: str
    registry: str
    calls: list[CallRun] = msgspec.field(default_factory=list)
    error: str | None = None  # the session could not run to its end
    seconds: float = 0.0


class SuiteRun(msgspec.Struct, kw_only=True, omit_defaults=True):
    servers: list[ServerRun] = msgspec.field(default_factory=list)
    started: float = 0.0
    seconds: float = 0.0
    command: str = ""
    commit: str = ""
    workdir: str = ""  # workspaces, audit logs and server stderr of each session


def create_workdir() -> Path:
    """A fresh folder per suite run (runs in parallel never share a workspace), which the
    sandbox user can traverse."""
    path = Path(tempfile.mkdtemp(prefix="mtguard-realsuite-"))
    path.chmod(0o755)
    return path


def _owner_name(uid: int) -> str:
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _chown_tree(root: Path, uid: int) -> None:
    if os.geteuid() != 0:  # not root: make it writable for the sandbox user instead
        for dirpath, dirs, files in os.walk(root):
            for name in [dirpath, *(os.path.join(dirpath, n) for n in [*dirs, *files])]:
                if not os.path.islink(name):
                    os.chmod(name, os.stat(name).st_mode | 0o777 if os.path.isdir(name)
                             else os.stat(name).st_mode | 0o666)
        return
    for dirpath, dirs, files in os.walk(root):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in [*dirs, *files])]:
            os.lchown(name, uid, uid)


def _fresh_dir(root: Path, files: dict[str, str]) -> None:
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


async def build_fixture(session: Session, ws: Path, values: dict[str, str], uid: int) -> None:
    """A fresh workspace at `ws`: the session's files, its setup commands, owned by `uid`."""
    _fresh_dir(ws, {rel: resolve(text, values) for rel, text in session.fixture.files.items()})
    env = {
        **os.environ,
        "HOME": values["home"],
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Dev",
        "GIT_AUTHOR_EMAIL": "dev@example.org",
        "GIT_COMMITTER_NAME": "Dev",
        "GIT_COMMITTER_EMAIL": "dev@example.org",
    }
    for argv in session.fixture.setup:
        argv = resolve(argv, values)
        with anyio.fail_after(SETUP_TIMEOUT_S):
            done = await anyio.run_process(argv, cwd=ws, env=env, check=False)
        if done.returncode != 0:
            raise SessionError(session.path, None, f"fixture command {argv} failed: "
                               f"{done.stderr.decode(errors='replace')[-400:]}")
    _chown_tree(ws, uid)


def _values(session: Session, ws: Path, home: str, site: str | None) -> dict[str, str]:
    values = {"servers": str(SERVERS_DIR), "ws": str(ws), "home": home}
    if site is not None:
        values["site"] = site.rstrip("/")
    return values


async def _call(client: Any, tool: str, args: dict[str, Any], task: str) -> tuple[dict[str, Any],
                                                                                   float]:
    t0 = time.perf_counter()
    try:
        result: dict[str, Any] = await client.call_tool(tool, args, meta={TASK_KEY: task})
    except McpRpcError as exc:
        result = {"isError": True, "rpcError": f"{exc.code}: {exc.message}"}
    except TimeoutError:
        result = {"isError": True, "rpcError": f"no answer within {client.timeout:.0f} s"}
    return result, round((time.perf_counter() - t0) * 1000, 2)


async def _run_calls(
    session: Session, cmd: list[str], env: dict[str, str] | None, cwd: Path, values: dict[str, str],
    errlog: TextIO,
) -> list[tuple[dict[str, Any], float]]:
    out: list[tuple[dict[str, Any], float]] = []
    bound = START_TIMEOUT_S + len(session.calls) * (session.call_timeout_s + 5)
    with anyio.fail_after(bound):
        async with open_stdio_client(
            cmd, env=env, cwd=cwd, mode="legacy", request_timeout=START_TIMEOUT_S, errlog=errlog
        ) as client:
            await client.list_tools()
            client.timeout = session.call_timeout_s
            for call in session.calls:
                args = resolve(call.arguments, values)
                task = resolve(call.task or session.task, values)
                out.append(await _call(client, call.tool, args, task))
    return out


def unguarded_command(session: Session, values: dict[str, str]) -> list[str]:
    return list(resolve(session.command, values))


AGENT_ENV = ("MTGUARD_AGENT", "MTGUARD_AGENT_SOCKET")  # run the suite through an agent


def guarded_command(session: Session, values: dict[str, str], ws: Path, audit: Path) -> list[str]:
    cmd = [sys.executable, "-m", "mtguard_rt", "proxy", "--name", session.server,
           "--workspace", str(ws), "--mount", str(SERVERS_DIR), "--audit-log", str(audit)]
    # each session is a host of its own: no agent session shared with the suite's others
    cmd += ["--session", f"realsuite-{os.getpid()}-{audit.stem}"[:200]]
    if session.network != "none":
        cmd += ["--network", session.network]
    for domain in session.allow_domains:
        cmd += ["--allow-domain", domain]
    for key, value in resolve(session.env, values).items():
        cmd += ["--env", f"{key}={value}"]
    return [*cmd, "--", *resolve(session.command, values)]


def _records(audit: Path) -> list[AuditRecord]:
    if not audit.exists():
        return []
    return [record_decoder.decode(line) for line in audit.read_bytes().splitlines() if line]


def _evidence(record: AuditRecord) -> list[str]:
    lines = []
    for v in record.violations:
        if v.mode != "enforce" and record.decision == "deny":
            continue
        ev = "; ".join(v.evidence[:EVIDENCE_ITEMS])
        lines.append(f"{v.rule}: {v.reason}" + (f" | {ev}" if ev else ""))
    return lines


def _subs(values: dict[str, str], user: str) -> dict[str, str]:
    subs = {values["ws"]: "{ws}", values["home"]: "{home}", f"{user} {user}": "<owner>"}
    if "site" in values:
        subs[values["site"]] = "{site}"
    return subs


async def run_session(session: Session, site: str | None, workdir: Path) -> ServerRun:
    run = ServerRun(server=session.server, package=session.package, registry=session.registry)
    t0 = time.perf_counter()
    root = workdir / session.server
    ws, home, audit = root / "ws", root / "home", root / "audit.jsonl"
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    run.calls = [CallRun(index=i, tool=c.tool, arguments=c.arguments)
                 for i, c in enumerate(session.calls)]
    me = os.geteuid()
    stage = "unguarded run"
    try:
        # 1. unguarded, on the host, as the user running the suite
        home.mkdir()
        plain = _values(session, ws, str(home), site)
        await build_fixture(session, ws, plain, me)
        env = {"HOME": str(home), "LANG": "C.UTF-8", **resolve(session.env, plain)}
        with (root / "unguarded.stderr").open("w") as errlog:
            first = await _run_calls(session, unguarded_command(session, plain), env, ws, plain,
                                     errlog)
        # 2. guarded, the same calls on a fresh copy of the same workspace
        stage = "guarded run"
        guarded_values = _values(session, ws, SANDBOX_HOME, site)
        owner = SANDBOX_UID if session.owner is None else session.owner
        await build_fixture(session, ws, guarded_values, owner)
        cmd = guarded_command(session, guarded_values, ws, audit)
        # the guard's state (the server's persistent state and package overlay) fresh per
        # run too: a state left by an earlier suite run must not change this run's results
        # and the guard from this checkout (the SDK's default environment drops PYTHONPATH:
        # a run from a snapshot would otherwise guard with the editable install's code)
        guard_env = {"XDG_STATE_HOME": str(root / "state"), "PYTHONPATH": str(REPO)}
        # the suite's agent choice reaches the proxies (the SDK's environment drops it too)
        guard_env |= {k: v for k in AGENT_ENV if (v := os.environ.get(k)) is not None}
        with (root / "guarded.stderr").open("w") as errlog:
            second = await _run_calls(session, cmd, guard_env, root, guarded_values, errlog)
    except Exception as exc:  # the SDK raises groups and its own errors on a dead server
        leaf = _leaf(exc)
        run.error = f"{stage}: {type(leaf).__name__}: {leaf}"[:300] + _stderr_tail(root)
        run.seconds = round(time.perf_counter() - t0, 1)
        return run
    records = _records(audit)
    subs_a = _subs(plain, _owner_name(me))
    subs_b = _subs(guarded_values, SANDBOX_USER if session.owner is None else
                   _owner_name(session.owner))
    queue = list(records)
    for call, spec, (a, ms_a), (b, ms_b) in zip(run.calls, session.calls, first, second,
                                                strict=True):
        record = _take(queue, call.tool)
        call.arguments = resolve(spec.arguments, guarded_values)
        call.task = resolve(spec.task or session.task, guarded_values)
        call.unguarded, call.unguarded_ms = a, ms_a
        call.guarded, call.guarded_ms = b, ms_b
        denied = False
        if record is not None:
            call.decision, call.phase, call.rules = record.decision, record.phase, record.rules
            call.evidence = _evidence(record)
            t = record.timings_ms
            call.guard_ms = round(t.pre + t.settle + t.post, 2)
            denied = record.decision == "deny" and record.mode == "enforce"
        call.status, call.detail = classify(
            a, b, denied=denied or is_denial(b), expect_error=spec.expect_error,
            subs_unguarded=subs_a, subs_guarded=subs_b,
        )
    first_fp = next((c.index for c in run.calls if c.status == "fp"), None)
    for call in run.calls:
        if call.status == "broken" and first_fp is not None and call.index > first_fp:
            call.after_fp = first_fp
    run.seconds = round(time.perf_counter() - t0, 1)
    return run


def _take(queue: list[AuditRecord], tool: str) -> AuditRecord | None:
    """The first record left for `tool` (records come in call order, one per tools/call)."""
    for i, record in enumerate(queue):
        if record.tool == tool:
            del queue[: i + 1]
            return record
    return None


def _leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups: the one that says what failed."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def _stderr_tail(root: Path) -> str:
    """The last lines of the newest server stderr (the guard's one-line error, a traceback's
    last line), to say why a session stopped."""
    logs = [root / n for n in ("guarded.stderr", "unguarded.stderr")]
    for path in logs:
        if path.exists() and path.stat().st_size:
            lines = [ln.strip() for ln in path.read_text(errors="replace").splitlines()
                     if ln.strip() and not ln.strip().startswith(("|", "+-", "^"))]
            return f" [{path.name}: {' / '.join(lines[-STDERR_LINES:])}]"
    return ""


def _commit() -> str:
    try:
        done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip()


async def run_suite(
    sessions: Sequence[Session],
    *,
    command: str = "",
    progress: TextIO | None = sys.stderr,
    workdir: Path | None = None,
) -> SuiteRun:
    """Run `sessions` one after another; their files stay in `workdir` (default: a new temp
    folder, named in the result) for a look at the audit logs."""
    workdir = workdir or create_workdir()
    suite = SuiteRun(started=time.time(), command=command, commit=_commit(),
                     workdir=str(workdir))
    t0 = time.perf_counter()
    async with AsyncExitStack() as stack:
        site = None
        if any("site" in placeholders(msgspec.to_builtins(s)) for s in sessions):
            site = await stack.enter_async_context(open_sites())
        for n, session in enumerate(sessions, 1):
            run = await run_session(session, site, workdir)
            suite.servers.append(run)
            if progress is not None:
                marks = "".join({"ok": ".", "fp": "D", "broken": "B", "session-error": "E",
                                 None: "-"}[c.status] for c in run.calls)
                err = f" ERROR {run.error}" if run.error else ""
                print(f"[{n}/{len(sessions)}] {run.server} [{marks}] {run.seconds:.1f}s{err}",
                      file=progress, flush=True)
    suite.seconds = round(time.perf_counter() - t0, 1)
    return suite


suite_encoder = msgspec.json.Encoder()
suite_decoder = msgspec.json.Decoder(SuiteRun)
