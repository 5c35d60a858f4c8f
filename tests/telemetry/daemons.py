"""Real Alertmanager, Prometheus and rsyslog daemons on 127.0.0.1 for tests, each with its
config in tmp.

Debian's `prometheus-alertmanager`, `prometheus` and `rsyslog` (scripts/setup-host.sh
installs them). A
missing binary skips, or fails under MTGUARD_REQUIRE_REAL=1. Start-up waits are bounded;
stopping is SIGTERM, then SIGKILL after a bound, so a test never leaves a daemon behind.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from mtguard_rt.telemetry.alertmanager import ALERT_NAME

from ..conftest import REQUIRE_REAL

START_TIMEOUT = 60.0  # a daemon's start on a loaded 2-core box (load 15: tens of seconds)
STOP_TIMEOUT = 5.0


def require_binary(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin:/sbin")
    if path is None:
        why = f"{name} is not installed (scripts/setup-host.sh installs it)"
        if REQUIRE_REAL:
            pytest.fail(f"MTGUARD_REQUIRE_REAL=1 but {why}")
        pytest.skip(why)
    return path


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_until(ready: Callable[[], bool], proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:  # an external daemon gives us no readiness fd
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        if ready():
            return
        time.sleep(0.1)
    raise TimeoutError(f"{what} not ready within {START_TIMEOUT} s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(STOP_TIMEOUT)


def _accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def _http_ready(port: int) -> bool:
    """`GET /-/ready` answers 200 (Alertmanager, Prometheus)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=1) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@dataclass
class Daemon:
    proc: subprocess.Popen[bytes]
    port: int
    output: Path  # rsyslog: the file it writes; Alertmanager: its log

    def stop(self) -> None:
        _stop(self.proc)


@contextmanager
def run_alertmanager(tmp: Path) -> Iterator[Daemon]:
    binary = require_binary("prometheus-alertmanager")
    port = free_port()
    tmp.mkdir(exist_ok=True)
    (tmp / "am.yml").write_text(
        'route:\n  receiver: "null"\n  group_wait: 1s\nreceivers:\n  - name: "null"\n'
    )
    log = tmp / "alertmanager.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'am.yml'}", f"--storage.path={tmp / 'am-data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--cluster.listen-address="],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        _wait_until(lambda: _http_ready(port), proc, "alertmanager")
        yield Daemon(proc, port, log)
    finally:
        _stop(proc)


@contextmanager
def run_prometheus(
    tmp: Path, target_port: int, rules: Path | None = None, alertmanager_port: int | None = None
) -> Iterator[Daemon]:
    """prometheus scraping 127.0.0.1:`target_port` (job "mtguard") every second, evaluating
    `rules` every second and sending their alerts to the Alertmanager at `alertmanager_port`."""
    binary = require_binary("prometheus")
    port = free_port()
    tmp.mkdir(exist_ok=True)
    conf = [
        "global: {scrape_interval: 1s, evaluation_interval: 1s}",
        "scrape_configs:",
        "  - job_name: mtguard",
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]",
    ]
    if rules is not None:
        conf.append(f"rule_files: ['{rules}']")
    if alertmanager_port is not None:
        conf += [
            "alerting:",
            "  alertmanagers:",
            f"    - static_configs: [{{targets: ['127.0.0.1:{alertmanager_port}']}}]",
        ]
    (tmp / "prometheus.yml").write_text("\n".join(conf) + "\n")
    log = tmp / "prometheus.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, f"--config.file={tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        _wait_until(lambda: _http_ready(port), proc, "prometheus")
        yield Daemon(proc, port, log)
    finally:
        _stop(proc)


def prometheus_query(port: int, query: str) -> list[dict[str, Any]]:
    """The instant vector of `query` (PromQL) from Prometheus's HTTP API."""
    url = f"http://127.0.0.1:{port}/api/v1/query?query={urllib.parse.quote(query)}"
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def get_alerts(port: int, **filters: str) -> list[dict[str, Any]]:
    """Alertmanager's `GET /api/v2/alerts` (active, unresolved) for mtguard's alerts."""
    matchers = {"alertname": ALERT_NAME, **filters}  # alertname=...: another rule's alerts
    query = urllib.parse.urlencode([("filter", f'{k}="{v}"') for k, v in matchers.items()])
    url = f"http://127.0.0.1:{port}/api/v2/alerts?{query}"
    with urllib.request.urlopen(url, timeout=5) as response:
        return list(json.load(response))


RSYSLOG_TEMPLATE = (
    "%PRI%|%TIMESTAMP:::date-rfc3339%|%HOSTNAME%|%APP-NAME%|%PROCID%|%MSGID%|"
    "%STRUCTURED-DATA%|%msg%\\n"
)


@contextmanager
def run_rsyslog(
    tmp: Path, ports: tuple[int, int] | None = None
) -> Iterator[tuple[Daemon, int]]:
    """rsyslogd with imudp and imtcp on loopback (`ports`: TCP, UDP; default free ones),
    every message to `output` one per line. Yields (daemon with its TCP port, UDP port)."""
    binary = require_binary("rsyslogd")
    tcp_port, udp_port = ports or (free_port(), free_port(socket.SOCK_DGRAM))
    tmp.mkdir(exist_ok=True)
    work = tmp / "rsyslog-work"
    work.mkdir()
    output = tmp / "syslog.out"
    conf = tmp / "rsyslog.conf"
    conf.write_text(
        f'global(workDirectory="{work}")\n'
        'module(load="imudp")\nmodule(load="imtcp")\n'
        f'input(type="imudp" address="127.0.0.1" port="{udp_port}")\n'
        f'input(type="imtcp" address="127.0.0.1" port="{tcp_port}")\n'
        f'template(name="probe" type="string" string="{RSYSLOG_TEMPLATE}")\n'
        f'*.* action(type="omfile" file="{output}" template="probe")\n'
    )
    log = tmp / "rsyslogd.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "-n", "-f", str(conf), "-i", str(tmp / "rsyslogd.pid")],
            stdout=out, stderr=subprocess.STDOUT,
        )
    try:
        _wait_until(lambda: _accepts(tcp_port), proc, "rsyslogd")
        yield Daemon(proc, tcp_port, output), udp_port
    finally:
        _stop(proc)


