"""Benchmark the secrets detector (audit/secrets.py) on 1 MB results: it runs on every result.

Usage: .venv/bin/python bench/secrets_scan.py [--size BYTES] [--rounds N]
Four 1 MB texts, each scanned cold (`find_secrets`' per-text cache cleared every round):
prose (a page the agent fetched), prose dense with credential words and "sk-"/"://"
(the adversarial case for the anchored search), a base64 image (one huge run to decode),
and JSON records with SHAs, UUIDs and URLs (a git log, a database dump). Each text carries
one GitHub-format token at its end, and the scan must find it (or the figure is not printed).
Also the secret-in-result rule on a 1 MB result, end to end (detector plus explanations).
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.context import CallContext
from mtguard_rt.audit.rules_secrets import secret_in_result
from mtguard_rt.audit.secrets import find_secrets
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import BehaviorTree, DeclaredCall

TOKEN = "ghp_" + "Tb7Wc1Yn6Kd3Jf8Hs5Gz0Pa1QxLm4Xq9Vr2Z"


def texts(size: int) -> dict[str, str]:
    prose = "The quick brown fox jumps over the lazy dog near the river bank today. "
    dense = "Rotate the API key and token; the password secret at https://x.org/ is task-based. "
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + os.urandom(size * 3 // 4)).decode()
    rows = []
    while sum(len(r) for r in rows) < size:
        i = len(rows)
        rows.append(
            json.dumps(
                {
                    "commit": hashlib.sha1(str(i).encode()).hexdigest(),
                    "id": str(uuid.UUID(int=i)),
                    "sha256": hashlib.sha256(str(i).encode()).hexdigest(),
                    "url": f"https://example.org/items/{i}",
                }
            )
        )
    out = {
        "prose": (prose * (size // len(prose) + 1))[:size],
        "credential-dense prose": (dense * (size // len(dense) + 1))[:size],
        "base64 image": f"data:image/png;base64,{png[:size]}",
        "JSON with hashes/UUIDs": "\n".join(rows)[:size],
    }
    return {k: f"{v}\n{TOKEN}\n" for k, v in out.items()}


def run(size: int, rounds: int) -> None:
    print(f"secrets detector on {size:,}-byte texts, {rounds} cold rounds each")
    for name, text in texts(size).items():
        times, cpu = [], []
        for _ in range(rounds):
            find_secrets.cache_clear()
            t0, c0 = time.perf_counter(), time.process_time()
            found = find_secrets(text)
            cpu.append((time.process_time() - c0) * 1000)
            times.append((time.perf_counter() - t0) * 1000)
            if [f.value for f in found] != [TOKEN]:
                sys.exit(f"{name}: expected the one token, found {[f.kind for f in found]}")
        print(
            f"  {name:24s} wall p50 {statistics.median(times):7.1f} ms  max {max(times):7.1f} ms"
            f"  CPU p50 {statistics.median(cpu):7.1f} ms"
        )
    policy = load_policy()
    call = DeclaredCall(call_id="b", server="web", tool="fetch", arguments={"url": "https://x"})
    ctx = CallContext(call=call, task="Summarise the page")
    view = TreeView.build(BehaviorTree(call=call), policy, {})
    result = {"content": [{"type": "text", "text": texts(size)["prose"]}]}
    times, cpu = [], []
    for _ in range(rounds):
        find_secrets.cache_clear()
        t0, c0 = time.perf_counter(), time.process_time()
        (v,) = secret_in_result(ctx, view, result, policy)
        cpu.append((time.process_time() - c0) * 1000)
        times.append((time.perf_counter() - t0) * 1000)
    print(
        f"  secret-in-result rule    wall p50 {statistics.median(times):7.1f} ms"
        f"  CPU p50 {statistics.median(cpu):7.1f} ms  ({v.rule} fired)"
    )
    print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=10)
    args = ap.parse_args()
    run(args.size, args.rounds)


if __name__ == "__main__":
    main()
