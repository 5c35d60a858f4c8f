"""Compile and load bpf/monitor.bpf.c with bcc, once per process; the only bcc importer.

`load_program()` returns a `BpfProgram`: the cgroup filter map, per-kind drop counters,
the ring buffer (its pollable map fd plus a synchronous `consume()` through libbpf's
consumer). bcc's bare `Exception`s are translated here into `BpfLoadError`.
"""

from __future__ import annotations

import atexit
import ctypes
import mmap
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BpfLoadError
from .decode import EventDecoder
from .kinds import (
    CG_EAGER,
    CG_GATE,
    CG_PDIRS,
    CG_PROTECTED,
    CG_WATCHED,
    EV_MAX,
    KEY_PATH_MAX,
    LOST_OPEN_WRITE,
    NAMED_TRACEPOINTS,
    PDIR_PATH_MAX,
    Kind,
    bpf_cflags,
)

RawCallback = Callable[[bytes], None]


def bpf_dir() -> Path:
    """The folder holding monitor.bpf.c: the source tree's bpf/, or the wheel's _bpf/."""
    here = Path(__file__).resolve().parent.parent
    for candidate in (here.parent / "bpf", here / "_bpf"):
        if (candidate / "monitor.bpf.c").is_file():
            return candidate
    raise BpfLoadError(f"monitor.bpf.c is in neither {here.parent / 'bpf'} nor {here / '_bpf'}")


def compiled_source(ring_pages: int) -> str:
    """The C as compiled: the -D definitions, then the header and the program."""
    d = bpf_dir()
    defs = "\n".join("#define " + flag[2:].replace("=", " ", 1) for flag in bpf_cflags(ring_pages))
    return f"{defs}\n{(d / 'events.h').read_text()}\n{program_text(d)}"


def program_text(d: Path) -> str:
    """monitor.bpf.c then egress.bpf.c (network policy) as one main file: bcc rewrites map
    and ring-buffer calls only in the main file, so the second cannot be an #include."""
    return f"{(d / 'monitor.bpf.c').read_text()}\n{(d / 'egress.bpf.c').read_text()}"


