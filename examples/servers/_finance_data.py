"""Deterministic market data for finance.py, computed from data/finance.json (no network).

Every value is a pure function of (ticker, date, kind): the same question gets the same answer
in every run and every process, whatever range it is asked over. Unknown tickers raise
`LookupError` (the real server answers "Company ticker X not found").
"""

from __future__ import annotations

import datetime as dt
import math
import random
from typing import Any

from _common import load_json

DATA = load_json("finance.json")
BASE_DATE = dt.date.fromisoformat(DATA["base_date"])
FINANCIAL_TYPES = (
    "income_stmt",
    "quarterly_income_stmt",
    "balance_sheet",
    "quarterly_balance_sheet",
    "cashflow",
    "quarterly_cashflow",
)
HOLDER_TYPES = (
    "major_holders",
    "institutional_holders",
    "mutualfund_holders",
    "insider_transactions",
    "insider_purchases",
    "insider_roster_holders",
)
RECOMMENDATION_TYPES = ("recommendations", "upgrades_downgrades")
INTERVAL_DAYS = {"1d": 1, "5d": 5, "1wk": 7, "1mo": 30, "3mo": 91}


def profile(ticker: str) -> dict[str, Any]:
    info = DATA["tickers"].get(ticker.upper())
    if info is None:
        raise LookupError(f"Company ticker {ticker} not found.")
    return dict(info)


def _rng(*parts: object) -> random.Random:
    return random.Random(":".join(str(p) for p in parts))  # str seeds are stable across runs


def close_price(ticker: str, day: dt.date) -> float:
    p = profile(ticker)
    years = (day - BASE_DATE).days / 365.25
    wave = 0.04 * math.sin(day.toordinal() / 9.0) + 0.02 * math.sin(day.toordinal() / 31.0)
    noise = 0.015 * (_rng(ticker.upper(), day.isoformat()).random() - 0.5)
    return round(p["base_price"] * math.exp(p["annual_drift"] * years) * (1 + wave + noise), 2)


def trading_days(start: dt.date, end: dt.date, step: int) -> list[dt.date]:
    days, day = [], start
    while day < end:  # end exclusive, as yfinance's history()
        if day.weekday() < 5:
            days.append(day)
        day += dt.timedelta(days=step if step > 1 else 1)
    return days


def history(ticker: str, start: str, end: str, interval: str) -> list[dict[str, Any]]:
    if interval not in INTERVAL_DAYS:
        raise ValueError(
            f"interval must be one of {', '.join(INTERVAL_DAYS)} (intraday: none offline)"
        )
    s, e = dt.date.fromisoformat(start), dt.date.fromisoformat(end)
    rows = []
    for day in trading_days(s, e, INTERVAL_DAYS[interval]):
        close = close_price(ticker, day)
        r = _rng(ticker.upper(), "ohlv", day.isoformat())
        open_ = round(close * (1 + 0.01 * (r.random() - 0.5)), 2)
        rows.append(
            {
                "Date": f"{day.isoformat()}T00:00:00.000",
                "Open": open_,
                "High": round(max(open_, close) * (1 + 0.008 * r.random()), 2),
                "Low": round(min(open_, close) * (1 - 0.008 * r.random()), 2),
                "Close": close,
                "Volume": int(2e6 + 5e7 * r.random()),
                "Dividends": 0.0,
                "Stock Splits": 0.0,
            }
        )
    return rows


def info(ticker: str) -> dict[str, Any]:
    p = profile(ticker)
    price = close_price(ticker, dt.date(2025, 6, 2))
    return {
        "symbol": ticker.upper(),
        "longName": p["name"],
        "sector": p["sector"],
        "industry": p["industry"],
        "currency": "USD",
        "currentPrice": price,
        "sharesOutstanding": int(p["shares_outstanding"]),
        "marketCap": int(price * p["shares_outstanding"]),
        "totalRevenue": int(p["revenue"]),
        "grossMargins": p["gross_margin"],
        "operatingMargins": p["operating_margin"],
        "profitMargins": p["net_margin"],
        "dividendRate": round(4 * p["quarterly_dividend"], 3),
        "trailingPE": round(
            price * p["shares_outstanding"] / max(p["revenue"] * p["net_margin"], 1), 2
        ),
    }


def statement(ticker: str, kind: str) -> list[dict[str, Any]]:
    if kind not in FINANCIAL_TYPES:
        raise ValueError(f"financial_type must be one of {', '.join(FINANCIAL_TYPES)}")
    p = profile(ticker)
    quarterly = kind.startswith("quarterly_")
    periods = (
        [f"{2024 - i}-09-30" for i in range(4)]
        if not quarterly
        else [f"2025-{m:02d}-{d}" for m, d in ((3, 31),)]
        + [f"2024-{m:02d}-{d}" for m, d in ((12, 31), (9, 30), (6, 30))]
    )
    rows = []
    for i, period in enumerate(periods):
        scale = 0.25 * 0.98**i if quarterly else 0.93**i
        revenue = p["revenue"] * scale
        row: dict[str, Any] = {"date": period}
        if kind.endswith("income_stmt"):
            row |= {
                "Total Revenue": revenue,
                "Gross Profit": revenue * p["gross_margin"],
                "Operating Income": revenue * p["operating_margin"],
                "Net Income": revenue * p["net_margin"],
                "Research And Development": revenue * p["rd_ratio"],
            }
        elif kind.endswith("balance_sheet"):
            row |= {
                "Total Assets": revenue * 1.6,
                "Total Liabilities Net Minority Interest": revenue * 0.9,
                "Stockholders Equity": revenue * 0.7,
                "Cash And Cash Equivalents": revenue * 0.15,
            }
        else:
            row |= {
                "Operating Cash Flow": revenue * (p["net_margin"] + 0.08),
                "Capital Expenditure": -revenue * 0.07,
                "Free Cash Flow": revenue * (p["net_margin"] + 0.01),
            }
        rows.append({k: round(v) if isinstance(v, float) else v for k, v in row.items()})
    return rows


def holders(ticker: str, kind: str) -> list[dict[str, Any]]:
    if kind not in HOLDER_TYPES:
        raise ValueError(f"holder_type must be one of {', '.join(HOLDER_TYPES)}")
    p = profile(ticker)
    if kind == "major_holders":
        return [
            {"metric": "insidersPercentHeld", "Value": 0.017},
            {"metric": "institutionsPercentHeld", "Value": 0.63},
            {"metric": "institutionsCount", "Value": 6100},
        ]
    names = {
        "institutional_holders": DATA["institutions"],
        "mutualfund_holders": DATA["mutual_funds"],
    }.get(kind, DATA["insiders"])
    rows = []
    for i, name in enumerate(names):
        r = _rng(ticker.upper(), kind, name)
        pct = round(0.09 / (i + 1) + 0.002 * r.random(), 4)
        shares = int(p["shares_outstanding"] * pct)
        if kind in ("institutional_holders", "mutualfund_holders"):
            rows.append(
                {
                    "Date Reported": "2025-03-31",
                    "Holder": name,
                    "pctHeld": pct,
                    "Shares": shares,
                    "Value": int(shares * close_price(ticker, dt.date(2025, 3, 31))),
                    "pctChange": round(0.1 * (r.random() - 0.5), 4),
                }
            )
        else:
            rows.append(
                {
                    "Insider": f"{name} of {p['name']}",
                    "Position": name,
                    "Shares": int(1e5 * (1 + r.random())),
                    "Transaction": "Sale" if r.random() < 0.7 else "Purchase",
                    "Start Date": f"2025-0{1 + i % 5}-15",
                }
            )
    return rows
