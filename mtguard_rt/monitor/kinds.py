"""Event kinds, flags and sizes shared with the BPF C: the one source of these constants.

They flow one way, Python -> C, as `-D` cflags (`bpf_cflags()`); `bpf/events.h` and
`bpf/monitor.bpf.c` never define them. Changing a size here changes the compiled program.
"""

from __future__ import annotations

import enum

from ..model import Transport
from .btf import task_offsets


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
    KILLED = 19  # kill on touch: SIGKILL sent at syscall enter (a0: KILLED_OPS; str1 path)
    # sends: a0 fd, a1 family, a2 port, a3 count so far, ret transport, str1 bytes (u64 LE)
    NET_SENT = 20
    # stdio integrity: bytes a server read from / wrote to its MCP wire (a0 stream 0 stdin /
    # 1 stdout, a1 offset of the chunk in the syscall's data, a2 syscall ret, a3 fd; str1 data)
    STDIO = 21
    # network policy (egress.bpf.c): a connect/sendmsg refused with EPERM, or packets dropped
    # (a0 NP_AT_*, a1 family, a2 port, a3 transport, ret packets refused so far, 0: one call)
    NET_REFUSED = 22
    # links (str1 the new name, a0 its dirfd; str2 the link text as given / the existing file,
    # a1 its dirfd; a2 linkat's flags)
    SYMLINK = 23
    LINK = 24
    # a signal sent (kill, tkill, tgkill, pidfd_send_signal, rt_(tg)sigqueueinfo): a0 target as
    # passed, a1 tid passed | first delivery result << 32 | the kernel's view of the targets
    # (SGV_*, signals.kernel_view) << 48, a2 signal, a3 SIG_* syscall |
    # count << 8 | first target's global tid << 32, addr the first SIG_TARGETS global tgids,
    # str1 the first target's comm (see monitor.bpf.c's signals block)
    SIGNAL = 25
    # memfd_create: ret the new fd, a1 its flags, str1 its name as given (the fd table names
    # it /memfd:<name>, as /proc does, so an exec of the fd names what ran)
    MEMFD = 26


EV_MAX = max(Kind) + 1
BLIND_SPOTS = {1: "io_uring_setup", 2: "open_by_handle_at"}  # EV_BLIND's a0


