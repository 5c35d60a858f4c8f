"""Alerts as journald entries over its native protocol (`/run/systemd/journal/socket`).

One datagram per alert: `MESSAGE` (the one-line summary), `PRIORITY` (3 for a deny, else 4),
`SYSLOG_IDENTIFIER`, `SYSLOG_FACILITY`, and `MTGUARD_*` fields (kind, rule, server, tool,
decision, phase, mode, call and trace ids, reasons, evidence) that `journalctl
MTGUARD_RULE=...` can match. A value with a newline uses the protocol's length-prefixed form;
an entry is clipped to `max_entry` bytes of values (journald's datagram limit is the socket's).
A journald that is not running refuses the send: a counted failure (`AlertOutbox`).
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
from anyio.abc import ConnectedUNIXDatagramSocket

from .outbox import Alert, AlertOutbox, DeliveryRetry
from .syslog import FACILITIES

JOURNAL_SOCKET = "/run/systemd/journal/socket"
_PRIORITY = {"ERROR": 3, "WARN": 4}
_VALUE_MAX = 4096  # one field; the audit log has the rest


def _field(name: str, value: object) -> bytes:
    data = str(value).encode()[:_VALUE_MAX]
    if b"\n" in data:
        return name.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
    return name.encode() + b"=" + data + b"\n"


def journal_entry(
    payload: Mapping[str, Any], *, identifier: str = "mtguard", facility: int = FACILITIES["local0"]
) -> bytes:
    """One native-protocol journal entry for one guard alert."""
    kind = str(payload.get("kind") or "alert")
    rules = [str(r) for r in payload.get("rules") or []]
    reasons = [str(r) for r in payload.get("reasons") or []]
    message = (
        f"mtguard {kind}: tools/call {payload.get('tool')} on {payload.get('server')}"
        f" ({', '.join(rules) or 'no rule'})" + (f": {'; '.join(reasons)}" if reasons else "")
    )
    fields: dict[str, object] = {
        "MESSAGE": " ".join(message.split()),
        "PRIORITY": _PRIORITY.get(str(payload.get("severity")), 4),
        "SYSLOG_IDENTIFIER": identifier,
        "SYSLOG_FACILITY": facility,
        "MTGUARD_KIND": kind,
        "MTGUARD_RULE": ",".join(rules),
        "MTGUARD_SERVER": payload.get("server"),
        "MTGUARD_TOOL": payload.get("tool"),
        "MTGUARD_DECISION": payload.get("decision"),
        "MTGUARD_PHASE": payload.get("phase"),
        "MTGUARD_MODE": payload.get("mode"),
        "MTGUARD_CALL_ID": payload.get("call_id"),
        "MTGUARD_TRACE_ID": payload.get("trace_id"),
        "MTGUARD_REASONS": "\n".join(reasons),
        "MTGUARD_EVIDENCE": "\n".join(str(e) for e in payload.get("evidence") or []),
    }
    return b"".join(_field(k, v) for k, v in fields.items() if v not in (None, ""))


async def _connect(path: str) -> ConnectedUNIXDatagramSocket:
    """A connected datagram socket to `path`, closed again when connecting fails (a unix
    datagram connect never blocks; anyio's own helper leaks the socket on trio)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.setblocking(False)
        sock.connect(path)
        return await ConnectedUNIXDatagramSocket.from_socket(sock)
    except BaseException:
        sock.close()
        raise


class JournaldSender(AlertOutbox):
    """Sends queued alerts to the journal socket at `path`."""

    name = "journald"

    def __init__(
        self,
        path: str = JOURNAL_SOCKET,
        *,
        identifier: str = "mtguard",
        facility: str = "local0",
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.5,
        queue_size: int = 256,
    ) -> None:
        super().__init__(retries=retries, backoff=backoff, queue_size=queue_size)
        self.path = path
        self._identifier = identifier
        self._facility = FACILITIES[facility]
        self._timeout = timeout
        self._sock: ConnectedUNIXDatagramSocket | None = None

    async def _deliver(self, batch: Sequence[Alert]) -> None:
        entries = [
            journal_entry(p, identifier=self._identifier, facility=self._facility) for p in batch
        ]
        try:
            with anyio.fail_after(self._timeout):
                if self._sock is None:
                    self._sock = await _connect(self.path)
                for entry in entries:
                    await self._sock.send(entry)
        except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            await self._aclose()  # journald restarted: its socket is a new one
            raise DeliveryRetry(f"journald {self.path}: {exc!r}") from exc

    async def _aclose(self) -> None:
        if self._sock is not None:
            with anyio.move_on_after(1.0, shield=True):
                await self._sock.aclose()
        self._sock = None
