"""Interpreters a server runs by name for its user: a name the user's PATH resolves and the
sandbox's does not (pyenv's `python` shim) brings its installation, read-only, with its
directory last on PATH; names the sandbox resolves keep their program; a home directory or
the guard's own environment is never exposed this way."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mtguard_rt.sandbox import SandboxConfig
from mtguard_rt.sandbox.interp import install_root, user_interpreters
from mtguard_rt.sandbox.plan import plan_sandbox


def program(path: Path, text: str = "#!/bin/sh\nexit 0\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def test_a_version_managers_shim_brings_the_managers_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = tmp_path / "opt" / "pyenv"
    shim = program(manager / "shims" / "python", f'#!/bin/sh\nexec "{manager}/libexec/x" "$@"\n')
    program(manager / "shims" / "python3")
    monkeypatch.setenv("PATH", f"{manager}/shims:/usr/bin:/bin")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert install_root(str(shim)) == str(manager)
    assert user_interpreters(["/usr/bin", "/bin"], [f"{manager}/shims", "/usr/bin", "/bin"]) == [
        (str(manager), f"{manager}/shims")
    ]
    plan = plan_sandbox(["sh"], SandboxConfig(), "runner", "img", runtime=True)
    binds = {b.source: b.mode for b in plan.binds}
    assert binds[str(manager)] == "ro"
    assert plan.path[-1] == f"{manager}/shims"  # last: python3 stays the sandbox's own
    assert plan.path.index("/usr/bin") < plan.path.index(f"{manager}/shims")


def test_a_name_the_sandbox_resolves_brings_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    plan = plan_sandbox(["sh"], SandboxConfig(), "runner", "img", runtime=True)
    assert [b.source for b in plan.binds if b.source.startswith(str(tmp_path / "opt"))] == []
    prefix = tmp_path / "bun-1.1"
    bun = program(prefix / "bin" / "bun")
    assert install_root(str(bun)) == str(prefix)  # a plain installation: its prefix
    assert user_interpreters(["/usr/bin"], [str(prefix / "bin")]) == [
        (str(prefix), str(prefix / "bin"))
    ]


def test_a_home_directory_or_the_guards_environment_is_never_brought_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    personal = program(home / "bin" / "python")  # ~/bin/python: the prefix is the home
    assert install_root(str(personal)) is None
    assert user_interpreters(["/usr/bin"], [str(home / "bin")]) == []
    guard_bin = str(Path(sys.prefix) / "bin")
    assert all(not root.startswith(sys.prefix) for root, _ in user_interpreters([], [guard_bin]))


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_shimmed_python_runs_by_name_inside_a_real_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The user's `python` is a version manager's shim the sandbox PATH lacks (Debian's /usr
    has python3 only): `sh -c 'python -c ...'` runs, as the server's users expect."""
    import anyio

    from mtguard_rt.sandbox import open_sandbox

    manager = tmp_path / "mgr"
    program(manager / "libexec" / "run", '#!/bin/sh\nexec /usr/bin/python3 "$@"\n')
    program(manager / "shims" / "python", f'#!/bin/sh\nexec "{manager}/libexec/run" "$@"\n')
    monkeypatch.setenv("PATH", f"{manager}/shims:/usr/bin:/bin")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    cmd = ["sh", "-c", "python -c 'print(6 * 7)'; command -v python3"]
    async with open_sandbox(cmd) as sb:
        out = b""
        with anyio.fail_after(30):
            try:
                while True:
                    out += await sb.stdout.receive()
            except anyio.EndOfStream:
                pass
        assert await sb.wait() == 0, sb.stderr_tail()
    assert out.decode().split() == ["42", "/usr/bin/python3"]
