"""Fixtures for driving the example servers as real stdio subprocesses."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SERVERS = Path(__file__).resolve().parents[2] / "examples" / "servers"


@pytest.fixture
def server_cmd() -> Callable[[str], list[str]]:
    def cmd(name: str) -> list[str]:
        return [sys.executable, str(SERVERS / f"{name}.py")]

    return cmd
