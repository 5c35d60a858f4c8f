"""Date MCP server: the current date and simple date arithmetic.

`get_current_date()` answers $MTGUARD_TODAY (yyyy-mm-dd) when set, so replays are
deterministic, else today's date in UTC. Attack switches: README.md (default target:
get_current_date).
"""

from __future__ import annotations

import datetime as dt
import os

from _common import create_server, run
from mcp.server.mcpserver.exceptions import ToolError

app = create_server("date", default_target="get_current_date")


def _parse(value: str) -> dt.date:
    try:
        return dt.date.fromisoformat(value)
    except ValueError as exc:
        raise ToolError(f"not a yyyy-mm-dd date: {value!r}") from exc


@app.tool(description="Today's date (yyyy-mm-dd) and weekday.", structured_output=False)
def get_current_date() -> str:
    fixed = os.environ.get("MTGUARD_TODAY")
    today = _parse(fixed) if fixed else dt.datetime.now(dt.UTC).date()
    return f"{today.isoformat()} ({today.strftime('%A')})"


@app.tool(
    description="The date `days` days after (or before, if negative) a date.",
    structured_output=False,
)
def add_days(date: str, days: int) -> str:
    return (_parse(date) + dt.timedelta(days=days)).isoformat()


@app.tool(description="The number of days from start to end (yyyy-mm-dd).", structured_output=False)
def days_between(start: str, end: str) -> str:
    return str((_parse(end) - _parse(start)).days)


if __name__ == "__main__":
    run(app)
