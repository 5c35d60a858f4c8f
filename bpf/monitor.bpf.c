/* mtguard behavior monitor: process, file, network and DNS events of watched cgroups.
 *
 * Only tracepoint arguments, syscall arguments, user memory and helpers are read, never
 * kernel struct fields (the build headers are older than the kernel). Tasks whose cgroup
 * v2 id is not in `cgroups` are ignored in the kernel. Syscalls are paired enter -> exit
 * through `pending` (keyed by tid) so user strings are read after the kernel has faulted
 * them in. Failed ring-buffer writes are counted per kind in `drops`.
 * All constants (EV_*, EVF_*, sizes) are -D cflags set by mtguard_rt/monitor/loader.py.
 */
#include <uapi/linux/ptrace.h>
#include "events.h"

#define AT_FDCWD_ (-100)
#define CLONE_THREAD_ 0x00010000ULL
#define HDR_SIZE (sizeof(struct event) - MT_DATA_MAX)
#define SCRATCH_OFF (MT_DATA_MAX - MT_ARG_MAX)

BPF_RINGBUF_OUTPUT(events, MT_RING_PAGES);
BPF_HASH(cgroups, u64, u8, MT_MAX_CGROUPS);
/* mmapable: user space reads every counter with one memory read, no syscall */
BPF_F_TABLE("array", u32, u64, drops, EV_MAX, BPF_F_MMAPABLE);
BPF_PERCPU_ARRAY(heap, struct event, 1);
BPF_PERCPU_ARRAY(wake_ctr, u64, 1);
BPF_TABLE("lru_hash", u32, struct pending, pending, MT_MAX_PENDING);
BPF_TABLE("lru_hash", u32, u64, clone_flags, MT_MAX_PENDING);
BPF_TABLE("lru_hash", u32, s32, exit_codes, MT_MAX_PENDING);
BPF_TABLE("lru_hash", u64, u8, dns_socks, MT_MAX_PENDING);
/* exact paths pushed per cgroup by the guard -> action bits (wake, kill on open/exec) */
BPF_HASH(protected, struct path_key, u32, MT_MAX_PROTECTED);
BPF_PERCPU_ARRAY(key_buf, struct path_key, 1);

static __always_inline int watched(void)
{
    u64 cg = bpf_get_current_cgroup_id();
    return cgroups.lookup(&cg) != NULL;
}

static __always_inline struct event *new_event(u16 kind)
{
    u32 zero = 0;
    struct event *e = heap.lookup(&zero);
    if (!e)
        return NULL;
    u64 id = bpf_get_current_pid_tgid();
    e->ts_ns = bpf_ktime_get_ns();
    e->cgroup_id = bpf_get_current_cgroup_id();
    e->pid = id >> 32;
    e->tid = (u32)id;
    e->uid = (u32)bpf_get_current_uid_gid();
    e->kind = kind;
    e->flags = 0;
    e->len1 = 0;
    e->len2 = 0;
    e->ret = 0;
    e->a0 = 0;
    e->a1 = 0;
    e->a2 = 0;
    e->a3 = 0;
    __builtin_memset(e->addr, 0, sizeof(e->addr));
    return e;
}

/* The action bits for a path string (user memory at syscall enter, else the event's own
 * copy): an exact, whole-string match only. Longer than the key, unreadable: no match. */
static __always_inline u32 path_action(u64 cg, const char *p, int user)
{
    u32 zero = 0;
    struct path_key *k = key_buf.lookup(&zero);
    if (!k)
        return 0;
    __builtin_memset(k, 0, sizeof(*k));
    k->cgroup_id = cg;
    long n = user ? bpf_probe_read_user_str(k->path, sizeof(k->path), p)
                  : bpf_probe_read_kernel_str(k->path, sizeof(k->path), p);
    if (n <= 1 || n >= sizeof(k->path))
        return 0;
    u32 *act = protected.lookup(k);
    return act ? *act : 0;
}

static __always_inline void count_drop(u32 kind)
{
    u64 *c = drops.lookup(&kind);
    if (c)
        __sync_fetch_and_add(c, 1);
}

/* Lost records per watched cgroup and kind, a writing open apart (MT_LOST_OPEN_WRITE): a
 * call's window tells its own sandbox's losses from another sandbox's flood (`drops` is the
 * whole monitor's). The guard reads the counts at a window's open and close; deletes them
 * with the cgroup. */
struct lost_counts {
    u32 n[MT_LOST_SLOTS];
};
BPF_HASH(cg_lost, u64, struct lost_counts, MT_MAX_CGROUPS);

static __always_inline void count_lost(struct event *e)
{
    u32 k = e->kind;
    if (k == EV_OPEN && (e->a1 & MT_O_ANY_WRITE))
        k = MT_LOST_OPEN_WRITE;
    if (k >= MT_LOST_SLOTS)
        return;
    struct lost_counts *c = cg_lost.lookup(&e->cgroup_id);
    if (!c) {
        struct lost_counts zero = {};
        cg_lost.update(&e->cgroup_id, &zero);
        c = cg_lost.lookup(&e->cgroup_id);
        if (!c)
            return;
    }
    __sync_fetch_and_add(&c->n[k], 1);
}

/* Wakeups cost the traced task an irq_work each: high-volume kinds (open, close, dup, memfd)
 * wake the reader only every MT_WAKE_EVERY-th record per CPU; every other kind forces a
 * wakeup (adaptive wakeups would be skipped behind unsignalled records), so a process
 * exit always reaches a settling window at once. Opens in an eager cgroup (value bit
 * MT_CG_EAGER: online rules are on) wake it at once when they write or name a path the
 * guard marked MT_ACT_WAKE. */
static __always_inline u64 wake_flags(struct event *e)
{
    u16 kind = e->kind;
    if (kind != EV_OPEN && kind != EV_CLOSE && kind != EV_DUP && kind != EV_MEMFD)
        return BPF_RB_FORCE_WAKEUP;
    if (kind == EV_OPEN) { /* an eager cgroup (online rules) needs writes and protected
                            * paths at once; other reads keep the batched wakeups */
        u8 *mode = cgroups.lookup(&e->cgroup_id);
        if (mode && (*mode & MT_CG_EAGER) &&
            ((e->a1 & MT_O_ANY_WRITE) || (path_action(e->cgroup_id, e->data, 0) & MT_ACT_WAKE)))
            return BPF_RB_FORCE_WAKEUP;
    }
    u32 zero = 0;
    u64 *n = wake_ctr.lookup(&zero);
    if (!n)
        return BPF_RB_FORCE_WAKEUP;
    *n += 1;
    return (*n % MT_WAKE_EVERY) ? BPF_RB_NO_WAKEUP : BPF_RB_FORCE_WAKEUP;
}

static __always_inline void submit(struct event *e)
{
    /* MT_DATA_MAX is a power of two: the mask is what the verifier needs to bound size */
    u64 n = (u64)e->len1 + e->len2;
    if (n >= MT_DATA_MAX)
        n = MT_DATA_MAX - 1;
    n &= MT_DATA_MAX - 1;
    if (events.ringbuf_output(e, HDR_SIZE + n, wake_flags(e)) != 0) {
        count_drop(e->kind);
        count_lost(e);
    }
}

static __always_inline void read_str1(struct event *e, const char *p)
{
    long n = bpf_probe_read_user_str(e->data, MT_STR_MAX, p);
    if (n < 0) {
        e->flags |= EVF_FAULT;
        n = 0;
    } else if (n == MT_STR_MAX) {
        e->flags |= EVF_TRUNC1;
    }
    e->len1 = n;
}

static __always_inline void read_str2(struct event *e, const char *p)
{
    u32 off = e->len1;
    if (off > MT_STR_MAX)
        off = MT_STR_MAX;
    long n = bpf_probe_read_user_str(&e->data[off], MT_STR_MAX, p);
    if (n < 0) {
        e->flags |= EVF_FAULT;
        n = 0;
    } else if (n == MT_STR_MAX) {
        e->flags |= EVF_TRUNC2;
    }
    e->len2 = n;
}

/* Store a syscall's arguments until its exit. */
static __always_inline int enter6(u32 kind, u64 a0, u64 a1, u64 a2, u64 a3, u64 a4)
{
    if (!watched())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct pending p = {};
    p.kind = kind;
    p.a[0] = a0;
    p.a[1] = a1;
    p.a[2] = a2;
    p.a[3] = a3;
    p.a[4] = a4;
    pending.update(&tid, &p);
    return 0;
}

static __always_inline int take(u32 kind, struct pending *out)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct pending *p = pending.lookup(&tid);
    if (!p)
        return 0;
    if (p->kind != kind) {
        pending.delete(&tid);
        return 0;
    }
    __builtin_memcpy(out, p, sizeof(*out));
    pending.delete(&tid);
    return 1;
}

/* ---- socket transport and datagram egress (net-transport block) ---------------- */

