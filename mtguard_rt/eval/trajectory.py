"""Benign trajectories: the tool calls a correct agent makes for a corpus task, no LLM.

Financial tasks: the calls follow from the case's utility evaluator (`yfinance.*`), whose
arguments name the tickers, dates, holders and statement periods the answer needs. Browser
tasks: navigate to the site the task names, read the page, close the browser. `SERVER_OF`
maps every known tool to its example server; `default_arguments` fills a call for a tool
from what the trajectory already uses (ticker, url, dates).
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from .scenario import Domain, ToolCall

YFINANCE_TOOLS = (
    "get_stock_info",
    "get_yahoo_finance_news",
    "get_stock_actions",
    "get_financial_statement",
    "get_holder_info",
    "get_option_expiration_dates",
    "get_option_chain",
    "get_historical_stock_prices",
    "get_recommendations",
    "get_stock_alert",
)
PLAYWRIGHT_TOOLS = (
    "playwright_navigate",
    "playwright_screenshot",
    "playwright_click",
    "playwright_fill",
    "playwright_evaluate",
    "playwright_click_text",
    "playwright_get_text_content",
    "playwright_get_html_content",
    "playwright_close",
)
SERVER_OF: dict[str, str] = {
    **dict.fromkeys(YFINANCE_TOOLS, "yfinance"),
    **dict.fromkeys(PLAYWRIGHT_TOOLS, "playwright"),
    "run_command": "terminal",
    "fetch_url": "fetch",
    "fetch_json": "fetch",
    "read_file": "filesystem",
    "write_file": "filesystem",
    "list_directory": "filesystem",
    "calculate": "calculator",
    "get_current_date": "date",
}
# Tasks that let the agent pick the companies ("find 3 companies that ...") get these.
DEFAULT_TICKERS = ("AAPL", "MSFT", "GOOGL", "AMZN", "NVDA")
# A signal on a date needs enough history before it for the longest moving average asked.
SIGNAL_LOOKBACK_DAYS = 120
INCOME_OPS = {
    "check_gross_profit_margin",
    "check_net_profit_margin",
    "check_rd_expense_percentage",
    "check_total_revenue",
    "check_rd_expense",
    "check_operating_income",
    "compare_companies_gross_profit_margin",
    "compare_companies_net_profit_margin",
    "compare_companies_rd_expense_percentage",
}
HOLDER_OPS = {
    "check_percentage_change",
    "check_largest_positive_increase",
    "check_holders_with_min_pct_held",
    "check_holders_pct_change",
    "check_holders_largest_pct_change",
    "check_common_significant_holders",
    "check_institutional_holding_values",
    "check_pct_values_with_durations",
}
SITE_OF_FAMILY = {
    "booking": "https://www.booking.com",
    "google_map": "https://www.google.com/maps",
    "huggingface": "https://huggingface.co",
    "paper": "https://arxiv.org",
    "sports": "https://www.nba.com",
}


def call(tool: str, **arguments: Any) -> ToolCall:
    return ToolCall(server=SERVER_OF.get(tool, "unknown"), tool=tool, arguments=arguments)


def _tickers(op_args: dict[str, Any]) -> list[str]:
    if "tickers" in op_args:
        return [str(t) for t in op_args["tickers"]]
    if "ticker" in op_args:
        return [str(op_args["ticker"])]
    return list(DEFAULT_TICKERS[: int(op_args.get("num_tickers", 1))])


def _financial_calls(op: str, a: dict[str, Any]) -> list[ToolCall]:
    name = op.removeprefix("yfinance.")
    tickers = _tickers(a)
    if name in ("check_portfolio_task_output", "check_quant_investment_task_output"):
        return [
            call(
                "get_historical_stock_prices",
                ticker=t,
                start_date=a["start_date"],
                end_date=a["end_date"],
            )
            for t in tickers
        ]
    if name == "check_buy_sell_hold_signal":
        day = dt.date.fromisoformat(a["date"])
        start = (day - dt.timedelta(days=SIGNAL_LOOKBACK_DAYS)).isoformat()
        end = (day + dt.timedelta(days=1)).isoformat()
        return [
            call("get_historical_stock_prices", ticker=t, start_date=start, end_date=end)
            for t in tickers
        ]
    if name in INCOME_OPS:
        return [
            call("get_financial_statement", ticker=t, financial_type="income_stmt") for t in tickers
        ]
    if name in ("check_net_income", "check_net_income_difference"):
        periods = a.get("periods") or [a.get("period", "annually")]
        kinds = ["quarterly_income_stmt" if p == "quarterly" else "income_stmt" for p in periods]
        return [
            call("get_financial_statement", ticker=t, financial_type=k)
            for t in tickers
            for k in kinds
        ]
    if name == "check_net_income_growth_task_output":
        return [
            call("get_financial_statement", ticker=t, financial_type="quarterly_income_stmt")
            for t in tickers
        ]
    if name == "check_dividend_consistency_task_output":
        return [call("get_stock_actions", ticker=t) for t in tickers]
    if name in HOLDER_OPS:
        calls = [
            call("get_holder_info", ticker=t, holder_type="institutional_holders") for t in tickers
        ]
        if name == "check_pct_values_with_durations":  # prices after the reporting date
            calls += [
                call(
                    "get_historical_stock_prices",
                    ticker=t,
                    start_date="2025-03-31",
                    end_date="2025-05-01",
                )
                for t in tickers
            ]
        return calls
    return []


def _browser_url(case_id: str, task: str) -> str:
    found = re.search(r"https?://[^\s)'\"`<>]+", task)
    if found:
        return found.group(0).rstrip(".,;:!?")
    www = re.search(r"\bwww\.[\w-]+(?:\.[\w-]+)+", task)
    if www:
        return "https://" + www.group(0).rstrip(".")
    family = next((f for f in SITE_OF_FAMILY if f"_{f}_" in case_id), "booking")
    return SITE_OF_FAMILY[family]


def benign_trajectory(
    domain: Domain, case_id: str, task: str, utility: list[tuple[str, dict[str, Any]]]
) -> list[ToolCall]:
    """The calls a correct agent makes; `utility` is the case's (op, op_args) evaluators."""
    if domain == "browser":
        url = _browser_url(case_id, task)
        return [
            call("playwright_navigate", url=url),
            call("playwright_get_text_content"),
            call("playwright_close"),
        ]
    calls: list[ToolCall] = []
    for op, args in utility:
        calls.extend(_financial_calls(op, args))
    if not calls:
        named = re.findall(r"\(([A-Z]{1,5})\)", task) or list(DEFAULT_TICKERS[:1])
        calls = [call("get_stock_info", ticker=t) for t in named]
    unique: dict[str, ToolCall] = {}
    for c in calls:
        unique.setdefault(f"{c.tool}{sorted(c.arguments.items())}", c)
    return list(unique.values())


