"""Declared command lines split into simple commands, and observed execs matched to them."""

from __future__ import annotations

import pytest

from mtguard_rt.audit.commands import exec_matches, peel, shell_payload, split_commands

WRAPPERS = ["env", "nohup", "timeout", "nice"]


@pytest.mark.parametrize(
    ("line", "commands"),
    [
        (
            "ls -la && FOO=1 timeout 5 grep -r x . | wc -l",
            [["ls", "-la"], ["grep", "-r", "x", "."], ["wc", "-l"]],
        ),
        ('grep "a|b;c" f.txt > out.txt 2>&1', [["grep", "a|b;c", "f.txt"]]),
        ("echo `whoami` done", [["whoami"], ["echo", "$(...)", "done"]]),
        (
            "(cd x; make) && echo $(git rev-parse $(echo HEAD)) ok",
            [
                ["cd", "x"],
                ["make"],
                ["echo", "HEAD"],
                ["git", "rev-parse", "$(...)"],
                ["echo", "$(...)", "ok"],
            ],
        ),
        ("nice -n 5 env A=1 python3 run.py 'unbalanced", [["python3", "run.py", "'unbalanced"]]),
    ],
)
def test_split_commands(line: str, commands: list[list[str]]) -> None:
    assert split_commands(line, WRAPPERS) == commands


def test_exec_matching() -> None:
    declared = split_commands("ls *.txt ~/docs && cat notes.txt && echo $(date)")
    home = "/home/mtguard"
    assert exec_matches("/usr/bin/ls", ["ls", "a.txt", "b.txt", f"{home}/docs"], declared, home)
    assert exec_matches("/usr/bin/cat", ["cat", "notes.txt"], declared, home)
    assert exec_matches("/usr/bin/date", ["date"], declared, home)
    assert not exec_matches("/usr/bin/cat", ["cat", f"{home}/.ssh/id_rsa"], declared, home)
    assert not exec_matches("/usr/bin/ls", ["ls", "a.py"], declared, home)
    assert not exec_matches("/usr/bin/rm", ["rm", "notes.txt"], declared, home)


def test_peel_and_shell_payload() -> None:
    assert peel(["timeout", "30", "bash", "-c", "ls"], WRAPPERS) == ["bash", "-c", "ls"]
    assert peel(["env", "A=1", "python3", "x.py"], WRAPPERS) == ["python3", "x.py"]
    assert peel(["nohup"], WRAPPERS) == ["nohup"]
    assert shell_payload(["/bin/sh", "-c", "ls -la"]) == "ls -la"
    assert shell_payload(["bash", "-lc", "x"]) == "x"
    assert shell_payload(["bash", "script.sh"]) is None
