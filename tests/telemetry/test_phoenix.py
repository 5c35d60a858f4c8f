"""Guarded calls as traces in a real Arize Phoenix, read back through its API and its UI.

Phoenix (`.venv-phoenix`, pinned, installed by scripts/setup-phoenix.sh) serves on loopback
with its working dir in tmp; the guard exports to it with its ordinary OTLP/HTTP config (the
`x-project-name` header picks the project). One allowed and one denied call of the terminal
server (real Docker sandbox, real eBPF monitor) come back from Phoenix's REST API
(`/v1/projects/{project}/spans/otlpv1`) with the tree's parent/child structure, file and
network events and the denial; real headless Chromium renders the denied trace in Phoenix's
UI (its DOM holds the span tree, level by level as in the record) and screenshots it (a PNG
that is not a blank frame). Phoenix's OTLP/gRPC listener (a free port; unused here) binds
every interface whatever PHOENIX_HOST says: it lives only as long as the test.
"""

from __future__ import annotations

import html
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard
from mtguard_rt.model import AuditRecord, ProcessNode
from tests.audit_records import last_call

from ..conftest import REQUIRE_REAL
from ..e2e.conftest import READ_CANARY, SERVERS, online_guard_config
from .daemons import free_port
from .test_report_chromium import chromium

REPO = Path(__file__).resolve().parents[2]
PHOENIX = REPO / ".venv-phoenix" / "bin" / "phoenix"
PROJECT = "mtguard-test"
SETUP_TIMEOUT_S = 900  # a first install resolves ~140 packages (pandas, grpcio, sqlalchemy...)
START_TIMEOUT_S = 240.0  # import + SQLite migration: 31-77 s measured at load 9-27 on 2 cores
STOP_TIMEOUT_S = 10.0
CALL_BOUND_S = 60.0  # guard start (a bcc compile) and two sandboxed calls on a loaded box
READ_BOUND_S = 60.0  # Phoenix inserts received spans in batches, off the request path
CHROMIUM_S = 180.0  # a cold Chromium loading Phoenix's UI (30 MB of assets) on a loaded box
# the server's own connect (refused: nothing listens on the sandbox's loopback), then the
# canary read: one call with a network event and a secret read. Online rules observe only,
# so that neither effect's kill can race the other's event; post-verification denies.
CONNECT = (f"{sys.executable} -c \"import socket; s = socket.socket(); "
           "print(s.connect_ex(('127.0.0.1', 9)))\"")
DENIED_COMMAND = f"{CONNECT}; {READ_CANARY}"
SSH_KEY = "/home/mtguard/.ssh/id_rsa"

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.chromium,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
    pytest.mark.timeout(SETUP_TIMEOUT_S + START_TIMEOUT_S + 300),
]


