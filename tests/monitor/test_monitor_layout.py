"""The C and the Python agree: constants flow Python -> C, fields come from bcc's view."""

from __future__ import annotations

import re
import struct

import pytest

from mtguard_rt.monitor.decode import HEADER_FIELDS
from mtguard_rt.monitor.kinds import DATA_MAX, Kind, bpf_cflags
from mtguard_rt.monitor.loader import bpf_dir, compiled_source, program_text


def test_every_constant_the_c_uses_comes_from_python() -> None:
    defined = {flag[2:].split("=")[0] for flag in bpf_cflags(64)}
    source = program_text(bpf_dir()) + (bpf_dir() / "events.h").read_text()  # + egress.bpf.c
    used = set(re.findall(r"\b(EVF?_[A-Z_]+|MT_[A-Z_]+)\b", source))
    assert used <= defined, used - defined
    assert {f"EV_{k.name}" for k in Kind} <= used  # no kind is defined but never emitted
    assert DATA_MAX & (DATA_MAX - 1) == 0  # submit() bounds sizes with a mask
    assert "#define RING_PAGES" not in compiled_source(64)
    assert "#define MT_RING_PAGES 64" in compiled_source(64)


@pytest.mark.root
@pytest.mark.bpf
def test_decoder_reads_only_fields_bcc_generated() -> None:
    from mtguard_rt.monitor.loader import load_program

    prog = load_program(4096)
    cls = prog.event_class()
    names = [name for name, _ in cls._fields_]
    assert set(HEADER_FIELDS) | {"data"} <= set(names)
    ev = cls()
    ev.ts_ns, ev.cgroup_id, ev.pid, ev.kind, ev.ret, ev.a2 = 5, 6, 7, int(Kind.OPEN), -2, 0o644
    ev.len1, ev.flags = 6, 1
    ev.data = b"/a/b"
    raw = bytes(ev)[: cls.data.offset + 6]
    out = prog.decoder.decode(raw)
    assert (out.ts_ns, out.cgroup_id, out.pid, out.kind, out.ret, out.a2, out.flags, out.s1) == (
        5,
        6,
        7,
        int(Kind.OPEN),
        -2,
        0o644,
        1,
        b"/a/b",
    )
    assert struct.calcsize(prog.decoder._header.format) == cls.data.offset


def test_ring_size_must_be_a_power_of_two() -> None:
    from mtguard_rt.errors import BpfLoadError
    from mtguard_rt.monitor.loader import load_program

    with pytest.raises(BpfLoadError, match="power of two"):
        load_program(3)


def test_public_surface() -> None:
    import mtguard_rt.monitor as monitor

    assert sorted(monitor.__all__) == [
        "Monitor", "MonitorConfig", "NoiseRules", "Watch", "Window", "load_noise",
        "open_monitor", "render_tree", "simplify",
    ]  # fmt: skip
    for name in monitor.__all__:
        assert getattr(monitor, name).__module__.startswith("mtguard_rt.monitor.")
