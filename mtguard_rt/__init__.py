"""mtguard-rt: a runtime guard for MCP tool calls.

Each MCP server runs in a Docker sandbox; every `tools/call` is audited before dispatch,
traced with eBPF into a tool behavior tree while it runs, and verified against what was
declared afterwards, with the result withheld on deny.
"""

__version__ = "0.1.0"

from .config import GuardConfig, load_config
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
from .guard import Guard, GuardedServer, open_guard
from .model import AuditRecord, BehaviorTree, DeclaredCall, ProcessNode, Verdict, Violation

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
