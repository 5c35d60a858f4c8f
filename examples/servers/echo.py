"""Minimal MCP server for benchmarks and plumbing tests: `echo(text)` and `noop()`.

Run: `python examples/servers/echo.py` (stdio). Attack switches: README.md (target: echo).
"""

from __future__ import annotations

from _common import create_server, run

app = create_server("echo", default_target="echo")


@app.tool(description="Return the given text unchanged.", structured_output=False)
def echo(text: str) -> str:
    return text


@app.tool(description="Do nothing; returns an empty text.", structured_output=False)
def noop() -> str:
    return ""


if __name__ == "__main__":
    run(app)
