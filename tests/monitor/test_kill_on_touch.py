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
from mtguard_rt.monitor.kinds import (
    ACT_KILL_EXEC,
    ACT_KILL_MODIFY,
    ACT_KILL_OPEN,
    ACT_KILL_WRITE,
)

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


async def test_write_protection_lets_reads_through_and_kills_an_append(tmp_path: Path) -> None:
    rc = tmp_path / "bashrc"
    rc.write_text("alias ll='ls -l'\n")
    # a shell rc file: reading it is normal, appending to it plants code for the next shell
    script = f"cat {rc}; echo rc=$?; sh -c 'echo evil >> {rc}'; echo rc=$?"
    out, tree, kills = await run_protected(["sh", "-c", script], {str(rc): ACT_KILL_WRITE}, 3)
    assert out == [b"alias ll='ls -l'", b"rc=0", b"rc=137"]
    assert rc.read_text() == "alias ll='ls -l'\n"  # killed on the open, before any write
    assert len(kills) == 1 and f"open of {rc}" in kills[0]
    (writer,) = [p for p in tree.processes if p.killed_by]
    assert writer.killed_by == f"kill-on-touch: open of {rc}"


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


async def test_unlink_of_a_protected_path_is_killed_but_has_happened(tmp_path: Path) -> None:
    """Measured on 6.18: SIGKILL at unlink's syscall entry is delivered on the way back to
    user space, after the unlink ran: the name is gone, the process never learns it."""
    victim, spare = tmp_path / "victim", tmp_path / "spare"
    for f in (victim, spare):
        f.write_text(SECRET + "\n")
    script = f"rm -f {victim}; echo rc=$?; rm -f {spare}; echo rc=$?"
    out, tree, kills = await run_protected(
        ["sh", "-c", script], {str(victim): ACT_KILL_MODIFY}, 2
    )
    assert out == [b"rc=137", b"rc=0"]  # the unprotected unlink is not touched
    (rm,) = [p for p in tree.processes if p.killed_by]
    assert rm.killed_by == f"kill-on-touch: unlink of {victim}"
    assert kills == [f"pid {rm.pid} /usr/bin/rm SIGKILLed in the kernel at the unlink of {victim}"]
    (ev,) = [f for f in rm.files if f.op == "unlink"]
    assert (ev.path, ev.result) == (str(victim), 0)  # the kernel finished the unlink
    assert not victim.exists() and not spare.exists()


@pytest.mark.parametrize("tool", ["mv", "python"])
async def test_rename_from_or_onto_a_protected_path_is_killed(tmp_path: Path, tool: str) -> None:
    """Both names count; `mv` calls renameat2, Python's os.rename calls rename. Measured
    on 6.18: the rename has already happened when the process dies."""
    secret, decoy, dest = tmp_path / "secret", tmp_path / "decoy", tmp_path / "dest"
    secret.write_text(SECRET + "\n")
    decoy.write_text("decoy\n")

    def rename(src: Path, dst: Path) -> str:
        if tool == "mv":
            return f"mv -f {src} {dst}"
        return f"python3 -c 'import os; os.rename(\"{src}\", \"{dst}\")'"

    script = "; echo rc=$?; ".join(
        [rename(secret, dest), rename(decoy, secret), rename(dest, tmp_path / "free")]
    ) + "; echo rc=$?"
    protect = {str(secret): ACT_KILL_MODIFY}
    out, tree, kills = await run_protected(["sh", "-c", script], protect, 3)
    assert out == [b"rc=137", b"rc=137", b"rc=0"]
    reasons = sorted(p.killed_by for p in tree.processes if p.killed_by)
    assert reasons == [f"kill-on-touch: rename of {secret}", f"kill-on-touch: rename onto {secret}"]
    assert len(kills) == 2
    # both renames completed before the kills landed: secret -> dest, then decoy -> secret;
    # the third (unprotected) rename then moved dest on
    assert secret.read_text() == "decoy\n"
    assert not decoy.exists() and not dest.exists()
    assert (tmp_path / "free").read_text() == SECRET + "\n"
    renames = [f for p in tree.processes for f in p.files if f.op == "rename"]
    assert [(f.path, f.target, f.result) for f in renames[:2]] == [
        (str(secret), str(dest), 0), (str(decoy), str(secret), 0)
    ]


async def test_open_protection_alone_does_not_kill_unlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("x\n")
    out, tree, kills = await run_protected(
        ["sh", "-c", f"rm -f {victim}; echo rc=$?"], {str(victim): ACT_KILL_OPEN}, 1
    )
    assert out == [b"rc=0"] and kills == []
    assert not any(p.killed_by for p in tree.processes)
