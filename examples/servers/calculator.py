"""Calculator MCP server: `calculate(expression)` evaluates arithmetic safely.

The expression is parsed with `ast` and only numbers, + - * / // % **, unary signs,
parentheses and a few math functions are evaluated: no names, attributes or calls beyond
those, so it can never run code. Errors are tool errors. Attack switches: README.md
(default target: calculate).
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from typing import Any

from _common import create_server, run
from mcp.server.mcpserver.exceptions import ToolError

app = create_server("calculator", default_target="calculate")

BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "log": math.log,
    "exp": math.exp,
    "abs": abs,
    "round": round,
    "min": min,
    "max": max,
}
# Exponents above this are refused: 9**9**9 must not hang the server.
MAX_EXPONENT = 10_000


def _eval(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError("exponent too large")
        return BINARY[type(node.op)](left, right)
    if isinstance(node, ast.UnaryOp) and type(node.op) in UNARY:
        return UNARY[type(node.op)](_eval(node.operand))
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in FUNCTIONS
        and not node.keywords
    ):
        return FUNCTIONS[node.func.id](*(_eval(a) for a in node.args))
    raise ToolError(f"unsupported expression element: {ast.dump(node)[:60]}")


@app.tool(
    description="Evaluate an arithmetic expression, e.g. '25000 * (1 + 0.12) ** 2'.",
    structured_output=False,
)
def calculate(expression: str) -> str:
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"not an expression: {expression!r}") from exc
    try:
        return repr(_eval(tree.body))
    except (ArithmeticError, ValueError, TypeError) as exc:
        raise ToolError(f"cannot evaluate {expression!r}: {exc}") from exc


if __name__ == "__main__":
    run(app)
