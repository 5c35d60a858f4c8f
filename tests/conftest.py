"""Shared fixtures and the capability gate.

Tests that need root, Docker or eBPF carry a marker. On a laptop they skip with a reason;
when MTGUARD_REQUIRE_REAL=1 (set by `make test` and CI) a missing capability is a failure,
so CI can never pass by skipping.
"""

from __future__ import annotations

import os
import shutil
from functools import cache

import pytest

REQUIRE_REAL = os.environ.get("MTGUARD_REQUIRE_REAL") == "1"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@cache
def _missing(marker: str) -> str | None:
    if marker == "root":
        return None if os.geteuid() == 0 else "needs root"
    if marker == "bpf":
        if os.geteuid() != 0:
            return "eBPF needs root"
        try:
            import bcc  # noqa: F401
        except Exception as exc:
            return f"bcc does not import: {exc}"
        if not os.path.exists("/sys/kernel/tracing/events"):
            return "tracefs is not mounted at /sys/kernel/tracing"
        return None
    if marker == "docker":
        import anyio

        from mtguard_rt.sandbox.engine import probe_docker

        try:
            return anyio.run(probe_docker)
        except Exception as exc:
            return f"Docker probe failed: {exc}"
    if marker == "chromium":
        return None if shutil.which("chromium") else "Debian's chromium is not installed"
    return None


def require_corpus() -> None:
    """Skip (with the path) when the MCP-SafetyBench corpus is not beside the checkout.

    The corpus is data the project must not copy (it is read from ../shared/corpora at run
    time, or $MTGUARD_CORPUS_DIR); a machine without it cannot run these tests, whatever
    MTGUARD_REQUIRE_REAL says. Everything else the evaluation needs is tested without it.
    """
    from mtguard_rt.eval.corpus import default_corpus_dir

    if not default_corpus_dir().is_dir():
        pytest.skip(f"the MCP-SafetyBench corpus is not at {default_corpus_dir()}")


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("corpus") is not None:
        require_corpus()
    for marker in ("root", "bpf", "docker", "chromium"):
        if item.get_closest_marker(marker) is None:
            continue
        why = _missing(marker)
        if why is None:
            continue
        if REQUIRE_REAL:
            pytest.fail(f"MTGUARD_REQUIRE_REAL=1 but {marker} is unavailable: {why}")
        pytest.skip(why)