/* Which transport each socket fd is, so a connect says tcp/udp/..., and whether a connected
 * datagram socket ever sent anything: a UDP connect() sends no packet (browsers probe
 * IPv6 reachability that way), only the datagrams that follow it leave the host.
 * `socks` is keyed by tgid << 32 | fd: filled at socket/socketpair/accept/dup exit,
 * deleted at close. A forked child (until it execs) falls back to its ancestors' entries
 * (`sock_parent`, 3 generations) and takes its own copy on first use; a child's close or
 * dup over an inherited number leaves a tombstone (an unknown, unconnected entry) so the
 * fallback cannot revive it. Not followed: close_range(), fcntl(F_DUPFD), fds received over
 * SCM_RIGHTS or with pidfd_getfd, inherited fds after an exec: such a socket is unknown
 * (0, counted as egress when it connects), or a stale entry of the same number. One that
 * stays connected sends unseen without an address. A stale entry can
 * claim a datagram transport for what is a TCP socket, so a TCP connect is recognised
 * independently of the map: by its SYN_SENT transition (sock:inet_sock_set_state) during
 * the same syscall, which also catches TCP Fast Open connects made by sendto/sendmsg.
 * Records: EV_CONNECT and EV_ACCEPT carry the transport in a3. EV_NET_SENT: a0 = fd,
 * a1 = family, a2 = port, addr = destination, a3 = sends to it so far (datagrams, or
 * writes of a stream), ret = transport, data = the bytes of those sends (u64, len1 = 8),
 * EVF_CONNECTED when the destination is the connected peer; emitted when the count
 * reaches 1, 2, 4, 8, ... and with the final count at close (an exit without close leaves
 * a lower bound). A TCP socket remembers the peer it connected to (a connect's SYN_SENT),
 * so its writes count bytes against it. Counted: sendto, sendmsg, sendmmsg (each of its
 * first MT_MMSG_MAX messages to its own destination: `mmsg_sent`),
 * write, writev and sendfile to a connected socket (the write hooks cost a non-socket fd
 * one hash lookup: `socks` holds only watched tasks' sockets). Not counted: splice,
 * io_uring, the writes of an accepted socket. */
BPF_TABLE("lru_hash", u64, struct sock_info, socks, MT_MAX_SOCKS);
BPF_TABLE("lru_hash", u32, struct sock_args, sock_new, MT_MAX_PENDING);
BPF_TABLE("lru_hash", u32, u8, tcp_syn, MT_MAX_PENDING);  /* tid: SYN_SENT in this syscall */
BPF_TABLE("lru_hash", u32, s32, sock_wr, MT_MAX_PENDING); /* tid: write to a connected socket */
BPF_TABLE("lru_hash", u32, u32, sock_parent, MT_MAX_PENDING); /* forked tgid -> parent tgid */

static __always_inline int read_sockaddr(struct event *e, const void *sa);

static __always_inline u64 sock_key(u64 fd)
{
    return ((bpf_get_current_pid_tgid() >> 32) << 32) | (u32)fd;
}

/* The fd's entry: the task's own, else (a forked child that has not exec'd) the nearest
 * ancestor's, copied into the task's own key when `copy` (its counters are its own). */
static __always_inline struct sock_info *sock_ancestor(u64 fd)
{
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
#pragma unroll
    for (int i = 0; i < 3; i++) {
        u32 *up = sock_parent.lookup(&tgid);
        if (!up)
            return NULL;
        tgid = *up;
        u64 akey = ((u64)tgid << 32) | (u32)fd;
        struct sock_info *anc = socks.lookup(&akey);
        if (anc)
            return anc;
    }
    return NULL;
}

static __always_inline struct sock_info *sock_find(u64 fd, int copy)
{
    u64 key = sock_key(fd);
    struct sock_info *si = socks.lookup(&key);
    if (si)
        return si;
    struct sock_info *anc = sock_ancestor(fd);
    if (!anc || !copy)
        return anc;
    struct sock_info c = *anc;
    socks.update(&key, &c);
    return socks.lookup(&key);
}

/* This task's fd is no longer a socket we know: a tombstone when an ancestor's entry of
 * that number would otherwise be found, else nothing. */
static __always_inline void sock_forget(u64 fd)
{
    u64 key = sock_key(fd);
    if (sock_ancestor(fd)) {
        struct sock_info tomb = {};
        socks.update(&key, &tomb);
    } else {
        socks.delete(&key);
    }
}

static __always_inline void sock_fork(u32 child)
{
    u32 parent = bpf_get_current_pid_tgid() >> 32;
    sock_parent.update(&child, &parent);
}

/* A successful exec keeps the fds without CLOEXEC, but closes the others unseen: an
 * ancestor's entries can no longer be trusted for this task. */
static __always_inline void sock_exec(long ret)
{
    if (ret != 0)
        return;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    sock_parent.delete(&tgid);
}

static __always_inline u8 sock_transport(u32 family, u32 type, u32 proto)
{
    if (family != 2 && family != 10)
        return MT_TR_OTHER;
    type &= 0xf; /* without SOCK_NONBLOCK / SOCK_CLOEXEC */
    if (type == 1) /* SOCK_STREAM: TCP, MPTCP (SCTP and others are "other") */
        return (proto == 0 || proto == 6 || proto == 262) ? MT_TR_TCP : MT_TR_OTHER;
    if (type == 2) { /* SOCK_DGRAM: UDP, UDP-Lite, ICMP echo ("ping") sockets */
        if (proto == 1 || proto == 58)
            return MT_TR_ICMP;
        return (proto == 0 || proto == 17 || proto == 136) ? MT_TR_UDP : MT_TR_OTHER;
    }
    if (type == 3)
        return MT_TR_RAW;
    return MT_TR_OTHER;
}

static __always_inline void sock_put(u64 fd, u8 transport)
{
    u64 key = sock_key(fd);
    struct sock_info si = {};
    si.transport = transport;
    socks.update(&key, &si);
}

static __always_inline int sock_enter(u32 family, u32 type, u32 protocol, u64 vec)
{
    if (!watched())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct sock_args a = {};
    a.family = family;
    a.type = type;
    a.protocol = protocol;
    a.vec = vec;
    sock_new.update(&tid, &a);
    return 0;
}

static __always_inline int sock_exit(long ret)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct sock_args *a = sock_new.lookup(&tid);
    if (!a)
        return 0;
    struct sock_args c = *a;
    sock_new.delete(&tid);
    if (ret < 0)
        return 0;
    u8 t = sock_transport(c.family, c.type, c.protocol);
    if (!c.vec) {
        sock_put(ret, t);
        return 0;
    }
    s32 fds[2] = {};
    if (bpf_probe_read_user(fds, sizeof(fds), (void *)c.vec) < 0)
        return 0;
    sock_put(fds[0], t);
    sock_put(fds[1], t);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_socket)
{
    return sock_enter(args->family, args->type, args->protocol, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_socket) { return sock_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_enter_socketpair)
{
    return sock_enter(args->family, args->type, args->protocol, (u64)args->usockvec);
}
TRACEPOINT_PROBE(syscalls, sys_exit_socketpair) { return sock_exit(args->ret); }

/* A TCP (or MPTCP) socket entering SYN_SENT: only a connect, or a Fast Open send, of the
 * current task does that, inside that syscall. */
TRACEPOINT_PROBE(sock, inet_sock_set_state)
{
    if (args->newstate != 2 || (args->protocol != 6 && args->protocol != 262) || !watched())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u8 one = 1;
    tcp_syn.update(&tid, &one);
    return 0;
}

static __always_inline int tcp_syn_seen(void)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    if (!tcp_syn.lookup(&tid))
        return 0;
    tcp_syn.delete(&tid);
    return 1;
}

/* NET_SENT: the bytes, as str1 (u64) */
static __always_inline void put_bytes(struct event *e, u64 bytes)
{
    __builtin_memcpy(e->data, &bytes, sizeof(bytes));
    e->len1 = sizeof(bytes);
}

/* close: the final count if it was not reported yet, then forget the fd */
static __always_inline void sock_closed(u64 fd)
{
    u64 key = sock_key(fd);
    struct sock_info *si = socks.lookup(&key);
    if (!si) {
        sock_forget(fd); /* maybe an inherited socket closed in the child */
        return;
    }
    if (si->sent != si->reported && si->family) {
        struct event *e = new_event(EV_NET_SENT);
        if (e) {
            e->a0 = fd;
            e->a1 = si->family;
            e->a2 = si->port;
            e->a3 = si->sent;
            e->ret = si->transport;
            if (si->connected)
                e->flags |= EVF_CONNECTED;
            __builtin_memcpy(e->addr, si->addr, sizeof(e->addr));
            put_bytes(e, si->bytes);
            submit(e);
        }
    }
    sock_forget(fd);
}

static __always_inline void sock_dup(u64 oldfd, u64 newfd)
{
    u64 nkey = sock_key(newfd);
    struct sock_info *si = sock_find(oldfd, 0);
    if (si) {
        struct sock_info c = *si;
        socks.update(&nkey, &c);
    } else {
        sock_forget(newfd);
    }
}

/* accept: the new fd has the listener's transport; returns it for the record */
static __always_inline u8 sock_accepted(u64 lfd, long fd)
{
    struct sock_info *si = sock_find(lfd, 0);
    u8 t = si ? si->transport : 0;
    sock_put(fd, t);
    return t;
}

/* connect exit (e holds ret and the address read by read_sockaddr; port < 0: none): the
 * transport for the record; a datagram socket remembers its peer, AF_UNSPEC forgets it */
static __always_inline u8 sock_connected(struct event *e, u64 fd, int port)
{
    int syn = tcp_syn_seen();
    struct sock_info *si = sock_find(fd, 1);
    u8 t = syn ? MT_TR_TCP : (si ? si->transport : 0);
    if (!si)
        return t;
    if (syn)
        si->transport = MT_TR_TCP; /* a stale entry said otherwise */
    if (t == MT_TR_TCP) { /* its peer, for the bytes written to it (-EINPROGRESS: on its way) */
        if (port >= 0 && (e->ret == 0 || e->ret == -115)) {
            si->connected = 1;
            si->family = e->a1;
            si->port = port;
            __builtin_memcpy(si->addr, e->addr, sizeof(si->addr));
            si->sent = 0;
            si->reported = 0;
            si->bytes = 0;
        } else {
            si->connected = 0;
        }
        return t;
    }
    if (port >= 0 && e->ret == 0) {
        si->connected = 1;
        si->family = e->a1;
        si->port = port;
        __builtin_memcpy(si->addr, e->addr, sizeof(si->addr));
        si->sent = 0;
        si->reported = 0;
        si->bytes = 0;
    } else if (port < 0 && e->a1 == 0) { /* AF_UNSPEC: dissolve the association */
        si->connected = 0;
        si->family = 0;
        si->sent = 0;
        si->reported = 0;
        si->bytes = 0;
    }
    return t;
}

