"""`AlertOutbox`: the bounded, non-blocking delivery every alert output shares.

`submit` is sync and never blocks: a full or closed queue is a counted drop. `run` (owned by
the telemetry task group) takes what has queued, up to `max_batch` alerts, and hands it to
`_deliver`, which a subclass implements with its own timeout; a batch that raises
`DeliveryRetry` is retried `retries` times with exponential backoff, then counted as failed.
Counters: sent, failed (gave up), dropped (queue full, closed, or in flight at cancellation).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

log = logging.getLogger(__name__)
Alert = dict[str, Any]
_CLOSE_TIMEOUT = 2.0  # closing a socket or HTTP client: bounded, so exit cannot hang on it


class DeliveryRetry(Exception):
    """Raised by `_deliver` for a transient failure (connection, timeout, 5xx): try again."""


class DeliveryRefused(Exception):
    """Raised by `_deliver` when the receiver rejects the batch for good (e.g. HTTP 400)."""


class AlertOutbox(ABC):
    """Base class of the Alertmanager and syslog outputs; subclasses define `_deliver`."""

    name = "outbox"

    def __init__(
        self, *, retries: int = 3, backoff: float = 0.5, queue_size: int = 256, max_batch: int = 64
    ) -> None:
        self._retries = retries
        self._backoff = backoff
        self._max_batch = max_batch
        self._send: MemoryObjectSendStream[Alert]
        self._recv: MemoryObjectReceiveStream[Alert]
        self._send, self._recv = anyio.create_memory_object_stream[Alert](queue_size)
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def submit(self, payload: Alert) -> bool:
        """Queue one alert; False (and a counted drop) when the queue is full or closed."""
        try:
            self._send.send_nowait(payload)
        except (anyio.WouldBlock, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self.dropped += 1
            return False
        return True

    def close(self) -> None:
        """No more alerts; `run` returns once the queue is delivered."""
        self._send.close()

    def abandon(self) -> int:
        """Count what is still queued as dropped (after a cancelled or timed-out shutdown)."""
        left = 0
        while True:
            try:
                self._recv.receive_nowait()
            except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
                break
            left += 1
        self.dropped += left
        self._recv.close()
        return left

    async def run(self) -> None:
        """Deliver until `close()` and the queue is drained; a cancel drops the batch in flight."""
        try:
            async with self._recv.clone() as recv:
                async for first in recv:
                    batch = [first]
                    while len(batch) < self._max_batch:
                        try:
                            batch.append(recv.receive_nowait())
                        except (anyio.WouldBlock, anyio.EndOfStream):
                            break
                    try:
                        await self._deliver_with_retries(batch)
                    except anyio.get_cancelled_exc_class():
                        self.dropped += len(batch)
                        raise
        finally:
            with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                await self._aclose()

    async def _deliver_with_retries(self, batch: Sequence[Alert]) -> None:
        for attempt in range(self._retries + 1):
            if attempt:
                await anyio.sleep(self._backoff * 2 ** (attempt - 1))  # backoff, not a poll
            try:
                await self._deliver(batch)
            except DeliveryRetry as exc:
                log.debug("%s attempt %d: %s", self.name, attempt + 1, exc)
                continue
            except DeliveryRefused as exc:
                log.warning("%s refused %d alert(s): %s", self.name, len(batch), exc)
                break
            self.sent += len(batch)
            return
        self.failed += len(batch)

    @abstractmethod
    async def _deliver(self, batch: Sequence[Alert]) -> None:
        """Send one batch within the output's own timeout (DeliveryRetry / DeliveryRefused)."""

    async def _aclose(self) -> None:
        """Release the output's connection; called once, shielded, when `run` ends."""
        return None