def default_arguments(
    tool: str, context: list[ToolCall], spec: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Arguments for `tool` taken from `context` (ticker, url, dates), else plain defaults."""
    known: dict[str, Any] = {}
    for c in context:
        for key, value in c.arguments.items():
            known.setdefault(key, value)
    known.setdefault("ticker", "AAPL")
    known.setdefault("url", "https://example.com")
    known.setdefault("interval", "1d")
    fixed = {
        "get_historical_stock_prices": ("ticker", "start_date", "end_date"),
        "get_financial_statement": ("ticker", "financial_type"),
        "get_holder_info": ("ticker", "holder_type"),
        "get_recommendations": ("ticker", "recommendation_type"),
        "playwright_navigate": ("url",),
        "playwright_screenshot": ("name",),
    }
    defaults = {
        "start_date": "2024-01-02",
        "end_date": "2024-12-31",
        "financial_type": "income_stmt",
        "holder_type": "institutional_holders",
        "recommendation_type": "recommendations",
        "name": "page",
    }
    if tool in fixed:
        return {k: known.get(k, defaults.get(k)) for k in fixed[tool]}
    if tool in YFINANCE_TOOLS:
        return {"ticker": known["ticker"]}
    if spec:  # an added tool: fill its declared parameters
        kinds = {"number": 1, "integer": 1, "boolean": True}
        return {k: known.get(k, kinds.get(str(v), "default")) for k, v in spec.items()}
    return {}
