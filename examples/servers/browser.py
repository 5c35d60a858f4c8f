"""Browser MCP server: the MCP-SafetyBench playwright tools, driving a real headless Chromium.

Tools (benchmark names and parameters, plus snapshot/select/press_key/go_back/wait_for):
navigate, snapshot, click, click_text, fill, select, press_key, go_back, wait_for, screenshot,
evaluate, get_text_content, get_html_content, close; all `playwright_*`. Chromium
(`_chromium.py`) starts lazily on the first call (bounded start-up, clear error) and is
stopped when the server exits; one call drives it at a time, in one tab (links that would
open another tab open in this one). Page errors and bad selectors
are tool errors (`isError`). Attack switches: README.md (default target: playwright_navigate).
"""

from __future__ import annotations

import atexit
import base64
import json
from typing import Any

import anyio
from _chromium import BrowserError, Chromium
from _common import DATA_DIR, create_server, run
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

NAV_TIMEOUT_S = 20.0  # a page that has not loaded by then is reported as still loading
# playwright_wait_for's cap: below the 30 s request timeout MCP clients commonly use.
MAX_WAIT_S = 20.0
SNAPSHOT_LIMIT = 12000  # characters of page snapshot returned to the agent
TEXT_LIMIT = 20000  # characters of get_text_content / get_html_content
MAX_SHOT_HEIGHT = 8000  # CSS pixels of a full-page screenshot
PAGE_LIB = (DATA_DIR / "browser_page.js").read_text()
NAV_EVENTS = {"Page.frameRequestedNavigation", "Page.frameStartedLoading", "Page.frameNavigated"}
# One tab: links and window.open that would open another navigate this one instead.
SINGLE_TAB_JS = """
document.addEventListener("click", (e) => {
  const a = e.target instanceof Element ? e.target.closest("a[target], form[target]") : null;
  if (a) a.target = "_self";
}, true);
window.open = (url) => { if (url) location.href = url; return window; };
"""
KEYS = {  # key name -> (windowsVirtualKeyCode, text typed)
    "Enter": (13, "\r"), "Tab": (9, ""), "Escape": (27, ""), "Backspace": (8, ""),
    "Delete": (46, ""), "Space": (32, " "), "ArrowLeft": (37, ""), "ArrowUp": (38, ""),
    "ArrowRight": (39, ""), "ArrowDown": (40, ""), "Home": (36, ""), "End": (35, ""),
    "PageUp": (33, ""), "PageDown": (34, ""),
}

app = create_server("playwright", default_target="playwright_navigate")


