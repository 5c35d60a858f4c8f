"""Where the guard keeps its own files: one per-user state directory, never the workspace.

`state_home()` is `$XDG_STATE_HOME/mtguard` or `~/.local/state/mtguard` (XDG Base Directory
spec): the audit log, traces and alerts default there, and each sandboxed server's persistent
state lives under its `servers/` directory. Nothing here is created until it is written.
"""

from __future__ import annotations

import os
from pathlib import Path


def state_home() -> Path:
    xdg = os.environ.get("XDG_STATE_HOME", "")
    if xdg and os.path.isabs(xdg):  # the spec: a relative value is invalid and ignored
        return Path(xdg) / "mtguard"
    return Path.home() / ".local" / "state" / "mtguard"


def default_audit_log() -> str:
    return str(state_home() / "audit.jsonl")


def default_traces_file() -> str:
    return str(state_home() / "traces.jsonl")


def default_alerts_file() -> str:
    return str(state_home() / "alerts.jsonl")
