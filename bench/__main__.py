"""`python -m bench` (`make bench`): every benchmark with modest defaults, then a summary.

Each benchmark runs as its own process (a fresh BPF load, its own RSS and fds), one after
another so they do not compete for the 2 shared cores; output streams through as it comes.
Figures for BENCHMARKS.md come from the scripts run with their documented defaults.

    python -m bench [--only NAME ...] [--list]
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT_TIMEOUT_S = 900  # the slowest (load, 1,800 guarded calls) takes about a minute idle
KILL_GRACE_S = 30.0  # after stdout closes (or the interrupt), for the script's own cleanup

# name -> (script, modest arguments)
SUITE: dict[str, tuple[str, list[str]]] = {
    "audit_rules": ("audit_rules.py", ["--iterations", "500"]),
    "secrets_scan": ("secrets_scan.py", ["--rounds", "5"]),  # the detector on 1 MB results
    "profile_matcher": ("profile_matcher.py", ["--iterations", "300"]),
    "monitor_overhead": ("monitor_overhead.py", ["--calls", "200"]),
    "monitor_throughput": ("monitor_throughput.py", ["--sizes", "50000,200000"]),
    "online_kill": ("online_kill.py", ["--calls", "50", "--heavy-calls", "10", "--files", "1000"]),
    "sandbox_startup": ("sandbox_startup.py", ["--starts", "5", "--calls", "300"]),
    "agent_startup": ("agent_startup.py", ["--starts", "3"]),  # proxy start, agent vs own BPF
    "bpf_tax": ("bpf_tax.py", ["--rounds", "3", "--calls", "150"]),
    "stdio_integrity": ("stdio_integrity.py", ["--pairs", "100000", "--calls", "200"]),
    "stdin_gate": ("stdin_gate.py", ["--calls", "200", "--rounds", "2"]),  # gated vs not, per call
    "guard_overhead": ("guard_overhead.py", ["--calls", "200", "--proxy-calls", "100"]),
    "real_latency": ("real_latency.py", ["--calls", "150"]),  # mcp-server-git, 4 ways
    "load": ("load.py", []),  # the sizes: 1,000 sequential, 8 servers x 100
    "rollback": ("rollback.py", ["--calls", "20", "--denials", "3"]),  # 10,000-file workspace
    "real_suite": ("real_suite.py", []),  # every shipped real-server session, both ways
    "own_corpus": ("own_corpus.py", []),  # our own attack corpus (issue 15), observe mode
}
TAIL_LINES = 4  # shown in the summary for scripts that print no SUMMARY line


def run(name: str) -> tuple[int | None, list[str], float]:
    script, args = SUITE[name]
    cmd = [sys.executable, str(HERE / script), *args]
    print(f"\n=== {name}: {' '.join(cmd)}", flush=True)
    t0 = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(cmd, cwd=HERE.parent, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        # SIGINT, not SIGTERM: KeyboardInterrupt cancels the run, so the sandboxes' shielded
        # removal runs; a kill follows if that hangs, and the next guard's start prunes the rest.
        interrupt = threading.Timer(SCRIPT_TIMEOUT_S, proc.send_signal, [signal.SIGINT])
        interrupt.start()
        try:
            for line in proc.stdout:  # ends at the script's exit (or the interrupt's)
                print(line, end="", flush=True)
                lines.append(line.rstrip("\n"))
            try:
                rc: int | None = proc.wait(timeout=KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                rc = None
        finally:
            interrupt.cancel()
        if rc is not None and time.monotonic() - t0 >= SCRIPT_TIMEOUT_S:
            rc = None  # interrupted by the timeout
    return rc, lines, time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description="Run the benchmark suite with modest defaults.")
    ap.add_argument("--only", action="append", choices=list(SUITE),
                    help="run just these (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the benchmarks and their arguments")
    opts = ap.parse_args()
    if opts.list:
        for name, (script, args) in SUITE.items():
            print(f"{name:20} bench/{script} {' '.join(args)}")
        return 0
    results = {name: run(name) for name in (opts.only or SUITE)}
    print("\n=== summary (full figures and method: BENCHMARKS.md)")
    failed = 0
    for name, (rc, lines, secs) in results.items():
        status = "ok" if rc == 0 else ("TIMEOUT" if rc is None else f"FAILED rc={rc}")
        failed += rc != 0
        print(f"--- {name}: {status} in {secs:.0f} s")
        picked = [ln.removeprefix(f"SUMMARY {name}").lstrip(": ") for ln in lines
                  if ln.startswith("SUMMARY ")]
        for ln in picked or lines[-TAIL_LINES:]:
            print(f"    {ln}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
