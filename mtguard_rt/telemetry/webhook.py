"""Alert webhook: POST one JSON object per alert, off the call path.

An `AlertOutbox` (bounded queue, counted drops, bounded retries with exponential backoff)
delivering batches of one: each alert is one POST with a per-request timeout. Connection
errors, timeouts, 429 and 5xx are retried; other statuses fail at once.
Counters: sent, failed (gave up), dropped (queue full or closed).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import httpx

from .outbox import Alert, AlertOutbox, DeliveryRefused, DeliveryRetry

log = logging.getLogger(__name__)


class WebhookSender(AlertOutbox):
    name = "webhook"

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
        super().__init__(retries=retries, backoff=backoff, queue_size=queue_size, max_batch=1)
        self.url = url
        self._client = httpx.AsyncClient(
            timeout=timeout, headers=dict(headers or {}), transport=transport
        )

    async def _deliver(self, batch: Sequence[Alert]) -> None:
        for payload in batch:
            try:
                response = await self._client.post(self.url, json=payload)
            except httpx.HTTPError as exc:
                raise DeliveryRetry(f"{self.url}: {exc}") from exc
            if response.is_success:
                continue
            if response.status_code == 429 or response.status_code >= 500:
                raise DeliveryRetry(f"{self.url}: HTTP {response.status_code}")
            raise DeliveryRefused(f"{self.url}: HTTP {response.status_code}")

    async def _aclose(self) -> None:
        await self._client.aclose()
