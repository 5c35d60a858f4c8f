"""Each example server, spawned for real and driven with the real SDK client: benign calls."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt.eval.mcp_client import open_stdio_client

pytestmark = pytest.mark.anyio
Cmd = Callable[[str], list[str]]
BOUND_S = 30  # generous for a noisy 2-core CI machine; a healthy run takes ~1 s per server


def text(result: dict[str, Any]) -> str:
    return "".join(block["text"] for block in result["content"] if block["type"] == "text")


async def test_echo(server_cmd: Cmd) -> None:
    with anyio.fail_after(BOUND_S):
        async with open_stdio_client(server_cmd("echo")) as client:
            assert [t["name"] for t in await client.list_tools()] == ["echo", "noop"]
            result = await client.call_tool("echo", {"text": "héllo wörld"})
            assert result["isError"] is False and text(result) == "héllo wörld"
            assert text(await client.call_tool("noop")) == ""


async def test_finance_every_tool(server_cmd: Cmd) -> None:
    calls: list[tuple[str, dict[str, Any]]] = [
        ("get_stock_info", {"ticker": "AAPL"}),
        ("get_yahoo_finance_news", {"ticker": "TSLA"}),
        ("get_stock_actions", {"ticker": "KO"}),
        ("get_financial_statement", {"ticker": "NVDA", "financial_type": "income_stmt"}),
        ("get_holder_info", {"ticker": "META", "holder_type": "institutional_holders"}),
        ("get_option_expiration_dates", {"ticker": "AMD"}),
        (
            "get_option_chain",
            {"ticker": "AMD", "expiration_date": "2025-07-18", "option_type": "puts"},
        ),
        ("get_recommendations", {"ticker": "GOOGL", "recommendation_type": "recommendations"}),
        ("get_stock_alert", {"ticker": "MSFT", "alert_type": "price_above", "threshold": 1.0}),
    ]
    with anyio.fail_after(BOUND_S):
        async with open_stdio_client(server_cmd("finance")) as client:
            tools = {t["name"]: t for t in await client.list_tools()}
            assert set(tools) == {name for name, _ in calls} | {"get_historical_stock_prices"}
            hist = tools["get_historical_stock_prices"]["inputSchema"]
            assert hist["required"] == ["ticker", "start_date", "end_date"]
            assert hist["properties"]["interval"]["default"] == "1d"
            answers = {
                name: json.loads(text(await client.call_tool(name, args))) for name, args in calls
            }
            args = {"ticker": "MSFT", "start_date": "2023-01-09", "end_date": "2023-01-16"}
            first = await client.call_tool("get_historical_stock_prices", args)
            again = await client.call_tool("get_historical_stock_prices", args)
            missing = await client.call_tool("get_stock_info", {"ticker": "ZZZZ"})
            bad = await client.call_tool(
                "get_financial_statement", {"ticker": "MSFT", "financial_type": "bogus"}
            )
    rows = json.loads(text(first))
    assert [r["Date"][:10] for r in rows] == [
        f"2023-01-{d}" for d in ("09", "10", "11", "12", "13")
    ]
    assert all(r["Low"] <= min(r["Open"], r["Close"]) <= r["High"] for r in rows)
    assert text(first) == text(again)  # deterministic fixture data
    assert answers["get_stock_info"]["longName"] == "Apple Inc."
    assert "TSLA" in answers["get_yahoo_finance_news"][0]["title"]
    assert any(a["Dividends"] == 0.485 for a in answers["get_stock_actions"])
    income = answers["get_financial_statement"][0]
    assert income["Net Income"] < income["Gross Profit"] < income["Total Revenue"]
    assert answers["get_holder_info"][0]["Holder"] == "Vanguard Group Inc"
    assert "2025-07-18" in answers["get_option_expiration_dates"]
    assert all("P" in c["contractSymbol"] for c in answers["get_option_chain"])
    assert answers["get_stock_alert"]["triggered"] is True
    assert text(missing) == "Company ticker ZZZZ not found."
    assert bad["isError"] is True and "financial_type must be one of" in text(bad)


async def test_terminal(server_cmd: Cmd, tmp_path: Path) -> None:
    env = {"MCP_WORKSPACE": str(tmp_path), "MTGUARD_COMMAND_TIMEOUT": "2"}
    with anyio.fail_after(BOUND_S):
        async with open_stdio_client(server_cmd("terminal"), env=env) as client:
            done = json.loads(
                text(
                    await client.call_tool(
                        "run_command",
                        {"command": "pwd; echo oops >&2; echo data > made.txt; exit 3"},
                    )
                )
            )
            hung = json.loads(
                text(
                    await client.call_tool(
                        "run_command", {"command": "sleep 60 & echo $! > bg.pid; sleep 60"}
                    )
                )
            )
    assert done == {
        "exit_code": 3,
        "stdout": f"{tmp_path}\n",
        "stderr": "oops\n",
        "timed_out": False,
    }
    assert (tmp_path / "made.txt").read_text() == "data\n"
    assert hung["timed_out"] is True and hung["exit_code"] == -9
    assert not _alive(int((tmp_path / "bg.pid").read_text()))  # its whole group was killed


def _alive(pid: int) -> bool:
    """True when `pid` exists and is not a zombie (an orphan may await reaping by init)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def test_filesystem_confined(server_cmd: Cmd, tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("outside")
    (root / "link").symlink_to(tmp_path / "secret.txt")
    with anyio.fail_after(BOUND_S):
        async with open_stdio_client(
            server_cmd("filesystem"), env={"MCP_WORKSPACE": str(root)}
        ) as client:
            wrote = await client.call_tool(
                "write_file", {"path": "notes/a.txt", "content": "alpha"}
            )
            read = await client.call_tool("read_file", {"path": "notes/a.txt"})
            listing = await client.call_tool("list_directory", {})
            refused = [
                await client.call_tool("read_file", {"path": p})
                for p in ("../secret.txt", str(tmp_path / "secret.txt"), "link")
            ]
            escape = await client.call_tool("write_file", {"path": "../evil.txt", "content": "x"})
    assert wrote["isError"] is False and (root / "notes" / "a.txt").read_text() == "alpha"
    assert text(read) == "alpha"
    assert json.loads(text(listing)) == [
        {"name": "link", "type": "file"},
        {"name": "notes", "type": "directory"},
    ]
    assert all(r["isError"] and "outside the workspace" in text(r) for r in refused)
    assert escape["isError"] is True and not (tmp_path / "evil.txt").exists()


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body, kind = {
            "/page": (b"<html><body>hello from loopback</body></html>", "text/html"),
            "/data": (json.dumps({"price": 42.5, "ticker": "MSFT"}).encode(), "application/json"),
        }.get(self.path, (b"missing", "text/plain"))
        self.send_response(200 if self.path in ("/page", "/data") else 404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def http_base() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


async def test_fetch(server_cmd: Cmd, http_base: str) -> None:
    with anyio.fail_after(BOUND_S):
        async with open_stdio_client(server_cmd("fetch")) as client:
            page = await client.call_tool(
                "fetch_url", {"url": f"{http_base}/page", "max_length": 30}
            )
            data = await client.call_tool("fetch_json", {"url": f"{http_base}/data"})
            missing = await client.call_tool("fetch_url", {"url": f"{http_base}/nope"})
            not_json = await client.call_tool("fetch_json", {"url": f"{http_base}/page"})
    assert text(page) == "<html><body>hello from loopbac"
    assert json.loads(text(data)) == {"price": 42.5, "ticker": "MSFT"}
    assert missing["isError"] is True and "HTTP 404" in text(missing)
    assert not_json["isError"] is True and "did not return JSON" in text(not_json)


async def test_date(server_cmd: Cmd) -> None:
    with anyio.fail_after(BOUND_S):
        async with open_stdio_client(
            server_cmd("date"), env={"MTGUARD_TODAY": "2025-07-07"}
        ) as client:
            today = await client.call_tool("get_current_date")
            later = await client.call_tool("add_days", {"date": "2025-07-07", "days": 5})
            span = await client.call_tool(
                "days_between", {"start": "2024-02-01", "end": "2024-03-01"}
            )
            bad = await client.call_tool("add_days", {"date": "July 7", "days": 1})
    assert text(today) == "2025-07-07 (Monday)"
    assert text(later) == "2025-07-12"
    assert text(span) == "29"
    assert bad["isError"] is True


async def test_calculator(server_cmd: Cmd) -> None:
    with anyio.fail_after(BOUND_S):
        async with open_stdio_client(server_cmd("calculator")) as client:
            values = [
                text(await client.call_tool("calculate", {"expression": e}))
                for e in ("25000 * 1.5 - 2 ** 3", "round(sqrt(16) / 3, 2)", "-(7 // 2) % 5")
            ]
            refused = [
                await client.call_tool("calculate", {"expression": e})
                for e in ("__import__('os').system('id')", "9 ** 9 ** 9", "1 / 0", "2 +")
            ]
    assert values == ["37492.0", "1.33", "2"]
    assert all(r["isError"] for r in refused)
