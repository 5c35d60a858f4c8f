"""The JSON-RPC connection to the guarded MCP server.

`Upstream` holds what every transport shares: responses the guard waits for (its own
requests and the `tools/call`s it relays) resolve their `ResponseSlot`; everything else goes
to the `on_message` callback (the proxy forwards it to the host). `StdioUpstream` speaks
newline-delimited JSON-RPC over a sandboxed server's stdio: lines that are not JSON-RPC are
counted and dropped, never forwarded; an oversize line is dropped whole. When the server's
stdout ends, every pending slot fails with `ServerExited`, so no caller waits forever.
Every call id the guard has handled (answered, killed, timed out, cancelled) leaves a
tombstone: a later response to it is dropped and reported to `on_dropped`, never relayed.
(`remote.HttpUpstream` speaks streamable HTTP to a server at a URL.)
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import msgspec

from ..errors import ServerExited
from ..sandbox import Sandbox

Message = dict[str, Any]
MAX_LINE_BYTES = 64 << 20  # a 16 MB argument must pass; a runaway server must not exhaust memory
MAX_TOMBSTONES = 4096  # handled ids remembered; the oldest go first (ids are never reused)

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(dict[str, Any])


class UpstreamError(Exception):
    """The server answered a guard-issued request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        self.code = code
        self.message = message
        super().__init__(f"server error {code}: {message}")


class RequestCancelled(Exception):
    """The host cancelled a relayed request; no response is awaited any more."""


class ResponseSlot:
    """Where one awaited response lands: the response message, or the reason there is none."""

    def __init__(self) -> None:
        self._done = anyio.Event()
        self.message: Message | None = None
        self.error: BaseException | None = None

    def resolve(self, message: Message | None = None, error: BaseException | None = None) -> None:
        if not self._done.is_set():
            self.message, self.error = message, error
            self._done.set()

    async def wait(self) -> Message:
        await self._done.wait()
        if self.error is not None:
            raise self.error
        assert self.message is not None
        return self.message


class Upstream(ABC):
    """What the supervisor and the relays use, whatever the transport: `expect` a response
    before `send`ing its request, `forget` it after; `closed` is set when the server is gone
    for good, and `exited()` says why. Subclasses provide `send`, `run`, `exited` and
    `describe`."""

    def __init__(self, on_message: Callable[[Message], Awaitable[None]] | None = None) -> None:
        self.on_message = on_message
        self.garbage_lines = 0  # messages from the server that were not JSON-RPC: dropped
        self.closed = anyio.Event()
        self._pending: dict[Any, ResponseSlot] = {}
        self._ids = itertools.count(1)
        # handled call id -> why no response to it may reach anyone any more
        self.tombstones: dict[Any, str] = {}
        # (message, why) for each response dropped on a tombstone (the supervisor records it)
        self.on_dropped: Callable[[Message, str], Awaitable[None]] | None = None

    def expect(self, request_id: Any) -> ResponseSlot:
        """Claim the response to `request_id` before the request is sent."""
        slot = ResponseSlot()
        if self.closed.is_set():
            slot.resolve(error=self.exited())
        self.tombstones.pop(request_id, None)  # a fresh request under an id reused on purpose
        self._pending[request_id] = slot
        return slot

    def cancel(self, request_id: Any, why: str) -> None:
        slot = self._pending.pop(request_id, None)
        if slot is not None:
            slot.resolve(error=RequestCancelled(why))
            self.tombstone(request_id, why)

    def tombstone(self, request_id: Any, why: str) -> None:
        """No response to `request_id` may be relayed from now on: drop the slot (a waiter
        keeps what it has) and remember the id, so a late answer is dropped and recorded."""
        self._pending.pop(request_id, None)
        self.tombstones.setdefault(request_id, why)
        while len(self.tombstones) > MAX_TOMBSTONES:
            del self.tombstones[next(iter(self.tombstones))]

    def forget(self, request_id: Any) -> None:
        """The caller is done with `request_id`: any later response to it is a duplicate."""
        self.tombstone(request_id, "a response after the call was handled")

    @abstractmethod
    async def send(self, message: Message) -> None:
        """Write one JSON-RPC message to the server."""

    async def request(self, method: str, params: Message | None, timeout: float) -> Message:
        request_id = f"mtguard-{next(self._ids)}"
        slot = self.expect(request_id)
        message: Message = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        try:
            await self.send(message)
            with anyio.fail_after(timeout):
                response = await slot.wait()
        finally:
            self.forget(request_id)
        if "error" in response:
            err = response["error"] or {}
            raise UpstreamError(int(err.get("code", -32603)), str(err.get("message", "")))
        result: Message = response.get("result") or {}
        return result

    async def notify(self, method: str, params: Message | None = None) -> None:
        message: Message = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    @abstractmethod
    def exited(self) -> ServerExited:
        """Why the server is gone (raised to every caller still waiting)."""

    @abstractmethod
    def describe(self) -> str:
        """Where the server runs, for the proxy's start-up line."""

    @abstractmethod
    async def run(self) -> None:
        """Read the server's messages and `deliver` them until it is gone."""

    async def deliver(self, message: Message) -> None:
        """A message from the server: the response a slot waits for, else `on_message`'s."""
        request_id = message.get("id")
        if "method" not in message and (slot := self._pending.pop(request_id, None)):
            slot.resolve(message)
            self.tombstone(request_id, "a second response to the same call")
        elif "method" not in message and request_id in self.tombstones:
            if self.on_dropped is not None:
                await self.on_dropped(message, self.tombstones[request_id])
        elif self.on_message is not None:
            await self.on_message(message)

    def fail_pending(self, error: BaseException) -> None:
        for slot in list(self._pending.values()):
            slot.resolve(error=error)


class StdioUpstream(Upstream):
    """A sandboxed server's stdio: newline-delimited JSON-RPC."""

    def __init__(
        self, sandbox: Sandbox, on_message: Callable[[Message], Awaitable[None]] | None = None
    ) -> None:
        super().__init__(on_message)
        self.sandbox = sandbox

    async def send(self, message: Message) -> None:
        try:
            await self.sandbox.stdin.send(_encoder.encode(message) + b"\n")
        except Exception as exc:  # the attach connection is gone: the server has exited
            raise self.exited() from exc

    def exited(self) -> ServerExited:
        return ServerExited(" ".join(self.sandbox.command), None, self.sandbox.stderr_tail())

    def describe(self) -> str:
        return f"in sandbox {self.sandbox.container_id[:12]}"

    async def run(self) -> None:
        """Read the server's stdout until it ends. Run it in a task group the caller owns."""
        buffer = bytearray()
        dropping = False
        try:
            while True:
                try:
                    chunk = await self.sandbox.stdout.receive()
                except (anyio.EndOfStream, anyio.ClosedResourceError):
                    break
                buffer += chunk
                while (end := buffer.find(b"\n")) >= 0:
                    line = bytes(buffer[:end])
                    del buffer[: end + 1]
                    if dropping:
                        dropping = False
                        continue
                    await self._dispatch(line)
                if len(buffer) > MAX_LINE_BYTES:
                    self.garbage_lines += 1
                    buffer.clear()
                    dropping = True
        finally:
            self.closed.set()
            self.fail_pending(self.exited())

    async def _dispatch(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = _decoder.decode(line)
        except msgspec.DecodeError:
            self.garbage_lines += 1
            self.sandbox.add_stderr(
                b"[mtguard] dropped a non-JSON stdout line: " + line[:200] + b"\n"
            )
            return
        if message.get("jsonrpc") != "2.0":
            self.garbage_lines += 1
            return
        await self.deliver(message)