class BpfProgram:
    """The loaded monitor. Not thread-safe: use it from the event loop thread only."""

    def __init__(self, bpf: Any, load_s: float, ring_pages: int) -> None:
        self._bpf = bpf
        self.load_s = load_s
        self.ring_pages = ring_pages
        self._cgroups = bpf["cgroups"]
        self._drops = bpf["drops"]
        self._ring = bpf["events"]
        self.ring_fd: int = int(self._ring.map_fd)
        self.decoder = EventDecoder(self.event_class())
        self._sink: RawCallback | None = None
        self._budget = 0
        # libbpf's consumer (through libbcc) with our own ctypes callback: bcc's Python
        # wrapper adds a frame per record. Opened once; `set_sink` only reroutes.
        from bcc.libbcc import _RINGBUF_CB_TYPE  # type: ignore[import-untyped]

        def on_raw(_ctx: Any, data: int, size: int) -> int:
            sink = self._sink
            if sink is not None:
                sink(ctypes.string_at(data, size))
            self._budget -= 1
            return 0 if self._budget > 0 else -1  # < 0: libbpf stops after this record

        self._callback = _RINGBUF_CB_TYPE(on_raw)
        bpf._open_ring_buffer(self.ring_fd, self._callback)
        self._drops_mm = mmap.mmap(self._drops.map_fd, mmap.PAGESIZE, mmap.MAP_SHARED,
                                   mmap.PROT_READ)  # fmt: skip
        self._drops_fmt = struct.Struct(f"{EV_MAX}Q")  # native: one load per counter

    @property
    def bcc(self) -> Any:
        """The bcc module object, for the network policy's maps and programs (egress.py)."""
        return self._bpf

    def event_class(self) -> type[ctypes.Structure]:
        from bcc.table import _get_event_class  # type: ignore[import-untyped]

        cls: type[ctypes.Structure] = _get_event_class(self._ring)
        return cls

    def add_cgroup(self, cgroup_id: int, eager: bool = False) -> None:
        mode = CG_WATCHED | (CG_EAGER if eager else 0)
        self._cgroups[self._cgroups.Key(cgroup_id)] = self._cgroups.Leaf(mode)

    def gate(self, cgroup_id: int, on: bool) -> None:
        """Set or clear CG_GATE on a watched cgroup: while set, a wholly captured read of its
        MCP stdin SIGSTOPs the reader until user space continues it (`Window`)."""
        cg = self._cgroups.Key(cgroup_id)
        try:
            mode = int(self._cgroups[cg].value)
        except KeyError:
            return  # not watched (any more): nothing reads under a gate
        self._cgroups[cg] = self._cgroups.Leaf((mode | CG_GATE) if on else (mode & ~CG_GATE))

    def protect(self, cgroup_id: int, paths: dict[str, int]) -> list[str]:
        """Push exact absolute paths -> ACT_* bits for one cgroup (`protected` map); a path
        ending in '/' is a directory (`pdirs`: kill on write under it). Returns the paths
        refused: not absolute, or too long for the fixed key."""
        table = self._bpf["protected"]
        refused: list[str] = []
        dirs = {p: a for p, a in paths.items() if p.endswith("/")}
        if dirs:
            refused += self._protect_dirs(cgroup_id, dirs)
        for path, act in paths.items():
            if path in dirs:
                continue
            raw = path.encode()
            if not path.startswith("/") or len(raw) >= KEY_PATH_MAX or b"\0" in raw:
                refused.append(path)
                continue
            key = table.Key()
            key.cgroup_id = cgroup_id
            key.path = raw
            table[key] = table.Leaf(act)
        if len(refused) < len(paths):  # the kernel looks names up only in such a cgroup
            cg = self._cgroups.Key(cgroup_id)
            try:
                mode = int(self._cgroups[cg].value)
            except KeyError:
                mode = CG_WATCHED
            self._cgroups[cg] = self._cgroups.Leaf(mode | CG_PROTECTED)
        return refused

    def _pdir_key(self, cgroup_id: int, path: str) -> Any:
        table = self._bpf["pdirs"]
        raw = path.encode()
        if not path.startswith("/") or len(raw) >= PDIR_PATH_MAX or b"\0" in raw:
            return None
        key = table.Key()
        key.prefixlen = (ctypes.sizeof(key) - 4 - PDIR_PATH_MAX + len(raw)) * 8
        key.cgroup_id = cgroup_id
        key.path = raw
        return key

    def _protect_dirs(self, cgroup_id: int, dirs: dict[str, int]) -> list[str]:
        """Directory prefixes -> ACT_* bits (`pdirs`, an LPM trie keyed by cgroup and path)."""
        table = self._bpf["pdirs"]
        refused = []
        for path, act in dirs.items():
            key = self._pdir_key(cgroup_id, path)
            if key is None:
                refused.append(path)
                continue
            leaf = table.Leaf()
            leaf.len = len(path.encode())
            leaf.act = act
            table[key] = leaf
        if len(refused) < len(dirs):
            cg = self._cgroups.Key(cgroup_id)
            try:
                mode = int(self._cgroups[cg].value)
            except KeyError:
                mode = CG_WATCHED
            self._cgroups[cg] = self._cgroups.Leaf(mode | CG_PDIRS)
        return refused

    def actions(self, cgroup_id: int, path: str) -> int:
        """The ACT_* bits pushed for one exact path (or directory, ending in '/') of one
        cgroup (0 when none)."""
        if path.endswith("/"):
            key = self._pdir_key(cgroup_id, path)
            if key is None:
                return 0
            # an LPM lookup finds the longest prefix: only an entry of exactly this one counts
            leaf = self._bpf["pdirs"].get(key)
            return int(leaf.act) if leaf is not None and leaf.len == len(path.encode()) else 0
        table = self._bpf["protected"]
        raw = path.encode()
        if not path.startswith("/") or len(raw) >= KEY_PATH_MAX or b"\0" in raw:
            return 0
        key = table.Key()
        key.cgroup_id = cgroup_id
        key.path = raw
        try:
            return int(table[key].value)
        except KeyError:
            return 0

    def unprotect(self, cgroup_id: int) -> None:
        """Drop every protected path and directory of one cgroup."""
        for name in ("protected", "pdirs"):
            table = self._bpf[name]
            for key in [k for k in table.keys() if k.cgroup_id == cgroup_id]:
                try:
                    del table[key]
                except KeyError:
                    pass

    def wire_add(self, cgroup_id: int, fds: dict[tuple[int, int], int]) -> None:
        """Mark (tgid, fd) -> stream (0 stdin, 1 stdout) as one cgroup's MCP wire; the kernel
        follows them from there (dup, fcntl dup, close, fork) and captures their bytes."""
        table = self._bpf["wire"]
        for (pid, fd), stream in fds.items():
            leaf = table.Leaf()
            leaf.cgroup_id = cgroup_id
            leaf.stream = stream
            table[table.Key((pid << 32) | fd)] = leaf

    def wire_forget(self, cgroup_id: int) -> None:
        """Drop every wire fd of one cgroup."""
        table = self._bpf["wire"]
        for key, leaf in list(table.items()):
            if leaf.cgroup_id == cgroup_id:
                try:
                    del table[key]
                except KeyError:
                    pass

    def remove_cgroup(self, cgroup_id: int) -> None:
        try:
            del self._cgroups[self._cgroups.Key(cgroup_id)]
        except KeyError:
            pass
        lost = self._bpf["cg_lost"]
        try:
            del lost[lost.Key(cgroup_id)]
        except KeyError:
            pass

    def lost(self, cgroup_id: int) -> dict[str, int]:
        """Records of one cgroup lost in the kernel since it was watched, per kind
        (`open_write`: a writing open), only non-zero ones."""
        table = self._bpf["cg_lost"]
        try:
            counts = list(table[table.Key(cgroup_id)].n)
        except KeyError:
            return {}
        names = {int(k): k.name.lower() for k in Kind}
        names[LOST_OPEN_WRITE] = "open_write"
        return {names.get(i, f"kind_{i}"): n for i, n in enumerate(counts) if n}

    def drops(self) -> dict[str, int]:
        """Failed ring-buffer reservations since load, per event kind (only non-zero ones)."""
        counts = self._drops_fmt.unpack_from(self._drops_mm, 0)
        return {kind.name.lower(): counts[kind] for kind in Kind if counts[kind]}

    def has_sink(self) -> bool:
        return self._sink is not None

    def set_sink(self, on_record: RawCallback | None) -> None:
        """Route every record (its raw bytes) to `on_record`; None discards them."""
        self._sink = on_record

    def consume(self, limit: int = 0) -> bool:
        """Read the records available now, at most `limit` (0: all); never blocks.

        Returns True when it stopped at the limit (more may be waiting), so a caller on an
        event loop can yield between batches instead of stalling every other task.
        """
        self._budget = limit if limit > 0 else 1 << 62
        self._bpf.ring_buffer_consume()
        return self._budget <= 0

    def close(self) -> None:
        self._drops_mm.close()
        _detach_concurrently(self._bpf.tracepoint_fds)
        self._bpf.cleanup()


