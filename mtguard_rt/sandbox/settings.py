"""`SandboxConfig`: the `[sandbox]` section of the guard's config (README, "The sandbox")."""

from __future__ import annotations

from typing import Literal

import msgspec


class SandboxConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    image: str | None = None  # None: the default image, built on first use
    network: Literal["none", "host"] = "none"
    # Network policy (README, "Network policy"): hosts the server may reach, and only these
    # (names, their subdomains, IP literals), enforced in the kernel on the sandbox's cgroup.
    # Non-empty: the container uses the host's network, filtered; [] keeps `network`.
    allow_domains: list[str] = msgspec.field(default_factory=list)
    # resolvers the sandbox uses with a policy ([]: the host's /etc/resolv.conf nameservers)
    dns: list[str] = msgspec.field(default_factory=list)
    workspace: str | None = None  # host directory mounted read-write at the same path
    mounts: list[str] = msgspec.field(default_factory=list)  # extra read-only host paths
    # /usr (and the Python environment the command runs from), read-only. None: on for the
    # default image (it holds no programs of its own), off for an image chosen with `image`.
    runtime_mounts: bool | None = None
    # "UID[:GID]" the server runs as; None: the workspace's owner, or 1000:1000 without one
    # or when root owns it (never root: a workspace owned by another uid is idmapped to it)
    user: str | None = None
    # the guard's state dir (None: $XDG_STATE_HOME/mtguard); each server keeps its
    # persistent state in servers/<name>/ there: data/ (mounted, $MTGUARD_STATE_DIR) and
    # package/ (the upper layer of the overlay on the --mount that holds its code)
    state_dir: str | None = None
    package_overlay: bool = True  # False: the package directory stays read-only
    memory_mb: int = 1024
    pids_limit: int = 512
    # seccomp profile (README, "The sandbox"): "guard" refuses io_uring, ptrace and other
    # syscalls the monitor cannot see (sandbox/seccomp.py); "docker-default" the daemon's own;
    # else the path of a profile in Docker's JSON format (relative to the config file)
    seccomp: str = "guard"
    cpus: float = 1.0
    env: dict[str, str] = msgspec.field(default_factory=dict)
    stderr_tail_bytes: int = 65536
    # Workspace rollback (README, "Rollback"): a denied call's file changes in `workspace`
    # are undone. How a call's changes are found: "tree" (its file events and every directory,
    # stat-verified) or "scan" (a stat scan of the whole workspace: also writes through old
    # fds, mmap, ...).
    rollback: Literal["off", "tree", "scan"] = "off"
    rollback_dir: str | None = None  # where the shadow copy lives (default: the temp dir)
    rollback_max_files: int = 200_000  # workspace entries indexed (memory: ~300 B each)
    rollback_max_mb: int = 2048  # bytes of regular files the shadow copy may hold
    rollback_timeout_s: float = 60.0  # bound on one snapshot, scan, commit or restore
