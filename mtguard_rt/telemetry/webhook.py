"""Alert webhook: POST one JSON object per alert, off the call path.

`submit` is sync and never blocks: a full queue is a counted drop. `run` (owned by the
telemetry task group) delivers in order with a per-request timeout and bounded retries with
exponential backoff on connection errors, timeouts, 429 and 5xx; other statuses fail at once.
Counters: sent, failed (gave up), dropped (queue full or closed).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import anyio
import httpx
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

log = logging.getLogger(__name__)


class WebhookSender:
    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        retries: int = 3,
        backoff: float = 0.5,
        queue_size: int = 256,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.url = url
        self._headers = dict(headers or {})
        self._timeout = timeout
        self._retries = retries
        self._backoff = backoff
        self._transport = transport
        self._send: MemoryObjectSendStream[dict[str, Any]]
        self._recv: MemoryObjectReceiveStream[dict[str, Any]]
        self._send, self._recv = anyio.create_memory_object_stream[dict[str, Any]](queue_size)
        self.sent = 0
        self.failed = 0
        self.dropped = 0

    def submit(self, payload: dict[str, Any]) -> bool:
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
        """Count what is still queued as dropped (after a cancelled shutdown)."""
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
        """Deliver until `close()` and the queue is empty; cancellation drops the in-flight one."""
        async with (
            httpx.AsyncClient(
                timeout=self._timeout, headers=self._headers, transport=self._transport
            ) as client,
            self._recv.clone() as recv,
        ):
            async for payload in recv:
                try:
                    await self._deliver(client, payload)
                except anyio.get_cancelled_exc_class():
                    self.dropped += 1
                    raise

    async def _deliver(self, client: httpx.AsyncClient, payload: dict[str, Any]) -> None:
        for attempt in range(self._retries + 1):
            if attempt:
                await anyio.sleep(self._backoff * 2 ** (attempt - 1))  # backoff, not a poll
            try:
                response = await client.post(self.url, json=payload)
            except httpx.HTTPError as exc:
                log.debug("webhook %s attempt %d: %s", self.url, attempt + 1, exc)
                continue
            if response.is_success:
                self.sent += 1
                return
            if response.status_code != 429 and response.status_code < 500:
                log.warning("webhook %s refused an alert: HTTP %d", self.url, response.status_code)
                break
        self.failed += 1