def _detach_concurrently(fds: dict[bytes, int]) -> None:
    """Close the tracepoints' perf events from several threads at once. Each close waits for
    an RCU grace period in the kernel (tracepoint unregistration): one after another, 80-odd
    tracepoints keep a guard's exit waiting for seconds; concurrent closes share the grace
    periods. bcc's own cleanup then finds nothing left to detach."""
    if not fds:
        return
    from bcc.libbcc import lib

    pending = list(fds.values())
    fds.clear()

    def close_some() -> None:
        while pending:
            try:
                fd = pending.pop()
            except IndexError:
                return
            lib.bpf_close_perf_event_fd(fd)

    # plain threads: this also runs at interpreter exit, when executors refuse new work
    workers = min(32, len(pending))
    threads = [threading.Thread(target=close_some, daemon=True) for _ in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)


def _release_at_exit(fds: dict[bytes, int]) -> None:
    """At interpreter exit, hand the tracepoints' perf events to a short-lived child.

    Releasing them costs a grace period each, serialised in the kernel (about 4 s for the
    monitor's 80-odd tracepoints): done here, a host that stops the guard would see it
    hang on exit. The child keeps only those fds (the host's pipes and sockets must reach
    EOF now); while it holds them our closes are instant. Once ours are closed we close a
    pipe, and the child exits, paying for the release after this process is gone."""
    if not fds:
        return
    keep = set(fds.values())
    try:
        r, w = os.pipe()
        pid = os.fork()
    except OSError:
        _detach_concurrently(fds)
        return
    if pid == 0:  # pragma: no cover - the child only closes descriptors, waits and exits
        try:
            for name in os.listdir("/proc/self/fd"):
                if int(name) not in keep and int(name) != r:
                    try:
                        os.close(int(name))
                    except OSError:
                        pass
            os.read(r, 1)  # EOF: the parent has closed its copies
        finally:
            os._exit(0)
    os.close(r)
    for fd in keep:
        try:
            os.close(fd)
        except OSError:
            pass
    fds.clear()  # bcc's cleanup must not close them again
    os.close(w)