class Flag(enum.IntFlag):
    TRUNC1 = 1  # str1 filled its buffer: the name is cut
    TRUNC2 = 2  # str2 (rename target, argv) is cut
    FAULT = 4  # a user pointer could not be read
    HAS_CODE = 8  # EXIT carries the exit_group code in a0
    BYFD = 16  # fchmod/fchdir: the target is the fd in a3, no name
    LEN_PARTIAL = 32  # argv full length is a lower bound (scan budget exhausted)
    CONNECTED = 64  # NET_SENT: the destination is the socket's connected peer
    APART = 128  # NET_SENT: a3 and the bytes are this send's alone, not a running total
    MMSG = 256  # NET_SENT: a sendmmsg's messages (str1: 32-byte entries, monitor.bpf.c)


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
CG_GATE = 8  # ... and a wholly captured read of its MCP stdin stops the reader (window.py)
CG_PDIRS = 16  # ... and has directories in `pdirs` (kill on write in them is looked up)
ACT_WAKE = 1  # `protected` map values: an open of this exact path wakes the reader at once
ACT_KILL_OPEN = 2  # ... an open of it is answered with SIGKILL in the kernel
ACT_KILL_EXEC = 4  # ... an exec of it is answered with SIGKILL in the kernel
ACT_KILL_MODIFY = 8  # ... an unlink or rename (from or onto it) is answered with SIGKILL
ACT_KILL_WRITE = 16  # ... an open of it for writing (or creat) is answered with SIGKILL
KEY_PATH_MAX = 256  # protected paths are exact strings shorter than this
MAX_PROTECTED = 4096
PDIR_PATH_MAX = 240  # `pdirs` (an LPM trie: 256 key bytes at most) path bytes
MAX_PDIRS = 1024
# a protected path ending in '/' is a directory (`pdirs`): ACT_KILL_WRITE kills a writing
# open, rename, link or symlink onto a name under it; these bits narrow the names
ACT_ONE_LEVEL = 32  # ... to the files directly in it
ACT_PTH = 64  # ... to names ending in `.pth`
LOST_SLOTS = 64  # `cg_lost`: lost records per cgroup, by kind (slot = Kind) ...
LOST_OPEN_WRITE = 63  # ... and a writing open in a slot of its own
O_ANY_WRITE = 0o1103  # O_WRONLY | O_RDWR | O_CREAT | O_TRUNC
# EV_SIGNAL's syscalls (a3 & 0xff)
SIG_KILL, SIG_TKILL, SIG_TGKILL, SIG_PIDFD, SIG_QUEUE, SIG_TGQUEUE = 1, 2, 3, 4, 5, 6
SIG_SYSCALLS = {
    SIG_KILL: "kill",
    SIG_TKILL: "tkill",
    SIG_TGKILL: "tgkill",
    SIG_PIDFD: "pidfd_send_signal",
    SIG_QUEUE: "rt_sigqueueinfo",
    SIG_TGQUEUE: "rt_tgsigqueueinfo",
}
SIG_TARGETS = 4  # targets' tgids kept per record (a power of two: the C masks the index)
SIG_IGNORED = 1  # TRACE_SIGNAL_IGNORED: a generation that had no effect (a dying target...)
# the kernel's view of one signalled target (a1 >> 48 holds them per target: signals.py)
SGV_SAME, SGV_KNOWN, SGV_IGNORED, SGV_VIEW = 1, 2, 4, 8
KILLED_OPS = {  # EV_KILLED a0
    1: "open", 2: "exec", 3: "unlink", 4: "rename", 5: "rename onto", 6: "link onto"
}  # EV_KILLED a0
# stdio integrity (EV_STDIO): per read/write syscall on a wire fd, at most IO_CAP bytes are
# copied, in records of at most IO_CHUNK bytes; readv/writev: the first IO_CHUNK bytes of each
# of at most IOV_MAX iovecs. More: TRUNC1 (the message is unverified)
IO_CAP = 65536
IO_CHUNK = 8192  # < DATA_MAX: one record's data
IOV_MAX = 8
MAX_WIRE = 4096  # (tgid, fd) entries of the `wire` map: the sandboxes' stdio pipe fds
WIRE_STDIN, WIRE_STDOUT = 0, 1  # `wire` values and EV_STDIO's a0
F_DUPFD, F_DUPFD_CLOEXEC = 0, 1030  # fcntl commands that duplicate an fd
# socket transports (`socks` map, CONNECT/ACCEPT a3, NET_SENT ret); 0 is unknown
TR_TCP, TR_UDP, TR_ICMP, TR_RAW, TR_OTHER = 1, 2, 3, 4, 5
TRANSPORTS: dict[int, Transport] = {
    TR_TCP: "tcp",
    TR_UDP: "udp",
    TR_ICMP: "icmp",
    TR_RAW: "raw",
    TR_OTHER: "other",
}
MAX_SOCKS = 16384  # sockets whose transport is remembered (LRU)
MMSG_MAX = 8  # sendmmsg messages read each (destination, bytes): mmsg_one x 8 in the C
# network policy (`np_addrs` map values, EV_NET_REFUSED's a0, names learnt from DNS answers)
NP_ANY, NP_DNS = 1, 2  # any port / port 53 only (a resolver)
NP_AT_CONNECT, NP_AT_SENDMSG, NP_AT_EGRESS, NP_AT_INGRESS = 1, 2, 3, 4
NP_AT = {1: "connect", 2: "sendmsg", 3: "egress packet", 4: "ingress packet"}
NP_MAX_ADDRS = 16384  # allowed (cgroup, address) entries, all sandboxes together
NP_MAX_NAMES = 1024  # allowed (cgroup, name) entries whose DNS answers are learnt
NP_MAX_PORTS = 4096  # loopback ports the sandboxes bound (their own loopback traffic passes)
NP_REPORT_NS = 1_000_000_000  # dropped packets: one record per address per second at most
DNAME_MAX = 128  # wire-format question names learnt from are shorter than this
DNAME_LABELS_MAX = 32
DNAME_SUFFIXES = 8  # the name and its parents looked up in `np_names`
DNS_ANSWERS_MAX = 32  # answer records read per DNS response (one tail call each: <= 33)
# tracepoints attached by name (bcc's TRACEPOINT_PROBE allows one program per tracepoint in
# a source; these share theirs with other sections, or their records name a type the build
# headers would have to bring in): tracepoint -> function
NAMED_TRACEPOINTS = {
    "syscalls:sys_enter_write": "mt_sock_write_enter",
    "syscalls:sys_exit_write": "mt_sock_write_exit",
    "syscalls:sys_enter_writev": "mt_sock_write_enter",
    "syscalls:sys_exit_writev": "mt_sock_write_exit",
    "syscalls:sys_enter_sendfile64": "mt_sock_write_enter",  # out_fd is its first argument
    "syscalls:sys_exit_sendfile64": "mt_sock_write_exit",
    "syscalls:sys_enter_pidfd_send_signal": "mt_sig_pidfd_enter",  # their records name siginfo_t
    "syscalls:sys_enter_rt_sigqueueinfo": "mt_sig_queue_enter",
    "syscalls:sys_enter_rt_tgsigqueueinfo": "mt_sig_tgqueue_enter",
}


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
        CG_GATE=CG_GATE,
        CG_PDIRS=CG_PDIRS,
        PDIR_PATH_MAX=PDIR_PATH_MAX,
        MAX_PDIRS=MAX_PDIRS,
        ACT_ONE_LEVEL=ACT_ONE_LEVEL,
        ACT_PTH=ACT_PTH,
        LOST_SLOTS=LOST_SLOTS,
        LOST_OPEN_WRITE=LOST_OPEN_WRITE,
        ACT_WAKE=ACT_WAKE,
        ACT_KILL_OPEN=ACT_KILL_OPEN,
        ACT_KILL_EXEC=ACT_KILL_EXEC,
        ACT_KILL_MODIFY=ACT_KILL_MODIFY,
        ACT_KILL_WRITE=ACT_KILL_WRITE,
        TR_TCP=TR_TCP,
        TR_UDP=TR_UDP,
        TR_ICMP=TR_ICMP,
        TR_RAW=TR_RAW,
        TR_OTHER=TR_OTHER,
        MAX_SOCKS=MAX_SOCKS,
        MMSG_MAX=MMSG_MAX,
        KEY_PATH_MAX=KEY_PATH_MAX,
        MAX_PROTECTED=MAX_PROTECTED,
        O_ANY_WRITE=O_ANY_WRITE,
        RING_PAGES=ring_pages,
        WAKE_EVERY=WAKE_EVERY,
        IO_CAP=IO_CAP,
        IO_CHUNK=IO_CHUNK,
        IOV_MAX=IOV_MAX,
        MAX_WIRE=MAX_WIRE,
        WIRE_STDIN=WIRE_STDIN,
        WIRE_STDOUT=WIRE_STDOUT,
        F_DUPFD=F_DUPFD,
        F_DUPFD_CLOEXEC=F_DUPFD_CLOEXEC,
        NP_ANY=NP_ANY,
        NP_DNS=NP_DNS,
        NP_AT_CONNECT=NP_AT_CONNECT,
        NP_AT_SENDMSG=NP_AT_SENDMSG,
        NP_AT_EGRESS=NP_AT_EGRESS,
        NP_AT_INGRESS=NP_AT_INGRESS,
        NP_MAX_ADDRS=NP_MAX_ADDRS,
        NP_MAX_NAMES=NP_MAX_NAMES,
        NP_MAX_PORTS=NP_MAX_PORTS,
        NP_REPORT_NS=NP_REPORT_NS,
        DNAME_MAX=DNAME_MAX,
        DNAME_LABELS_MAX=DNAME_LABELS_MAX,
        DNAME_SUFFIXES=DNAME_SUFFIXES,
        DNS_ANSWERS_MAX=DNS_ANSWERS_MAX,
        SIG_KILL=SIG_KILL,
        SIG_TKILL=SIG_TKILL,
        SIG_TGKILL=SIG_TGKILL,
        SIG_PIDFD=SIG_PIDFD,
        SIG_QUEUE=SIG_QUEUE,
        SIG_TGQUEUE=SIG_TGQUEUE,
        SIG_TARGETS=SIG_TARGETS,
        SIG_IGNORED=SIG_IGNORED,
        SGV_SAME=SGV_SAME,
        SGV_KNOWN=SGV_KNOWN,
        SGV_IGNORED=SGV_IGNORED,
        SGV_VIEW=SGV_VIEW,
        **task_offsets(),  # the running kernel's struct offsets (BTF), -1 when unknown
    )
    defs["EV_MAX"] = EV_MAX
    defs.update(
        {f"MT_{name}": value for name, value in sizes.items()}
    )  # MT_: no clash with kernel macros
    return [f"-D{name}={value}" for name, value in sorted(defs.items())]
