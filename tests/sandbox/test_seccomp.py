"""The sandbox's seccomp profile: the syscalls the monitor cannot see are refused, in a real
container, and ordinary work (python, node, git, file writes) still runs."""

from __future__ import annotations

import errno
import json
import textwrap
from pathlib import Path

import anyio
import pytest

from mtguard_rt.config import load_config
from mtguard_rt.errors import PolicyError, SandboxError
from mtguard_rt.sandbox import SandboxConfig, open_sandbox
from mtguard_rt.sandbox.container import security_opts
from mtguard_rt.sandbox.seccomp import (
    NOT_IMPLEMENTED,
    REFUSED,
    describe,
    guard_profile,
    seccomp_option,
)

# Raw x86_64 syscalls by number (ctypes, no wrappers): prints "name result errno" per line.
# The i386 entries go through `int 0x80` from a 64-bit process (machine code in an mmap'd
# page): the kernel then checks the 32-bit ABI's filter, a classic way around a 64-bit-only one.
PROBE = textwrap.dedent("""
    import ctypes, mmap, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    def report(name, r, e):
        print(name, r, e if r < 0 else 0, flush=True)
    def call(name, nr, *args):
        r = libc.syscall(nr, *args)
        report(name, r, ctypes.get_errno())
    params = ctypes.create_string_buffer(120)
    call("io_uring_setup", 425, 1, params)
    call("io_uring_enter", 426, -1, 0, 0, 0, 0, 0)
    call("io_uring_register", 427, -1, 0, 0, 0)
    call("ptrace_traceme", 101, 0, 0, 0, 0)
    if "control" not in sys.argv:  # it works without the profile, and stops pid 1 for good
        call("ptrace_attach", 101, 16, os.getppid(), 0, 0)
    buf = ctypes.create_string_buffer(8)
    iov = (ctypes.c_void_p * 2)(ctypes.cast(buf, ctypes.c_void_p), 8)
    call("process_vm_readv", 310, os.getppid(), iov, 1, iov, 1, 0)
    call("process_vm_writev", 311, os.getppid(), iov, 1, iov, 1, 0)
    call("unshare_user", 272, 0x10000000)
    call("clone_newuser", 56, 0x10000000 | 17, 0, 0, 0, 0)
    call("open_by_handle_at", 304, -100, 0, 0)
    call("userfaultfd", 323, 0)
    call("pidfd_getfd", 438, 0, 0, 0)
    call("name_to_handle_at", 303, -100, b"/tmp", 0, 0, 0)
    call("perf_event_open", 298, 0, 0, -1, -1, 0)
    call("bpf", 321, 0, 0, 0)
    call("keyctl", 250, 0, 0, 0, 0)
    call("setns", 308, 0, 0)
    call("mount", 165, b"none", b"/tmp", b"tmpfs", 0, 0)
    # push rbx; mov eax,edi; mov ebx,esi; mov ecx,edx; int 0x80; pop rbx; ret: f(nr, a, b)
    code = bytes([0x53, 0x89, 0xF8, 0x89, 0xF3, 0x89, 0xD1, 0xCD, 0x80, 0x5B, 0xC3])
    page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    page.write(code)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(page))
    i386 = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int)(addr)
    r = i386(26, 0, 0)  # i386 ptrace(PTRACE_TRACEME)
    report("i386_ptrace_traceme", -1 if r < 0 else r, -r)
    r = i386(425, 1, 0)  # i386 io_uring_setup(1, NULL): EFAULT if it ran
    report("i386_io_uring_setup", -1 if r < 0 else r, -r)
""")


def test_guard_profile_refuses_every_listed_syscall() -> None:
    profile = guard_profile()
    assert profile["defaultAction"] == "SCMP_ACT_ALLOW"
    by_code: dict[int, set[str]] = {}
    for rule in profile["syscalls"]:
        if "args" not in rule:
            by_code.setdefault(rule["errnoRet"], set()).update(rule["names"])
    assert by_code == {errno.ENOSYS: set(NOT_IMPLEMENTED), errno.EPERM: set(REFUSED)}
    assert {"io_uring_setup", "clone3"} <= set(NOT_IMPLEMENTED)
    assert {"ptrace", "process_vm_writev", "pidfd_getfd", "bpf", "unshare"} <= set(REFUSED)
    clones = [r for r in profile["syscalls"] if r["names"] == ["clone"]]
    assert {r["args"][0]["index"] for r in clones if "excludes" in r} == {0}
    assert {r["args"][0]["index"] for r in clones if "includes" in r} == {1}  # s390
    masks = {r["args"][0]["value"] for r in clones}
    assert 0x10000000 in masks and len(masks) == 7  # CLONE_NEWUSER among the 7 namespaces
    assert all(r["args"][0]["value"] == r["args"][0]["valueTwo"] for r in clones)


def test_options_by_choice(tmp_path: Path) -> None:
    assert security_opts(SandboxConfig(seccomp="docker-default")) == []
    (opt,) = security_opts(SandboxConfig())
    assert opt.startswith("seccomp=") and json.loads(opt[8:]) == guard_profile()
    path = tmp_path / "p.json"
    path.write_text('{"defaultAction": "SCMP_ACT_ERRNO", "syscalls": []}')
    assert seccomp_option(str(path)) == 'seccomp={"defaultAction":"SCMP_ACT_ERRNO","syscalls":[]}'
    assert "custom profile" in describe(str(path)) and "guard" in describe("guard")


