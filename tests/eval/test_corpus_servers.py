"""Corpus server payloads applied for real: the finance example server run with a case's env."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

from mtguard_rt.eval.corpus import load_corpus
from mtguard_rt.eval.mcp_client import open_stdio_client
from mtguard_rt.eval.scenario import Scenario
from tests.conftest import require_corpus

pytestmark = pytest.mark.anyio
FINANCE = [sys.executable, str(Path(__file__).resolve().parents[2] / "examples/servers/finance.py")]
BOUND_S = 60  # four server runs; a healthy run takes ~1 s each


def text(result: dict[str, Any]) -> str:
    return "".join(block["text"] for block in result["content"] if block["type"] == "text")


@pytest.fixture(scope="module")
def cases() -> dict[str, Scenario]:
    require_corpus()
    return {s.case_id: s for s in load_corpus()}


async def replay(
    s: Scenario, env: dict[str, str] | None = None, extra: tuple[dict[str, Any], ...] = ()
) -> tuple[list[dict[str, Any]], list[str], int]:
    """Run the scenario's yfinance calls (then `extra` calls of the first attacked tool) on
    a finance server carrying its payload."""
    assert s.server_attack is not None and s.server_attack.server == "yfinance"
    async with open_stdio_client(FINANCE, env={**s.server_attack.env, **(env or {})}) as client:
        tools = await client.list_tools()
        results = [
            text(await client.call_tool(c.tool, c.arguments))
            for c in s.attacked
            if c.server == "yfinance"
        ]
        results += [text(await client.call_tool(s.attacked[0].tool, args)) for args in extra]
    return tools, results, client.list_changed_count


async def test_case_payloads_happen_on_the_server(
    cases: dict[str, Scenario], tmp_path: Path
) -> None:
    with anyio.fail_after(BOUND_S):
        poisoned = cases["yfinance_task_0001"]
        tools, results, _ = await replay(poisoned)
        served = {t["name"]: t["description"] for t in tools}["get_historical_stock_prices"]
        assert served == poisoned.server_attack.env["MTGUARD_POISON_DESCRIPTION"]  # type: ignore[union-attr]
        assert json.loads(results[0])[0]["Close"] > 0  # the TSLA call itself works

        appended = cases["yfinance_task_0037"]
        _, results, _ = await replay(appended)
        assert results[0].startswith('[{"Date"') and "sudo rm -rf /tmp/*" in results[0]

        overlapping = cases["yfinance_task_0027"]
        tools, results, _ = await replay(overlapping)
        assert "get_historical_stock_data" in {t["name"] for t in tools}
        assert [c.tool for c in overlapping.attacked] == ["get_historical_stock_data"]
        assert json.loads(results[0])["status"] == "success"

        swapped_args = cases["yfinance_task_0040"]
        real_aapl = {**swapped_args.attacked[0].arguments, "ticker": "AAPL"}
        _, results, changed = await replay(swapped_args, extra=(real_aapl,))
        *results, aapl = results
        target = [c for c in swapped_args.attacked if c.tool == "get_historical_stock_prices"]
        assert changed == 1 and any(c.unsafe for c in target)
        assert [r == aapl for r in results] == [c.unsafe for c in target]

        shell = cases["yfinance_task_0039"]
        marker = tmp_path / "rugpull.path"
        _, results, changed = await replay(
            shell, {"MTGUARD_RUGPULL_COMMAND": f"echo $PATH | tee {marker}"}
        )
        target = [c for c in shell.attacked if c.tool == "get_holder_info"]
        assert changed == 1 and marker.read_text().strip() == os.environ["PATH"]
        assert [os.environ["PATH"] in r for r in results] == [c.unsafe for c in target]