class Session:
    """The lazily started browser; every tool runs under `lock` so calls never interleave."""

    def __init__(self) -> None:
        self.browser: Chromium | None = None
        self._lock: anyio.Lock | None = None

    @property
    def lock(self) -> anyio.Lock:
        if self._lock is None:  # created inside the event loop, on first use
            self._lock = anyio.Lock()
        return self._lock

    async def page(self) -> Chromium:
        if self.browser is None or self.browser.dead:
            try:
                self.browser = await Chromium.launch()
            except BrowserError as exc:
                raise ToolError(str(exc)) from exc
            await self.cdp(self.browser, "Page.addScriptToEvaluateOnNewDocument",
                           {"source": SINGLE_TAB_JS})
        return self.browser

    def close(self) -> bool:
        was_open = self.browser is not None and not self.browser.dead
        if self.browser is not None:
            self.browser.kill()
            self.browser = None
        return was_open

    async def call(self, fn: str, *args: Any, limit_s: float = NAV_TIMEOUT_S) -> Any:
        """Run a helper of browser_page.js in the page; `{error}` becomes a ToolError."""
        browser = await self.page()
        expression = f"({PAGE_LIB}).{fn}(...{json.dumps(list(args))})"
        reply = await self.cdp(browser, "Runtime.evaluate", {
            "expression": expression, "returnByValue": True, "awaitPromise": True,
            "userGesture": True}, limit_s=limit_s)
        if "exceptionDetails" in reply:
            raise ToolError(f"page script failed: {_exception_text(reply)}")
        value = reply.get("result", {}).get("value")
        if isinstance(value, dict) and "error" in value:
            raise ToolError(str(value["error"]))
        return value

    async def cdp(
        self, browser: Chromium, method: str, params: dict[str, Any] | None = None,
        limit_s: float = NAV_TIMEOUT_S,
    ) -> dict[str, Any]:
        try:
            return await browser.send(method, params, limit_s=limit_s)
        except TimeoutError as exc:
            raise ToolError(f"browser did not answer {method} within {limit_s:g} s") from exc
        except BrowserError as exc:
            raise ToolError(str(exc)) from exc

    async def act(self, fn: str, *args: Any) -> str:
        """A page action that may navigate (click, submit, Enter): wait for what it started."""
        browser = await self.page()
        mark = browser.seq
        done = await self.call(fn, *args)
        return f"{done['done']}\n{await self.after_action(browser, mark)}"

    async def after_action(self, browser: Chromium, mark: int) -> str:
        try:
            await browser.send("Runtime.evaluate", {
                "expression": f"({PAGE_LIB}).settle()", "awaitPromise": True}, limit_s=5)
        except (BrowserError, TimeoutError):
            pass  # the old document went away mid-evaluation: a navigation is under way
        dialogs = _dialogs(browser, mark)
        if browser.find_event(lambda e: _main_frame(browser, e, NAV_EVENTS), mark) is None:
            return f"{dialogs}(no navigation)\n{await self.snapshot()}"
        return dialogs + await self.wait_loaded(browser, mark)

    async def wait_loaded(
        self, browser: Chromium, mark: int, loader: str | None = None
    ) -> str:
        """Wait for the navigation begun after `mark` (document `loader`, if known) to load."""
        try:
            event = await browser.wait_event(LoadWatch(browser, loader), mark, NAV_TIMEOUT_S)
        except BrowserError as exc:
            raise ToolError(str(exc)) from exc
        note = "" if event else f"(page still loading after {NAV_TIMEOUT_S:g} s)\n"
        return note + await self.snapshot()

    async def snapshot(self) -> str:
        page = await self.call("snapshot", SNAPSHOT_LIMIT)
        return f"Page: {page['url']}\nTitle: {page['title']}\n\n{page['snapshot']}"


session = Session()
atexit.register(session.close)


class LoadWatch:
    """Event predicate: true once the main frame's new document has fired `load`.

    The document is known by its loader id (given by Page.navigate, else learned from the
    frameNavigated that commits it), so a late event of an earlier document (an error
    page still loading) cannot end the wait. A same-document navigation ends it at once; a
    navigation that stops without committing (a download, HTTP 204) ends it when it stops.
    """

    def __init__(self, browser: Chromium, loader: str | None) -> None:
        self.browser = browser
        self.loader = loader
        self.started = False

    def __call__(self, event: dict[str, Any]) -> bool:
        method, params = event.get("method"), event.get("params") or {}
        frame = params.get("frameId") or (params.get("frame") or {}).get("id")
        if frame != self.browser.target_id:
            return False
        if method == "Page.frameStartedLoading":
            self.started = True
        elif method == "Page.frameNavigated" and self.loader is None:
            self.loader = params["frame"].get("loaderId")
        elif method == "Page.lifecycleEvent" and params.get("name") == "load":
            return self.loader is not None and params.get("loaderId") == self.loader
        elif method == "Page.navigatedWithinDocument":
            return self.loader is None
        elif method == "Page.frameStoppedLoading":
            return self.started and self.loader is None
        return False


def _main_frame(browser: Chromium, event: dict[str, Any], methods: set[str]) -> bool:
    """`event` is one of `methods` and concerns the page's main frame (not an iframe)."""
    if event.get("method") not in methods:
        return False
    params = event.get("params") or {}
    frame = params.get("frameId") or (params.get("frame") or {}).get("id")
    return frame is None or frame == browser.target_id  # loadEventFired names no frame


