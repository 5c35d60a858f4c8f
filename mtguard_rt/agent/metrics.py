"""The agent's Prometheus metrics: what its guards report per call, plus its own figures.

Guards send one `CallReport` per audited call (a fire-and-forget `M` frame, no reply); the
agent counts them here and renders the text exposition format (version 0.0.4) for
`GET /metrics` on the address given with `mtguard agent run --metrics HOST:PORT`. Label
values are bounded: rules come from the policy, servers from the guards' configs, and past
`MAX_SERIES` label sets a family folds the rest into `other`, so a peer cannot grow the
agent's memory without bound.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import anyio
import anyio.abc

from .protocol import CallReport

MAX_SERIES = 500  # label sets per family; more fold into "other"
STAGE_BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 1000.0, 5000.0)
MAX_REQUEST = 8192  # an HTTP request head longer than this is refused
REQUEST_TIMEOUT_S = 5.0
_log = logging.getLogger(__name__)
Labels = tuple[tuple[str, str], ...]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _fmt(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels) + "}"


class Counter:
    def __init__(self, name: str, help_text: str) -> None:
        self.name, self.help = name, help_text
        self.values: dict[Labels, float] = {}

    def inc(self, labels: Labels = (), by: float = 1.0) -> None:
        if labels not in self.values and len(self.values) >= MAX_SERIES:
            labels = tuple((k, "other") for k, _ in labels)
        self.values[labels] = self.values.get(labels, 0.0) + by

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} counter"
        for labels, value in sorted(self.values.items()):
            yield f"{self.name}{_fmt(labels)} {value:g}"


class Histogram:
    def __init__(self, name: str, help_text: str, buckets: tuple[float, ...]) -> None:
        self.name, self.help, self.buckets = name, help_text, buckets
        self.series: dict[Labels, list[float]] = {}  # bucket counts..., +Inf count, sum

    def observe(self, value: float, labels: Labels = ()) -> None:
        if labels not in self.series and len(self.series) >= MAX_SERIES:
            labels = tuple((k, "other") for k, _ in labels)
        s = self.series.setdefault(labels, [0.0] * (len(self.buckets) + 2))
        for i, bound in enumerate(self.buckets):
            if value <= bound:
                s[i] += 1
        s[-2] += 1
        s[-1] += value

    def render(self) -> Iterable[str]:
        yield f"# HELP {self.name} {self.help}"
        yield f"# TYPE {self.name} histogram"
        for labels, s in sorted(self.series.items()):
            for bound, count in zip(self.buckets, s, strict=False):
                yield f"{self.name}_bucket{_fmt((*labels, ('le', f'{bound:g}')))} {count:g}"
            yield f"{self.name}_bucket{_fmt((*labels, ('le', '+Inf')))} {s[-2]:g}"
            yield f"{self.name}_count{_fmt(labels)} {s[-2]:g}"
            yield f"{self.name}_sum{_fmt(labels)} {s[-1]:g}"


class AgentMetrics:
    """Per-call figures the guards report; the agent's own are read at render time."""

    def __init__(self) -> None:
        self.calls = Counter("mtguard_calls_total", "Audited tool calls by server and decision.")
        # born at 0 for both modes, so that rate()/increase() see the first denial
        self.denials = Counter(
            "mtguard_denials_total", "Calls denied (observe: would have been denied), by mode."
        )
        self.denials.values = {(("mode", "enforce"),): 0.0, (("mode", "observe"),): 0.0}
        self.violations = Counter(
            "mtguard_rule_violations_total", "Rule violations by rule, phase and mode."
        )
        self.kills = Counter(
            "mtguard_kills_total", "Processes mtguard SIGKILLed, by what decided the kill."
        )
        self.rollbacks = Counter("mtguard_rollbacks_total", "Workspace rollbacks by action.")
        self.between = Counter(
            "mtguard_between_records_total",
            "Records of what a sandbox did with no call in flight, by server and decision.",
        )
        self.stages = Histogram(
            "mtguard_audit_stage_ms", "The guard's own time per call stage (ms).", STAGE_BUCKETS_MS
        )
        self.reports_bad = 0

    def observe(self, rep: CallReport) -> None:
        server = (("server", rep.server),)
        family = self.between if rep.between else self.calls
        family.inc((*server, ("decision", rep.decision), ("mode", rep.mode)))
        if rep.decision == "deny":  # a between record's deny too: it alerts like a call's
            self.denials.inc((("mode", rep.mode),))
        for rule, phase, mode in rep.violations:
            self.violations.inc((("rule", rule), ("phase", phase), ("mode", mode)))
        for why in rep.kills:
            self.kills.inc((("by", why),))
        if rep.rollback:
            self.rollbacks.inc((("action", rep.rollback),))
        for stage, ms in rep.stages_ms.items():
            self.stages.observe(ms, (("stage", stage),))

    def render(self, status: dict[str, Any]) -> str:
        lines: list[str] = []
        families = (self.calls, self.between, self.denials, self.violations, self.kills,
                    self.rollbacks, self.stages)  # fmt: skip
        for family in families:
            lines += family.render()
        gauges = (
            ("mtguard_agent_up", "1 while the agent serves.", 1),
            ("mtguard_agent_uptime_seconds", "Seconds since the agent started.",
             status["uptime_s"]),
            ("mtguard_agent_connections", "Guards connected now.", status["connections"]),
            ("mtguard_agent_sandboxes", "Sandbox cgroups watched now.", status["watched_cgroups"]),
            ("mtguard_agent_programs", "BPF programs the agent loaded.", status["programs"]),
        )  # fmt: skip
        for name, help_text, value in gauges:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name} {value:g}"]
        totals = (
            ("mtguard_agent_events_total", "Kernel records read.", status["events_total"]),
            ("mtguard_agent_events_unrouted_total", "Records of no watched sandbox.",
             status["events_unrouted"]),
            ("mtguard_agent_connections_total", "Guards that ever connected.",
             status["connections_total"]),
            ("mtguard_agent_reports_malformed_total", "Call reports the agent could not read.",
             self.reports_bad),
        )  # fmt: skip
        for name, help_text, value in totals:
            lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name} {value:g}"]
        lost = Counter("mtguard_agent_events_lost_total", "Records lost, by where and kind.")
        for kind, n in sorted(status["drops"].items()):
            lost.inc((("kind", str(kind)),), float(n))
        if status["lost_by_connection"]:
            lost.inc((("kind", "agent_backlog"),), float(status["lost_by_connection"]))
        lines += lost.render()
        return "\n".join(lines) + "\n"


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` or `[V6]:PORT` (port 0: any free one) -> (host, port); a clear ValueError."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ValueError(f"--metrics wants HOST:PORT (e.g. 127.0.0.1:9464), not {text!r}")
    return host.strip("[]"), int(port)


async def serve_metrics(
    address: tuple[str, int],
    render: Any,
    *,
    task_status: anyio.abc.TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Answer `GET /metrics` with `render()` on `address`; started with the bound port."""
    listener = await anyio.create_tcp_listener(local_host=address[0], local_port=address[1])
    port = int(listener.extra(anyio.abc.SocketAttribute.local_port))

    async def answer(stream: anyio.abc.SocketStream) -> None:
        async with stream:
            head = b""
            try:
                with anyio.fail_after(REQUEST_TIMEOUT_S):
                    while b"\r\n\r\n" not in head and len(head) <= MAX_REQUEST:
                        head += await stream.receive(4096)
            except (TimeoutError, anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                return
            line = head.split(b"\r\n", 1)[0].split()
            if len(head) > MAX_REQUEST or len(line) != 3:
                status, body, ctype = "400 Bad Request", "bad request\n", "text/plain"
            elif line[0] != b"GET" or line[1].split(b"?")[0] != b"/metrics":
                status, body, ctype = "404 Not Found", "try /metrics\n", "text/plain"
            else:
                status, ctype = "200 OK", "text/plain; version=0.0.4; charset=utf-8"
                body = render()
            data = body.encode()
            reply = (
                f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
            ).encode() + data
            try:
                await stream.send(reply)
            except (anyio.BrokenResourceError, OSError):
                pass

    async with listener:
        task_status.started(port)
        await listener.serve(answer)
