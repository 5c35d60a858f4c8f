"""mtguard-rt: a runtime guard for MCP tool calls.

Each MCP server runs in a Docker sandbox; every `tools/call` is audited before dispatch,
traced with eBPF into a tool behavior tree while it runs, and verified against what was
declared afterwards, with the result withheld on deny.
"""

__version__ = "0.1.0"

import typing as _typing

from .errors import (
    AuditError,
    CallDenied,
    DockerUnavailable,
    GuardError,
    ImageNotFound,
    MonitorError,
    PolicyError,
    RollbackError,
    SandboxError,
    ServerExited,
)

if _typing.TYPE_CHECKING:
    from .config import GuardConfig, load_config
    from .guard import Guard, GuardedServer, open_guard
    from .model import AuditRecord, BehaviorTree, DeclaredCall, ProcessNode, Verdict, Violation

# Imported on first use (PEP 562): `mtguard proxy` reaches its sandbox without paying for
# the whole guard's imports first (the CLI imports this package before any subcommand).
_LAZY = {
    "GuardConfig": "config", "load_config": "config",
    "Guard": "guard", "GuardedServer": "guard", "open_guard": "guard",
    "AuditRecord": "model", "BehaviorTree": "model", "DeclaredCall": "model",
    "ProcessNode": "model", "Verdict": "model", "Violation": "model",
}  # fmt: skip


def __getattr__(name: str) -> _typing.Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

__all__ = [
    "AuditError",
    "AuditRecord",
    "BehaviorTree",
    "CallDenied",
    "DeclaredCall",
    "DockerUnavailable",
    "Guard",
    "GuardConfig",
    "GuardError",
    "GuardedServer",
    "ImageNotFound",
    "MonitorError",
    "PolicyError",
    "ProcessNode",
    "RollbackError",
    "SandboxError",
    "ServerExited",
    "Verdict",
    "Violation",
    "__version__",
    "load_config",
    "open_guard",
]