def _dialogs(browser: Chromium, mark: int) -> str:
    """Dialogs the page opened since `mark` (Chromium accepted them): one line each."""
    found = [e for seq, e in browser.events
             if seq > mark and e.get("method") == "Page.javascriptDialogOpening"]
    return "".join(f"(accepted {e['params'].get('type')} dialog: "
                   f"{e['params'].get('message', '')!r})\n" for e in found)


def _exception_text(reply: dict[str, Any]) -> str:
    details = reply["exceptionDetails"]
    exc = details.get("exception") or {}
    return str(exc.get("description") or details.get("text") or "exception")


@app.tool(description="Navigate the browser to a URL; returns the page's text snapshot.",
          structured_output=False)
async def playwright_navigate(url: str) -> str:
    async with session.lock:
        browser = await session.page()
        mark = browser.seq
        reply = await session.cdp(browser, "Page.navigate", {"url": url})
        if reply.get("errorText"):
            # Chromium still commits an error page: let it finish, or its late events
            # would look like the next navigation's.
            await session.wait_loaded(browser, mark, reply.get("loaderId"))
            raise ToolError(f"cannot navigate to {url}: {reply['errorText']}")
        loaded = await session.wait_loaded(browser, mark, reply.get("loaderId"))
        return f"Navigated to {url}\n{loaded}"


@app.tool(description="Text snapshot of the current page: headings, text, links, buttons and "
          "form fields, each interactive element with a CSS selector in [brackets].",
          structured_output=False)
async def playwright_snapshot() -> str:
    async with session.lock:
        return await session.snapshot()


@app.tool(description="Click the element matching a CSS selector.", structured_output=False)
async def playwright_click(selector: str) -> str:
    async with session.lock:
        return await session.act("click", selector)


@app.tool(description="Click the visible link, button or element showing the given text.",
          structured_output=False)
async def playwright_click_text(text: str) -> str:
    async with session.lock:
        return await session.act("clickText", text)


@app.tool(description="Fill a text field (CSS selector) with a value.", structured_output=False)
async def playwright_fill(selector: str, value: str) -> str:
    async with session.lock:
        return str((await session.call("fill", selector, value))["done"])


@app.tool(description="Choose an option (by value or visible label) in a <select>.",
          structured_output=False)
async def playwright_select(selector: str, value: str) -> str:
    async with session.lock:
        return await session.act("select", selector, value)


@app.tool(description="Press a key (Enter, Tab, Escape, Backspace, ArrowDown, ... or one "
          "character), in the element matching `selector` if given.", structured_output=False)
async def playwright_press_key(key: str, selector: str | None = None) -> str:
    if key not in KEYS and len(key) != 1:
        raise ToolError(f"unknown key {key!r}; use one character or one of {', '.join(KEYS)}")
    if key in KEYS:
        code, typed = KEYS[key]
    else:
        code, typed = (ord(key.upper()) if key.isascii() and key.isalnum() else 0), key
    async with session.lock:
        browser = await session.page()
        if selector:
            await session.call("focus", selector)
        mark = browser.seq
        base = {"key": key, "windowsVirtualKeyCode": code, "nativeVirtualKeyCode": code}
        down = {**base, "type": "keyDown" if typed else "rawKeyDown", "text": typed}
        await session.cdp(browser, "Input.dispatchKeyEvent", down)
        await session.cdp(browser, "Input.dispatchKeyEvent", {**base, "type": "keyUp"})
        return f"pressed {key}\n{await session.after_action(browser, mark)}"


@app.tool(description="Go back to the previous page in the history.", structured_output=False)
async def playwright_go_back() -> str:
    async with session.lock:
        browser = await session.page()
        history = await session.cdp(browser, "Page.getNavigationHistory")
        index = int(history["currentIndex"])
        if index <= 0:
            raise ToolError("there is no previous page")
        mark = browser.seq
        entry = history["entries"][index - 1]
        await session.cdp(browser, "Page.navigateToHistoryEntry", {"entryId": entry["id"]})
        return f"Went back to {entry['url']}\n{await session.wait_loaded(browser, mark)}"


@app.tool(description="Wait until `text` appears (or `text_gone` disappears) on the page, or "
          f"for `time` seconds; at most {MAX_WAIT_S:g} s.", structured_output=False)
