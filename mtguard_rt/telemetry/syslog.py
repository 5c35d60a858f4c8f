"""Alerts as RFC 5424 syslog messages over UDP or TCP, off the call path.

`format_rfc5424` writes one message: PRI from the facility and the alert's severity (err
for a deny, warning otherwise), APP-NAME `mtguard`, MSGID the alert kind, one SD-ELEMENT
`mtguard@32473` (RFC 5612's documentation enterprise number) with rule, server, tool,
decision, call and trace ids, and a one-line MSG. TCP frames by octet counting (RFC 6587
3.4.1), reconnecting after an error or when the receiver has closed the connection; UDP
sends one datagram per message, clipped to `max_datagram`. A UDP loss is only seen when the
kernel reports it (ICMP port unreachable): at once on loopback, else one datagram late, so
to a remote receiver the first datagram after it went away is lost uncounted. Over TCP a
refused, reset or closed connection is counted. Delivery and counters are `AlertOutbox`'s.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Literal

import anyio
import anyio.lowlevel
from anyio.abc import SocketAttribute, SocketStream

from .outbox import Alert, AlertOutbox, DeliveryRetry

SyslogTransport = Literal["udp", "tcp"]
FACILITIES: dict[str, int] = {
    "kern": 0, "user": 1, "daemon": 3, "auth": 4, "syslog": 5, "authpriv": 10,
    "audit": 13, "local0": 16, "local1": 17, "local2": 18, "local3": 19, "local4": 20,
    "local5": 21, "local6": 22, "local7": 23,
}
SD_ID = "mtguard@32473"
_SEVERITY = {"ERROR": 3, "WARN": 4}  # err, warning
_MSG_MAX = 2048  # MSG part; evidence beyond this is in the audit log


def _sd_value(value: object) -> str:
    """An SD-PARAM value: `"`, `\\` and `]` escaped (RFC 5424 6.3.3), one line."""
    text = " ".join(str(value).split())
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("]", "\\]")


def _header_field(value: str, limit: int) -> str:
    """A header field: printable US-ASCII without spaces, at most `limit` chars, else "-"."""
    clean = "".join(c for c in value if 33 <= ord(c) <= 126)[:limit]
    return clean or "-"


def format_rfc5424(
    payload: Mapping[str, Any], *, facility: int = FACILITIES["local0"],
    hostname: str | None = None, app_name: str = "mtguard", procid: int | None = None,
) -> bytes:
    """One RFC 5424 message (without transport framing) for one guard alert."""
    pri = facility * 8 + _SEVERITY.get(str(payload.get("severity")), 4)
    ts = payload.get("ts")
    when = datetime.fromtimestamp(float(ts), UTC) if ts else datetime.now(UTC)
    stamp = when.isoformat(timespec="microseconds").replace("+00:00", "Z")
    host = _header_field(hostname or socket.gethostname(), 255)
    kind = str(payload.get("kind") or "alert")
    rules = [str(r) for r in payload.get("rules") or []]
    params = {
        "kind": kind, "rule": ",".join(rules), "server": payload.get("server"),
        "tool": payload.get("tool"), "decision": payload.get("decision"),
        "phase": payload.get("phase"), "mode": payload.get("mode"),
        "call_id": payload.get("call_id"), "trace_id": payload.get("trace_id"),
    }
    sd = "[" + SD_ID + "".join(
        f' {k}="{_sd_value(v)}"' for k, v in params.items() if v not in (None, "")
    ) + "]"
    reasons = "; ".join(str(r) for r in payload.get("reasons") or [])
    evidence = "; ".join(str(e) for e in payload.get("evidence") or [])
    msg = f"mtguard {kind}: tools/call {params['tool']} on {params['server']}"
    msg += f" ({', '.join(rules) or 'no rule'})"
    msg += f": {reasons}" if reasons else ""
    msg += f" [evidence: {evidence}]" if evidence else ""
    msg = " ".join(msg.split())[:_MSG_MAX]
    header = (
        f"<{pri}>1 {stamp} {host} {_header_field(app_name, 48)} "
        f"{procid if procid is not None else os.getpid()} {_header_field(kind, 32)}"
    )
    return f"{header} {sd} {msg}".encode()


def _peer_closed(stream: SocketStream) -> bool:
    """True when the receiver closed or reset the connection. A syslog receiver never
    writes, so a readable socket means EOF or an error; without this check a message written
    after the daemon stopped would be accepted by the kernel and lost uncounted."""
    raw = stream.extra(SocketAttribute.raw_socket)  # asyncio wraps it: peek through a dup
    try:
        with socket.fromfd(raw.fileno(), raw.family, raw.type) as sock:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except (BlockingIOError, InterruptedError):
        return False
    except OSError:
        return True


def _raise_pending(sock: socket.socket) -> None:
    """Raise the socket's pending error (an ICMP port unreachable for a sent datagram)."""
    err = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
    if err:
        raise OSError(err, os.strerror(err))


