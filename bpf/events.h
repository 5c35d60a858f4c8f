/* Event record shared by monitor.bpf.c and its loader (mtguard_rt/monitor/loader.py).
 *
 * One fixed header plus a variable tail: `data` holds str1 (len1 bytes) then str2 (len2
 * bytes); only HDR + len1 + len2 bytes are copied into the ring buffer. The loader reads
 * the layout through bcc's generated ctypes view of this struct, never a hand mirror.
 * Event kinds (EV_*), flags (EVF_*) and sizes come from Python as -D cflags.
 */
#ifndef MTGUARD_EVENTS_H
#define MTGUARD_EVENTS_H

struct event {
    u64 ts_ns;      /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
    u64 cgroup_id;  /* cgroup v2 inode of the emitting task */
    s64 ret;        /* syscall return value (fd, 0, -errno) */
    s64 a0;         /* kind-specific: dirfd, child pid, fd, exit code */
    s64 a1;         /* kind-specific: flags, newdirfd, family, argv bytes */
    s64 a2;         /* kind-specific: mode, port, argc */
    s64 a3;         /* kind-specific: fd for fchmod/fchdir, parent tid */
    u32 pid;        /* tgid */
    u32 tid;
    u32 uid;
    u16 kind;
    u16 flags;
    u32 len1;       /* bytes of str1 in data, including its NUL for strings */
    u32 len2;       /* bytes of str2 following str1 */
    u8 addr[16];    /* IPv4 (first 4 bytes) or IPv6 address */
    char data[MT_DATA_MAX];
};

/* `protected` map key: an exact absolute path, NUL-padded, per watched cgroup */
struct path_key {
    u64 cgroup_id;
    char path[MT_KEY_PATH_MAX];
};

struct pending {
    u32 kind;
    u32 flags;
    u64 a[6];
};

/* ---- socket transport (net-transport block, see monitor.bpf.c) ---- */
/* `socks` value, keyed by tgid << 32 | fd */
struct sock_info {
    u8 transport;   /* a transport code (kinds.TRANSPORTS), 0 unknown */
    u8 connected;   /* a non-TCP socket with a connected peer (the destination below) */
    u16 family;     /* destination: the connected peer, else the last explicit one */
    u16 port;
    u16 pad;
    u32 sent;       /* datagrams to the destination since it was set */
    u32 reported;   /* `sent` as last emitted in an EV_NET_SENT record */
    u8 addr[16];
    u64 bytes;      /* bytes to the destination since it was set (with `sent`) */
};

/* socket()/socketpair() arguments, enter -> exit */
struct sock_args {
    u32 family;
    u32 type;
    u32 protocol;
    u32 pad;
    u64 vec;        /* socketpair's int[2] */
};

#endif