def read_lines(path: Path, n: int, timeout: float = 10.0) -> list[str]:
    """The first `n` lines rsyslog wrote to `path` (it writes asynchronously to our send)."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:  # rsyslog's file is the only signal we get
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n:
            return lines
        time.sleep(0.05)
    raise TimeoutError(f"{path}: {len(lines)} of {n} lines after {timeout} s: {lines}")


@contextmanager
def run_journald(tmp: Path) -> Iterator[Daemon]:
    """systemd-journald in a private mount namespace whose /run/systemd and /run/log (and
    /var/log/journal, if the host has one) are directories in `tmp`: the host's journal is
    untouched, and its socket is `tmp/run-systemd/journal/socket` from outside. `output` is
    the directory journalctl reads (`-D`)."""
    installed = ("/lib/systemd/systemd-journald", "/usr/lib/systemd/systemd-journald")
    binary = next((p for p in installed if Path(p).exists()), None)
    if binary is None:  # not on PATH: this skips, or fails under MTGUARD_REQUIRE_REAL
        binary = require_binary("systemd-journald")
    unshare = require_binary("unshare")
    run_sd, run_log, var_log = tmp / "run-systemd", tmp / "run-log", tmp / "var-journal"
    for d in (run_sd, run_log, var_log):
        d.mkdir(parents=True)
    script = (
        "set -e; mount --make-rprivate /; "
        f"mount --bind {run_sd} /run/systemd; mount --bind {run_log} /run/log; "
        f"if [ -d /var/log/journal ]; then mount --bind {var_log} /var/log/journal; fi; "
        f"exec {binary}"
    )
    log = tmp / "journald.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [unshare, "--mount", "sh", "-c", script], stdout=out, stderr=subprocess.STDOUT
        )
    socket_path = run_sd / "journal" / "socket"
    try:
        _wait_until(socket_path.exists, proc, "systemd-journald")
        yield Daemon(proc, 0, tmp)
    finally:
        _stop(proc)


def journal_entries(tmp: Path, match: str, n: int, timeout: float = 10.0) -> list[dict[str, str]]:
    """The first `n` entries matching `match` (FIELD=value) in the journal `run_journald` keeps."""
    journalctl = require_binary("journalctl")
    deadline = time.monotonic() + timeout
    entries: list[dict[str, str]] = []
    while time.monotonic() < deadline:  # journald's files are the only signal we get
        entries = []
        for d in (tmp / "run-log" / "journal", tmp / "var-journal"):
            if not any(d.glob("*/*.journal")):
                continue
            out = subprocess.run(
                [journalctl, "-D", str(next(d.glob("*"))), "-o", "json", "--no-pager", match],
                capture_output=True, timeout=10, check=False,
            ).stdout.decode()
            entries += [json.loads(line) for line in out.splitlines() if line.strip()]
        if len(entries) >= n:
            return entries
        time.sleep(0.1)
    raise TimeoutError(f"journal: {len(entries)} of {n} entries for {match} after {timeout} s")
