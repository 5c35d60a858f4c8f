"""`Prefetch`: modules imported in a worker thread while the event loop starts the guard.

A proxy's start is mostly waits (Docker creating the sandbox, the server's own start inside
it) and imports (CPU): the host side's modules (the MCP SDK, about half a second of a quiet
core) are imported here during those waits instead of before them. Only third-party modules
that do not import mtguard_rt belong here: two threads importing modules that import each
other could deadlock on the import locks. A failed import is not reported here: the
caller's own import statement, after `wait()`, raises it where it belongs.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Sequence

import anyio

JOIN_S = 120.0  # the SDK's import on a loaded 2-core host is seconds; a hang is a bug


class Prefetch:
    """`start()` when the event loop is about to wait (the thread holds the GIL while it
    imports: started any earlier, it slows the loop's own work as much as it saves)."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = tuple(modules)
        self._thread = threading.Thread(target=self._run, name="mtguard-prefetch", daemon=True)
        self.started = anyio.Event()

    def start(self) -> None:
        if not self.started.is_set():
            self._thread.start()
            self.started.set()

    def _run(self) -> None:
        for name in self.modules:
            try:
                importlib.import_module(name)
            except BaseException:  # the caller's own import raises it again
                return

    async def wait(self) -> None:
        """Until it was started and is done (the join bounded by JOIN_S; the caller's import
        then goes on)."""
        await self.started.wait()
        if self._thread.is_alive():
            await anyio.to_thread.run_sync(self._thread.join, JOIN_S, abandon_on_cancel=True)

    def join(self, timeout_s: float = JOIN_S) -> None:
        if self.started.is_set():
            self._thread.join(timeout_s)


__all__ = ["Prefetch"]
