/* Network policy: a kernel-enforced allowlist for a sandbox's cgroup (issue 13).
 *
 * Included at the end of monitor.bpf.c (one BPF module: refusals go into its `events` ring,
 * so they land in the call's behavior tree). Loaded and attached per cgroup by
 * mtguard_rt/monitor/egress.py; nothing here runs until a sandbox has an allowlist.
 *
 * - cgroup/connect4|6 and cgroup/sendmsg4|6: a connect() or an unconnected sendmsg() to an
 *   address not in `np_addrs` fails at once with EPERM (a dropped SYN would hang for minutes).
 * - cgroup_skb egress: every packet leaving to an address not allowed is dropped (raw, ICMP,
 *   anything the socket hooks do not see); ingress: every packet from one is dropped.
 * - A resolver entry (MT_NP_DNS) is allowed for port 53 only. A DNS answer from a resolver to
 *   a question whose name, or a parent of it, is in `np_names` adds its A/AAAA addresses to
 *   `np_addrs` in the ingress program (one tail call per answer record, mt_np_answer),
 *   before the socket can read the answer: no race.
 * - Loopback passes only between the sandbox's own sockets: to (or, for packets, from) a
 *   port a socket of the cgroup bound on loopback or a wildcard address (post_bind hooks).
 * Only the UAPI contexts (bpf_sock_addr, bpf_sock, __sk_buff) and packet bytes are read.
 */

struct np_key {
    u64 cgroup_id;
    u32 family;     /* AF_INET (2) or AF_INET6 (10) */
    u32 pad;
    u8 addr[16];
};

struct np_name {
    u64 cgroup_id;
    u8 name[MT_DNAME_MAX];  /* wire format, lower case, NUL-padded */
};

struct np_seen {
    u64 last_ns;
    u64 count;
};

/* a port a socket of the cgroup bound on loopback or a wildcard address */
struct np_port {
    u64 cgroup_id;
    u32 port;
    u32 pad;
};

BPF_HASH(np_addrs, struct np_key, u32, MT_NP_MAX_ADDRS);
BPF_HASH(np_ports, struct np_port, u8, MT_NP_MAX_PORTS);
BPF_HASH(np_names, struct np_name, u8, MT_NP_MAX_NAMES);
BPF_TABLE("lru_hash", struct np_key, struct np_seen, np_reported, MT_NP_MAX_ADDRS);
/* a question name, twice the width it is read to: a clang-elided index mask stays in bounds */
struct np_qbuf {
    u8 name[2 * MT_DNAME_MAX];
    u32 answers;  /* offset of the next answer record, kept in memory (see np_learn) */
    u32 end;      /* length of the question name */
    u32 left;     /* answer records still to read (mt_np_answer) */
    u64 cg;       /* the cgroup they are allowed for */
};
BPF_PERCPU_ARRAY(np_scratch, struct np_name, 1);  /* ingress (softirq) only */
BPF_PERCPU_ARRAY(np_qscratch, struct np_qbuf, 1);
BPF_PROG_ARRAY(np_tail, 1);  /* [0]: mt_np_answer, set by egress.py */

/* an index into a question buffer, masked so that the verifier sees the bound (the empty asm
 * stops clang from dropping a mask it can prove redundant) */
static __always_inline u32 np_idx(u32 i)
{
    asm volatile("" : "+r"(i));
    return i & (MT_DNAME_MAX - 1);
}

#define NP_AF_INET 2
#define NP_AF_INET6 10
#define NP_IPPROTO_ICMP 1
#define NP_IPPROTO_TCP 6
#define NP_IPPROTO_UDP 17
#define NP_IPPROTO_ICMPV6 58

static __always_inline u32 np_transport(u32 proto)
{
    if (proto == NP_IPPROTO_TCP)
        return MT_TR_TCP;
    if (proto == NP_IPPROTO_UDP)
        return MT_TR_UDP;
    if (proto == NP_IPPROTO_ICMP || proto == NP_IPPROTO_ICMPV6)
        return MT_TR_ICMP;
    return MT_TR_OTHER;
}

