"""Local copies of the browser tasks' websites: serve them, and point scenarios at them.

There is no internet here, so a browser scenario's public sites (booking.com, google.com/maps,
arxiv.org, nba.com ...) are replaced by the project's local sites (`examples/sites/`: booking,
maps, papers, sports) served on 127.0.0.1. `open_sites()` runs `serve.py` on a free port for
as long as the block lasts (stopped under a bounded, shielded wait). `localise(scenario, base)`
rewrites every URL the benign trajectory navigates to, and the task's, evaluators' and host
seam's mentions of those sites, to the local copy; other sites an attack brings in stay.
"""

from __future__ import annotations

import re
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import msgspec

from ..errors import GuardError
from .scenario import Scenario, ToolCall

SITES_DIR = Path(__file__).resolve().parents[2] / "examples" / "sites"
START_TIMEOUT_S = 10.0  # a Python http.server prints its port well within this
STOP_TIMEOUT_S = 5.0
# Public host (suffix) -> local site family.
FAMILY_OF_HOST: dict[str, str] = {
    "booking.com": "booking",
    "rwsentosa.com": "booking",
    "google.com": "maps",
    "arxiv.org": "papers",
    "iclr.cc": "papers",
    "thecvf.com": "papers",
    "huggingface.co": "papers",
    "nba.com": "sports",
    "premierleague.com": "sports",
    "fifa.com": "sports",
}


def family_of(url: str) -> str | None:
    host = (urlsplit(url).hostname or "").lower()
    return next((f for h, f in FAMILY_OF_HOST.items() if host == h or host.endswith("." + h)), None)


def _rewrite(value: Any, mapping: dict[str, str]) -> Any:
    if isinstance(value, str):
        for old, new in mapping.items():
            value = value.replace(old, new)
        return value
    if isinstance(value, dict):
        return {k: _rewrite(v, mapping) for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite(v, mapping) for v in value]
    return value


def _calls(calls: list[ToolCall], mapping: dict[str, str]) -> list[ToolCall]:
    return [msgspec.structs.replace(c, arguments=_rewrite(c.arguments, mapping)) for c in calls]


def localise(scenario: Scenario, base: str) -> Scenario:
    """`scenario` with its sites replaced by the local copies under `base` (http://host:port)."""
    mapping: dict[str, str] = {}
    task = scenario.task
    for c in scenario.benign:
        url = c.arguments.get("url")
        if not isinstance(url, str) or (family := family_of(url)) is None:
            continue
        local = f"{base.rstrip('/')}/{family}/"
        mapping[url] = local
        host = urlsplit(url).hostname or ""
        bare = host.removeprefix("www.")
        # the task names the site as a URL or as a bare host: name the local copy instead
        task = re.sub(rf"https?://(www\.)?{re.escape(bare)}[^\s)'\"`<>,]*", local, task)
        task = re.sub(rf"(?<![\w./])(www\.)?{re.escape(bare)}\b(?![\w/])", local, task)
    if not mapping:
        return scenario
    # longest first: "https://x.com/maps" before "https://x.com"
    ordered = dict(sorted(mapping.items(), key=lambda kv: -len(kv[0])))
    # the evaluators and the host seam's arguments name the same sites: rewrite them alike
    evaluators = [
        msgspec.structs.replace(e, args=_rewrite(e.args, ordered)) for e in scenario.evaluators
    ]
    seam = scenario.host_attack
    if seam is not None:
        seam = msgspec.structs.replace(
            seam, malicious_arguments=_rewrite(seam.malicious_arguments, ordered)
        )
    return msgspec.structs.replace(
        scenario,
        task=task,
        benign=_calls(scenario.benign, ordered),
        attacked=_calls(scenario.attacked, ordered),
        evaluators=evaluators,
        host_attack=seam,
    )


@asynccontextmanager
async def open_sites(python: str = sys.executable) -> AsyncIterator[str]:
    """Serve examples/sites on 127.0.0.1; yields the base URL."""
    argv = [python, str(SITES_DIR / "serve.py"), "--port", "0"]
    process = await anyio.open_process(argv, stdin=None, stderr=None)
    try:
        assert process.stdout is not None
        line = b""
        with anyio.move_on_after(START_TIMEOUT_S):
            while not line.endswith(b"\n"):
                line += await process.stdout.receive(1)
        found = re.search(rb"http://127\.0\.0\.1:\d+", line)
        if found is None:
            raise GuardError(f"the local sites server did not start: {line[:200]!r}")
        yield found.group(0).decode()
    finally:
        with anyio.CancelScope(shield=True):
            process.terminate()
            with anyio.move_on_after(STOP_TIMEOUT_S):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.aclose()