/* n sends (n > 0) of `bytes` in all left through fd, to the explicit destination `sa` (user
 * memory, may be NULL) or else to the connected peer. A stream counts against the peer it
 * connected to (its connect was the egress; these are its bytes), or is skipped when its
 * connect was not seen, unless this very syscall made the TCP connection (Fast Open). */
static __always_inline void sock_sent(u64 fd, long n, const void *sa, u64 bytes)
{
    int tfo = tcp_syn_seen();
    if (n <= 0)
        return;
    u64 key = sock_key(fd);
    struct sock_info *si = sock_find(fd, 1);
    if (!si) { /* not seen created: count it under an unknown transport from now on */
        struct sock_info fresh = {};
        socks.update(&key, &fresh);
        si = socks.lookup(&key);
        if (!si)
            return;
    }
    u8 t = tfo ? MT_TR_TCP : si->transport;
    if (t == MT_TR_TCP && !tfo && !si->connected)
        return;
    if (t == MT_TR_TCP && !tfo)
        sa = NULL; /* a connected stream ignores the address: its peer gets the bytes */
    struct event *e = new_event(EV_NET_SENT);
    if (!e)
        return;
    e->a0 = fd;
    e->ret = t;
    int port = read_sockaddr(e, sa);
    u64 dst[2] = {};
    u64 cur[2] = {};
    __builtin_memcpy(dst, e->addr, sizeof(dst));
    __builtin_memcpy(cur, si->addr, sizeof(cur));
    int same = si->family == e->a1 && si->port == port && dst[0] == cur[0] && dst[1] == cur[1];
    if (port < 0 || (si->connected && same)) {
        if (!si->connected)
            return; /* no destination: not a datagram to anywhere we can name */
        e->a1 = si->family;
        e->a2 = si->port;
        __builtin_memcpy(e->addr, si->addr, sizeof(e->addr));
        e->flags |= EVF_CONNECTED;
    } else if (si->connected || tfo) {
        e->a3 = n; /* another destination than the peer, or a Fast Open: each reported */
        e->flags |= EVF_APART;
        put_bytes(e, bytes);
        submit(e);
        return;
    } else if (!same) { /* a new destination restarts the count */
        si->family = e->a1;
        si->port = port;
        __builtin_memcpy(si->addr, e->addr, sizeof(si->addr));
        si->sent = 0;
        si->reported = 0;
        si->bytes = 0;
    }
    u32 old = si->sent;
    u32 now = old + (u32)n;
    si->sent = now;
    si->bytes += bytes;
    if ((old ^ now) <= old)
        return; /* the count's highest bit did not move: not reported */
    si->reported = now;
    e->a3 = now;
    put_bytes(e, si->bytes);
    submit(e);
}

/* user_msghdr.msg_name (offset 0) */
static __always_inline const void *msg_name(const void *msg)
{
    u64 name = 0;
    bpf_probe_read_user(&name, sizeof(name), msg);
    return (const void *)name;
}

/* write/writev/sendfile to a connected socket (the fd, or sendfile's out_fd, is the first
 * argument): attached by name (kinds.NAMED_TRACEPOINTS) so other sections can have their
 * own programs on these tracepoints. The records are read at fixed offsets (syscall
 * tracepoints: args at 16 + 8 * i, ret at 16). */
int mt_sock_write_enter(void *ctx)
{
    u64 fd = 0;
    bpf_probe_read_kernel(&fd, sizeof(fd), (char *)ctx + 16);
    u64 key = sock_key(fd);
    struct sock_info *si = socks.lookup(&key); /* only watched tasks have entries */
    if (!si) {
        u32 tgid = key >> 32;
        if (!sock_parent.lookup(&tgid)) /* the common miss: one more lookup, no more */
            return 0;
        si = sock_find(fd, 1);
    }
    if (!si || !si->connected)
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    s32 f = fd;
    sock_wr.update(&tid, &f);
    return 0;
}

int mt_sock_write_exit(void *ctx)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    s32 *f = sock_wr.lookup(&tid);
    if (!f)
        return 0;
    s32 fd = *f;
    sock_wr.delete(&tid);
    s64 ret = 0;
    bpf_probe_read_kernel(&ret, sizeof(ret), (char *)ctx + 16);
    sock_sent(fd, ret >= 0 ? 1 : 0, NULL, ret > 0 ? ret : 0);
    return 0;
}

/* ---- end of the net-transport block --------------------------------------------- */

/* ---- stdio integrity (H2): the bytes a server reads from / writes to its MCP wire ------ *
 * `wire` maps (tgid << 32 | fd) to the stream of the sandbox's stdio pipe that fd is: user
 * space seeds fd 0 / fd 1 of the sandbox's first processes when the watch starts; the kernel
 * then follows them through dup/dup2/dup3/fcntl(F_DUPFD*) (the MCP SDK serves from private
 * duplicates and points fd 0/1 elsewhere), close and fork (fds 0 and 1 only). The value holds
 * the cgroup so a reused pid elsewhere never matches. read/readv of a stdin fd and
 * write/writev of a stdout fd are paired enter -> exit in `io_pending` (not the shared
 * `pending`: other sections trace write too); the exit copies min(ret, MT_IO_CAP) bytes in
 * EV_STDIO records of at most MT_IO_CHUNK bytes (readv/writev: the first MT_IO_CHUNK of each
 * iovec): a0 = stream, a1 = offset of the chunk in the syscall's data, a2 = ret, a3 = fd;
 * EVF_TRUNC1 when not all of ret was captured, EVF_FAULT when the buffer was unreadable.
 * Cost off the wire: a hash lookup at each read/write enter and exit, host-wide (measured in
 * bench/stdio_integrity.py). Not seen: splice/sendfile/vmsplice, io_uring (reported as
 * blind); a CLOEXEC wire fd stays marked after exec until closed or reused. */
struct wire_val {
    u64 cgroup_id;
    u32 stream;
    u32 pad;
};

struct io_pending {
    u64 buf;    /* buffer, or the iovec array for readv/writev */
    u64 vlen;   /* iovec count; 0 for read/write */
    s64 fd;
    u32 stream; /* MT_WIRE_STDIN / MT_WIRE_STDOUT; ~0 for an fcntl dup in flight */
    u32 vec;
};

BPF_TABLE("lru_hash", u64, struct wire_val, wire, MT_MAX_WIRE);
BPF_TABLE("lru_hash", u32, struct io_pending, io_pending, MT_MAX_PENDING);

#define IO_DUP_ (~0U)

static __always_inline u64 wire_key(u64 fd)
{
    return ((bpf_get_current_pid_tgid() >> 32) << 32) | (u32)fd;
}

/* The wire stream of fd in the current process, or -1. */
static __always_inline int wire_stream(u64 fd)
{
    u64 key = wire_key(fd);
    struct wire_val *w = wire.lookup(&key);
    if (!w || w->cgroup_id != bpf_get_current_cgroup_id())
        return -1;
    return w->stream;
}

/* newfd = dup(oldfd) succeeded: newfd is the wire iff oldfd is (dup2 over a wire fd ends it) */
static __always_inline void wire_dup(u64 oldfd, u64 newfd)
{
    u64 ko = wire_key(oldfd), kn = wire_key(newfd);
    struct wire_val *w = wire.lookup(&ko);
    if (w) {
        struct wire_val v = *w;
        wire.update(&kn, &v);
    } else {
        wire.delete(&kn);
    }
}

static __always_inline void wire_close(u64 fd)
{
    u64 key = wire_key(fd);
    wire.delete(&key);
}

/* a new process inherits the parent's wire fds 0 and 1 */
static __always_inline void wire_fork(u32 child)
{
    for (u32 fd = 0; fd < 2; fd++) {
        u64 kp = wire_key(fd);
        struct wire_val *w = wire.lookup(&kp);
        if (!w)
            continue;
        struct wire_val v = *w;
        u64 kc = ((u64)child << 32) | fd;
        wire.update(&kc, &v);
    }
}

static __always_inline int io_enter(u64 fd, u64 buf, u64 vlen, u32 want, u32 vec)
{
    if (wire_stream(fd) != (int)want)
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct io_pending p = {};
    p.buf = buf;
    p.vlen = vlen;
    p.fd = (s64)fd;
    p.stream = want;
    p.vec = vec;
    io_pending.update(&tid, &p);
    return 0;
}

/* One record of n bytes from src, at the offset already in e->a1. Loop state lives in the
 * event (map memory, which the verifier does not track), so loop iterations prune. */
static __always_inline long io_chunk(struct event *e, const char *src, u64 n)
{
    n &= MT_DATA_MAX - 1; /* n <= MT_IO_CHUNK < MT_DATA_MAX: the mask tells the verifier */
    long err = bpf_probe_read_user(e->data, n, src);
    if (err < 0) {
        e->flags |= EVF_FAULT;
        n = 0;
    }
    e->len1 = n;
    if (events.ringbuf_output(e, HDR_SIZE + n, BPF_RB_FORCE_WAKEUP) != 0) {
        count_drop(EV_STDIO);
        return -1; /* not seen in user space: nothing after it is, and no gate stop */
    }
    return err;
}