_lock = threading.Lock()
_loaded: dict[int, BpfProgram] = {}


def _preflight() -> None:
    if os.geteuid() != 0:
        raise BpfLoadError("the monitor needs root (CAP_BPF and CAP_PERFMON)")
    if not Path("/sys/kernel/tracing/events/syscalls").is_dir():
        raise BpfLoadError("tracefs is not mounted at /sys/kernel/tracing")


def load_program(ring_pages: int) -> BpfProgram:
    """Compile and attach once per process (and ring size); later calls reuse it."""
    with _lock:
        if ring_pages in _loaded:
            return _loaded[ring_pages]
        if ring_pages <= 0 or ring_pages & (ring_pages - 1):
            raise BpfLoadError(f"ring_pages must be a power of two, not {ring_pages}")
        _preflight()
        try:
            from bcc import BPF  # type: ignore[import-untyped]
        except Exception as exc:
            raise BpfLoadError(f"bcc does not import: {exc}") from exc
        d = bpf_dir()
        started = time.monotonic()
        try:
            bpf = BPF(
                text=program_text(d).encode(),
                cflags=[*bpf_cflags(ring_pages), f"-I{d}", "-Wno-macro-redefined"],
            )
            for tp, fn in NAMED_TRACEPOINTS.items():  # beside the TRACEPOINT_PROBEs
                bpf.attach_tracepoint(tp=tp.encode(), fn_name=fn.encode())
        except Exception as exc:
            raise BpfLoadError(f"compile or attach failed: {str(exc).splitlines()[-1]}") from exc
        prog = BpfProgram(bpf, time.monotonic() - started, ring_pages)
        _loaded[ring_pages] = prog
        # runs before bcc's own exit cleanup (atexit is last-in, first-out), which would
        # otherwise detach the tracepoints one grace period at a time
        atexit.register(_release_at_exit, bpf.tracepoint_fds)
        return prog


def unload_program(ring_pages: int) -> None:
    """Detach and free a program loaded with this ring size (tests, tools); no-op if none."""
    with _lock:
        prog = _loaded.pop(ring_pages, None)
    if prog is not None:
        if prog.has_sink():
            _loaded[ring_pages] = prog
            raise BpfLoadError("cannot unload the program: a monitor still reads it")
        prog.close()