/* Allowed? `port` is the peer's port (host order), `proto` an IPPROTO_* (0: unknown). */
static __always_inline int np_allowed(struct np_key *k, u32 port, u32 proto)
{
    u32 *v = np_addrs.lookup(k);
    if (!v)
        return 0;
    if (*v & MT_NP_ANY)
        return 1;
    return (*v & MT_NP_DNS) && port == MT_DNS_PORT &&
           (proto == NP_IPPROTO_UDP || proto == NP_IPPROTO_TCP || proto == 0);
}

/* Loopback between the sandbox's own sockets: a loopback peer whose port (or, for packets,
 * either port) a socket of this cgroup bound. The host's own loopback services stay refused. */
static __always_inline int np_loopback(struct np_key *k)
{
    if (k->family == NP_AF_INET)
        return k->addr[0] == 127;
    u64 hi = 0, lo = 0;
    __builtin_memcpy(&hi, k->addr, 8);
    __builtin_memcpy(&lo, k->addr + 8, 8);
    return hi == 0 && lo == 0x0100000000000000ULL;  /* ::1, bytes in network order */
}

static __always_inline int np_own_port(u64 cg, u32 port)
{
    if (port == 0)
        return 0;
    struct np_port p = {.cgroup_id = cg, .port = port};
    return np_ports.lookup(&p) != NULL;
}

static __always_inline void np_bound(u32 port, int local)
{
    if (!port || !local)
        return;
    struct np_port p = {.cgroup_id = bpf_get_current_cgroup_id(), .port = port};
    u8 one = 1;
    np_ports.update(&p, &one);
}

/* post_bind4|6: remember the port of a bind to loopback or a wildcard address (kept until
 * the policy is detached: a port the sandbox chose once) */
int mt_np_bind4(struct bpf_sock *sk)
{
    u32 ip = sk->src_ip4;
    np_bound(sk->src_port, ip == 0 || (bpf_ntohl(ip) >> 24) == 127);
    return 1;
}

int mt_np_bind6(struct bpf_sock *sk)
{
    u32 a = sk->src_ip6[0], b = sk->src_ip6[1], c = sk->src_ip6[2], d = sk->src_ip6[3];
    int any = (a | b | c | d) == 0;
    int lo6 = a == 0 && b == 0 && c == 0 && d == bpf_htonl(1);
    int mapped = a == 0 && b == 0 && c == bpf_htonl(0xffff) && (bpf_ntohl(d) >> 24) == 127;
    np_bound(sk->src_port, any || lo6 || mapped);
    return 1;
}

/* One EV_NET_REFUSED record: a0 where (an MT_NP_AT_CONNECT ... value), a1 family, a2 port,
 * a3 transport, ret refused so far for this (cgroup, address) when packets are counted. */
