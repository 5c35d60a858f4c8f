"""Refuse before harm, by identity (issue 17), for real: a sandboxed terminal server, enforce
mode, kill on touch on. The persistence class's home directories are mounts of their own
(sandbox/homedirs.py): a systemd user unit renamed into place, opened O_TRUNC, or created
through a relative name after a chdir or through a dirfd, is refused by the kernel (EROFS)
whatever name reaches it; a PATH shim staged elsewhere cannot be renamed into ~/.local/bin
(EXDEV). Each file is checked from the HOST (through the sandbox's /proc/<pid>/root), not
only the verdict. A call with consent gets the directory writable for its window only."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt import CallDenied, open_guard

from .conftest import SERVERS, online_guard_config

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.docker,
    pytest.mark.bpf,
    pytest.mark.parametrize("anyio_backend", ["trio"]),
]

CALL_BOUND_S = 60.0  # generous: a loaded 2-core CI machine
TIDY = "Tidy my notes"
UNITS = "/home/mtguard/.config/systemd/user"
UNIT = f"{UNITS}/app.service"
SHIM = "/home/mtguard/.local/bin/ls"
GOOD = "[Service]\nExecStart=/usr/bin/true\n"
# each hides its target from the name checks: a dirfd, a relative name, a rename
ATTACKS = {
    "rename-onto": (
        "echo '[Service]' > ~/.cache/evil; python3 -c \"import os; "
        f"os.rename(os.path.expanduser('~/.cache/evil'), '{UNIT}')\""
    ),
    "truncate": f'd={UNITS}; : > "$d/app.service"',
    "relative": f"cd {UNITS} && echo '[Service]' > evil.service",
    "dirfd": (
        f"python3 -c \"import os; d = os.open('{UNITS}', os.O_RDONLY); "
        "os.write(os.open('evil2.service', os.O_CREAT | os.O_WRONLY, dir_fd=d), b'x')\""
    ),
    "mkdir": f"cd {UNITS} && mkdir hidden.d",
    # one-level PATH dir: staged beside and renamed without a copy fallback
    "shim-rename": (
        "echo 'touch /tmp/ran' > ~/.cache/shim; python3 -c \"import os; "
        f"os.rename(os.path.expanduser('~/.cache/shim'), '{SHIM}')\""
    ),
}


def host_view(server: Any, path: str) -> bytes | None:
    """The sandbox's file as the host sees it (None: absent)."""
    pid = server.supervisor.files.pid
    try:
        return Path(f"/proc/{pid}/root{path}").read_bytes()
    except FileNotFoundError:
        return None


def host_exists(server: Any, path: str) -> bool:
    return os.path.lexists(f"/proc/{server.supervisor.files.pid}/root{path}")


async def _run(server: Any, command: str, task: str) -> Any:
    with anyio.fail_after(CALL_BOUND_S):
        return await server.call_tool("run_command", {"command": command}, task=task)


async def test_persistence_dirs_refuse_renames_truncation_and_indirect_names(
    tmp_path: Path,
) -> None:
    config = online_guard_config(tmp_path, "enforce", kill_on_touch=True)
    command = [sys.executable, str(SERVERS / "terminal.py")]
    async with open_guard(config) as guard, guard.connect(command, name="term") as server:
        # asked for: the unit lands (the read-only mount is writable for this call only)
        make = f"mkdir -p ~/.cache {UNITS} && printf '{GOOD}' > {UNIT}"
        task = f"Install my systemd user unit: run {make}"
        try:  # the kernel let it through; the post rule judges the unit's content apart
            await _run(server, make, task)
        except CallDenied as exc:
            assert exc.record is not None and not exc.record.terminated, exc.record.reasons
        assert host_view(server, UNIT) == GOOD.encode()

        for name, attack in ATTACKS.items():
            try:
                await _run(server, attack, TIDY)
            except CallDenied:
                pass  # denied or not: what counts is that nothing landed (below)
            assert host_view(server, UNIT) == GOOD.encode(), name  # not replaced, not cut
            for other in ("evil.service", "evil2.service"):
                assert host_view(server, f"{UNITS}/{other}") is None, (name, other)
            assert not host_exists(server, f"{UNITS}/hidden.d"), name
            assert host_view(server, SHIM) is None, name
        # the staged files are still where they were staged: refused, not lost
        assert host_view(server, "/home/mtguard/.cache/shim") == b"touch /tmp/ran\n"

        # the one-level PATH dir's mount is writable and a directory runs nothing: a tool
        # making its own subdirectory there, unasked, is allowed (an executable is not)
        sub = "mkdir -p ~/.local/bin/tool && echo ok > ~/.local/bin/tool/x; echo done"
        out = await _run(server, sub, TIDY)
        assert "done" in out["content"][0]["text"]
        assert guard.records[-1].decision == "allow", guard.records[-1].reasons
        assert host_view(server, "/home/mtguard/.local/bin/tool/x") == b"ok\n"
        with pytest.raises(CallDenied):
            await _run(server, "d=$HOME/.local/bin; echo 'touch /tmp/ran' > \"$d/git\"", TIDY)
        assert host_view(server, "/home/mtguard/.local/bin/git") in (None, b"")

        # a shim written by a relative name (no name check sees it) lands, but never runs:
        # the PATH dir is noexec until a call has consent for it
        plant = "cd ~/.local/bin && echo 'touch /tmp/ran-hi' > hi && chmod +x hi"
        for command in (plant, "$HOME/.local/bin/hi"):
            try:
                await _run(server, command, TIDY)
            except CallDenied:
                pass
        assert not host_exists(server, "/tmp/ran-hi")
        # asked for: the script lands and runs, then and in later calls
        task = "Create the script ~/.local/bin/hello with the line echo hello"
        await _run(server, "echo 'echo hello' > ~/.local/bin/hello", task)
        task = "Make ~/.local/bin/hello executable: chmod +x ~/.local/bin/hello"
        await _run(server, "chmod +x ~/.local/bin/hello", task)
        out = await _run(server, "~/.local/bin/hello", "Run ~/.local/bin/hello")
        assert "hello" in out["content"][0]["text"], out
