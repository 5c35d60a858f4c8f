"""Where the example servers a scenario names live, and how to start them.

`server_command(name)` is the argv that runs `examples/servers/<script>` for a scenario's
server name (`yfinance` → finance.py, ...); `proxy_env_flags(attack)` turns a server-side
payload into `mtguard proxy --env KEY=VALUE` flags, since the proxy passes the sandboxed
server only the environment it is given that way.
"""

from __future__ import annotations

import sys
from pathlib import Path

from .scenario import ServerAttack

SERVERS_DIR = Path(__file__).resolve().parents[2] / "examples" / "servers"
SCRIPT_OF = {
    "yfinance": "finance.py",
    "playwright": "browser.py",
    "terminal": "terminal.py",
    "filesystem": "filesystem.py",
    "fetch": "fetch.py",
    "date": "date.py",
    "calculator": "calculator.py",
    "echo": "echo.py",
}


def server_script(name: str) -> Path:
    script = SCRIPT_OF.get(name)
    if script is None:
        raise KeyError(f"no example server is called {name!r}; known: {', '.join(SCRIPT_OF)}")
    return SERVERS_DIR / script


def server_command(name: str, python: str = sys.executable) -> list[str]:
    """argv for the example server `name`."""
    return [python, str(server_script(name))]


def proxy_env_flags(attack: ServerAttack | None) -> list[str]:
    flags: list[str] = []
    for key, value in sorted((attack.env if attack else {}).items()):
        flags += ["--env", f"{key}={value}"]
    return flags