static __always_inline void np_report(struct np_key *k, u32 where, u32 port, u32 transport,
                                      u64 count, int with_task)
{
    struct event *e = events.ringbuf_reserve(HDR_SIZE);
    if (!e) {
        count_drop(EV_NET_REFUSED);
        return;
    }
    u64 id = with_task ? bpf_get_current_pid_tgid() : 0;
    e->ts_ns = bpf_ktime_get_ns();
    e->cgroup_id = k->cgroup_id;
    e->ret = count;
    e->a0 = where;
    e->a1 = k->family;
    e->a2 = port;
    e->a3 = transport;
    e->pid = id >> 32;
    e->tid = (u32)id;
    e->uid = with_task ? (u32)bpf_get_current_uid_gid() : 0;
    e->kind = EV_NET_REFUSED;
    e->flags = 0;
    e->len1 = 0;
    e->len2 = 0;
    __builtin_memcpy(e->addr, k->addr, sizeof(e->addr));
    events.ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

/* Packets are refused in bursts (retransmits, floods): report the first, then at most one
 * record per MT_NP_REPORT_NS per (cgroup, address), carrying the count. */
static __always_inline void np_report_packet(struct np_key *k, u32 where, u32 port, u32 proto,
                                             int with_task)
{
    u64 now = bpf_ktime_get_ns();
    struct np_seen *s = np_reported.lookup(k);
    if (s) {
        s->count += 1;
        if (now - s->last_ns < MT_NP_REPORT_NS)
            return;
        s->last_ns = now;
        np_report(k, where, port, np_transport(proto), s->count, with_task);
        return;
    }
    struct np_seen fresh = {.last_ns = now, .count = 1};
    np_reported.update(k, &fresh);
    np_report(k, where, port, np_transport(proto), 1, with_task);
}

/* ---- socket hooks: connect() and unconnected sendmsg() ------------------------------ */

static __always_inline int np_sock4(struct bpf_sock_addr *ctx, u32 where)
{
    struct np_key k = {};
    k.cgroup_id = bpf_get_current_cgroup_id();
    k.family = NP_AF_INET;
    u32 ip = ctx->user_ip4;
    __builtin_memcpy(k.addr, &ip, 4);
    u32 port = bpf_ntohs((u16)ctx->user_port);
    u32 proto = ctx->type == 1 ? NP_IPPROTO_TCP : (ctx->type == 2 ? ctx->protocol : 0);
    if (ctx->type == 2 && proto == 0)
        proto = NP_IPPROTO_UDP;
    if (np_allowed(&k, port, proto) || (np_loopback(&k) && np_own_port(k.cgroup_id, port)))
        return 1;
    np_report(&k, where, port, np_transport(proto), 0, 1);
    return 0;
}

static __always_inline int np_sock6(struct bpf_sock_addr *ctx, u32 where)
{
    struct np_key k = {};
    k.cgroup_id = bpf_get_current_cgroup_id();
    u32 w0 = ctx->user_ip6[0], w1 = ctx->user_ip6[1], w2 = ctx->user_ip6[2],
        w3 = ctx->user_ip6[3];
    if (w0 == 0 && w1 == 0 && w2 == bpf_htonl(0xffff)) { /* v4-mapped: the IPv4 policy */
        k.family = NP_AF_INET;
        __builtin_memcpy(k.addr, &w3, 4);
    } else {
        k.family = NP_AF_INET6;
        __builtin_memcpy(k.addr, &w0, 4);
        __builtin_memcpy(k.addr + 4, &w1, 4);
        __builtin_memcpy(k.addr + 8, &w2, 4);
        __builtin_memcpy(k.addr + 12, &w3, 4);
    }
    u32 port = bpf_ntohs((u16)ctx->user_port);
    u32 proto = ctx->type == 1 ? NP_IPPROTO_TCP : (ctx->type == 2 ? ctx->protocol : 0);
    if (ctx->type == 2 && proto == 0)
        proto = NP_IPPROTO_UDP;
    if (np_allowed(&k, port, proto) || (np_loopback(&k) && np_own_port(k.cgroup_id, port)))
        return 1;
    np_report(&k, where, port, np_transport(proto), 0, 1);
    return 0;
}

int mt_np_connect4(struct bpf_sock_addr *ctx) { return np_sock4(ctx, MT_NP_AT_CONNECT); }
int mt_np_connect6(struct bpf_sock_addr *ctx) { return np_sock6(ctx, MT_NP_AT_CONNECT); }
int mt_np_sendmsg4(struct bpf_sock_addr *ctx) { return np_sock4(ctx, MT_NP_AT_SENDMSG); }
int mt_np_sendmsg6(struct bpf_sock_addr *ctx) { return np_sock6(ctx, MT_NP_AT_SENDMSG); }

/* ---- packets ---------------------------------------------------------------------- */

/* The peer of a packet: its address (source on ingress, destination on egress), port,
 * protocol and the offset of its L4 header. Returns 0 for a packet that is not IP. */
static __always_inline int np_peer(struct __sk_buff *skb, int ingress, struct np_key *k,
                                   u32 *port, u32 *local, u32 *proto, u32 *l4)
{
    k->cgroup_id = bpf_skb_cgroup_id(skb);
    if (skb->protocol == bpf_htons(0x0800)) {
        u8 h[20];
        if (bpf_skb_load_bytes(skb, 0, h, sizeof(h)))
            return 0;
        k->family = NP_AF_INET;
        __builtin_memcpy(k->addr, ingress ? h + 12 : h + 16, 4);
        *proto = h[9];
        *l4 = (h[0] & 0xf) * 4;
    } else if (skb->protocol == bpf_htons(0x86DD)) {
        u8 h[40];
        if (bpf_skb_load_bytes(skb, 0, h, sizeof(h)))
            return 0;
        k->family = NP_AF_INET6;
        __builtin_memcpy(k->addr, ingress ? h + 8 : h + 24, 16);
        *proto = h[6];
        *l4 = 40;
    } else {
        return 0;
    }
    *port = 0;
    *local = 0;
    if (*proto == NP_IPPROTO_TCP || *proto == NP_IPPROTO_UDP) {
        u8 ports[4];
        if (bpf_skb_load_bytes(skb, *l4, ports, sizeof(ports)) == 0) {
            u32 src = (u32)ports[0] << 8 | ports[1], dst = (u32)ports[2] << 8 | ports[3];
            *port = ingress ? src : dst;
            *local = ingress ? dst : src;
        }
    }
    return 1;
}

int mt_np_egress(struct __sk_buff *skb)
{
    struct np_key k = {};
    u32 port = 0, local = 0, proto = 0, l4 = 0;
    if (!np_peer(skb, 0, &k, &port, &local, &proto, &l4))
        return 0;  /* inet sockets only send IP: anything else is refused */
    if (np_allowed(&k, port, proto))
        return 1;
    if (np_loopback(&k) && (np_own_port(k.cgroup_id, port) || np_own_port(k.cgroup_id, local)))
        return 1;  /* to the sandbox's own listener, or its listener's replies */
    /* the sender is current when it is in the socket's cgroup (not a timer or softirq) */
    np_report_packet(&k, MT_NP_AT_EGRESS, port, proto,
                     bpf_get_current_cgroup_id() == k.cgroup_id);
    return 0;
}

/* A DNS response (UDP payload at `off`): when its question is an allowed name (or under
 * one), allow the addresses of its A/AAAA answers for this cgroup. */
static __always_inline void np_learn(struct __sk_buff *skb, u64 cg, u32 off)
{
    u8 hdr[12];
    if (bpf_skb_load_bytes(skb, off, hdr, sizeof(hdr)))
        return;
    if (!(hdr[2] & 0x80) || (hdr[2] & 0x78))
        return;  /* a query, or not a standard QUERY */
    u32 qd = (u32)hdr[4] << 8 | hdr[5], an = (u32)hdr[6] << 8 | hdr[7];
    if (qd != 1 || an == 0)
        return;
    u32 zero = 0;
    struct np_qbuf *q = np_qscratch.lookup(&zero);
    struct np_name *key = np_scratch.lookup(&zero);
    if (!q || !key)
        return;
    u32 qoff = off + 12;
    if (skb->len <= qoff)
        return;
    u32 n = skb->len - qoff;
    if (n > MT_DNAME_MAX - 1)
        n = MT_DNAME_MAX - 1;
    n = np_idx(n);
    if (n == 0)
        return;
    __builtin_memset(q->name, 0, MT_DNAME_MAX);
    if (bpf_skb_load_bytes(skb, qoff, q->name, n))
        return;
    u32 end = 0, pos = 0;
    for (int i = 0; i < MT_DNAME_LABELS_MAX; i++) {
        if (pos >= MT_DNAME_MAX)
            return;
        u8 l = q->name[np_idx(pos)];
        if (l == 0) {
            end = pos + 1;
            break;
        }
        if (l > 63)
            return;  /* a compression pointer in the question: not learned */
        pos += l + 1;
    }
    if (end == 0 || end > n)
        return;
    q->end = end;
    /* lower case, 8 bytes at a time and branch-free (a branch per byte is too many states
     * for the verifier); length bytes (<= 63) are not letters and stay as they are */
    u64 *w = (u64 *)q->name;
#pragma clang loop unroll(disable)
    for (int j = 0; j < MT_DNAME_MAX / 8; j++) {
        u64 x = w[j], h = x & 0x7f7f7f7f7f7f7f7fULL;
        u64 ge_a = h + 0x3f3f3f3f3f3f3f3fULL; /* + 0x80 - 'A' */
        u64 gt_z = h + 0x2525252525252525ULL;                               /* + 0x7f - 'Z' */
        u64 upper = ~x & (ge_a ^ gt_z) & 0x8080808080808080ULL;
        w[j] = x | (upper >> 2);
    }
    /* read back after the suffix walk: a value from memory carries no bounds, so every way
     * out of the walks reaches the answer loop in one verifier state, not a product of them */
    end = *(volatile u32 *)&q->end;
    q->answers = qoff + end + 4;  /* qtype, qclass */
    /* the name, then each parent (a label start) up to MT_DNAME_SUFFIXES of them */
    int allowed = 0;
    pos = 0;
    for (int i = 0; i < MT_DNAME_SUFFIXES; i++) {
        if (pos + 1 >= end)
            break;  /* the root alone never matches */
        __builtin_memset(key, 0, sizeof(*key));
        key->cgroup_id = cg;
        u32 len = np_idx(end - pos);
        if (len == 0)
            break;
        if (bpf_probe_read_kernel(key->name, len, &q->name[np_idx(pos)]))
            break;
        if (np_names.lookup(key)) {
            allowed = 1;
            break;
        }
        pos += q->name[np_idx(pos)] + 1;
    }
    if (!allowed)
        return;
    /* answers: an owner name is a compression pointer (what resolvers send); any other form
     * stops the walk (fail closed: those addresses are not learnt) */
    q->left = an < MT_DNS_ANSWERS_MAX ? an : MT_DNS_ANSWERS_MAX;
    q->cg = cg;
    np_tail.call(skb, 0);  /* mt_np_answer, once per record; returns here only if unset */
}

/* One answer record per run, then a tail call to itself: the verifier sees one record, not
 * a loop over them (bcc has no bpf_loop callbacks). State is in np_qscratch: ingress runs
 * in softirq context, which does not nest on a CPU. The owner name must be a compression
 * pointer (what resolvers send); an A or AAAA record's address is allowed. The packet came
 * from a resolver to a socket of the cgroup: it passes (1) whatever is read here. */
int mt_np_answer(struct __sk_buff *skb)
{
    u32 zero = 0;
    struct np_qbuf *q = np_qscratch.lookup(&zero);
    if (!q || q->left == 0)
        return 1;
    q->left -= 1;
    u32 p = q->answers;
    u8 rr[12];
    if (bpf_skb_load_bytes(skb, p, rr, sizeof(rr)))
        return 1;
    if ((rr[0] & 0xC0) != 0xC0)
        return 1;
    u32 type = (u32)rr[2] << 8 | rr[3], rdlen = (u32)rr[10] << 8 | rr[11];
    q->answers = p + 12 + rdlen;
    struct np_key k = {};
    k.cgroup_id = q->cg;
    if (type == 1 && rdlen == 4) {
        k.family = NP_AF_INET;
        if (bpf_skb_load_bytes(skb, p + 12, k.addr, 4))
            return 1;
    } else if (type == 28 && rdlen == 16) {
        k.family = NP_AF_INET6;
        if (bpf_skb_load_bytes(skb, p + 12, k.addr, 16))
            return 1;
    }
    if (k.family) {
        u32 *v = np_addrs.lookup(&k);
        u32 nv = (v ? *v : 0) | MT_NP_ANY;
        np_addrs.update(&k, &nv);
    }
    np_tail.call(skb, 0);
    return 1;
}

int mt_np_ingress(struct __sk_buff *skb)
{
    struct np_key k = {};
    u32 port = 0, local = 0, proto = 0, l4 = 0;
    if (!np_peer(skb, 1, &k, &port, &local, &proto, &l4))
        return 0;
    if (np_loopback(&k) && (np_own_port(k.cgroup_id, port) || np_own_port(k.cgroup_id, local)))
        return 1;
    if (!np_allowed(&k, port, proto)) {
        np_report_packet(&k, MT_NP_AT_INGRESS, port, proto, 0);
        return 0;
    }
    u32 *v = np_addrs.lookup(&k);
    if (v && (*v & MT_NP_DNS) && proto == NP_IPPROTO_UDP && port == MT_DNS_PORT)
        np_learn(skb, k.cgroup_id, l4 + 8);
    return 1;
}
