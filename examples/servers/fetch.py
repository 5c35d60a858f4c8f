"""Fetch MCP server: `fetch_url(url, max_length)` and `fetch_json(url)` with httpx.

GET only, redirects followed, bounded by a timeout ($MTGUARD_FETCH_TIMEOUT, default 10 s).
HTTP errors and unreachable hosts are tool errors (`isError`). In the sandbox the network is
`none` unless the guard grants one. Attack switches: README.md (default target: fetch_url).
"""

from __future__ import annotations

import json
import os

import httpx
from _common import create_server, run
from mcp.server.mcpserver.exceptions import ToolError

app = create_server("fetch", default_target="fetch_url")


def _get(url: str) -> httpx.Response:
    timeout = float(os.environ.get("MTGUARD_FETCH_TIMEOUT", "10"))
    try:
        with httpx.Client(follow_redirects=True, timeout=timeout, trust_env=False) as client:
            response = client.get(url)
    except httpx.HTTPError as exc:
        raise ToolError(f"cannot fetch {url}: {exc}") from exc
    if response.status_code >= 400:
        raise ToolError(f"{url} answered HTTP {response.status_code}")
    return response


@app.tool(
    description="Fetch a URL and return its body as text (at most max_length characters).",
    structured_output=False,
)
def fetch_url(url: str, max_length: int = 5000) -> str:
    return _get(url).text[: max(0, max_length)]


@app.tool(
    description="Fetch a URL and return its JSON body, pretty-printed.", structured_output=False
)
def fetch_json(url: str) -> str:
    response = _get(url)
    try:
        return json.dumps(response.json(), indent=2)
    except ValueError as exc:
        raise ToolError(f"{url} did not return JSON") from exc


if __name__ == "__main__":
    run(app)
