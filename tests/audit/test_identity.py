"""Programs judged by identity (`audit/identity.py`): the classifier on a fake sandbox root
(files, links, copies; no /proc), and the exec rules judging what really ran."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from mtguard_rt.audit import load_policy
from mtguard_rt.audit.expected import Expected
from mtguard_rt.audit.identity import (
    FILES,
    Program,
    ProgramFiles,
    Where,
    identify,
    is_loader,
    loader_target,
    no_file_name,
    resolve_in,
)
from mtguard_rt.audit.online import OnlineRules
from mtguard_rt.audit.rules_exec import judged_program, unexpected_shell
from mtguard_rt.audit.treeview import TreeView
from mtguard_rt.model import ExecEvent, FileEvent, ProcessNode

from .trees import HOME, child, ctx_for, opened, server_tree

POLICY = load_policy()
LOADER = "/lib64/ld-linux-x86-64.so.2"
READ_KEY = f"cat {HOME}/.ssh/id_rsa"


@pytest.fixture
def root(tmp_path: Path) -> str:
    """A sandbox root as Debian lays it out: /bin -> usr/bin, sh -> dash, python3 ->
    python3.11, the loader behind an absolute link (a host-side lookup would leave the root)."""
    r = tmp_path / "root"
    for d in ("usr/bin", "usr/lib/x86_64-linux-gnu", "lib64", "tmp", "opt"):
        (r / d).mkdir(parents=True)
    (r / "bin").symlink_to("usr/bin")
    (r / "lib").symlink_to("usr/lib")
    (r / "usr/bin/dash").write_bytes(b"\x7fELF dash" + b"d" * 4000)
    (r / "usr/bin/sh").symlink_to("dash")
    (r / "usr/bin/python3.11").write_bytes(b"\x7fELF python" + b"p" * 9000)
    (r / "usr/bin/python3").symlink_to("python3.11")
    (r / "usr/bin/busybox").write_bytes(b"\x7fELF busybox" + b"b" * 5000)
    (r / "usr/bin/git").write_bytes(b"\x7fELF git" + b"g" * 4001)  # 4010 bytes, as dash
    (r / "usr/bin/ls").write_bytes(b"\x7fELF ls" + b"l" * 700)
    (r / "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2").write_bytes(b"\x7fELF ld" + b"x" * 300)
    (r / "lib64/ld-linux-x86-64.so.2").symlink_to("/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    return str(r)


def ident(exe: str, argv: list[str], root: str | None, **kw: object) -> Program:
    return identify(exe, argv, Where(root=root, **kw), POLICY, ProgramFiles())  # type: ignore[arg-type]


def test_names_that_are_no_file_loaders_and_their_targets() -> None:
    for name in ("fd:5", "/proc/self/fd/3", "/proc/1234/fd/7", "/proc/self/task/9/fd/3",
                 "/dev/fd/4", "/memfd:payload", "/memfd:x (deleted)", "/tmp/gone (deleted)"):
        assert no_file_name(name), name
    for name in ("/usr/bin/sh", "/proc/self/exe", "/dev/fdx", "/tmp/fd:5"):
        assert not no_file_name(name), name
    for name in (LOADER, "/lib/ld-linux.so.2", "/lib/ld-musl-x86_64.so.1", "/usr/lib/ld.so",
                 "/lib/x86_64-linux-gnu/ld-2.36.so", "/lib/ld-linux-aarch64.so.1"):
        assert is_loader(name), name
    for name in ("/usr/bin/ld", "/usr/lib/libld.so", "/usr/bin/ldd", "/usr/lib/ld.so.conf"):
        assert not is_loader(name), name
    assert loader_target([LOADER, "/bin/sh", "-c", "x"]) == 1
    assert loader_target([LOADER, "--library-path", "/x", "--argv0", "sh", "/tmp/y"]) == 5
    assert loader_target([LOADER, "--inhibit-cache", "--", "/bin/sh"]) == 3
    assert loader_target([LOADER, "--verify", "/bin/sh"]) is None  # ldd: runs nothing
    assert loader_target([LOADER, "--list", "/bin/sh"]) is None
    assert loader_target([LOADER]) is None


def test_links_resolve_inside_the_sandbox_root(root: str) -> None:
    assert resolve_in(root, "/bin/sh") == "/usr/bin/dash"
    assert resolve_in(root, LOADER) == "/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    assert resolve_in(root, "/usr/bin/../bin/./python3") == "/usr/bin/python3.11"
    assert resolve_in(root, "/nope/sh") is None
    assert resolve_in(root, "/proc/self/exe") is None  # the host would answer for itself
    os.symlink("loop", f"{root}/tmp/loop")
    assert resolve_in(root, "/tmp/loop") is None


def test_a_renamed_copy_or_hard_link_of_a_shell_is_that_shell(root: str) -> None:
    shutil.copy(f"{root}/usr/bin/dash", f"{root}/tmp/helper")
    os.link(f"{root}/usr/bin/python3.11", f"{root}/opt/worker")
    copy = ident("/tmp/helper", ["helper", "-c", READ_KEY], root)
    assert (copy.kind, copy.exe) == ("copy", "/usr/bin/dash")
    assert copy.note == "/tmp/helper is a copy of /usr/bin/dash"
    link = ident("/opt/worker", ["worker", "-c", "1"], root)
    assert (link.kind, link.exe) == ("copy", "/usr/bin/python3.11")
    # relative to the process's cwd
    assert ident("./helper", ["./helper"], root, cwd="/tmp").exe == "/usr/bin/dash"
    # the real names, a program of the same size but other content, a plain program
    for exe in ("/bin/sh", "/usr/bin/python3", "/usr/bin/git", "/usr/bin/ls"):
        got = ident(exe, [exe], root)
        assert (got.kind, got.exe, got.note) == ("named", exe, ""), exe
    # a shebang script is itself: its interpreter is named in it, not renamed
    Path(f"{root}/opt/tool").write_text("#!/usr/bin/python3\nprint(1)\n")
    assert ident("/opt/tool", ["tool"], root).kind == "named"


def test_busybox_is_the_applet_its_argv0_names(root: str) -> None:
    os.symlink("busybox", f"{root}/usr/bin/cp")
    assert ident("/usr/bin/cp", ["cp", "a", "b"], root).kind == "named"
    os.link(f"{root}/usr/bin/busybox", f"{root}/tmp/bb")
    shell = ident("/tmp/bb", ["sh", "-c", READ_KEY], root)
    assert (shell.kind, shell.exe) == ("copy", "/usr/bin/busybox")
    assert ident("/tmp/bb", ["bb", "ls"], root).kind == "named"  # `busybox ls` under a name


def test_the_loader_runs_its_first_operand(root: str) -> None:
    shell = ident(LOADER, [LOADER, "/bin/sh", "-c", READ_KEY], root)
    assert (shell.exe, shell.argv) == ("/bin/sh", ["/bin/sh", "-c", READ_KEY])
    assert shell.note == f"run by the dynamic loader {LOADER}" and not shell.unknown
    shutil.copy(f"{root}/usr/bin/dash", f"{root}/tmp/s")
    shutil.copy(f"{root}/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2", f"{root}/tmp/l")
    both = ident("/tmp/l", ["l", "--argv0", "x", "/tmp/s", "-c", "id"], root)
    assert both.exe == "/usr/bin/dash" and both.argv == ["/tmp/s", "-c", "id"]
    assert "a copy of /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" in both.note
    memfd = ident(LOADER, [LOADER, "/proc/self/fd/3"], root)
    assert memfd.kind == "no-file"
    listing = ident(LOADER, [LOADER, "--list", "/bin/sh"], root)
    assert (listing.kind, listing.exe) == ("named", LOADER)
    assert ident(LOADER, [LOADER, "/usr/bin/ls"], None).exe == "/usr/bin/ls"  # by name alone


def test_self_exe_is_the_callers_program_and_written_files_are_unknown(root: str) -> None:
    chrome = ident("/proc/self/exe", ["chrome", "--type=zygote"], root, before="/opt/chrome")
    assert (chrome.kind, chrome.exe) == ("named", "/opt/chrome")
    shutil.copy(f"{root}/usr/bin/dash", f"{root}/tmp/x")
    again = ident("/proc/self/exe", ["x"], root, before="/tmp/x")
    assert again.exe == "/usr/bin/dash"
    Path(f"{root}/tmp/payload").write_bytes(b"\x7fELF mine")
    made = ident("/tmp/payload", ["payload"], root, made=lambda p: p == "/tmp/payload")
    assert made.kind == "made" and made.unknown
    assert ident("/tmp/payload", ["payload"], root).kind == "named"
    # without a root only the names tell: fd paths still are no file
    assert ident("/proc/self/fd/3", ["x"], None).kind == "no-file"


def test_digests_are_cached_and_an_exec_costs_little(root: str) -> None:
    files = ProgramFiles()
    shutil.copy(f"{root}/usr/bin/dash", f"{root}/tmp/helper")
    where = Where(root=root)
    t0 = time.process_time()  # CPU time: the cost, not the machine's load
    for _ in range(200):
        identify("/usr/bin/git", ["git", "status"], where, POLICY, files)
        identify("/tmp/helper", ["helper"], where, POLICY, files)
    per_exec_ms = (time.process_time() - t0) * 1000 / 400
    assert per_exec_ms < 2.0, per_exec_ms  # measured ~0.05 ms here
    assert len(files._digests) == 5  # heads of git, dash, helper; then dash, helper whole
    assert FILES is not files


def _tree_with(exe: str, argv: list[str], files: list[FileEvent] | None = None,
               tool: str = "get_weather", task: str | None = "What is the weather in Paris?",
               server_files: list[FileEvent] | None = None, **args: object):  # type: ignore[no-untyped-def]
    ctx = ctx_for(tool, dict(args) or {"city": "Paris"}, task=task)
    tree = server_tree(ctx.call)
    tree.processes[0].files.extend(server_files or [])
    p = child(tree, 50, argv, exe=exe, files=files)
    return ctx, tree, p


def run(ctx, tree):  # type: ignore[no-untyped-def]
    return unexpected_shell(ctx, TreeView.build(tree, POLICY, ctx.canaries), {}, POLICY)


def test_a_program_with_no_file_on_disk_is_denied_unless_the_job_is_code() -> None:
    ctx, tree, _ = _tree_with("fd:5", ["sh", "-c", "echo hi"])
    [v] = run(ctx, tree)
    assert v.evidence[0] == "pid 50 fd:5 executed sh -c 'echo hi' (no file on disk: fd:5)"
    assert "no file on disk" in v.evidence[1]
    ctx2, tree2, _ = _tree_with("/proc/self/fd/3", ["x"], tool="run_snippet",
                                code="print(1)")
    assert run(ctx2, tree2) == []  # its job is running code


def test_the_loader_and_a_written_program_are_judged_as_what_they_run() -> None:
    ctx, tree, _ = _tree_with(LOADER, [LOADER, "/bin/sh", "-c", READ_KEY])
    [v] = run(ctx, tree)
    assert v.evidence[0].endswith(f"(run by the dynamic loader {LOADER})")
    assert any(f"names {HOME}/.ssh/id_rsa" in e for e in v.evidence)
    # ld.so running ls is ls: not a shell
    ctx, tree, _ = _tree_with(LOADER, [LOADER, "/usr/bin/ls", f"{HOME}/.ssh"])
    assert run(ctx, tree) == []
    wrote = [FileEvent(ts_ns=4000, op="open", path="/tmp/mytool", flags=["write", "create"])]
    ctx, tree, _ = _tree_with("/tmp/mytool", ["/tmp/mytool", READ_KEY], server_files=wrote)
    [v] = run(ctx, tree)
    assert "(/tmp/mytool was written in the sandbox during the session)" in v.evidence[0]
    # the same program with nothing security-relevant: evidence, not a verdict
    ctx, tree, _ = _tree_with("/tmp/mytool", ["/tmp/mytool", "--help"], server_files=wrote)
    assert run(ctx, tree) == []
    # the user asked to run what was built: judged as itself
    ctx, tree, _ = _tree_with("/tmp/mytool", ["/tmp/mytool", READ_KEY], server_files=wrote,
                              task="build mytool and run it on my key")
    assert run(ctx, tree) == []
    # written after the exec: not what ran
    late = [FileEvent(ts_ns=9_000_000, op="open", path="/tmp/mytool", flags=["write", "create"])]
    ctx, tree, _ = _tree_with("/tmp/mytool", ["/tmp/mytool", READ_KEY], server_files=late)
    assert run(ctx, tree) == []


def test_online_kills_what_it_would_for_the_named_shell() -> None:
    server = ProcessNode(key="100@1", pid=100, exe="/usr/bin/python3", learned="seeded")
    kid = ProcessNode(key="200@2", pid=200, exe="fd:4", learned="observed")
    ctx = ctx_for("get_weather", {"city": "Paris"})
    rules = OnlineRules(POLICY, ctx)
    v = rules.check(kid, ExecEvent(ts_ns=3, path="fd:4", argv=["sh", "-c", "echo hi"]))
    assert v is not None and v.rule == "unexpected-shell"
    assert "no file on disk" in v.evidence[1]
    # the post rules reuse what was seen online
    assert ctx.programs.programs[("200@2", 3)].kind == "no-file"
    # a file the call wrote, run: judged as a shell, killed only on what its command shows
    rules = OnlineRules(POLICY, ctx_for("get_weather", {"city": "Paris"}))
    assert rules.check(server, opened("/tmp/.y", "write", "create")) is None
    y = ProcessNode(key="201@2", pid=201, exe="/tmp/.y", learned="observed")
    assert rules.check(y, ExecEvent(ts_ns=8000, path="/tmp/.y", argv=["y"])) is None
    loader = ProcessNode(key="202@2", pid=202, exe=LOADER, learned="observed")
    v = rules.check(loader, ExecEvent(ts_ns=9000, path=LOADER, argv=[LOADER, "/tmp/.y", READ_KEY]))
    assert v is not None and "written in the sandbox" in v.evidence[0]
    assert judged_program(Expected.of(ctx, POLICY), Program("named", "/usr/bin/ls", ["ls"])) is None


def test_after_the_call_a_copy_is_found_through_a_live_process_of_the_sandbox(
    tmp_path: Path,
) -> None:
    """No online rules ran: the post rule identifies the exec from the files, read through the
    root of a process of the tree still alive (here this test process: the host's root)."""
    copy = tmp_path / "helper"
    shutil.copy(os.path.realpath("/bin/sh"), copy)
    ctx, tree, _ = _tree_with(str(copy), [str(copy), "-c", f"ls -l {HOME}/.ssh/id_rsa"])
    with open("/proc/self/stat", "rb") as fh:
        ticks = int(fh.read().rsplit(b")", 1)[1].split()[19])
    me = tree.processes[0]
    me.pid, me.start_ns = os.getpid(), ticks * (1_000_000_000 // os.sysconf("SC_CLK_TCK"))
    [v] = run(ctx, tree)
    assert v.evidence[0].endswith(f"({copy} is a copy of {os.path.realpath('/bin/sh')})")
    # no live process of the sandbox (the tree's server is pid 100 of long ago): by its name
    ctx, tree2, _ = _tree_with(str(copy), [str(copy), "-c", f"ls -l {HOME}/.ssh/id_rsa"])
    assert run(ctx, tree2) == []
