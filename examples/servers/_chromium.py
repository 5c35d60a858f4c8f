"""A real headless Chromium driven over the DevTools protocol on a pipe (no port, no websocket).

`Chromium.launch()` spawns Debian's chromium in its own process group with
`--remote-debugging-pipe` (commands on its fd 3, answers on its fd 4, NUL-framed JSON), and
fails with `BrowserError` if it does not answer within `STARTUP_TIMEOUT_S` (or
$MTGUARD_CHROMIUM_START_TIMEOUT). Every wait is
bounded. `kill()` is synchronous, bounded and idempotent (SIGTERM, then SIGKILL to the
whole group, reap, remove the profile), so it also runs from `finally`/atexit; and Chromium
exits by itself when its pipe closes, so a killed server cannot leave a browser behind.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import select
import shutil
import signal
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

# A cold start on a loaded 2-core machine takes 1-3 s; far beyond that, something is broken.
STARTUP_TIMEOUT_S = 20.0
COMMAND_TIMEOUT_S = 30.0  # one DevTools command (a screenshot of a long page is the slowest)
EVENT_BACKLOG = 2000  # buffered events; the oldest are dropped (only recent ones are waited on)
READ_SIZE = 1 << 16
GRACE_S = 3.0  # a SIGTERMed Chromium closes in ~0.2 s; then its whole group is SIGKILLed

# Debian's chromium-headless-shell first: the same engine without the browser's profile
# services, so it makes no traffic of its own (measured: full Chromium contacts Google's
# update, sign-in and time services at start-up, which the guard rightly reports). Then
# the full browser binary (/usr/bin/chromium is a shell wrapper that sources /etc/chromium.d,
# which the sandbox lacks). $MTGUARD_CHROMIUM overrides.
CANDIDATES = (
    "/usr/lib/chromium/chromium-headless-shell",
    "/usr/lib/chromium/chromium",
    "/usr/bin/chromium",
)
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-dev-shm-usage",  # Docker's /dev/shm is 64 MB
    "--hide-scrollbars",
    "--mute-audio",
    "--window-size=1280,800",
    "--remote-debugging-pipe",
    # No traffic of the browser's own: the guard must see only what the pages cause
    # (measured in the sandbox: without these, Chromium looks up Google service hosts and,
    # for them, probes IPv6 reachability with a UDP connect to 2001:4860:4860::8888).
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-component-extensions-with-background-pages",
    "--disable-client-side-phishing-detection",
    "--disable-domain-reliability",
    "--disable-field-trial-config",
    "--disable-breakpad",
    "--disable-crash-reporter",
    "--metrics-recording-only",
    "--no-default-browser-check",
    "--password-store=basic",
    "--use-mock-keychain",
    # Still looked up at start-up despite all of the above: answered "not found" inside
    # Chromium, so no DNS query leaves it (pages' own host names resolve as usual).
    "--host-resolver-rules=" + ", ".join(f"MAP {host} ~NOTFOUND" for host in (
        "clients2.google.com", "accounts.google.com", "update.googleapis.com",
        "content-autofill.googleapis.com", "optimizationguide-pa.googleapis.com",
        "safebrowsing.googleapis.com", "redirector.gvt1.com")),
    # BackForwardCache: a restore from it fires no load event, and go_back waits for one.
    "--disable-features=BackForwardCache,Translate,OptimizationHints,MediaRouter,"
    "AutofillServerCommunication,InterestFeedContentSuggestions,CertificateTransparency"
    "ComponentUpdater,DnsOverHttps,SafeBrowsing,AcceptCHFrame,HttpsUpgrades",
)


class BrowserError(Exception):
    """Chromium did not start, died, or did not answer in time."""


def chromium_path() -> str:
    explicit = os.environ.get("MTGUARD_CHROMIUM")
    for path in ([explicit] if explicit else list(CANDIDATES)):
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise BrowserError(f"no chromium found (tried {explicit or ', '.join(CANDIDATES)})")


def _above_stdio(fd: int) -> int:
    """Move `fd` to a number >= 10, so the spawn's dup2 onto 0-4 neither clobbers it nor
    is a no-op that would keep close-on-exec set."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Chromium:
    """One browser process and one page session on it. Create with `launch()`."""

    def __init__(self, pid: int, to_fd: int, from_fd: int, profile: Path) -> None:
        self.pid = pid
        self._to = to_fd
        self._from = from_fd
        self.profile = profile
        self._buf = bytearray()
        self._next_id = 0
        self._replies: dict[int, dict[str, Any]] = {}
        self.events: collections.deque[tuple[int, dict[str, Any]]] = collections.deque(
            maxlen=EVENT_BACKLOG
        )
        self.seq = 0  # number of events received so far: a mark for "since"
        self.session: str | None = None
        self.target_id = ""
        self.dead = False

    @classmethod
    async def launch(cls) -> Chromium:
        exe = chromium_path()
        profile = Path(tempfile.mkdtemp(prefix="mtguard-chromium-"))
        cmd_r, cmd_w = os.pipe()  # we write commands, chromium reads them on fd 3
        out_r, out_w = os.pipe()  # chromium writes answers on fd 4
        log = os.open(profile / "chromium.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        cmd_r, out_w, log = _above_stdio(cmd_r), _above_stdio(out_w), _above_stdio(log)
        actions = [
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_DUP2, log, 1),  # never our stdout: that is the MCP channel
            (os.POSIX_SPAWN_DUP2, log, 2),
            (os.POSIX_SPAWN_DUP2, cmd_r, 3),
            (os.POSIX_SPAWN_DUP2, out_w, 4),
        ]
        argv = [exe, *FLAGS, f"--user-data-dir={profile}", "about:blank"]
        try:
            # Chromium's own dot-files (crash reports, caches) land in the profile, not in HOME.
            env = {**os.environ, "XDG_CONFIG_HOME": str(profile), "XDG_CACHE_HOME": str(profile)}
            # posix_spawn returns once the child exists: nothing here waits for it.
            pid = os.posix_spawn(exe, argv, env, file_actions=actions, setsid=True)  # noqa: ASYNC221
        except OSError as exc:
            shutil.rmtree(profile, ignore_errors=True)
            raise BrowserError(f"cannot start {exe}: {exc}") from exc
        finally:
            for fd in (cmd_r, out_w, log):
                os.close(fd)
        os.set_blocking(cmd_w, False)
        os.set_blocking(out_r, False)
        browser = cls(pid, cmd_w, out_r, profile)
        start_s = float(os.environ.get("MTGUARD_CHROMIUM_START_TIMEOUT") or STARTUP_TIMEOUT_S)
        try:
            with anyio.fail_after(start_s):
                await browser.send("Browser.getVersion", session=False)
                target = await browser.send(
                    "Target.createTarget", {"url": "about:blank"}, session=False
                )
                browser.target_id = target["targetId"]
                attached = await browser.send(
                    "Target.attachToTarget",
                    {"targetId": browser.target_id, "flatten": True},
                    session=False,
                )
                browser.session = attached["sessionId"]
                await browser.send("Page.enable")
                await browser.send("Page.setLifecycleEventsEnabled", {"enabled": True})
                await browser.send("Page.setBypassCSP", {"enabled": True})  # evaluate's eval
        except TimeoutError:
            tail = browser.log_tail()
            browser.kill()
            raise BrowserError(
                f"{exe} did not start within {start_s:g} s; log: {tail or '(empty)'}"
            ) from None
        except BaseException:
            browser.kill()
            raise
        return browser

    def log_tail(self, limit: int = 2000) -> str:
        try:
            return (self.profile / "chromium.log").read_text(errors="replace")[-limit:].strip()
        except OSError:
            return "(no log)"

    # -- the protocol -------------------------------------------------------------------------

    async def send(
        self, method: str, params: dict[str, Any] | None = None, *, session: bool = True,
        limit_s: float = COMMAND_TIMEOUT_S,
    ) -> dict[str, Any]:
        """Send one command and return its result; a protocol error raises `BrowserError`."""
        if self.dead:
            raise BrowserError("chromium is not running")
        self._next_id += 1
        ident = self._next_id
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session and self.session:
            message["sessionId"] = self.session
        with anyio.fail_after(limit_s):
            await self._write(json.dumps(message).encode() + b"\0")
            while ident not in self._replies:
                await self._read_some()
        reply = self._replies.pop(ident)
        if "error" in reply:
            err = reply["error"]
            raise BrowserError(f"{method}: {err.get('message')} {err.get('data') or ''}".strip())
        result: dict[str, Any] = reply.get("result") or {}
        return result

    async def wait_event(
        self, match: Callable[[dict[str, Any]], bool], since: int, limit_s: float
    ) -> dict[str, Any] | None:
        """The first event after mark `since` that matches, or None after `limit_s`."""
        with anyio.move_on_after(limit_s):
            while True:
                found = self.find_event(match, since)
                if found is not None:
                    return found
                since = self.seq
                await self._read_some()
        return None

    def find_event(
        self, match: Callable[[dict[str, Any]], bool], since: int
    ) -> dict[str, Any] | None:
        return next((e for seq, e in self.events if seq > since and match(e)), None)

    async def _accept_dialog(self) -> None:
        """A dialog blocks the page (and the command that opened it): accept it at once."""
        self._next_id += 1
        message = {"id": self._next_id, "method": "Page.handleJavaScriptDialog",
                   "params": {"accept": True}, "sessionId": self.session}
        await self._write(json.dumps(message).encode() + b"\0")

    async def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            await anyio.wait_writable(self._to)
            try:
                view = view[os.write(self._to, view) :]
            except BlockingIOError:
                continue
            except OSError as exc:  # EPIPE: it is gone (the read side says the same on EOF)
                tail = self.log_tail()
                self._died()
                raise BrowserError(f"chromium exited ({exc.strerror}); log: {tail}") from exc

    async def _read_some(self) -> None:
        await anyio.wait_readable(self._from)
        try:
            chunk = os.read(self._from, READ_SIZE)
        except BlockingIOError:
            return
        if not chunk:
            tail = self.log_tail()
            self._died()
            raise BrowserError(f"chromium exited; log: {tail}")
        self._buf += chunk
        while (end := self._buf.find(b"\0")) >= 0:
            message = json.loads(self._buf[:end])
            del self._buf[: end + 1]
            if "id" in message:
                self._replies[message["id"]] = message
            elif message.get("sessionId") in (None, self.session):
                self.seq += 1
                self.events.append((self.seq, message))
                if message.get("method") == "Page.javascriptDialogOpening":
                    await self._accept_dialog()

    # -- shutdown -----------------------------------------------------------------------------

    def _died(self) -> None:
        self.kill()

    def kill(self) -> None:
        """Stop the browser, reap it and remove the profile; synchronous, bounded, idempotent.

        SIGTERM first, so Chromium shuts its helpers down itself; whatever is still alive
        after `GRACE_S` gets SIGKILL, the whole group. Helpers orphaned by the browser's exit
        are reaped by init (tini in the sandbox).
        """
        if self.dead:
            return
        self.dead = True
        for fd in (self._to, self._from):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            pidfd = os.pidfd_open(self.pid)
        except ProcessLookupError:
            pidfd = None
        try:
            if pidfd is not None:
                os.kill(self.pid, signal.SIGTERM)
                poller = select.poll()
                poller.register(pidfd, select.POLLIN)
                poller.poll(GRACE_S * 1000)  # readable once the process has exited
        except ProcessLookupError:
            pass
        finally:
            if pidfd is not None:
                os.close(pidfd)
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.waitpid(self.pid, 0)  # exited or SIGKILLed: this returns at once
        except ChildProcessError:
            pass
        shutil.rmtree(self.profile, ignore_errors=True)