@dataclass
class Phoenix:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def get(self, path: str, **query: Any) -> Any:
        qs = urllib.parse.urlencode(query, doseq=True)
        with urllib.request.urlopen(f"{self.url}{path}?{qs}", timeout=10) as resp:
            return json.load(resp)

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise RuntimeError(f"phoenix exited with {self.proc.returncode}:\n{tail}")
        try:
            with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def wait_ready(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.ready():  # a foreign daemon gives no readiness fd: poll its endpoint
            if time.monotonic() > deadline:
                raise TimeoutError(f"phoenix not serving {self.url} within {START_TIMEOUT_S} s")
            time.sleep(0.25)


@pytest.fixture(scope="session")
def phoenix_venv() -> Path:
    """The project's own set-up for .venv-phoenix (idempotent, pinned), as `make test` runs."""
    try:
        done = subprocess.run([str(REPO / "scripts" / "setup-phoenix.sh")], capture_output=True,
                              text=True, timeout=SETUP_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"scripts/setup-phoenix.sh took over {SETUP_TIMEOUT_S} s")
    if done.returncode != 0:
        why = f"scripts/setup-phoenix.sh failed:\n{done.stderr[-2000:]}"
        if REQUIRE_REAL:
            pytest.fail(why)
        pytest.skip(why)
    return PHOENIX


@contextmanager
def run_phoenix(workdir: Path, phoenix: Path) -> Iterator[Phoenix]:
    """`phoenix serve` on 127.0.0.1 (free ports), its database in `workdir`; not waited for
    here (the caller overlaps its start with the guard's). Killed with its process group
    and reaped on the way out, whatever happened."""
    workdir.mkdir()
    port, grpc_port = free_port(), free_port()
    env = {
        **os.environ, "PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_TELEMETRY_ENABLED": "false", "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
    }
    env.pop("PHOENIX_SQL_DATABASE_URL", None)
    log = workdir / "phoenix.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([str(phoenix), "serve"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        yield Phoenix(f"http://127.0.0.1:{port}", proc, log)
    finally:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(STOP_TIMEOUT_S)
                break
            except subprocess.TimeoutExpired:
                continue
        proc.wait(STOP_TIMEOUT_S)


def value(v: dict[str, Any]) -> Any:
    """An OTLP AnyValue as Phoenix's REST API returns it (JSON, one field set)."""
    for kind, x in v.items():
        if x is not None:
            return [value(y) for y in x["values"]] if kind == "array_value" else x
    return None


def attrs(kvs: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {kv["key"]: value(kv["value"]) for kv in kvs or []}


def trace_spans(px: Phoenix, trace_id: str, want: int) -> list[dict[str, Any]]:
    """The trace's spans once Phoenix has inserted `want` of them (bounded poll)."""
    deadline = time.monotonic() + READ_BOUND_S
    while True:
        spans: list[dict[str, Any]] = px.get(
            f"/v1/projects/{PROJECT}/spans/otlpv1", trace_id=trace_id, limit=1000
        )["data"]
        if len(spans) >= want or time.monotonic() > deadline:
            return spans
        time.sleep(0.25)


def check_trace(px: Phoenix, record: AuditRecord) -> dict[str, dict[str, Any]]:
    """The record's trace as Phoenix stores it mirrors the record; spans by name."""
    tree = record.tree
    assert tree is not None and tree.processes and record.trace_id is not None
    spans = trace_spans(px, record.trace_id, 4 + len(tree.processes))
    names = sorted(s["name"] for s in spans)
    assert len(spans) == 4 + len(tree.processes), names
    [root] = [s for s in spans if s["parent_span_id"] is None]
    assert root["name"] == f"tools/call {record.tool}"
    stages = {s["name"]: s for s in spans if s["parent_span_id"] == root["span_id"]}
    assert sorted(stages) == ["execution", "post-verification", "pre-audit"]
    ex = stages["execution"]

    # one span per process, nested like the tree (pid: the guard's own attribute)
    procs = {attrs(s["attributes"])["process.pid"]: s
             for s in spans if s["name"].startswith("process ")}
    assert sorted(procs) == sorted(p.pid for p in tree.processes)  # one span each
    pid_of = {p.key: p.pid for p in tree.processes}
    for p in tree.processes:
        span = procs[p.pid]
        parent = procs[pid_of[p.parent]] if p.parent in pid_of else ex
        assert span["parent_span_id"] == parent["span_id"], (p.pid, p.argv)
        assert attrs(span["attributes"])["process.command_line"] == " ".join(p.argv)
        opened = [attrs(e["attributes"])["file.path"]
                  for e in span["events"] or [] if e["name"] == "file.open"]
        assert opened == [f.path for f in p.files if f.op == "open"]

    ra = attrs(root["attributes"])
    assert ra["mtguard.decision"] == record.decision
    assert ra["mtguard.server"] == record.server and ra["gen_ai.tool.name"] == record.tool
    assert ra.get("mtguard.rules", []) == record.rules
    return {"root": root, **stages, **{f"pid {pid}": s for pid, s in procs.items()}}


async def test_guarded_calls_arrive_in_phoenix_with_their_trees(
    tmp_path: Path, phoenix_venv: Path
) -> None:
    config = online_guard_config(tmp_path, "observe")
    command = [sys.executable, str(SERVERS / "terminal.py")]
    with run_phoenix(tmp_path / "phoenix", phoenix_venv) as px:
        config.telemetry = {
            "exporter": "otlp-http", "logs_exporter": "off", "endpoint": px.url,
            "headers": {"x-project-name": PROJECT}, "export_timeout": 30.0,
            "flush_timeout": 30.0,
        }
        async with open_guard(config) as guard:
            # overlapped with the guard's bcc compile; before connect, whose start-up
            # records are exported too
            await anyio.to_thread.run_sync(px.wait_ready)
            async with guard.connect(command, name="term") as server:
                with anyio.fail_after(CALL_BOUND_S):
                    await server.call_tool("run_command", {"command": "echo hi"})
                    allowed = last_call(guard.records)
                    with pytest.raises(CallDenied) as info:
                        await server.call_tool("run_command", {"command": DENIED_COMMAND})
        denied = info.value.record
        assert denied is not None and allowed.decision == "allow"
        assert (denied.decision, denied.phase, denied.terminated) == ("deny", "post", False)
        assert guard.telemetry is not None
        stats = guard.telemetry.stats()  # closed: every record flushed or counted
        assert stats["export_failures"] == 0 and stats["spans_dropped"] == 0, stats

        ok = check_trace(px, allowed)
        assert ok["root"]["status"]["code"] != 2 and not attrs(ok["root"]["attributes"]).get(
            "mtguard.rules")
        bad = check_trace(px, denied)
        assert bad["root"]["status"] == {
            "code": 2, "message": f"denied: {', '.join(denied.rules)}"
        }
        # the evidence, as events on the process spans: the canary read and the connect
        assert denied.tree is not None
        reads = {(p.pid, f.path) for p in denied.tree.processes for f in p.files}
        [(reader, _)] = [r for r in reads if r[1] == SSH_KEY]
        key_opens = [attrs(e["attributes"]) for e in bad[f"pid {reader}"]["events"] or []
                     if e["name"] == "file.open"]
        assert SSH_KEY in [a["file.path"] for a in key_opens]
        [(talker, conn)] = [(p.pid, n) for p in denied.tree.processes for n in p.net
                            if n.op == "connect" and n.port == 9]
        connects = [attrs(e["attributes"]) for e in bad[f"pid {talker}"]["events"] or []
                    if e["name"] == "network.connect"]
        assert [(c["network.peer.address"], c["network.peer.port"]) for c in connects] == [
            (conn.address, 9)]
        # the violations, on the stage that decided
        stage = bad["post-verification"]
        assert stage["status"]["code"] == 2
        fired = [attrs(e["attributes"]) for e in stage["events"] or []
                 if e["name"] == "mtguard.violation"]
        assert {v["mtguard.rule"] for v in fired} == {
            v.rule for v in denied.violations if v.phase == "post"} >= {"canary-touched"}
        assert any(SSH_KEY in " ".join(v["mtguard.evidence"]) for v in fired), fired

        # Phoenix's own UI: the denied trace, rendered by real Chromium (1600 px wide: at
        # 1280 Phoenix draws the span tree without its indentation)
        ui = f"{px.url}/redirects/traces/{denied.trace_id}"
        args = ("--window-size=1600,1000",  # the last --window-size wins
                "--virtual-time-budget=20000")  # paused while Phoenix's GraphQL is pending
        shot, dom = tmp_path / "phoenix-trace.png", ""

        async def dump_dom() -> None:
            nonlocal dom
            dom = await anyio.to_thread.run_sync(
                lambda: chromium(tmp_path / "dom", *args, "--dump-dom", ui, timeout=CHROMIUM_S))

        async with anyio.create_task_group() as tg:  # two browsers, each its own profile
            tg.start_soon(dump_dom)
            await anyio.to_thread.run_sync(lambda: chromium(
                tmp_path / "shot", *args, f"--screenshot={shot}", ui, timeout=CHROMIUM_S))
    assert f"denied: {', '.join(denied.rules)}" in dom  # the root span's status, shown
    assert sorted(ui_tree(dom)) == sorted(tree_levels(denied)), ui_tree(dom)
    check_png(shot.read_bytes())


def ui_tree(dom: str) -> list[tuple[str, int]]:
    """(span name, nesting level) of each row of the trace tree Phoenix's UI rendered."""
    row = re.compile(r'class="span-node-wrap[^"]*" style="--trace-tree-nesting-level: (\d+);'
                     r'.*?<span[^>]*>([^<]+)</span>', re.S)
    return [(html.unescape(m.group(2)), int(m.group(1))) for m in row.finditer(dom)]


def tree_levels(record: AuditRecord) -> list[tuple[str, int]]:
    """What that tree must be: the root, its three stages, each process under its parent."""
    assert record.tree is not None
    nodes = {p.key: p for p in record.tree.processes}

    def level(p: ProcessNode) -> int:  # the roots of the tree sit under `execution`
        parent = nodes.get(p.parent) if p.parent is not None else None
        return 2 if parent is None else 1 + level(parent)

    def name(p: ProcessNode) -> str:  # as the guard names a process span
        return os.path.basename(p.exe) if p.exe else (p.argv[0] if p.argv else "?")

    procs = [(f"process {name(p)}", level(p)) for p in record.tree.processes]
    stages = [(name, 1) for name in ("pre-audit", "execution", "post-verification")]
    return [(f"tools/call {record.tool}", 0), *stages, *procs]


def check_png(data: bytes) -> None:
    """A 1600x1000 8-bit RGB(A) PNG that is not a blank frame: its scanlines (zlib) hold the
    full image, and after PNG's per-row filters, which turn a one-colour frame into zeros,
    they still take well over a hundred byte values."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1600, 1000)
    depth, colour = data[24], data[25]
    assert depth == 8 and colour in (2, 6), (depth, colour)
    idat, pos = b"", 8
    while pos < len(data):
        n = int.from_bytes(data[pos:pos + 4], "big")
        if data[pos + 4:pos + 8] == b"IDAT":
            idat += data[pos + 8:pos + 8 + n]
        pos += 12 + n
    raw = zlib.decompress(idat)
    assert len(raw) == (1 + width * (3 if colour == 2 else 4)) * height
    assert len(set(raw)) > 128, f"{len(set(raw))} byte values: a blank frame"
    assert len(data) > 20_000  # a one-colour 1600x1000 frame compresses to a few KB
