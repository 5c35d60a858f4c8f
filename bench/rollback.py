"""Workspace rollback (issue 8): what it costs with a 10,000-file workspace.

Three guarded terminal servers (examples/servers/terminal.py, eBPF monitor, balanced policy)
in one guard, each on its own copy of the same workspace (`--files` files of `--size` bytes
in directories of 100): rollback off, "tree" and "scan". Allowed calls (`echo > out.txt`)
alternate between them, so the per-call difference is measured within one run; the
rollback's own time on the call path is `record.rollback.ms`. Then denied calls (write
`--touch` files, then read the canary) on the tree and scan servers: the restore's cost
end to end. Finally the components in-process on a fresh copy: snapshot, a full stat scan,
tree-mode checking, restoring and committing k changed files.

    sudo .venv/bin/python bench/rollback.py [--files 10000] [--size 4096] [--calls 40]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench._common import fmt, machine, ms, stats, summary
from mtguard_rt import CallDenied, GuardConfig, open_guard
from mtguard_rt.sandbox import SandboxConfig
from mtguard_rt.sandbox.shadow import ShadowLimits, WorkspaceShadow

SERVERS = Path(__file__).resolve().parent.parent / "examples" / "servers"
TERMINAL = [sys.executable, str(SERVERS / "terminal.py")]
READ_CANARY = 'cat $HOME/.s""sh/id_r""sa >/dev/null'  # hidden from the pre-audit
PER_DIR = 100
MODES = ("off", "tree", "scan")
# balanced, with shadowed-tool observed: three copies of one server share a guard here
POLICY = str(Path(__file__).resolve().parent / "load_policy.toml")


def make_workspace(root: Path, files: int, size: int) -> None:
    root.mkdir(parents=True)
    blob = os.urandom(size)
    for i in range(files):
        d = root / f"d{i // PER_DIR:04d}"
        if i % PER_DIR == 0:
            d.mkdir()
        (d / f"f{i % PER_DIR:03d}.txt").write_bytes(blob)


def copy_workspace(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst)
    for path in [dst, *dst.rglob("*")]:
        os.chown(path, 1000, 1000)  # the sandbox runs as uid 1000


def touch_command(k: int, n: int) -> str:
    """Append to k existing files (shell builtins only), then read the canary; `n` makes
    each command text unique (the repeated-call rule denies a repeat before dispatch)."""
    names = " ".join(f"d{i // PER_DIR:04d}/f{i % PER_DIR:03d}.txt" for i in range(k))
    return f"for f in {names}; do echo {n} >> $f; done; {READ_CANARY}"


async def guarded(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    config = GuardConfig(audit_log=None, telemetry={"exporter": "off"}, policies=[POLICY])
    out: dict[str, Any] = {"total": {m: [] for m in MODES}, "rb": {m: [] for m in MODES}}
    async with open_guard(config) as guard, AsyncExitStack() as stack:
        servers = {}
        for mode in MODES:
            ws = base / f"ws-{mode}"
            copy_workspace(base / "ws", ws)
            box = SandboxConfig(mounts=[str(SERVERS)], workspace=str(ws), rollback=mode)  # type: ignore[arg-type]
            t0 = time.perf_counter()
            servers[mode] = await stack.enter_async_context(
                guard.connect(TERMINAL, mode, sandbox=box)
            )
            out[f"connect_{mode}"] = ms(t0, time.perf_counter())
        for i in range(args.calls):
            for mode in MODES[i % 3 :] + MODES[: i % 3]:  # rotate who goes first
                await servers[mode].call_tool("run_command", {"command": f"echo {i} > out.txt"})
                rec = guard.records[-1]
                assert rec.decision == "allow", rec.reasons
                assert '"exit_code": 0' in str(rec.result or "") or rec.result is None
                out["total"][mode].append(rec.timings_ms.total)
                if rec.rollback is not None:
                    out["rb"][mode].append(rec.rollback.ms)
        for k in (1, args.touch):
            for mode in ("tree", "scan"):
                key = f"deny_{mode}_{k}"
                out[key] = []
                for n in range(args.denials):
                    try:
                        command = touch_command(k, n)
                        await servers[mode].call_tool("run_command", {"command": command})
                    except CallDenied as exc:
                        rb = exc.record.rollback if exc.record else None
                        assert rb is not None and rb.action == "restored", rb
                        assert rb.modified >= k, rb
                        out[key].append(rb.ms)
                    else:
                        raise AssertionError("the canary read was not denied")
    return out


def components(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    ws = base / "ws-lib"
    copy_workspace(base / "ws", ws)
    store = base / "store"
    store.mkdir()
    t0 = time.perf_counter()
    shadow = WorkspaceShadow.create(str(ws), str(store), ShadowLimits(), 600)
    out: dict[str, Any] = {"snapshot": ms(t0, time.perf_counter()), "method": shadow.method}
    out["entries"], out["mib"] = len(shadow.index), shadow.bytes / 2**20
    out["scan"], out["tree"] = [], []
    for _ in range(args.calls):
        t0 = time.perf_counter()
        shadow.changes(600)
        out["scan"].append(ms(t0, time.perf_counter()))
        t0 = time.perf_counter()
        shadow.changes(600, {"d0000/f000.txt"})
        out["tree"].append(ms(t0, time.perf_counter()))
    for k in (1, args.touch):
        names = [f"d{i // PER_DIR:04d}/f{i % PER_DIR:03d}.txt" for i in range(k)]
        restore, commit = [], []
        for _ in range(args.denials):
            for n in names:
                with open(ws / n, "ab") as f:
                    f.write(b"x")
            changed, _ = shadow.changes(600, set(names))
            t0 = time.perf_counter()
            assert shadow.restore(changed, 600) == {}
            restore.append(ms(t0, time.perf_counter()))
            for n in names:
                with open(ws / n, "ab") as f:
                    f.write(b"y")
            changed, _ = shadow.changes(600, set(names))
            t0 = time.perf_counter()
            shadow.commit(changed, 600)
            commit.append(ms(t0, time.perf_counter()))
        out[f"restore_{k}"], out[f"commit_{k}"] = restore, commit
    shadow.close()
    return out


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--files", type=int, default=10_000)
    p.add_argument("--size", type=int, default=4096)
    p.add_argument("--calls", type=int, default=40, help="allowed calls per mode")
    p.add_argument("--touch", type=int, default=100, help="files a denied call modifies")
    p.add_argument("--denials", type=int, default=5, help="denied calls per mode and size")
    args = p.parse_args()
    print(f"# rollback: {machine()}")
    print(f"# workspace: {args.files} files of {args.size} B, {PER_DIR} per directory")
    with tempfile.TemporaryDirectory(prefix="mtguard-bench-rb-") as tmp:
        base = Path(tmp)
        make_workspace(base / "ws", args.files, args.size)
        lib = await anyio.to_thread.run_sync(components, args, base)
        print(f"snapshot (copy {lib['entries']} entries, {lib['mib']:.1f} MiB, "
              f"{lib['method']}): {lib['snapshot']:.0f} ms")  # fmt: skip
        print(f"full stat scan:        {fmt(stats(lib['scan']))}")
        print(f"tree check (1 path):   {fmt(stats(lib['tree']))}")
        for k in (1, args.touch):
            print(f"restore {k:>3} file(s):    {fmt(stats(lib[f'restore_{k}']))}")
            print(f"commit  {k:>3} file(s):    {fmt(stats(lib[f'commit_{k}']))}")
        g = await guarded(args, base)
    print(f"connect (sandbox up + snapshot + handshake): off {g['connect_off']:.0f} ms, "
          f"tree {g['connect_tree']:.0f} ms, scan {g['connect_scan']:.0f} ms")  # fmt: skip
    off = stats(g["total"]["off"])
    for mode in MODES:
        s = stats(g["total"][mode])
        extra = f"  rollback itself {fmt(stats(g['rb'][mode]))}" if g["rb"][mode] else ""
        print(f"allowed call, rollback {mode:<4}: total {fmt(s)}"
              f"  (+{s['p50'] - off['p50']:.2f} ms vs off){extra}")  # fmt: skip
    for k in (1, args.touch):
        for mode in ("tree", "scan"):
            print(f"denied call touching {k:>3}, {mode:<4}: rollback "
                  f"{fmt(stats(g[f'deny_{mode}_{k}']))}")  # fmt: skip
    tree, scan = stats(g["rb"]["tree"]), stats(g["rb"]["scan"])
    summary(
        "rollback",
        f"{args.files} files: snapshot {lib['snapshot']:.0f} ms; per allowed call tree "
        f"{tree['p50']:.2f} ms, scan {scan['p50']:.2f} ms; restore {args.touch} files "
        f"{stats(lib[f'restore_{args.touch}'])['p50']:.1f} ms",
    )


if __name__ == "__main__":
    anyio.run(main, backend="trio")