def octet_counted(message: bytes) -> bytes:
    """RFC 6587 octet-counting frame: `MSG-LEN SP SYSLOG-MSG`."""
    return b"%d %s" % (len(message), message)


class SyslogSender(AlertOutbox):
    """Sends queued alerts to a syslog receiver at `host`:`port` over `transport`."""

    name = "syslog"

    def __init__(
        self,
        host: str,
        port: int,
        *,
        transport: SyslogTransport = "udp",
        facility: str = "local0",
        app_name: str = "mtguard",
        hostname: str | None = None,
        timeout: float = 5.0,
        max_datagram: int = 2048,
        retries: int = 3,
        backoff: float = 0.5,
        queue_size: int = 256,
    ) -> None:
        super().__init__(retries=retries, backoff=backoff, queue_size=queue_size)
        if facility not in FACILITIES:
            raise ValueError(f"unknown syslog facility {facility!r}")
        self.host, self.port, self.transport = host, port, transport
        self._facility = FACILITIES[facility]
        self._app_name, self._hostname = app_name, hostname
        self._timeout = timeout
        self._max_datagram = max_datagram
        self._tcp: SocketStream | None = None
        self._udp: socket.socket | None = None

    def format(self, payload: Mapping[str, Any]) -> bytes:
        return format_rfc5424(
            payload, facility=self._facility, hostname=self._hostname, app_name=self._app_name
        )

    async def _deliver(self, batch: Sequence[Alert]) -> None:
        messages = [self.format(p) for p in batch]
        try:
            with anyio.fail_after(self._timeout):
                if self.transport == "tcp":
                    await self._send_tcp(messages)
                else:
                    await self._send_udp(messages)
        except (OSError, TimeoutError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            await self._aclose()  # a broken connection is reopened on the next attempt
            raise DeliveryRetry(f"{self.transport}://{self.host}:{self.port}: {exc!r}") from exc

    async def _send_tcp(self, messages: Sequence[bytes]) -> None:
        if self._tcp is not None and _peer_closed(self._tcp):
            await self._aclose()  # the daemon went away: write to a new connection, or fail
        if self._tcp is None:
            self._tcp = await anyio.connect_tcp(self.host, self.port)
        await self._tcp.send(b"".join(octet_counted(m) for m in messages))

    async def _send_udp(self, messages: Sequence[bytes]) -> None:
        """A plain non-blocking connected socket, not an event-loop transport: the kernel's
        pending ICMP error (nobody listens) then surfaces on our next `send` as
        ConnectionRefusedError, which a loop's datagram transport would swallow."""
        if self._udp is None:
            family, kind, proto, _, addr = (
                await anyio.getaddrinfo(self.host, self.port, type=socket.SOCK_DGRAM)
            )[0]
            sock = socket.socket(family, kind, proto)
            try:
                sock.setblocking(False)
                sock.connect(addr)  # UDP: no traffic, only the peer address
            except BaseException:
                sock.close()
                raise
            self._udp = sock
        for message in messages:
            _raise_pending(self._udp)  # the previous datagram was refused: receiver gone
            self._udp.send(message[: self._max_datagram])  # BlockingIOError: retried
            await anyio.lowlevel.checkpoint()
        _raise_pending(self._udp)  # on loopback the refusal is back before send returns

    async def _aclose(self) -> None:
        if self._tcp is not None:
            with anyio.move_on_after(1.0, shield=True):
                await self._tcp.aclose()
        if self._udp is not None:
            self._udp.close()
        self._tcp, self._udp = None, None
