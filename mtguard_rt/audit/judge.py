"""The optional LLM judge: any OpenAI-compatible chat-completions endpoint over httpx.

`LlmJudge.ask(system, user)` posts one chat completion and parses the answer strictly as
`{"decision", "violated_policy", "reason"}` (a ```json fence tolerated, nothing else).
Timeouts, HTTP errors and malformed answers become `JudgeTimeout`, `JudgeUnavailable` and
`JudgeProtocolError`; `judge()` maps them through `on_error` to a verdict that says so.
Identical requests are answered from an LRU cache; concurrent requests are capped.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import OrderedDict
from typing import Any, Literal

import anyio
import httpx
import msgspec

from ..errors import AuditError, JudgeProtocolError, JudgeTimeout, JudgeUnavailable


class JudgeConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """The `[llm]` settings. `base_url` includes the API version, as in OpenAI's SDKs."""

    base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = 30.0
    max_result_chars: int = 4000
    max_tree_chars: int = 12000
    on_error: Literal["deny", "allow"] = "deny"
    max_concurrency: int = 4
    temperature: float = 0.0
    json_mode: bool = False  # send response_format={"type": "json_object"}
    cache_size: int = 512


class JudgeReply(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    decision: Literal["allow", "deny"]
    violated_policy: str | None
    reason: str


class JudgeAnswer(msgspec.Struct, kw_only=True, frozen=True):
    """A reply, or the `on_error` outcome of a failed request (`error` says why)."""

    decision: Literal["allow", "deny"]
    violated_policy: str | None = None
    reason: str = ""
    error: str | None = None
    cached: bool = False


_FENCE = re.compile(r"\A```(?:json)?[ \t]*\n(.*?)\n?```\Z", re.S)
_reply_decoder = msgspec.json.Decoder(JudgeReply)


def parse_reply(content: str) -> JudgeReply:
    """Strictly parse a judge's message content (bare JSON or one ```json fence)."""
    text = content.strip()
    if m := _FENCE.match(text):
        text = m.group(1).strip()
    try:
        return _reply_decoder.decode(text)
    except msgspec.DecodeError as exc:
        raise JudgeProtocolError(f"{exc} in {content[:200]!r}") from exc


class LlmJudge:
    """One endpoint, one connection pool. Use `async with` or call `aclose()`."""

    def __init__(
        self, config: JudgeConfig, *, transport: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self.config = config
        base = config.base_url.rstrip("/")
        self.url = base if base.endswith("/chat/completions") else base + "/chat/completions"
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(config.timeout_s), transport=transport
        )
        self._limiter: anyio.CapacityLimiter | None = None
        self._cache: OrderedDict[str, JudgeReply] = OrderedDict()
        self.requests = 0  # requests actually sent (cache misses)

    async def __aenter__(self) -> LlmJudge:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    def _body(self, system: str, user: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.config.model,
            "temperature": self.config.temperature,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": user},
            ],
        }
        if self.config.json_mode:
            body["response_format"] = {"type": "json_object"}
        return body

    async def judge(self, system: str, user: str) -> JudgeAnswer:
        """Ask, and apply `on_error` to any failure: never raises an `AuditError`."""
        try:
            reply, cached = await self._ask(system, user)
        except AuditError as exc:
            return JudgeAnswer(
                decision=self.config.on_error,
                violated_policy="judge-error" if self.config.on_error == "deny" else None,
                reason=str(exc),
                error=type(exc).__name__,
            )
        return JudgeAnswer(
            decision=reply.decision,
            violated_policy=reply.violated_policy,
            reason=reply.reason,
            cached=cached,
        )

    async def ask(self, system: str, user: str) -> JudgeReply:
        """One verdict; raises JudgeTimeout, JudgeUnavailable or JudgeProtocolError."""
        return (await self._ask(system, user))[0]

    async def _ask(self, system: str, user: str) -> tuple[JudgeReply, bool]:
        body = msgspec.json.encode(self._body(system, user))
        key = hashlib.sha256(body).hexdigest()
        if (hit := self._cache.get(key)) is not None:
            self._cache.move_to_end(key)
            return hit, True
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self.config.max_concurrency)
        async with self._limiter:
            reply = await self._post(body)
        self._cache[key] = reply
        while len(self._cache) > self.config.cache_size:
            self._cache.popitem(last=False)
        return reply, False

    def _headers(self) -> dict[str, str]:
        headers = {"content-type": "application/json"}
        if self.config.api_key_env:
            key = os.environ.get(self.config.api_key_env)
            if not key:
                raise JudgeUnavailable(self.url, f"${self.config.api_key_env} is not set")
            headers["authorization"] = f"Bearer {key}"
        return headers

    async def _post(self, body: bytes) -> JudgeReply:
        self.requests += 1
        try:
            with anyio.fail_after(self.config.timeout_s):
                resp = await self._client.post(self.url, content=body, headers=self._headers())
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise JudgeTimeout(self.config.timeout_s) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise JudgeUnavailable(self.url, f"{type(exc).__name__}: {exc}") from exc
        if resp.status_code != 200:
            raise JudgeUnavailable(self.url, f"HTTP {resp.status_code}: {resp.text[:200]}")
        try:
            content = resp.json()["choices"][0]["message"]["content"]
        except (ValueError, LookupError, TypeError) as exc:
            raise JudgeProtocolError(f"not a chat completion: {resp.text[:200]!r}") from exc
        if not isinstance(content, str):
            raise JudgeProtocolError(f"message content is {type(content).__name__}, not text")
        return parse_reply(content)
