"""`mtguard doctor` on this machine (real checks) and its rendering of failures."""

from __future__ import annotations

import subprocess
import sys

import pytest

from mtguard_rt.doctor import Check, render


def test_render_names_the_fix_and_counts_required_failures() -> None:
    checks = [
        Check("privileges", True, "running as root", ""),
        Check("docker", False, "socket missing", "start dockerd"),
        Check("fentry programs", False, "EPERM", "optional", required=False),
    ]
    text = render(checks, color=False)
    assert "FAIL docker" in text and "fix: start dockerd" in text
    assert "off  fentry programs" in text
    assert text.endswith("1 required check(s) failed: docker")


@pytest.mark.root
@pytest.mark.bpf
@pytest.mark.docker
def test_doctor_passes_on_a_prepared_machine() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mtguard_rt", "doctor"], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout
    for name in (
        "privileges",
        "kernel BTF",
        "tracefs",
        "bcc + canary BPF",
        "cgroup v2",
        "docker",
        "sandbox image",
        "seccomp",
    ):
        assert f"ok   {name}" in done.stdout