/* Gate (online enforce, MT_CG_GATE): a read of the MCP stdin whose every byte reached the
 * ring buffer stops the reader (SIGSTOP to its thread group, on its way back to user
 * space) until user space has checked what it read (a swapped, routed or replayed
 * tools/call is killed, anything else continued: monitor/window.py). A read not wholly
 * captured never stops.
 * The stop is sent before the first record, never after the last: user space continues
 * the reader as soon as it sees the last record, and a SIGSTOP sent after that SIGCONT
 * would stop the server for good (a race on two cores, measured: tests/monitor/
 * test_stdio_integrity.py). A record that does not reach the ring buffer takes the stop
 * back (SIGCONT from this same thread: it cancels the pending SIGSTOP). */
static __always_inline u32 io_gated(void)
{
    u64 cg = bpf_get_current_cgroup_id();
    u8 *mode = cgroups.lookup(&cg);
    return mode && (*mode & MT_CG_GATE);
}

static __always_inline int io_exit(long ret)
{
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct io_pending *pp = io_pending.lookup(&tid);
    if (!pp)
        return 0;
    struct io_pending p = *pp;
    io_pending.delete(&tid);
    if (p.stream == IO_DUP_) {
        if (ret >= 0)
            wire_dup(p.fd, ret);
        return 0;
    }
    if (ret <= 0)
        return 0;
    struct event *e = new_event(EV_STDIO); /* one header, re-sent per chunk */
    if (!e)
        return 0;
    e->a0 = p.stream;
    e->a2 = ret;
    e->a3 = p.fd;
    if (ret > MT_IO_CAP)
        e->flags |= EVF_TRUNC1;
    if (!p.vec) {
        u32 gated = p.stream == MT_WIRE_STDIN && io_gated();
        if (gated)
            bpf_send_signal(19); /* SIGSTOP, before user space can see the read */
        for (u32 i = 0; i < MT_IO_CAP / MT_IO_CHUNK; i++) {
            u64 cap = e->a2 > MT_IO_CAP ? MT_IO_CAP : e->a2;
            u64 off = (u64)i * MT_IO_CHUNK;
            if (off >= cap)
                break;
            u64 n = cap - off > MT_IO_CHUNK ? MT_IO_CHUNK : cap - off;
            e->a1 = off;
            if (io_chunk(e, (const char *)p.buf + off, n) < 0) {
                if (gated)
                    bpf_send_signal(18); /* SIGCONT: not wholly captured, never stopped */
                break;
            }
        }
        return 0;
    }
    /* readv/writev: one record per iovec, whose first MT_IO_CHUNK bytes only are captured
     * (EVF_TRUNC1 past them); stdio servers seen here use read/write */
    for (u32 j = 0; j < MT_IOV_MAX; j++) {
        if (j >= p.vlen)
            break;
        u64 cap = e->a2 > MT_IO_CAP ? MT_IO_CAP : e->a2;
        u64 off = e->a1;
        if (off >= cap)
            break;
        u64 iov[2] = {};
        if (bpf_probe_read_user(iov, sizeof(iov), (void *)(p.buf + j * 16)) < 0)
            break;
        u64 len = iov[1] < cap - off ? iov[1] : cap - off;
        if (len == 0)
            continue;
        u64 n = len > MT_IO_CHUNK ? MT_IO_CHUNK : len;
        if (n < len)
            e->flags |= EVF_TRUNC1;
        if (io_chunk(e, (const char *)iov[0], n) < 0 || n < len)
            break;
        e->a1 = off + n;
    }
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_read)
{
    return io_enter(args->fd, (u64)args->buf, 0, MT_WIRE_STDIN, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_readv)
{
    return io_enter(args->fd, (u64)args->vec, args->vlen, MT_WIRE_STDIN, 1);
}
TRACEPOINT_PROBE(syscalls, sys_enter_write)
{
    return io_enter(args->fd, (u64)args->buf, 0, MT_WIRE_STDOUT, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_writev)
{
    return io_enter(args->fd, (u64)args->vec, args->vlen, MT_WIRE_STDOUT, 1);
}
TRACEPOINT_PROBE(syscalls, sys_exit_read) { return io_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_readv) { return io_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_write) { return io_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_writev) { return io_exit(args->ret); }

TRACEPOINT_PROBE(syscalls, sys_enter_fcntl)
{
    if (args->cmd != MT_F_DUPFD && args->cmd != MT_F_DUPFD_CLOEXEC)
        return 0;
    if (wire_stream(args->fd) < 0)
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    struct io_pending p = {};
    p.fd = args->fd;
    p.stream = IO_DUP_;
    io_pending.update(&tid, &p);
    return 0;
}
TRACEPOINT_PROBE(syscalls, sys_exit_fcntl) { return io_exit(args->ret); }
/* ---- end of stdio integrity ---------------------------------------------------------- */

/* ---- processes ---------------------------------------------------------------- */

/* thread tid -> its tgid, for threads created by watched processes (signals block) */
BPF_TABLE("lru_hash", u32, u32, threads, MT_MAX_PENDING);

TRACEPOINT_PROBE(syscalls, sys_enter_clone)
{
    if (!watched())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 fl = args->clone_flags;
    clone_flags.update(&tid, &fl);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_clone3)
{
    if (!watched())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 fl = 0;
    bpf_probe_read_user(&fl, sizeof(fl), args->uargs);
    clone_flags.update(&tid, &fl);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_process_fork)
{
    if (!watched())
        return 0;
    u32 tid = (u32)bpf_get_current_pid_tgid();
    u64 *fl = clone_flags.lookup(&tid);
    u64 flags = fl ? *fl : 0;
    if (fl)
        clone_flags.delete(&tid);
    if (flags & CLONE_THREAD_) { /* signals: a thread-directed signal names its process */
        u32 tgid = bpf_get_current_pid_tgid() >> 32;
        u32 child = args->child_pid;
        threads.update(&child, &tgid);
        return 0;
    }
    wire_fork(args->child_pid); /* stdio integrity */
    sock_fork(args->child_pid); /* net transport */
    struct event *e = new_event(EV_FORK);
    if (!e)
        return 0;
    e->a0 = args->child_pid;
    e->a3 = args->parent_pid;
    submit(e);
    return 0;
}

/* argv element i is kept NUL-terminated in its own fixed slot at data[STR_MAX + i*ARG_MAX]
 * (fixed offsets keep the verifier's work linear); str1 is padded to STR_MAX so that
 * len1 + len2 covers the slots. Elements past the kept ones, and the parts of kept ones past
 * their slot, are measured in a scratch slot so a1 is the full argv length. */
static __always_inline void read_argv(struct event *e, const char *const *argv)
{
    u64 total = 0;
    u32 argc = 0;
    u32 kept = 0;
    for (u32 i = 0; i < MT_ARGV_COUNT_MAX; i++) {
        const char *p = NULL;
        if (bpf_probe_read_user(&p, sizeof(p), &argv[i]) < 0 || p == NULL)
            break;
        argc++;
        long n;
        if (i < MT_ARGV_MAX) {
            n = bpf_probe_read_user_str(&e->data[MT_STR_MAX + i * MT_ARG_MAX], MT_ARG_MAX, p);
            kept = i + 1;
        } else {
            n = bpf_probe_read_user_str(&e->data[SCRATCH_OFF], MT_ARG_MAX, p);
            e->flags |= EVF_TRUNC2;
        }
        if (n <= 0) {
            e->flags |= EVF_FAULT;
            break;
        }
        total += n;
        if (n < MT_ARG_MAX)
            continue;
        const char *q = p + MT_ARG_MAX - 1;
        for (u32 j = 0; j < MT_ARG_SCAN_CHUNKS; j++) {
            long m = bpf_probe_read_user_str(&e->data[SCRATCH_OFF], MT_ARG_MAX, q);
            if (m <= 1)
                break;
            e->flags |= EVF_TRUNC2;
            total += m - 1;
            if (m < MT_ARG_MAX)
                break;
            q += MT_ARG_MAX - 1;
            if (j == MT_ARG_SCAN_CHUNKS - 1)
                e->flags |= EVF_LEN_PARTIAL;
        }
    }
    if (argc == MT_ARGV_COUNT_MAX)
        e->flags |= EVF_LEN_PARTIAL;
    e->len1 = MT_STR_MAX;
    e->len2 = kept * MT_ARG_MAX;
    e->a1 = total;
    e->a2 = argc;
}

/* SIGKILL the current task at syscall enter and say so (EV_KILLED: a0 what, str1 the name) */
static __always_inline int kill_now(const char *name, u32 what)
{
    bpf_send_signal(9);
    struct event *e = new_event(EV_KILLED);
    if (!e)
        return 1;
    e->a0 = what;
    read_str1(e, name);
    submit(e);
    return 1;
}

/* Kill on touch: a protected exact path named by open/openat/openat2/creat/execve(at),
 * unlink/unlinkat or rename/renameat/renameat2 (as source or destination) is answered with
 * SIGKILL in the syscall-enter tracepoint, plus an EV_KILLED record (a0 = 1 open, 2 exec,
 * 3 unlink, 4 rename from, 5 rename onto; str1 = path). The process dies on its way back
 * to user space: it never sees the fd (not one byte read), an exec'd program never runs an
 * instruction, and it cannot use the result of an unlink or rename.
 * What it cannot prevent:
 *  - the syscall itself still runs: an O_TRUNC open has truncated, an O_CREAT one created,
 *    an unlink has removed the name and a rename has moved it (measured on 6.18:
 *    tests/monitor/test_kill_on_touch.py);
 *  - only the name string as passed is compared, whole: relative names, dirfd-relative
 *    names, `.`/`..`/`//` spellings, symlinks, hard links, /proc/self/root/... and bind
 *    mounts of the same file do not match (the online rules see resolved names; symlinks
 *    and links are left to post-verification);
 *  - the string is read at enter: another thread may rewrite it before the kernel copies
 *    it (TOCTOU), and an unreadable (not resident) string is no match;
 *  - other ways to the data: fds opened before the call, link/truncate by name, a rename
 *    or unlink of a parent directory, open_by_handle_at, io_uring (reported as blind spots), a copy of a forbidden
 *    program or `ld.so <program>`;
 *  - paths of MT_KEY_PATH_MAX bytes or more (refused when pushed). */
static __always_inline int kill_on_touch(const char *name, u32 act_bit, u32 what)
{
    u64 cg = bpf_get_current_cgroup_id();
    u8 *mode = cgroups.lookup(&cg);
    if (!mode || !(*mode & MT_CG_PROTECTED)) /* nothing pushed: no per-syscall lookup */
        return 0;
    if (!(path_action(cg, name, 1) & act_bit))
        return 0;
    return kill_now(name, what);
}

/* Kill on write in a persistence directory (the persistence CLASS of the sandbox home:
 * PATH dirs, systemd and autostart dirs, fish conf.d, git hooks, user site-packages .pth):
 * `pdirs` maps a directory prefix (with its trailing '/') per cgroup to ACT_* bits: kill
 * (MT_ACT_KILL_WRITE), how deep a name may go (MT_ACT_ONE_LEVEL: a file directly in it,
 * else any depth) and whether only `.pth` names count (MT_ACT_PTH). One LPM-trie lookup per
 * writing open, rename, link or symlink onto a name, only in a cgroup with CG_PDIRS; the
 * guard clears MT_ACT_KILL_WRITE for a call that has consent to write there and sets it
 * back after. Same limits as kill_on_touch (the name as passed: relative and dirfd-relative
 * names do not match); a name too long for the key is judged on its head (fails closed:
 * killed when the head is in such a directory and shows no further '/').
 * what: 1 open, 5 rename onto, 6 link onto. */
struct pdir_key {
    u32 prefixlen; /* bits of what follows: pad, cgroup id, path */
    u32 pad;
    u64 cgroup_id;
    char path[MT_PDIR_PATH_MAX];
};
struct pdir_val {
    u32 len; /* bytes of the directory prefix, its '/' included */
    u32 act;
};
BPF_LPM_TRIE(pdirs, struct pdir_key, struct pdir_val, MT_MAX_PDIRS);
BPF_PERCPU_ARRAY(pdir_buf, struct pdir_key, 1);

static __always_inline int kill_in_pdir(const char *name, u32 what)
{
    u64 cg = bpf_get_current_cgroup_id();
    u8 *mode = cgroups.lookup(&cg);
    if (!mode || !(*mode & MT_CG_PDIRS))
        return 0;
    u32 zero = 0;
    struct pdir_key *k = pdir_buf.lookup(&zero);
    if (!k)
        return 0;
    __builtin_memset(k, 0, sizeof(*k));
    long n = bpf_probe_read_user_str(k->path, sizeof(k->path), name);
    if (n <= 1)
        return 0;
    k->prefixlen = (sizeof(*k) - sizeof(k->prefixlen)) * 8;
    k->cgroup_id = cg;
    struct pdir_val *v = pdirs.lookup(k);
    if (!v || !(v->act & MT_ACT_KILL_WRITE))
        return 0;
    u32 off = v->len;
    u32 end = n - 1; /* the name's length (or the head's, when cut) */
    if (end <= off)
        return 0; /* the directory itself */
    int cut = n >= (long)sizeof(k->path); /* its end unseen: no more checks, killed */
    u32 act = v->act;
    if ((act & MT_ACT_PTH) && !cut) { /* re-read from the name: no bounds for the verifier */
        u32 tail = 0;
        bpf_probe_read_user(&tail, sizeof(tail), name + end - 4);
        if (end < off + 4 || tail != ('.' | ('p' << 8) | ('t' << 16) | ('h' << 24)))
            return 0;
    }
    if (act & MT_ACT_ONE_LEVEL) { /* the part past the directory, from the key's start */
        if (bpf_probe_read_user_str(k->path, sizeof(k->path), name + off) <= 1)
            return 0;
        for (u32 i = 0; i < MT_PDIR_PATH_MAX; i++) {
            char c = k->path[i];
            if (c == 0)
                break;
            if (c == '/')
                return 0; /* deeper than the directory's files */
        }
    }
    return kill_now(name, what);
}

/* rename family: the source, else the destination */
static __always_inline void kill_on_rename(const char *oldname, const char *newname)
{
    if (!kill_on_touch(oldname, MT_ACT_KILL_MODIFY, 4) &&
        !kill_on_touch(newname, MT_ACT_KILL_MODIFY, 5))
        kill_in_pdir(newname, 5);
}

static __always_inline int on_exec(int dirfd, const char *filename, const char *const *argv)
{
    if (!watched())
        return 0;
    kill_on_touch(filename, MT_ACT_KILL_EXEC, 2);
    struct event *e = new_event(EV_EXEC);
    if (!e)
        return 0;
    e->a0 = dirfd;
    read_str1(e, filename);
    read_argv(e, argv);
    submit(e);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_execve)
{
    return on_exec(AT_FDCWD_, args->filename, args->argv);
}

TRACEPOINT_PROBE(syscalls, sys_enter_execveat)
{
    return on_exec(args->fd, args->filename, args->argv);
}

static __always_inline int on_exec_exit(long ret)
{
    if (!watched())
        return 0;
    sock_exec(ret); /* net transport */
    struct event *e = new_event(EV_EXEC_RESULT);
    if (!e)
        return 0;
    e->ret = ret;
    submit(e);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_execve) { return on_exec_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_execveat) { return on_exec_exit(args->ret); }

static __always_inline int remember_exit_code(int code)
{
    if (!watched())
        return 0;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    s32 c = code;
    exit_codes.update(&tgid, &c);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_exit_group) { return remember_exit_code(args->error_code); }
TRACEPOINT_PROBE(syscalls, sys_enter_exit) { return remember_exit_code(args->error_code); }

TRACEPOINT_PROBE(sched, sched_process_exit)
{
    if (!args->group_dead) { /* a thread ended: its tid may be reused by another process */
        u32 tid = (u32)bpf_get_current_pid_tgid();
        threads.delete(&tid);
        return 0;
    }
    if (!watched())
        return 0;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    sock_parent.delete(&tgid); /* net transport: a reused pid must not inherit */
    struct event *e = new_event(EV_EXIT);
    if (!e)
        return 0;
    s32 *c = exit_codes.lookup(&tgid);
    if (c) {
        e->a0 = *c;
        e->flags |= EVF_HAS_CODE;
        exit_codes.delete(&tgid);
    }
    submit(e);
    return 0;
}

/* ---- signals ------------------------------------------------------------------ *
 * kill, tkill, tgkill, pidfd_send_signal, rt_sigqueueinfo, rt_tgsigqueueinfo of a watched
 * task: one EV_SIGNAL record at the syscall's exit. The pids the sender passes are in its
 * own pid namespace; which tasks the kernel really signalled comes from
 * signal:signal_generate, which fires in the sender's context inside the syscall with the
 * target's global pid (paired through `sig_gen`, keyed by tid: a miss there is one lookup
 * per signal host-wide). Signal 0 (a probe) and refused sends generate nothing.
 * Where each target was is the kernel's view as the signal is generated (the raw
 * tracepoint's task: its cgroup against the sender's), never a user-space lookup that races
 * the target's exit; the task's pid, tgid, comm and cgroup are read at the running kernel's
 * BTF offsets (monitor/btf.py). Without BTF the tracepoint's own fields are used (no view)
 * and a thread's tid is mapped to its process through `threads` (created while watched).
 * Record: a0 = the target as passed (pid, tgid or pidfd); a1 = the tid passed (low 32
 * bits) | the first generation's TRACE_SIGNAL_* result (16 bits) << 32 | the view
 * (sig_generated's bits: target i in the sender's cgroup, its cgroup read, its signal
 * ignored; a target past the kept ones not in the sender's cgroup) << 48; a2 = signal;
 * a3 = the syscall (MT_SIG_KILL...) | generated count << 8 (capped) | the first target's
 * global tid << 32; addr = the first MT_SIG_TARGETS targets' global tgids (u32 each);
 * str1 = the first target's comm; ret = the syscall's result. */
struct sig_gen {
    u32 tgid[MT_SIG_TARGETS];
    u32 tid0;
    s32 result0;
    u32 count;
    u32 view; /* see sig_generated */
    char comm[16];
};
BPF_TABLE("lru_hash", u32, struct sig_gen, sig_gen, MT_MAX_PENDING);

static __always_inline int sig_enter(u32 code, s64 target, s64 tid, s64 sig)
{
    if (!watched())
        return 0;
    u32 me = (u32)bpf_get_current_pid_tgid();
    struct pending p = {};
    p.kind = EV_SIGNAL;
    p.a[0] = target;
    p.a[1] = tid;
    p.a[2] = sig;
    p.a[3] = code;
    pending.update(&me, &p);
    struct sig_gen g = {};
    sig_gen.update(&me, &g);
    return 0;
}

/* one generation: target i's tgid (and for the first its tid, result and comm) and view */
static __always_inline void sig_generated(struct sig_gen *g, u32 tid, u32 tgid, s32 result,
                                          u32 view)
{
    u32 i = g->count;
    if (result == MT_SIG_IGNORED)
        view |= MT_SGV_IGNORED;
    if (i < MT_SIG_TARGETS) {
        g->tgid[i & (MT_SIG_TARGETS - 1)] = tgid;
        g->view |= (view & MT_SGV_SAME) << i;
        g->view |= ((view & MT_SGV_KNOWN) >> 1) << (MT_SIG_TARGETS + i);
        g->view |= ((view & MT_SGV_IGNORED) >> 2) << (2 * MT_SIG_TARGETS + i);
    } else if ((view & MT_SGV_VIEW) && !(view & MT_SGV_SAME)) {
        g->view |= 1 << (3 * MT_SIG_TARGETS); /* one past those kept was not ours */
    }
    if (i == 0) {
        g->tid0 = tid;
        g->result0 = result;
    }
    if (i < 0xffffff)
        g->count = i + 1;
}

#if MT_BTF_TASK_CGROUPS >= 0
/* task->cgroups->dfl_cgrp->kn->id: what bpf_get_current_cgroup_id() returns for current */
static __always_inline u64 task_cgroup_id(const char *task)
{
    const char *p = 0;
    u64 id = 0;
    if (bpf_probe_read_kernel(&p, sizeof(p), task + MT_BTF_TASK_CGROUPS) || !p)
        return 0;
    if (bpf_probe_read_kernel(&p, sizeof(p), p + MT_BTF_CSS_SET_DFL_CGRP) || !p)
        return 0;
    if (bpf_probe_read_kernel(&p, sizeof(p), p + MT_BTF_CGROUP_KN) || !p)
        return 0;
    bpf_probe_read_kernel(&id, sizeof(id), p + MT_BTF_KERNFS_NODE_ID);
    return id;
}

/* TP_PROTO(int sig, struct kernel_siginfo *info, struct task_struct *task, int group,
 * int result) */
RAW_TRACEPOINT_PROBE(signal_generate)
{
    u32 me = (u32)bpf_get_current_pid_tgid();
    struct sig_gen *g = sig_gen.lookup(&me);
    if (!g)
        return 0;
    const char *task = (const char *)ctx->args[2];
    u32 tid = 0, tgid = 0;
    bpf_probe_read_kernel(&tid, sizeof(tid), task + MT_BTF_TASK_PID);
    bpf_probe_read_kernel(&tgid, sizeof(tgid), task + MT_BTF_TASK_TGID);
    u64 cg = task_cgroup_id(task);
    u32 view = MT_SGV_VIEW;
    if (cg)
        view |= MT_SGV_KNOWN | (cg == bpf_get_current_cgroup_id() ? MT_SGV_SAME : 0);
    if (g->count == 0)
        bpf_probe_read_kernel(g->comm, sizeof(g->comm), task + MT_BTF_TASK_COMM);
    sig_generated(g, tid, tgid ? tgid : tid, (s32)ctx->args[4], view);
    return 0;
}
#else
TRACEPOINT_PROBE(signal, signal_generate)
{
    u32 me = (u32)bpf_get_current_pid_tgid();
    struct sig_gen *g = sig_gen.lookup(&me);
    if (!g)
        return 0;
    u32 tid = args->pid;
    u32 *up = threads.lookup(&tid);
    if (g->count == 0)
        __builtin_memcpy(g->comm, args->comm, sizeof(g->comm));
    sig_generated(g, tid, up ? *up : tid, args->result, 0);
    return 0;
}
#endif

static __always_inline int sig_exit(long ret)
{
    struct pending p;
    if (!take(EV_SIGNAL, &p))
        return 0;
    u32 me = (u32)bpf_get_current_pid_tgid();
    struct sig_gen *g = sig_gen.lookup(&me);
    struct event *e = new_event(EV_SIGNAL);
    if (!e) {
        sig_gen.delete(&me);
        return 0;
    }
    e->ret = ret;
    e->a0 = (s32)p.a[0];
    e->a2 = (s32)p.a[2];
    u64 a1 = (u32)p.a[1];
    u64 a3 = p.a[3] & 0xff;
    if (g) {
        a1 |= (u64)((u32)g->result0 & 0xffff) << 32;
        a1 |= (u64)(g->view & 0xffff) << 48;
        a3 |= ((u64)g->count & 0xffffff) << 8;
        a3 |= (u64)g->tid0 << 32;
        __builtin_memcpy(e->addr, g->tgid, sizeof(e->addr));
        if (g->count) {
            __builtin_memcpy(e->data, g->comm, sizeof(g->comm));
            e->data[sizeof(g->comm) - 1] = 0;
            e->len1 = sizeof(g->comm);
        }
        sig_gen.delete(&me);
    }
    e->a1 = a1;
    e->a3 = a3;
    submit(e);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_kill) { return sig_enter(MT_SIG_KILL, args->pid, 0, args->sig); }
TRACEPOINT_PROBE(syscalls, sys_enter_tkill)
{
    return sig_enter(MT_SIG_TKILL, args->pid, args->pid, args->sig);
}
TRACEPOINT_PROBE(syscalls, sys_enter_tgkill)
{
    return sig_enter(MT_SIG_TGKILL, args->tgid, args->pid, args->sig);
}
/* the three whose records name siginfo_t are attached by name (kinds.NAMED_TRACEPOINTS) and
 * read at fixed offsets (syscall tracepoints: argument i at 16 + 8 * i): bcc would otherwise
 * need the kernel's signal headers, a second of compile time */
static __always_inline s64 sys_arg(void *ctx, int i)
{
    s64 v = 0;
    bpf_probe_read_kernel(&v, sizeof(v), (char *)ctx + 16 + 8 * i);
    return v;
}
int mt_sig_pidfd_enter(void *ctx)
{
    return sig_enter(MT_SIG_PIDFD, (s32)sys_arg(ctx, 0), 0, (s32)sys_arg(ctx, 1));
}
int mt_sig_queue_enter(void *ctx)
{
    return sig_enter(MT_SIG_QUEUE, (s32)sys_arg(ctx, 0), 0, (s32)sys_arg(ctx, 1));
}
int mt_sig_tgqueue_enter(void *ctx)
{
    return sig_enter(MT_SIG_TGQUEUE, (s32)sys_arg(ctx, 0), (s32)sys_arg(ctx, 1),
                     (s32)sys_arg(ctx, 2));
}
TRACEPOINT_PROBE(syscalls, sys_exit_kill) { return sig_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_tkill) { return sig_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_tgkill) { return sig_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_pidfd_send_signal) { return sig_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_rt_sigqueueinfo) { return sig_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_rt_tgsigqueueinfo) { return sig_exit(args->ret); }

/* ---- files -------------------------------------------------------------------- */

static __always_inline int open_enter(int dfd, const char *name, u64 flags, u64 mode, u64 how)
{
    if (!watched())
        return 0;
    /* any open of a KILL_OPEN path; only a writing open of a KILL_WRITE one (persistence
     * files: shells read them, an undeclared write plants code) */
    u64 oflags = flags;
    if (how) /* openat2: the flags are the first field of struct open_how */
        bpf_probe_read_user(&oflags, sizeof(oflags), (void *)how);
    if (!kill_on_touch(name, (oflags & MT_O_ANY_WRITE) ? (MT_ACT_KILL_OPEN | MT_ACT_KILL_WRITE)
                                                       : MT_ACT_KILL_OPEN, 1) &&
        (oflags & MT_O_ANY_WRITE))
        kill_in_pdir(name, 1);
    return enter6(EV_OPEN, dfd, (u64)name, flags, mode, how);
}

TRACEPOINT_PROBE(syscalls, sys_enter_open)
{
    return open_enter(AT_FDCWD_, args->filename, args->flags, args->mode, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_creat)
{
    return open_enter(AT_FDCWD_, args->pathname, MT_O_CREAT_WRONLY_TRUNC, args->mode, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_openat)
{
    return open_enter(args->dfd, args->filename, args->flags, args->mode, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_openat2)
{
    return open_enter(args->dfd, args->filename, 0, 0, (u64)args->how);
}

static __always_inline int open_exit(long ret)
{
    struct pending p;
    if (!take(EV_OPEN, &p))
        return 0;
    struct event *e = new_event(EV_OPEN);
    if (!e)
        return 0;
    e->ret = ret;
    e->a0 = (s32)p.a[0];
    e->a1 = p.a[2];
    e->a2 = p.a[3];
    if (p.a[4]) { /* openat2: struct open_how { u64 flags; u64 mode; u64 resolve; } */
        u64 how[2] = {};
        bpf_probe_read_user(how, sizeof(how), (void *)p.a[4]);
        e->a1 = how[0];
        e->a2 = how[1];
    }
    read_str1(e, (const char *)p.a[1]);
    submit(e);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_exit_open) { return open_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_creat) { return open_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_openat) { return open_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_openat2) { return open_exit(args->ret); }

/* One-path operations: a0 = dirfd, a1 = flag word, a2 = mode, str1 = path. */
static __always_inline int path_exit(u32 kind, long ret)
{
    struct pending p;
    if (!take(kind, &p))
        return 0;
    struct event *e = new_event(kind);
    if (!e)
        return 0;
    e->ret = ret;
    e->a0 = (s32)p.a[0];
    e->a1 = p.a[2];
    e->a2 = p.a[3];
    e->a3 = p.a[4];
    if (p.a[1])
        read_str1(e, (const char *)p.a[1]);
    else
        e->flags |= EVF_BYFD;
    submit(e);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_unlink)
{
    kill_on_touch(args->pathname, MT_ACT_KILL_MODIFY, 3);
    return enter6(EV_UNLINK, AT_FDCWD_, (u64)args->pathname, 0, 0, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_unlinkat)
{
    kill_on_touch(args->pathname, MT_ACT_KILL_MODIFY, 3);
    return enter6(EV_UNLINK, args->dfd, (u64)args->pathname, args->flag, 0, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_unlink) { return path_exit(EV_UNLINK, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_unlinkat) { return path_exit(EV_UNLINK, args->ret); }

TRACEPOINT_PROBE(syscalls, sys_enter_rmdir)
{
    return enter6(EV_RMDIR, AT_FDCWD_, (u64)args->pathname, 0, 0, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_rmdir) { return path_exit(EV_RMDIR, args->ret); }

TRACEPOINT_PROBE(syscalls, sys_enter_mkdir)
{
    return enter6(EV_MKDIR, AT_FDCWD_, (u64)args->pathname, 0, args->mode, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_mkdirat)
{
    return enter6(EV_MKDIR, args->dfd, (u64)args->pathname, 0, args->mode, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_mkdir) { return path_exit(EV_MKDIR, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_mkdirat) { return path_exit(EV_MKDIR, args->ret); }

TRACEPOINT_PROBE(syscalls, sys_enter_chmod)
{
    return enter6(EV_CHMOD, AT_FDCWD_, (u64)args->filename, 0, args->mode, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_fchmodat)
{
    return enter6(EV_CHMOD, args->dfd, (u64)args->filename, 0, args->mode, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_fchmodat2)
{
    return enter6(EV_CHMOD, args->dfd, (u64)args->filename, args->flags, args->mode, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_fchmod)
{
    return enter6(EV_CHMOD, AT_FDCWD_, 0, 0, args->mode, args->fd);
}
TRACEPOINT_PROBE(syscalls, sys_exit_chmod) { return path_exit(EV_CHMOD, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_fchmodat) { return path_exit(EV_CHMOD, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_fchmodat2) { return path_exit(EV_CHMOD, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_fchmod) { return path_exit(EV_CHMOD, args->ret); }

TRACEPOINT_PROBE(syscalls, sys_enter_chdir)
{
    return enter6(EV_CHDIR, AT_FDCWD_, (u64)args->filename, 0, 0, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_fchdir)
{
    return enter6(EV_CHDIR, AT_FDCWD_, 0, 0, 0, args->fd);
}
TRACEPOINT_PROBE(syscalls, sys_exit_chdir) { return path_exit(EV_CHDIR, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_fchdir) { return path_exit(EV_CHDIR, args->ret); }

/* rename family: a0 = olddirfd, a1 = newdirfd, a2 = flags, str1 = old, str2 = new */
TRACEPOINT_PROBE(syscalls, sys_enter_rename)
{
    kill_on_rename(args->oldname, args->newname);
    return enter6(EV_RENAME, AT_FDCWD_, (u64)args->oldname, AT_FDCWD_, (u64)args->newname, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_renameat)
{
    kill_on_rename(args->oldname, args->newname);
    return enter6(EV_RENAME, args->olddfd, (u64)args->oldname, args->newdfd, (u64)args->newname, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_renameat2)
{
    kill_on_rename(args->oldname, args->newname);
    return enter6(EV_RENAME, args->olddfd, (u64)args->oldname, args->newdfd, (u64)args->newname,
                  args->flags);
}

/* Two-name operations (rename, link, symlink): pending a[0] = dirfd of name 1, a[1] = name 1,
 * a[2] = dirfd of name 2, a[3] = name 2, a[4] = flags -> a0, str1, a1, str2, a2. */
static __always_inline int two_path_exit(u32 kind, long ret)
{
    struct pending p;
    if (!take(kind, &p))
        return 0;
    struct event *e = new_event(kind);
    if (!e)
        return 0;
    e->ret = ret;
    e->a0 = (s32)p.a[0];
    e->a1 = (s32)p.a[2];
    e->a2 = p.a[4];
    read_str1(e, (const char *)p.a[1]);
    read_str2(e, (const char *)p.a[3]);
    submit(e);
    return 0;
}
TRACEPOINT_PROBE(syscalls, sys_exit_rename) { return two_path_exit(EV_RENAME, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_renameat) { return two_path_exit(EV_RENAME, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_renameat2) { return two_path_exit(EV_RENAME, args->ret); }

/* links: str1 = the new name (a0 its dirfd), str2 = the symlink's text as given (EV_SYMLINK,
 * never resolved: it is read relative to the link's directory when followed) or the existing
 * file of a hard link (EV_LINK, a1 its dirfd, a2 linkat's flags) */
TRACEPOINT_PROBE(syscalls, sys_enter_symlink)
{
    kill_in_pdir(args->newname, 6);
    return enter6(EV_SYMLINK, AT_FDCWD_, (u64)args->newname, AT_FDCWD_, (u64)args->oldname, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_symlinkat)
{
    kill_in_pdir(args->newname, 6);
    return enter6(EV_SYMLINK, args->newdfd, (u64)args->newname, AT_FDCWD_, (u64)args->oldname, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_link)
{
    kill_in_pdir(args->newname, 6);
    return enter6(EV_LINK, AT_FDCWD_, (u64)args->newname, AT_FDCWD_, (u64)args->oldname, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_linkat)
{
    kill_in_pdir(args->newname, 6);
    return enter6(EV_LINK, args->newdfd, (u64)args->newname, args->olddfd, (u64)args->oldname,
                  args->flags);
}
TRACEPOINT_PROBE(syscalls, sys_exit_symlink) { return two_path_exit(EV_SYMLINK, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_symlinkat) { return two_path_exit(EV_SYMLINK, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_link) { return two_path_exit(EV_LINK, args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_linkat) { return two_path_exit(EV_LINK, args->ret); }

/* fd bookkeeping so user space can resolve dirfd-relative names */
TRACEPOINT_PROBE(syscalls, sys_enter_close)
{
    if (!watched())
        return 0;
    u64 key = ((bpf_get_current_pid_tgid() >> 32) << 32) | (u32)args->fd;
    dns_socks.delete(&key);
    sock_closed(args->fd);
    wire_close(args->fd); /* stdio integrity */
    struct event *e = new_event(EV_CLOSE);
    if (!e)
        return 0;
    e->a0 = args->fd;
    submit(e);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_dup) { return enter6(EV_DUP, args->fildes, 0, 0, 0, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_dup2) { return enter6(EV_DUP, args->oldfd, 0, 0, 0, 0); }
TRACEPOINT_PROBE(syscalls, sys_enter_dup3) { return enter6(EV_DUP, args->oldfd, 0, 0, 0, 0); }
static __always_inline int dup_exit(long ret)
{
    struct pending p = {}; /* initialised: clang may read a[0] on the not-taken path */
    if (!take(EV_DUP, &p))
        return 0;
    if (ret < 0)
        return 0;
    sock_dup(p.a[0], ret);
    wire_dup(p.a[0], ret); /* stdio integrity: a duplicate of the wire is the wire */
    struct event *e = new_event(EV_DUP);
    if (!e)
        return 0;
    e->ret = ret;
    e->a0 = (s32)p.a[0];
    submit(e);
    return 0;
}
TRACEPOINT_PROBE(syscalls, sys_exit_dup) { return dup_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_dup2) { return dup_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_dup3) { return dup_exit(args->ret); }

/* memfd_create: the fd's name, so that an exec of it (fexecve) names the memfd even when the
 * process is gone before user space can read /proc/<pid>/exe. str1 = the name as given. */
TRACEPOINT_PROBE(syscalls, sys_enter_memfd_create)
{
    return enter6(EV_MEMFD, (u64)args->uname, args->flags, 0, 0, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_memfd_create)
{
    struct pending p;
    if (!take(EV_MEMFD, &p))
        return 0;
    if (args->ret < 0)
        return 0;
    struct event *e = new_event(EV_MEMFD);
    if (!e)
        return 0;
    e->ret = args->ret;
    e->a1 = p.a[1];
    read_str1(e, (const char *)p.a[0]);
    submit(e);
    return 0;
}

/* ---- network ------------------------------------------------------------------ */

/* Reads a user sockaddr into e (a1 = family, a2 = port, addr). Returns the port or -1. */
static __always_inline int read_sockaddr(struct event *e, const void *sa)
{
    u8 buf[24] = {};
    if (!sa || bpf_probe_read_user(buf, sizeof(buf), sa) < 0)
        return -1;
    u16 family = buf[0] | (buf[1] << 8);
    u16 port = (buf[2] << 8) | buf[3];
    e->a1 = family;
    e->a2 = port;
    if (family == 2) {
        __builtin_memcpy(e->addr, &buf[4], 4);
    } else if (family == 10) {
        __builtin_memcpy(e->addr, &buf[8], 16);
    } else {
        return -1;
    }
    return port;
}

TRACEPOINT_PROBE(syscalls, sys_enter_connect)
{
    return enter6(EV_CONNECT, args->fd, (u64)args->uservaddr, args->addrlen, 0, 0);
}

/* An AF_UNIX connect (e->a1 == 1): str1 = sun_path as passed, addrlen - 2 bytes of it (at
 * most 108, raw: an abstract name starts with a NUL and may hold more); a2 = 0. */
static __always_inline void unix_connect(struct event *e, const char *sa, u64 addrlen)
{
    e->a2 = 0;
    u64 n = addrlen > 2 ? addrlen - 2 : 0;
    if (n > 108)
        n = 108;
    n &= 127;
    if (n && bpf_probe_read_user(e->data, n, sa + 2) == 0)
        e->len1 = n;
    submit(e);
}
TRACEPOINT_PROBE(syscalls, sys_exit_connect)
{
    struct pending p;
    if (!take(EV_CONNECT, &p))
        return 0;
    struct event *e = new_event(EV_CONNECT);
    if (!e)
        return 0;
    e->ret = args->ret;
    e->a0 = (s32)p.a[0];
    int port = read_sockaddr(e, (const void *)p.a[1]);
    e->a3 = sock_connected(e, p.a[0], port);
    if (port < 0) {
        if (e->a1 == 1)
            unix_connect(e, (const char *)p.a[1], p.a[2]);
        return 0;
    }
    if (port == MT_DNS_PORT) {
        u64 key = ((u64)e->pid << 32) | (u32)p.a[0];
        u8 one = 1;
        dns_socks.update(&key, &one);
    }
    submit(e);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_accept)
{
    return enter6(EV_ACCEPT, args->fd, (u64)args->upeer_sockaddr, 0, 0, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_accept4)
{
    return enter6(EV_ACCEPT, args->fd, (u64)args->upeer_sockaddr, 0, 0, 0);
}
static __always_inline int accept_exit(long ret)
{
    struct pending p = {}; /* initialised: clang may read a[0] on the not-taken path */
    if (!take(EV_ACCEPT, &p))
        return 0;
    if (ret < 0)
        return 0;
    u8 transport = sock_accepted(p.a[0], ret);
    struct event *e = new_event(EV_ACCEPT);
    if (!e)
        return 0;
    e->a3 = transport;
    e->ret = ret;
    e->a0 = (s32)p.a[0];
    if (read_sockaddr(e, (const void *)p.a[1]) < 0)
        e->a1 = 0;
    submit(e);
    return 0;
}
TRACEPOINT_PROBE(syscalls, sys_exit_accept) { return accept_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_accept4) { return accept_exit(args->ret); }

/* DNS: payloads to/from port 53, by explicit address or by a socket connected to it. */
static __always_inline int dns_exit(u32 kind, long ret, u64 fd, const void *buf, u64 len,
                                    const void *sa)
{
    if (ret <= 0)
        return 0;
    struct event *e = new_event(kind);
    if (!e)
        return 0;
    int port = read_sockaddr(e, sa);
    if (port != MT_DNS_PORT) {
        u64 key = ((u64)e->pid << 32) | (u32)fd;
        if (!dns_socks.lookup(&key))
            return 0;
        e->a1 = 0;
        e->a2 = 0;
    }
    u64 n = len < (u64)ret ? len : (u64)ret;
    if (n > MT_DNS_MAX)
        n = MT_DNS_MAX;
    if (n == 0)
        return 0;
    if (bpf_probe_read_user(e->data, n, buf) < 0)
        return 0;
    e->len1 = n;
    e->ret = ret;
    e->a0 = fd;
    submit(e);
    return 0;
}

TRACEPOINT_PROBE(syscalls, sys_enter_sendto)
{
    return enter6(EV_DNS_SEND, args->fd, (u64)args->buff, args->len, (u64)args->addr, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_sendto)
{
    struct pending p;
    if (!take(EV_DNS_SEND, &p))
        return 0;
    long sent = args->ret;
    sock_sent(p.a[0], sent >= 0 ? 1 : 0, (void *)p.a[3], sent > 0 ? sent : 0);
    return dns_exit(EV_DNS_SEND, args->ret, p.a[0], (void *)p.a[1], p.a[2], (void *)p.a[3]);
}
TRACEPOINT_PROBE(syscalls, sys_enter_recvfrom)
{
    return enter6(EV_DNS_RECV, args->fd, (u64)args->ubuf, args->size, (u64)args->addr, 0);
}
TRACEPOINT_PROBE(syscalls, sys_exit_recvfrom)
{
    struct pending p;
    if (!take(EV_DNS_RECV, &p))
        return 0;
    return dns_exit(EV_DNS_RECV, args->ret, p.a[0], (void *)p.a[1], p.a[2], (void *)p.a[3]);
}

/* struct user_msghdr: name@0, namelen@8, iov@16, iovlen@24; struct iovec: base@0, len@8 */
static __always_inline int msg_exit(u32 kind, long ret, u64 fd, const void *msg)
{
    u64 hdr[4] = {};
    if (bpf_probe_read_user(hdr, sizeof(hdr), msg) < 0 || hdr[3] == 0)
        return 0;
    u64 iov[2] = {};
    if (bpf_probe_read_user(iov, sizeof(iov), (void *)hdr[2]) < 0)
        return 0;
    return dns_exit(kind, ret, fd, (void *)iov[0], iov[1], (void *)hdr[0]);
}

TRACEPOINT_PROBE(syscalls, sys_enter_sendmsg)
{
    return enter6(EV_DNS_SEND, args->fd, (u64)args->msg, 0, 0, 1);
}
TRACEPOINT_PROBE(syscalls, sys_exit_sendmsg)
{
    struct pending p;
    if (!take(EV_DNS_SEND, &p))
        return 0;
    long sent = args->ret;
    sock_sent(p.a[0], sent >= 0 ? 1 : 0, msg_name((void *)p.a[1]), sent > 0 ? sent : 0);
    return msg_exit(EV_DNS_SEND, args->ret, p.a[0], (void *)p.a[1]);
}
TRACEPOINT_PROBE(syscalls, sys_enter_recvmsg)
{
    return enter6(EV_DNS_RECV, args->fd, (u64)args->msg, 0, 0, 1);
}
TRACEPOINT_PROBE(syscalls, sys_exit_recvmsg)
{
    struct pending p;
    if (!take(EV_DNS_RECV, &p))
        return 0;
    return msg_exit(EV_DNS_RECV, args->ret, p.a[0], (void *)p.a[1]);
}

struct mmsg_sum {
    u64 total;
    u64 named;
    u64 first;
    u32 n;
};

/* message i (a constant) of a sendmmsg into its record slot */
static __always_inline void mmsg_one(struct event *e, const char *m, long ret, int i,
                                     struct mmsg_sum *sum)
{
    if (i >= ret)
        return;
    const char *h = m + 64 * i;
    u64 name = 0;
    bpf_probe_read_user(&name, sizeof(name), h);
    u32 len = 0;
    bpf_probe_read_user(&len, sizeof(len), h + 56);
    sum->total += len;
    sum->named |= name;
    if (i == 0)
        sum->first = name;
    u64 *slot = (u64 *)(e->data + 32 * i);
    slot[0] = 0;
    slot[1] = 0;
    slot[2] = 0;
    if (name)
        bpf_probe_read_user(slot, 24, (const void *)name);
    slot[3] = len;
    sum->n = i + 1;
}

/* sendmmsg's `ret` messages (struct mmsghdr: a 56-byte msghdr, then msg_len). Named
 * destinations: one EV_NET_SENT record with EVF_MMSG (a0 fd, a3 messages sent, ret
 * transport), data = the first MT_MMSG_MAX messages' {raw sockaddr (24 bytes), u32 len,
 * u32 0} (32 bytes each; family 0: no name), counted each to its own destination by the
 * builder, the rest to the last one's. Unnamed (a connected socket): all against its
 * peer, through the socket's counters. One record, no per-message helpers: the verifier
 * walks the loop without branching on each message. */
static __always_inline void mmsg_sent(u64 fd, long ret, const char *m)
{
    if (ret < 1)
        return;
    u64 key = sock_key(fd);
    struct sock_info *si = socks.lookup(&key);
    u8 t = si ? si->transport : 0;
    struct event *e = new_event(EV_NET_SENT);
    if (!e)
        return;
    struct mmsg_sum sum = {};
    /* spelled out: a loop lets clang count by pointer, which the verifier cannot bound */
    mmsg_one(e, m, ret, 0, &sum);
    mmsg_one(e, m, ret, 1, &sum);
    mmsg_one(e, m, ret, 2, &sum);
    mmsg_one(e, m, ret, 3, &sum);
    mmsg_one(e, m, ret, 4, &sum);
    mmsg_one(e, m, ret, 5, &sum);
    mmsg_one(e, m, ret, 6, &sum);
    mmsg_one(e, m, ret, 7, &sum);
    u64 named = sum.named, first = sum.first, total = sum.total;
    u32 n = sum.n;
    if (named) {
        e->a0 = fd;
        e->a3 = ret;
        e->ret = t;
        e->flags |= EVF_MMSG;
        e->len1 = 32 * n;
        submit(e);
    }
    if (!first)
        sock_sent(fd, ret, NULL, total); /* reuses the per-CPU event: after the submit */
}

/* sendmmsg: ret = messages sent; struct mmsghdr is 64 bytes (msghdr 56 + len + pad).
 * glibc's resolver sends its A and AAAA queries as one sendmmsg of two. */
TRACEPOINT_PROBE(syscalls, sys_enter_sendmmsg)
{
    return enter6(EV_DNS_SEND, args->fd, (u64)args->mmsg, 0, 0, 2);
}
TRACEPOINT_PROBE(syscalls, sys_exit_sendmmsg)
{
    struct pending p;
    if (!take(EV_DNS_SEND, &p))
        return 0;
    long ret = args->ret;
    const char *m = (const char *)p.a[1];
    mmsg_sent(p.a[0], ret, m);
    if (ret < 1)
        return 0;
    u32 len0 = 0;
    bpf_probe_read_user(&len0, sizeof(len0), m + 56);
    msg_exit(EV_DNS_SEND, len0, p.a[0], m);
    if (ret < 2)
        return 0;
    u32 len1 = 0;
    bpf_probe_read_user(&len1, sizeof(len1), m + 64 + 56);
    msg_exit(EV_DNS_SEND, len1, p.a[0], m + 64);
    return 0;
}

/* ---- blind spots ---------------------------------------------------------------- */

/* io_uring submits opens, connects and sends without syscalls this program traces, and
 * open_by_handle_at opens a file with no name: report both so the tree can say it is blind. */
static __always_inline int blind(u32 what)
{
    if (!watched())
        return 0;
    struct event *e = new_event(EV_BLIND);
    if (!e)
        return 0;
    e->a0 = what;
    submit(e);
    return 0;
}
TRACEPOINT_PROBE(syscalls, sys_enter_io_uring_setup) { return blind(1); }
TRACEPOINT_PROBE(syscalls, sys_enter_open_by_handle_at) { return blind(2); }
