"""Alerts pushed to a Prometheus Alertmanager (`POST /api/v2/alerts`), off the call path.

One Alertmanager alert per (alert, rule): labels `alertname`, `rule`, `server`, `tool`,
`decision`, `severity`, `kind` identify it (no call id: a label set is a deduplication key,
so a rule that keeps denying the same tool is one firing alert, not thousands); annotations
carry the summary, reasons, evidence, call id and trace id. A guard's alert is an event, so
it resolves itself: `endsAt` = `startsAt` + `resolve_after`, as Alertmanager expects of a
sender that will not re-send. Delivery, retries and loss counting are `AlertOutbox`'s.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import httpx

from .outbox import Alert, AlertOutbox, DeliveryRefused, DeliveryRetry

ALERT_NAME = "MtguardAlert"
_SEVERITY = {"ERROR": "critical", "WARN": "warning"}
_ANNOTATION_MAX = 1024  # one annotation's length: evidence can be long, a page must stay short


def _rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace(
        "+00:00", "Z"
    )


def _clip(text: str) -> str:
    return text if len(text) <= _ANNOTATION_MAX else text[: _ANNOTATION_MAX - 1] + "…"


def alertmanager_alerts(
    payload: Mapping[str, Any], *, resolve_after: float, generator_url: str = ""
) -> list[dict[str, Any]]:
    """The Alertmanager v2 `postableAlert`s for one guard alert (one per rule, at least one)."""
    started = float(payload.get("ts") or time.time())
    rules = list(payload.get("rules") or []) or ["none"]
    base = {
        "alertname": ALERT_NAME,
        "kind": str(payload["kind"]),
        "server": str(payload.get("server") or ""),
        "tool": str(payload.get("tool") or ""),
        "decision": str(payload.get("decision") or ""),
        "severity": _SEVERITY.get(str(payload.get("severity")), "warning"),
    }
    reasons = [str(r) for r in payload.get("reasons") or []]
    annotations = {
        "summary": _clip(
            f"mtguard {payload['kind']}: tools/call {base['tool']} on {base['server']}"
            f" ({', '.join(rules)})"
        ),
        "description": _clip("; ".join(reasons) or "no reason given"),
        "evidence": _clip("; ".join(str(e) for e in payload.get("evidence") or [])),
        "call_id": str(payload.get("call_id") or ""),
        "request_id": str(payload.get("request_id") or ""),
        "trace_id": str(payload.get("trace_id") or ""),
        "phase": str(payload.get("phase") or ""),
        "mode": str(payload.get("mode") or ""),
    }
    out = []
    for rule in dict.fromkeys(rules):
        alert: dict[str, Any] = {
            "labels": {**base, "rule": rule},
            "annotations": {k: v for k, v in annotations.items() if v},
            "startsAt": _rfc3339(started),
            "endsAt": _rfc3339(started + resolve_after),
        }
        if generator_url:
            alert["generatorURL"] = generator_url
        out.append(alert)
    return out


class AlertmanagerSender(AlertOutbox):
    """Posts queued alerts to `url` (the Alertmanager base URL), a batch per request."""

    name = "alertmanager"

    def __init__(
        self,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout: float = 5.0,
        resolve_after: float = 300.0,
        generator_url: str = "",
        retries: int = 3,
        backoff: float = 0.5,
        queue_size: int = 256,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(retries=retries, backoff=backoff, queue_size=queue_size)
        base = url.rstrip("/")
        self.url = base if base.endswith("/api/v2/alerts") else f"{base}/api/v2/alerts"
        self._resolve_after = resolve_after
        self._generator_url = generator_url
        self._client = httpx.AsyncClient(
            timeout=timeout, headers=dict(headers or {}), transport=transport
        )

    async def _deliver(self, batch: Sequence[Alert]) -> None:
        body = [
            a for p in batch
            for a in alertmanager_alerts(
                p, resolve_after=self._resolve_after, generator_url=self._generator_url
            )
        ]
        try:
            response = await self._client.post(self.url, json=body)
        except httpx.HTTPError as exc:
            raise DeliveryRetry(f"{self.url}: {exc!r}") from exc
        if response.is_success:
            return
        detail = f"{self.url}: HTTP {response.status_code} {response.text[:200]}"
        if response.status_code == 429 or response.status_code >= 500:
            raise DeliveryRetry(detail)
        raise DeliveryRefused(detail)

    async def _aclose(self) -> None:
        await self._client.aclose()
