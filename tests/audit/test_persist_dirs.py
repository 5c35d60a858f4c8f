"""The persistence class's home directories as the kernel refuses them (`persist_dirs`):
which directories, how deep, and when a call's consent lifts one."""

from __future__ import annotations

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.consent import WriteConsent
from mtguard_rt.audit.context import CallContext
from mtguard_rt.audit.persist_dirs import (
    ACT_KILL_WRITE,
    ACT_ONE_LEVEL,
    ACT_PTH,
    kernel_write_dirs,
    may_write_under,
    named_under,
)
from mtguard_rt.model import DeclaredCall

HOME = "/home/u"
BIN = f"{HOME}/.local/bin/"
UNITS = f"{HOME}/.config/systemd/"
POLICY = load_policy()


def consent(task: str | None, command: str, **args: str) -> WriteConsent:
    arguments = args or {"command": command}
    call = DeclaredCall(call_id="c", server="s", tool="run_command", arguments=arguments)
    return WriteConsent(CallContext(call=call, task=task), POLICY)


def test_the_home_directories_and_their_depth() -> None:
    dirs = kernel_write_dirs(HOME)
    assert dirs[BIN] == ACT_KILL_WRITE | ACT_ONE_LEVEL  # files directly in it
    assert dirs[UNITS] == ACT_KILL_WRITE  # any depth
    site = f"{HOME}/.local/lib/python3.12/site-packages/"
    assert dirs[site] == ACT_KILL_WRITE | ACT_ONE_LEVEL | ACT_PTH
    assert f"{HOME}/.config/autostart/" in dirs and f"{HOME}/.config/git/hooks/" in dirs
    # content-judged classes (git config, package.json) and workspace globs are not here
    assert not any(d.startswith(f"{HOME}/.git") or "/.vscode/" in d for d in dirs)
    assert all(d.endswith("/") and d.startswith(HOME + "/") for d in dirs)


def test_paths_named_under_a_directory() -> None:
    texts = ["echo x > ~/.local/bin/git; cp a $HOME/.local/bin/b", f"see {BIN}c and /etc/x"]
    assert named_under(texts, BIN, HOME) == [f"{BIN}git", f"{BIN}b", f"{BIN}c"]
    assert named_under(["ls ~/.local/binaries/x"], BIN, HOME) == []


def test_consent_lifts_only_for_an_asked_place() -> None:
    write = "echo 'echo hello' > ~/.local/bin/hello"
    asked = "Create the script ~/.local/bin/hello with the line echo hello"
    assert may_write_under(consent(asked, write), BIN)
    assert not may_write_under(consent("Tidy my notes", write), BIN)
    # a task asking for the kind, no file named: lifted; another kind: not
    timer = "Add a systemd timer unit for my backup"
    assert may_write_under(consent(timer, "", name="backup", schedule="daily"), UNITS)
    assert not may_write_under(consent(timer, "", name="backup", schedule="daily"), BIN)
    # ... but an argument writing a line the task does not ask for: not lifted
    assert not may_write_under(consent(timer, "curl x | sh"), UNITS)
    # an unknown directory or one outside a home: never
    assert not may_write_under(consent(asked, write), "/etc/cron.d/")
