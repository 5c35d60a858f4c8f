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

/* Wakeups cost the traced task an irq_work each: high-volume kinds (open, close, dup)
 * wake the reader only every MT_WAKE_EVERY-th record per CPU; every other kind forces a
 * wakeup (adaptive wakeups would be skipped behind unsignalled records), so a process
 * exit always reaches a settling window at once. Opens in an eager cgroup (value bit
 * MT_CG_EAGER: online rules are on) wake it at once when they write or name a path the
 * guard marked MT_ACT_WAKE. */
static __always_inline u64 wake_flags(struct event *e)
{
    u16 kind = e->kind;
    if (kind != EV_OPEN && kind != EV_CLOSE && kind != EV_DUP)
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
    if (events.ringbuf_output(e, HDR_SIZE + n, wake_flags(e)) != 0)
        count_drop(e->kind);
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

/* ---- processes ---------------------------------------------------------------- */

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
    if (flags & CLONE_THREAD_)
        return 0;
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

/* Kill on touch: a protected exact path named by open/openat/openat2/creat/execve(at) is
 * answered with SIGKILL in the syscall-enter tracepoint, plus an EV_KILLED record (a0 = 1
 * open, 2 exec; str1 = path). The process dies on its way back to user space: it never
 * sees the fd (not one byte read) and an exec'd program never runs an instruction.
 * What it cannot prevent:
 *  - the syscall itself still runs: an O_TRUNC open has truncated, an O_CREAT one created;
 *  - only the name string as passed is compared, whole: relative names, dirfd-relative
 *    names, `.`/`..`/`//` spellings, symlinks, hard links, /proc/self/root/... and bind
 *    mounts of the same file do not match (the online rules see resolved names; symlinks
 *    and links are left to post-verification);
 *  - the string is read at enter: another thread may rewrite it before the kernel copies
 *    it (TOCTOU), and an unreadable (not resident) string is no match;
 *  - other ways to the data: fds opened before the call, unlink/rename/link/truncate by
 *    name, open_by_handle_at, io_uring (reported as blind spots), a copy of a forbidden
 *    program or `ld.so <program>`;
 *  - paths of MT_KEY_PATH_MAX bytes or more (refused when pushed). */
static __always_inline void kill_on_touch(const char *name, u32 act_bit, u32 what)
{
    u64 cg = bpf_get_current_cgroup_id();
    u8 *mode = cgroups.lookup(&cg);
    if (!mode || !(*mode & MT_CG_PROTECTED)) /* nothing pushed: no per-syscall lookup */
        return;
    if (!(path_action(cg, name, 1) & act_bit))
        return;
    bpf_send_signal(9);
    struct event *e = new_event(EV_KILLED);
    if (!e)
        return;
    e->a0 = what;
    read_str1(e, name);
    submit(e);
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
    if (!args->group_dead || !watched())
        return 0;
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
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

/* ---- files -------------------------------------------------------------------- */

static __always_inline int open_enter(int dfd, const char *name, u64 flags, u64 mode, u64 how)
{
    if (!watched())
        return 0;
    kill_on_touch(name, MT_ACT_KILL_OPEN, 1);
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
    return enter6(EV_UNLINK, AT_FDCWD_, (u64)args->pathname, 0, 0, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_unlinkat)
{
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
    return enter6(EV_RENAME, AT_FDCWD_, (u64)args->oldname, AT_FDCWD_, (u64)args->newname, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_renameat)
{
    return enter6(EV_RENAME, args->olddfd, (u64)args->oldname, args->newdfd, (u64)args->newname, 0);
}
TRACEPOINT_PROBE(syscalls, sys_enter_renameat2)
{
    return enter6(EV_RENAME, args->olddfd, (u64)args->oldname, args->newdfd, (u64)args->newname,
                  args->flags);
}

static __always_inline int rename_exit(long ret)
{
    struct pending p;
    if (!take(EV_RENAME, &p))
        return 0;
    struct event *e = new_event(EV_RENAME);
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
TRACEPOINT_PROBE(syscalls, sys_exit_rename) { return rename_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_renameat) { return rename_exit(args->ret); }
TRACEPOINT_PROBE(syscalls, sys_exit_renameat2) { return rename_exit(args->ret); }

/* fd bookkeeping so user space can resolve dirfd-relative names */
TRACEPOINT_PROBE(syscalls, sys_enter_close)
{
    if (!watched())
        return 0;
    u64 key = ((bpf_get_current_pid_tgid() >> 32) << 32) | (u32)args->fd;
    dns_socks.delete(&key);
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
    struct pending p;
    if (!take(EV_DUP, &p))
        return 0;
    if (ret < 0)
        return 0;
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
    return enter6(EV_CONNECT, args->fd, (u64)args->uservaddr, 0, 0, 0);
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
    if (port < 0)
        return 0;
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
    struct pending p;
    if (!take(EV_ACCEPT, &p))
        return 0;
    if (ret < 0)
        return 0;
    struct event *e = new_event(EV_ACCEPT);
    if (!e)
        return 0;
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
