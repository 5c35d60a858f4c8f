"""Real eBPF kill on touch: protected exact paths answered with SIGKILL at syscall enter.

Prevented: `cat` of a protected absolute path dies before `open` returns, so it prints
nothing; an exec of a protected program never runs it. Documented as not prevented: a
relative spelling of the same file is not an exact-path match (left to the online rules),
and an O_TRUNC open has truncated by the time the process dies.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import anyio
import pytest
from monitor_harness import CALL, gated_cgroup

from mtguard_rt.model import BehaviorTree
from mtguard_rt.monitor import MonitorConfig, open_monitor
from mtguard_rt.monitor.kinds import ACT_KILL_EXEC, ACT_KILL_OPEN

pytestmark = [pytest.mark.root, pytest.mark.bpf, pytest.mark.anyio]
SECRET = "TOP-SECRET-CONTENT"


async def run_protected(
    cmd: Sequence[str], protect: dict[str, int], lines: int, cwd: str | None = None
) -> tuple[list[bytes], BehaviorTree, list[str]]:
    """Run `cmd` in a fresh watched cgroup with `protect` pushed; its first stdout lines."""
    async with open_monitor(MonitorConfig(settle_max_ms=2000)) as mon, gated_cgroup() as cg:
        async with cg.run(cmd, cwd=cwd) as proc, mon.watch(cg.id, str(cg.path)) as watch:
            assert watch.protect(protect) == []
            async with watch.window(CALL) as window:
                await cg.release(proc)
                out = [await cg.line() for _ in range(lines)]
                with anyio.fail_after(10):
                    await proc.wait()
                window.response_arrived()
            return out, window.tree, window.kernel_kills


async def test_open_of_a_protected_path_dies_before_open_returns(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    script = f"cat {secret}; echo rc=$?"
    out, tree, kills = await run_protected(["sh", "-c", script], {str(secret): ACT_KILL_OPEN}, 1)
    assert out == [b"rc=137"]  # 128 + SIGKILL, and not one byte of the file
    (cat,) = [p for p in tree.processes if p.exe == "/usr/bin/cat"]
    assert cat.killed_by == f"kill-on-touch: open of {secret}"
    assert kills == [f"pid {cat.pid} /usr/bin/cat SIGKILLed in the kernel at the open of {secret}"]
    sh = next(p for p in tree.processes if p.learned == "seeded")
    assert sh.killed_by is None and sh.exit_code == 0


async def test_exec_of_a_forbidden_program_never_runs_it() -> None:
    out, tree, kills = await run_protected(
        ["sh", "-c", "/usr/bin/id -u; echo rc=$?"], {"/usr/bin/id": ACT_KILL_EXEC}, 1
    )
    assert out == [b"rc=137"]  # no uid printed
    assert any(p.killed_by == "kill-on-touch: exec of /usr/bin/id" for p in tree.processes)
    assert len(kills) == 1


async def test_documented_gaps_relative_names_and_truncation(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text(SECRET + "\n")
    victim = tmp_path / "victim"
    victim.write_text("data that O_TRUNC destroys\n")
    script = f"cat ./secret; echo rc=$?; sh -c ': > {victim}'; echo rc=$?"
    protect = {str(secret): ACT_KILL_OPEN, str(victim): ACT_KILL_OPEN}
    out, tree, kills = await run_protected(["sh", "-c", script], protect, 3, cwd=str(tmp_path))
    # a relative spelling is not an exact-path match: the read is NOT prevented here
    assert out[:2] == [SECRET.encode(), b"rc=0"]
    # the truncating open is answered with SIGKILL, but the file was already truncated
    assert out[2] == b"rc=137"
    assert victim.read_text() == ""
    assert len(kills) == 1 and f"open of {victim}" in kills[0]
    opened = [f for p in tree.processes for f in p.files if f.path == str(secret)]
    assert opened and opened[0].result >= 0  # the tree still shows the (resolved) read
