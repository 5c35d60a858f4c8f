"""Load-and-fire canaries for the eBPF features the guard uses or could use.

`python -m mtguard_rt.monitor.probe FEATURE` exits 0 when FEATURE works on this kernel:
`canary` (a syscall tracepoint writing to a ring buffer must actually deliver an event),
`fentry` and `lsm` (optional program types; refused on some hosts). Each probe runs in a child
process so a failing compile cannot disturb the caller and bcc's noise stays captured.
"""

from __future__ import annotations

import os
import subprocess
import sys

PROBE_TIMEOUT_S = 60.0

_CANARY = r"""
BPF_RINGBUF_OUTPUT(canary_events, 1);
TRACEPOINT_PROBE(syscalls, sys_enter_getppid) {
    u32 tgid = bpf_get_current_pid_tgid() >> 32;
    if (tgid != TARGET_TGID) return 0;
    u64 *v = canary_events.ringbuf_reserve(sizeof(u64));
    if (!v) return 0;
    *v = bpf_get_current_cgroup_id();
    canary_events.ringbuf_submit(v, 0);
    return 0;
}
"""
_FENTRY = r"""
KFUNC_PROBE(do_sys_openat2) { return 0; }
"""
_LSM = r"""
LSM_PROBE(file_open, struct file *file) { return 0; }
"""


def _run(feature: str) -> int:
    from bcc import BPF  # type: ignore[import-untyped]

    if feature == "canary":
        bpf = BPF(text=_CANARY, cflags=[f"-DTARGET_TGID={os.getpid()}"])
        seen: list[int] = []
        bpf["canary_events"].open_ring_buffer(lambda _c, _d, _s: seen.append(1))
        os.getppid()
        bpf.ring_buffer_poll(timeout=1000)
        return 0 if seen else 1
    if feature == "fentry":
        BPF(text=_FENTRY)
        return 0
    if feature == "lsm":
        BPF(text=_LSM)
        return 0
    return 2


def probe(feature: str) -> str | None:
    """None when the feature works, else a one-line reason."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", __name__, feature],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return f"the {feature} probe did not finish within {PROBE_TIMEOUT_S:g} s"
    if done.returncode == 0:
        return None
    lines = [ln for ln in (done.stderr + done.stdout).splitlines() if ln.strip()]
    if done.returncode == 1 and feature == "canary":
        return "the canary program loaded but delivered no event"
    last = lines[-1][:200] if lines else f"probe exited with {done.returncode}"
    if "super-user" in last and os.geteuid() == 0:
        return "the kernel refused to load it as root (EPERM)"
    return last


if __name__ == "__main__":
    try:
        sys.exit(_run(sys.argv[1]))
    except Exception as exc:  # bcc raises bare Exception; report it on one line
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(3)