async def playwright_wait_for(
    text: str | None = None, text_gone: str | None = None, time: float | None = None
) -> str:
    if not (text or text_gone or time):
        raise ToolError("give text, text_gone or time")
    if time:
        await anyio.sleep(min(max(time, 0.0), MAX_WAIT_S))
        if not (text or text_gone):
            return f"waited {min(max(time, 0.0), MAX_WAIT_S):g} s"
    async with session.lock:
        ms = int(MAX_WAIT_S * 1000)
        found = await session.call("waitText", text or "", text_gone or "", ms,
                                   limit_s=MAX_WAIT_S + 5)
        if not found:
            raise ToolError(f"timed out after {MAX_WAIT_S:g} s waiting for the page text")
        return "found" if text else "gone"


@app.tool(description="Take a PNG screenshot of the visible page, the whole page "
          "(`full_page`) or the element matching `selector`; `name` labels it.",
          structured_output=False)
async def playwright_screenshot(
    name: str, selector: str | None = None, full_page: bool = False
) -> list[Any]:
    async with session.lock:
        browser = await session.page()
        params: dict[str, Any] = {"format": "png"}
        if full_page and not selector:
            size = (await session.cdp(browser, "Page.getLayoutMetrics"))["cssContentSize"]
            params["clip"] = {"x": 0, "y": 0, "width": size["width"],
                              "height": min(size["height"], MAX_SHOT_HEIGHT), "scale": 1}
            params["captureBeyondViewport"] = True
        if selector:
            box = await session.call("rect", selector)
            params["clip"] = {**box, "scale": 1}
            params["captureBeyondViewport"] = True
        shot = await session.cdp(browser, "Page.captureScreenshot", params)
        png = base64.b64decode(shot["data"])
        where = f" of {selector}" if selector else ""
        return [f"Screenshot '{name}'{where}: {len(png)} bytes PNG", Image(data=png, format="png")]


# The script runs once: indirect eval gives statements their completion value; a function
# result is called; DOM nodes and cycles are made JSON-safe in the page.
EVAL_WRAPPER = """(async () => {
  let v = await (0, eval)(%s);
  if (typeof v === "function") v = await v();
  if (v === undefined) return undefined;
  const seen = new WeakSet();
  return JSON.stringify(v, (k, x) => {
    if (x instanceof Node) {
      return x.outerHTML !== undefined ? x.outerHTML.slice(0, 500) : String(x.textContent);
    }
    if (typeof x === "object" && x !== null) { if (seen.has(x)) return "[cycle]"; seen.add(x); }
    return typeof x === "bigint" ? String(x) : x;
  });
})()"""


@app.tool(description="Evaluate JavaScript in the page and return the result as JSON (a "
          "function expression is called; promises are awaited).", structured_output=False)
async def playwright_evaluate(script: str) -> str:
    async with session.lock:
        browser = await session.page()
        reply = await session.cdp(browser, "Runtime.evaluate", {
            "expression": EVAL_WRAPPER % json.dumps(script), "awaitPromise": True,
            "userGesture": True, "returnByValue": True})
        if "exceptionDetails" in reply:
            raise ToolError(f"script failed: {_exception_text(reply)}")
        value = reply.get("result", {}).get("value")
        return "undefined" if value is None else str(value)


@app.tool(description="The visible text of the current page.", structured_output=False)
async def playwright_get_text_content() -> str:
    async with session.lock:
        return str((await session.call("text"))["text"])[:TEXT_LIMIT]


@app.tool(description="The HTML of the element matching a CSS selector (e.g. `body`).",
          structured_output=False)
async def playwright_get_html_content(selector: str) -> str:
    async with session.lock:
        return str((await session.call("html", selector))["html"])[:TEXT_LIMIT]


@app.tool(description="Close the browser (a later call opens a fresh one).",
          structured_output=False)
async def playwright_close() -> str:
    async with session.lock:
        return "Browser closed" if session.close() else "Browser was not open"


if __name__ == "__main__":
    try:
        run(app)
    finally:
        session.close()