@pytest.mark.parametrize(
    ("text", "why"),
    [(None, "cannot read"), ("{oops", "not JSON"), ('{"syscalls": []}', "no defaultAction")],
)
def test_a_bad_profile_file_fails_with_its_name(tmp_path: Path, text: str | None, why: str) -> None:
    path = tmp_path / "profile.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(SandboxError, match=why) as info:
        seccomp_option(str(path))
    assert str(path) in str(info.value)


async def run(command: list[str], config: SandboxConfig, limit: float = 60) -> tuple[str, int]:
    out = b""
    async with open_sandbox(command, config) as sb:
        with anyio.fail_after(limit):
            try:
                while True:
                    out += await sb.stdout.receive()
            except anyio.EndOfStream:
                pass
            code = await sb.wait()
    assert code == 0, (out, sb.stderr_tail())
    return out.decode(), code


async def probe(seccomp: str) -> dict[str, tuple[int, int]]:
    command = ["python3", "-c", PROBE, *(["control"] if seccomp == "docker-default" else [])]
    out, _ = await run(command, SandboxConfig(seccomp=seccomp))
    return {n: (int(r), int(e)) for n, r, e in (line.split() for line in out.splitlines())}


@pytest.mark.docker
@pytest.mark.anyio
async def test_the_guard_profile_refuses_what_the_monitor_cannot_see() -> None:
    got = await probe("guard")
    nosys, perm = (-1, errno.ENOSYS), (-1, errno.EPERM)
    for name in ("io_uring_setup", "io_uring_enter", "io_uring_register"):
        assert got[name] == nosys, (name, got)
    for name in ("ptrace_traceme", "ptrace_attach", "process_vm_readv", "process_vm_writev",
                 "unshare_user", "clone_newuser", "open_by_handle_at", "userfaultfd",
                 "pidfd_getfd", "name_to_handle_at", "perf_event_open", "bpf", "keyctl", "setns",
                 "mount"):  # fmt: skip
        assert got[name] == perm, (name, got)
    assert got["i386_ptrace_traceme"] == perm, got  # the 32-bit ABI gets the same rules
    assert got["i386_io_uring_setup"] == nosys, got


@pytest.mark.docker
@pytest.mark.anyio
async def test_docker_default_lets_io_uring_and_ptrace_through() -> None:
    # The control: the same probe without our profile, so a wrong syscall number (ENOSYS
    # for the wrong reason) or a daemon that already refuses them would show here.
    got = await probe("docker-default")
    assert got["io_uring_setup"][0] >= 0 or got["io_uring_setup"][1] != errno.ENOSYS, got
    assert got["i386_io_uring_setup"][1] != errno.ENOSYS, got
    assert got["ptrace_traceme"] == (0, 0), got  # Docker allows it on kernels >= 4.8


@pytest.mark.docker
@pytest.mark.anyio
async def test_ordinary_work_runs_under_the_guard_profile() -> None:
    # threads (glibc's clone3 falls back to clone), a subprocess, file writes, node with
    # libuv told to use io_uring (it falls back), async fs, a child and a worker thread, and a
    # git commit.
    script = textwrap.dedent("""
        set -e
        python3 -c 'import threading, subprocess, pathlib
        t = threading.Thread(target=lambda: pathlib.Path("/tmp/t").write_text("thread"))
        t.start(); t.join()
        print(subprocess.run(["cat", "/tmp/t"], capture_output=True, text=True).stdout)'
        UV_USE_IO_URING=1 node -e '
        const fs = require("fs/promises"), cp = require("child_process");
        (async () => {
          await fs.writeFile("/tmp/n", "node-async");
          const text = await fs.readFile("/tmp/n", "utf8");
          const kid = cp.execFileSync("sh", ["-c", "echo child"]).toString().trim();
          const { Worker } = require("worker_threads");
          const w = new Worker("require(\\"worker_threads\\").parentPort.postMessage(6*7)",
                               { eval: true });
          w.on("message", (n) => { console.log(text, kid, n); w.terminate(); });
        })();'
        cd /tmp && git init -q repo && cd repo && echo hi > f && git add f
        git -c user.email=a@b -c user.name=t commit -qm one && git log --format=%s
        echo written > ~/note && cat ~/note
    """)
    out, _ = await run(["sh", "-c", script], SandboxConfig())
    assert out.split("\n")[:4] == ["thread", "node-async child 42", "one", "written"], out


@pytest.mark.docker
@pytest.mark.anyio
async def test_a_profile_file_is_what_the_sandbox_runs_under(tmp_path: Path) -> None:
    path = tmp_path / "no-mkdir.json"
    rule = {"names": ["mkdir", "mkdirat"], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EACCES}
    path.write_text(json.dumps({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": [rule]}))
    script = "mkdir /tmp/d 2>&1 || echo refused; touch /tmp/f && echo touched"
    out, _ = await run(["sh", "-c", script], SandboxConfig(seccomp=str(path)))
    assert "Permission denied" in out and "refused" in out and "touched" in out, out


def test_config_resolves_a_profile_path_and_rejects_a_bad_one(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text('{"defaultAction": "SCMP_ACT_ALLOW"}')
    good = tmp_path / "good.toml"
    good.write_text('[sandbox]\nseccomp = "p.json"\n')
    assert load_config(good).sandbox.seccomp == str(tmp_path / "p.json")
    assert load_config(None).sandbox.seccomp == "guard"
    bad = tmp_path / "bad.toml"
    bad.write_text('[sandbox]\nnetwork = "none"\nseccomp = "missing.json"\n')
    with pytest.raises(PolicyError, match=r"missing\.json") as info:
        load_config(bad)
    assert info.value.line == 3
