"""The host's stdin/stdout as event-loop streams: no worker thread per line or write.

The MCP SDK's stdio transport reads each line and writes (then flushes) each message in a
worker thread (`anyio.wrap_file`): three thread hops per call, each a scheduler round trip
on a loaded machine. `open_host_stdio()` hands the SDK line/writer objects over the same fds
that wait on the fd in the event loop instead (`anyio.wait_readable`/`wait_writable`), only
when both are pipes or sockets (what a host spawns a server with); a terminal or a file
gets None (the SDK's own transport). Like the SDK, it claims fd 0/1 for the wire: they
point at /dev/null and stderr while it runs, so a stray print or a child's output cannot
corrupt the JSON-RPC stream, and both are restored on exit. Every read is of what poll said
is there and every write at most `CHUNK` bytes once poll said there is room, so the
descriptors stay blocking (their flags are shared with the host) and no call blocks the loop.
`host_stdio_server()` is the SDK's `stdio_server` over them.
"""

from __future__ import annotations

import os
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager, nullcontext
from typing import Any

import anyio
from mcp.server.stdio import stdio_server

CHUNK = 4096  # PIPE_BUF: poll's "writable" on a pipe or socket means at least this much room
READ_SIZE = 1 << 16


def _streamable(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


class FdLines:
    """Lines (str, with their newline) read from `fd` until EOF, UTF-8 with replacement
    (as the SDK's own transport decodes them)."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buf = bytearray()

    async def __aiter__(self) -> AsyncIterator[str]:
        while True:
            await anyio.wait_readable(self.fd)
            try:
                chunk = os.read(self.fd, READ_SIZE)
            except BlockingIOError:  # the host shared a non-blocking description: poll again
                continue
            if not chunk:  # EOF: a last line without its newline still counts
                if self._buf:
                    rest = bytes(self._buf)
                    self._buf.clear()
                    yield rest.decode("utf-8", errors="replace")
                return
            start = len(self._buf)
            self._buf += chunk
            cut = self._buf.find(b"\n", start)  # only the new bytes: a long line stays linear
            while cut >= 0:
                line = bytes(self._buf[: cut + 1])
                del self._buf[: cut + 1]
                yield line.decode("utf-8", errors="replace")
                cut = self._buf.find(b"\n")


class FdWriter:
    """`write` then `flush` text to `fd` (the SDK's stdout interface); the bytes are all on
    the fd when `flush` returns."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._pending = bytearray()

    async def write(self, text: str) -> None:
        self._pending += text.encode("utf-8")

    async def flush(self) -> None:
        view = memoryview(self._pending)
        done = 0
        try:
            while done < len(view):
                await anyio.wait_writable(self.fd)
                try:
                    done += os.write(self.fd, view[done : done + CHUNK])
                except BlockingIOError:
                    continue
        finally:
            view.release()
            del self._pending[:done]


@contextmanager
def _claim(fd: int, open_diversion: int) -> Iterator[int]:
    """A private duplicate of `fd` for the wire, `fd` itself pointed at the diversion until
    exit (then the wire is put back)."""
    private = os.dup(fd)
    os.set_inheritable(private, False)
    try:
        os.dup2(open_diversion, fd)
        try:
            yield private
        finally:
            os.dup2(private, fd)
    finally:
        os.close(private)


@contextmanager
def open_host_stdio(in_fd: int = 0, out_fd: int = 1) -> Iterator[tuple[FdLines, FdWriter] | None]:
    """(lines from the host, writer to the host) over `in_fd`/`out_fd`, claimed for the wire
    (see the module); None when either is not a pipe or socket."""
    if not (_streamable(in_fd) and _streamable(out_fd)):
        yield None
        return
    with ExitStack() as stack:
        null = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        stack.callback(os.close, null)
        err = os.dup(2)
        os.set_inheritable(err, False)
        stack.callback(os.close, err)
        wire_in = stack.enter_context(_claim(in_fd, null))
        wire_out = stack.enter_context(_claim(out_fd, err))
        yield FdLines(wire_in), FdWriter(wire_out)


@asynccontextmanager
async def host_stdio_server(stdin: Any = None, stdout: Any = None) -> AsyncIterator[Any]:
    """The SDK's `stdio_server(stdin, stdout)`; with neither given, over the host's fds in
    the event loop (`open_host_stdio`) when they are pipes or sockets."""
    own = open_host_stdio() if stdin is None and stdout is None else nullcontext(None)
    with own as native:
        if native is not None:
            stdin, stdout = native
        async with stdio_server(stdin, stdout) as streams:
            yield streams


__all__ = ["CHUNK", "FdLines", "FdWriter", "host_stdio_server", "open_host_stdio"]
