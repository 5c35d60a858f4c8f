"""The sandbox's seccomp profile (`[sandbox] seccomp`): refuse what the monitor cannot see.

`seccomp_option(choice)` is the `HostConfig.SecurityOpt` entry for a choice: "guard" (the
default) is the profile below, "docker-default" keeps the daemon's own, anything else is the
path of a profile in Docker's JSON format. A custom profile *replaces* Docker's default, so
"guard" repeats the refusals of Docker's default that matter here. It allows by default and
refuses a list: each entry names why. Unlisted syscalls still meet the capability drop
(`CapDrop: ALL`) and no-new-privileges.
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

from ..errors import SandboxError

# ENOSYS, "not implemented": runtimes that probe for these fall back to plain syscalls
# (libuv/Node for io_uring, glibc's pthread_create for clone3).
NOT_IMPLEMENTED: dict[str, str] = {
    "io_uring_setup": "io_uring does file and network I/O the syscall tracepoints never see",
    "io_uring_enter": "same: submits the ring's operations",
    "io_uring_register": "same: registers the ring's files and buffers",
    "clone3": "its flags are in memory no filter can read: glibc falls back to clone (checked)",
}

# EPERM: the kernel refuses as it does an unprivileged caller.
REFUSED: dict[str, str] = {
    # control of another process without any syscall of its own the monitor would trace
    "ptrace": "reads and writes another process's memory and registers",
    "process_vm_readv": "reads another process's memory",
    "process_vm_writev": "writes another process's memory",
    "process_madvise": "acts on another process's memory",
    "pidfd_getfd": "takes a copy of another process's open file",
    "kcmp": "probes another process's files and memory by comparison",
    "move_pages": "moves another process's memory between NUMA nodes (Docker refuses it too)",
    "migrate_pages": "same",
    # files opened with no name (the monitor and kill on touch match names)
    "open_by_handle_at": "opens a file by handle: no path in the tree",
    "name_to_handle_at": "makes the handles open_by_handle_at takes",
    # timing and observation of other processes or of the kernel
    "userfaultfd": "stalls kernel copies at chosen points (races against the monitor's reads)",
    "perf_event_open": "traces other processes and the kernel",
    "bpf": "loads kernel programs and reads their maps (the monitor's own)",
    "fanotify_init": "watches other processes' file accesses",
    "syslog": "reads the kernel log, which is not the container's",
    "lookup_dcookie": "resolves kernel profiling cookies to paths",
    # the filesystem view the tree's paths refer to (Docker refuses these too)
    "mount": "changes which file a path names",
    "umount": "same",
    "umount2": "same",
    "pivot_root": "same",
    "chroot": "same",
    "fsopen": "new mount API: same as mount",
    "fsconfig": "same",
    "fsmount": "same",
    "fspick": "same",
    "open_tree": "same",
    "move_mount": "same",
    "mount_setattr": "same",
    # namespaces: a new user namespace hands back every capability inside it
    "unshare": "new namespaces (user: capabilities back; mount: a private view)",
    "setns": "joins another namespace",
    # the kernel itself, shared with the host (Docker refuses these too)
    "kexec_load": "replaces the running kernel",
    "kexec_file_load": "same",
    "init_module": "loads kernel code",
    "finit_module": "same",
    "delete_module": "unloads kernel code",
    "create_module": "same (obsolete)",
    "query_module": "same (obsolete)",
    "get_kernel_syms": "same (obsolete)",
    "keyctl": "the kernel keyring is not namespaced: secrets beyond the container",
    "add_key": "same",
    "request_key": "same",
    "reboot": "host-wide",
    "swapon": "host-wide",
    "swapoff": "host-wide",
    "acct": "host-wide process accounting to a file",
    "settimeofday": "the clock is host-wide",
    "clock_settime": "same",
    "clock_adjtime": "same",
    "stime": "same",
    "iopl": "raw port I/O",
    "ioperm": "same",
    "quotactl": "host-wide quotas",
    "quotactl_fd": "same",
    "nfsservctl": "host-wide (obsolete)",
    "uselib": "obsolete loader",
    "ustat": "obsolete",
    "sysfs": "obsolete",
    "_sysctl": "obsolete",
    "vm86": "obsolete",
    "vm86old": "obsolete",
    "vhangup": "hangs up the terminal",
}

# clone's flags that create namespaces, refused like unshare (its first argument; the second
# on s390, as in Docker's profile)
CLONE_NAMESPACES = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}

# The daemon picks the entry of its own architecture; sub-architectures get the same rules
# (a 32-bit `int 0x80` ptrace is refused like the 64-bit one).
ARCH_MAP = [
    {"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86", "SCMP_ARCH_X32"]},
    {"architecture": "SCMP_ARCH_AARCH64", "subArchitectures": ["SCMP_ARCH_ARM"]},
]

CHOICES = ("guard", "docker-default")


def guard_profile() -> dict[str, Any]:
    """Docker's JSON profile: allow by default, refuse the lists above."""

    def refuse(names: list[str], code: int, **extra: Any) -> dict[str, Any]:
        return {"names": names, "action": "SCMP_ACT_ERRNO", "errnoRet": code, **extra}

    rules = [
        refuse(sorted(NOT_IMPLEMENTED), errno.ENOSYS),
        refuse(sorted(REFUSED), errno.EPERM),
    ]
    s390 = {"arches": ["s390", "s390x"]}
    for flag in CLONE_NAMESPACES.values():  # rules of one syscall are or-ed
        for index, where in ((0, {"excludes": s390}), (1, {"includes": s390})):
            arg = {"index": index, "value": flag, "valueTwo": flag, "op": "SCMP_CMP_MASKED_EQ"}
            rules.append(refuse(["clone"], errno.EPERM, args=[arg], **where))
    return {"defaultAction": "SCMP_ACT_ALLOW", "archMap": ARCH_MAP, "syscalls": rules}


def load_profile(path: str) -> dict[str, Any]:
    """A profile file, checked enough that a typo fails here, not as a container error."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as exc:
        raise SandboxError(f"cannot read the seccomp profile {path}: {exc.strerror}") from exc
    except ValueError as exc:
        raise SandboxError(f"the seccomp profile {path} is not JSON: {exc}") from exc
    if not isinstance(data, dict) or "defaultAction" not in data:
        raise SandboxError(f"the seccomp profile {path} has no defaultAction")
    return data


def seccomp_option(choice: str) -> str | None:
    """The SecurityOpt entry for `[sandbox] seccomp` (None: the daemon's default)."""
    if choice == "docker-default":
        return None
    profile = guard_profile() if choice == "guard" else load_profile(choice)
    return "seccomp=" + json.dumps(profile, separators=(",", ":"))


def describe(choice: str) -> str:
    """One line for `mtguard doctor` and logs: which profile a sandbox runs under."""
    if choice == "guard":
        n = len(NOT_IMPLEMENTED) + len(REFUSED) + 1
        return f"guard profile: {n} syscalls refused, io_uring and ptrace among them"
    if choice == "docker-default":
        return "Docker's default profile (io_uring, if the daemon allows it, is not traced)"
    return f"custom profile {choice}"
