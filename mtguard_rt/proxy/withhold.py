"""What the relay withholds from the host, and the audit record each withholding leaves.

- A response on a tombstone (a call the guard already answered, killed, timed out or
  cancelled: `Upstream.tombstone`) and a response to an id the guard never sent are dropped.
- Every other server-to-host message is scanned (`audit.scan`) before it is relayed: a hit is
  replaced by a JSON-RPC error (a response), answered with an error (a server-to-client
  request, never relayed) or dropped (a notification).
- A quarantined server (`Supervisor.quarantined`, after a confidentiality deny) sends nothing
  more to the host.
Each withholding is one audit record: tool "(initialize)", "(tools/list)", "(notification)",
"(request sampling/createMessage)", "(late-response)", "(unsolicited-response)". In observe
mode the records are written and the message is relayed.
"""

from __future__ import annotations

import time

from ..audit.scan import message_label, scan_message
from ..model import AuditRecord, Timings, Violation
from ..supervisor import Supervisor
from .upstream import Message

WITHHELD = -32003  # the code the guard's own withholding errors carry


class Withholder:
    def __init__(self, supervisor: Supervisor) -> None:
        self.supervisor = supervisor
        self.withheld = 0  # messages the host did not get
        self._serial = 0

    def record(self, tool: str, rule: str, reason: str, evidence: list[str]) -> AuditRecord:
        sup = self.supervisor
        self._serial += 1
        violation = Violation(
            rule=rule,
            phase="post",
            mode="observe" if sup.observe else "enforce",
            reason=reason,
            evidence=evidence,
        )
        record = AuditRecord(
            call_id=f"{sup.name}:message-{self._serial}",
            server=sup.name,
            tool=tool,
            arguments={},
            decision="deny",
            phase="post",
            rules=[rule],
            reasons=[reason],
            mode="observe" if sup.observe else "enforce",
            timings_ms=Timings(),
            tree_complete=True,
            llm_used=False,
            tree=None,
            ts=time.time(),
            violations=[violation],
        )
        sup.sink(record, None, rule)
        return record

    async def dropped(self, message: Message, why: str) -> None:
        """`Upstream.on_dropped`: a response on a tombstone, never relayed (in any mode: the
        host was already answered for that id)."""
        self.withheld += 1
        self.record(
            "(late-response)",
            "withheld-response",
            f"a response to call id {message.get('id')!r} after it was handled ({why}): dropped",
            [_shape(message)],
        )

    def unsolicited(self, message: Message) -> None:
        self.withheld += 1
        self.record(
            "(unsolicited-response)",
            "withheld-response",
            f"a response to id {message.get('id')!r}, which the guard never sent: dropped",
            [_shape(message)],
        )

    def screen(self, message: Message, answered: str | None) -> tuple[Message | None, bool]:
        """(what to relay, None for nothing; whether the server's request needs an error
        answer from the guard). `answered`: the method of the request a response answers."""
        sup = self.supervisor
        label = message_label(message, answered)
        if sup.quarantined is not None:
            self.withheld += 1
            self.record(
                label,
                "quarantined",
                f"the server is quarantined ({sup.quarantined}): nothing it sends reaches the host",
                [_shape(message)],
            )
            return self._withhold(message, label, f"quarantined ({sup.quarantined})")
        rule, evidence = scan_message(message, answered, sup.canaries, sup.engine.policy.secrets)
        if not evidence:
            return message, False
        reason = f"the server's {label} message carries a secret: withheld"
        self.record(label, rule, reason, evidence)
        if sup.observe:
            return message, False
        self.withheld += 1
        sup.quarantine(f"{rule} in its {label} message")
        return self._withhold(message, label, f"it carries a secret ({rule})")

    def _withhold(self, message: Message, label: str, why: str) -> tuple[Message | None, bool]:
        if self.supervisor.observe:
            return message, False
        if "method" in message:
            return None, message.get("id") is not None  # a notification is dropped
        error = {
            "code": WITHHELD,
            "message": f"mtguard: the server's {label} answer was withheld: {why}",
        }
        return {"jsonrpc": "2.0", "id": message.get("id"), "error": error}, False


def _shape(message: Message) -> str:
    """What the record keeps of a withheld message: its shape, never its content."""
    keys = ",".join(sorted(k for k in message if k != "jsonrpc"))
    return f"message keys {keys}; method {message.get('method')!r}; id {message.get('id')!r}"


__all__ = ["WITHHELD", "Withholder"]
