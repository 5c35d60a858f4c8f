"""The guard's one exception tree. Each builds its own message from its fields.

    GuardError
    ├── SandboxError
    │   ├── DockerUnavailable      daemon down, socket missing, permission denied
    │   ├── DockerApiError         the Engine API answered an unexpected status
    │   ├── ImageNotFound
    │   ├── CommandNotFound        the server command does not exist in the image
    │   ├── ServerExited           the server process ended (at start or mid-call)
    │   └── RollbackError          the workspace could not be snapshot, committed or restored
    ├── MonitorError
    │   ├── BpfLoadError           bcc missing, compile or attach failed
    │   └── MonitorLost            the event stream broke
    ├── AuditError
    │   ├── JudgeTimeout
    │   ├── JudgeProtocolError     the LLM answered something that is not a verdict
    │   └── JudgeUnavailable       the LLM endpoint is unreachable or answered an HTTP error
    ├── PolicyError                a policy/config file is invalid (file and line)
    ├── TelemetryError             telemetry cannot be set up (exporter choice, paths)
    │   └── AuditLogError          an audit log line is malformed (file and line)
    ├── CallDenied                 carries the verdict; raised by the library API only
    ├── CorpusError                the eval's attack corpus is missing or malformed
    └── HostConfigError            a host's MCP config file cannot be read or rewritten

Foreign errors (httpx, bcc's bare Exception, OSError) are translated once at the seam that
meets them, with `raise X from exc`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .model import AuditRecord, Verdict


class GuardError(Exception):
    """Base of every error the guard raises on purpose. `str()` is one line for the CLI."""


class SandboxError(GuardError):
    pass


class DockerUnavailable(SandboxError):
    def __init__(self, socket: str, why: str) -> None:
        self.socket = socket
        self.why = why
        super().__init__(
            f"Docker is not reachable at {socket}: {why}. Start it with "
            "`dockerd --bridge=none --iptables=false --ip6tables=false` (or run `make demo`, "
            "which does), and run mtguard as root or a member of the docker group"
        )


class DockerApiError(SandboxError):
    def __init__(self, what: str, status: int, message: str) -> None:
        self.what = what
        self.status = status
        self.message = message
        super().__init__(f"Docker refused to {what} (HTTP {status}): {message}")


class ImageNotFound(SandboxError):
    def __init__(self, image: str) -> None:
        self.image = image
        super().__init__(
            f"sandbox image {image!r} is not present locally; build the default one with "
            "`mtguard image build` or choose another with --image"
        )


class CommandNotFound(SandboxError):
    def __init__(self, command: str, image: str, detail: str = "") -> None:
        self.command = command
        self.image = image
        extra = f" ({detail})" if detail else ""
        super().__init__(
            f"command {command!r} was not found in the sandbox image {image!r}{extra}; "
            "install it on the host (its /usr and Python environment are mounted read-only) "
            "or pick an image that has it"
        )


# What a failed name lookup or connect says on stderr (npm/node, Python, uv/reqwest, curl/git)
_NO_NETWORK = re.compile(
    r"(EAI_AGAIN|ENOTFOUND|ENETUNREACH|getaddrinfo|Temporary failure in name resolution|"
    r"Name or service not known|Network is unreachable|failed to lookup address|dns error|"
    r"Could not resolve host|network connectivity is disabled|offline mode)",
    re.IGNORECASE,
)
_HOST = re.compile(r"(?:https?://|EAI_AGAIN |ENOTFOUND |host:? )([a-z0-9.-]+\.[a-z]{2,})", re.I)


def no_network_hint(stderr_tail: str) -> str | None:
    """One line when a server's start-up failed for lack of network (the sandbox has none
    unless allowed), naming the host it wanted; None when stderr shows nothing of the kind."""
    found = _NO_NETWORK.search(stderr_tail)
    if found is None:
        return None
    hosts = _HOST.findall(stderr_tail)
    host = hosts[-1] if hosts else "HOST"
    return (
        f"the sandbox has no network: the server could not reach {host} "
        f"({found.group(1)}); use --allow-domain {host} or install the server first"
    )


class ServerExited(SandboxError):
    def __init__(self, command: str, exit_code: int | None, stderr_tail: str = "") -> None:
        self.command = command
        self.exit_code = exit_code
        self.stderr_tail = stderr_tail
        hint = no_network_hint(stderr_tail)
        if hint is not None:
            super().__init__(f"server {command!r} exited with code {exit_code}: {hint}")
            return
        tail = stderr_tail.strip().splitlines()[-1:] if stderr_tail.strip() else []
        last = f"; last stderr line: {tail[0]!r}" if tail else ""
        super().__init__(f"server {command!r} exited with code {exit_code}{last}")


class RollbackError(SandboxError):
    """Workspace rollback failed: at connect (the snapshot) or after a call (in the record)."""

    def __init__(self, workspace: str, why: str) -> None:
        self.workspace = workspace
        self.why = why
        super().__init__(f"workspace rollback of {workspace}: {why}")


class MonitorError(GuardError):
    pass


class BpfLoadError(MonitorError):
    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(f"cannot load the eBPF monitor: {why}; run `mtguard doctor` for the fix")


class MonitorLost(MonitorError):
    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(f"the eBPF event stream was lost: {why}")


class AuditError(GuardError):
    pass


class JudgeTimeout(AuditError):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"the LLM judge did not answer within {seconds:g} s")


class JudgeProtocolError(AuditError):
    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(f"the LLM judge's answer is not a verdict: {why}")


class PolicyError(GuardError):
    def __init__(self, path: str, line: int | None, why: str) -> None:
        self.path = path
        self.line = line
        self.why = why
        where = f"{path}:{line}" if line else path
        super().__init__(f"{where}: {why}")


class CallDenied(GuardError):
    def __init__(self, tool: str, verdict: Verdict, record: AuditRecord | None = None) -> None:
        self.tool = tool
        self.verdict = verdict
        self.record = record
        rules = ", ".join(v.rule for v in verdict.denying) or "policy"
        super().__init__(f"mtguard denied {tool} ({verdict.phase}): {rules}")


class TelemetryError(GuardError):
    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(f"telemetry: {why}")


class AuditLogError(TelemetryError):
    def __init__(self, path: str, line: int, why: str) -> None:
        self.path = path
        self.line = line
        GuardError.__init__(self, f"{path}:{line}: not an audit record: {why}")
        self.why = why


class JudgeUnavailable(AuditError):
    def __init__(self, url: str, why: str) -> None:
        self.url = url
        self.why = why
        super().__init__(f"the LLM judge at {url} is unavailable: {why}")


class CorpusError(GuardError):
    def __init__(self, path: str, why: str) -> None:
        self.path = path
        self.why = why
        super().__init__(
            f"attack corpus {path}: {why} (set MTGUARD_CORPUS_DIR or pass the corpus path; the "
            "MCP-SafetyBench cases live in ../shared/corpora/mcp-safetybench beside the repo)"
        )


class HostConfigError(GuardError):
    """A host's MCP config (Claude Desktop, Cursor, Claude Code, VS Code) cannot be used."""

    def __init__(self, path: str, why: str) -> None:
        self.path = path
        self.why = why
        super().__init__(f"{path}: {why}")
