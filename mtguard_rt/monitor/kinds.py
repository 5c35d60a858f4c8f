"""Event kinds, flags and sizes shared with the BPF C: the one source of these constants.

They flow one way, Python -> C, as `-D` cflags (`bpf_cflags()`); `bpf/events.h` and
`bpf/monitor.bpf.c` never define them. Changing a size here changes the compiled program.
"""

from __future__ import annotations

import enum


class Kind(enum.IntEnum):
    FORK = 1
    EXEC = 2
    EXEC_RESULT = 3
    EXIT = 4
    OPEN = 5
    UNLINK = 6
    RMDIR = 7
    RENAME = 8
    MKDIR = 9
    CHMOD = 10
    CHDIR = 11
    CLOSE = 12
    DUP = 13
    CONNECT = 14
    ACCEPT = 15
    DNS_SEND = 16
    DNS_RECV = 17
    BLIND = 18  # a syscall that opens a path this monitor cannot follow (io_uring, ...)
    KILLED = 19  # kill on touch: SIGKILL sent at syscall enter (a0: 1 open, 2 exec; str1 path)


EV_MAX = max(Kind) + 1
BLIND_SPOTS = {1: "io_uring_setup", 2: "open_by_handle_at"}  # EV_BLIND's a0


class Flag(enum.IntFlag):
    TRUNC1 = 1  # str1 filled its buffer: the name is cut
    TRUNC2 = 2  # str2 (rename target, argv) is cut
    FAULT = 4  # a user pointer could not be read
    HAS_CODE = 8  # EXIT carries the exit_group code in a0
    BYFD = 16  # fchmod/fchdir: the target is the fd in a3, no name
    LEN_PARTIAL = 32  # argv full length is a lower bound (scan budget exhausted)


STR_MAX = 4096  # PATH_MAX: names are read whole up to this
ARG_MAX = 256  # bytes kept per argv element
ARGV_MAX = 32  # argv elements kept
ARGV_COUNT_MAX = 64  # argv elements counted (and measured) in the kernel
ARG_SCAN_CHUNKS = 16  # chunks of ARG_MAX-1 bytes measured past a kept head, per element
DNS_MAX = 512  # DNS payload bytes copied
DNS_PORT = 53
# str1 (PATH) + argv heads + one scratch element fit; a power of two so that the C can
# bound a record's size with a mask the verifier understands
DATA_MAX = 16384
WAKE_EVERY = 64  # high-volume records per CPU between reader wakeups
MAX_CGROUPS = 1024
MAX_PENDING = 16384
O_CREAT_WRONLY_TRUNC = 0o1101
CG_WATCHED = 1  # `cgroups` map value bits: the cgroup is traced ...
CG_EAGER = 2  # ... and writing or MT_ACT_WAKE opens wake the reader at once (online rules)
CG_PROTECTED = 4  # ... and has paths in `protected` (kill on touch is looked up)
ACT_WAKE = 1  # `protected` map values: an open of this exact path wakes the reader at once
ACT_KILL_OPEN = 2  # ... an open of it is answered with SIGKILL in the kernel
ACT_KILL_EXEC = 4  # ... an exec of it is answered with SIGKILL in the kernel
KEY_PATH_MAX = 256  # protected paths are exact strings shorter than this
MAX_PROTECTED = 4096
O_ANY_WRITE = 0o1103  # O_WRONLY | O_RDWR | O_CREAT | O_TRUNC
KILLED_OPS = {1: "open", 2: "exec"}  # EV_KILLED's a0


def bpf_cflags(ring_pages: int) -> list[str]:
    """The -D flags that configure monitor.bpf.c."""
    defs: dict[str, int] = {f"EV_{k.name}": int(k) for k in Kind}
    defs.update({f"EVF_{f.name}": int(f) for f in Flag if f.name})
    sizes = dict(
        STR_MAX=STR_MAX,
        ARG_MAX=ARG_MAX,
        ARGV_MAX=ARGV_MAX,
        ARGV_COUNT_MAX=ARGV_COUNT_MAX,
        ARG_SCAN_CHUNKS=ARG_SCAN_CHUNKS,
        DNS_MAX=DNS_MAX,
        DNS_PORT=DNS_PORT,
        DATA_MAX=DATA_MAX,
        MAX_CGROUPS=MAX_CGROUPS,
        MAX_PENDING=MAX_PENDING,
        O_CREAT_WRONLY_TRUNC=O_CREAT_WRONLY_TRUNC,
        CG_EAGER=CG_EAGER,
        CG_PROTECTED=CG_PROTECTED,
        ACT_WAKE=ACT_WAKE,
        ACT_KILL_OPEN=ACT_KILL_OPEN,
        ACT_KILL_EXEC=ACT_KILL_EXEC,
        KEY_PATH_MAX=KEY_PATH_MAX,
        MAX_PROTECTED=MAX_PROTECTED,
        O_ANY_WRITE=O_ANY_WRITE,
        RING_PAGES=ring_pages,
        WAKE_EVERY=WAKE_EVERY,
    )
    defs["EV_MAX"] = EV_MAX
    defs.update(
        {f"MT_{name}": value for name, value in sizes.items()}
    )  # MT_: no clash with kernel macros
    return [f"-D{name}={value}" for name, value in sorted(defs.items())]
