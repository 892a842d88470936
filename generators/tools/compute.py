"""The calculator: a virtual tool that evaluates arithmetic, so that a computed answer (the
years between two dates) is read from a tool result instead of being worked out by the model.

It is a `tools` row like the search tools (domain `math`, one `expression` argument), in a
bank built with it (generators.tools.bank; `synthesize --calculator`) and known to every
simulator, which answers its calls here. Only numbers, + - * /, parentheses and unary minus
are evaluated (through Python's `ast`, never `eval`); anything else is an error message, as a
real tool would return:

    answer("1863 - 1783")   -> '{"expression": "1863 - 1783", "result": 80}'
    answer("1863 - x")      -> '{"error": "invalid_expression", "detail": "..."}'
"""

from __future__ import annotations

import ast
import json
import math
import operator

from generators.tools.base import make_row

COMPUTE = "math"
NAME = "calculate"
DESCRIPTION = ("Evaluate an arithmetic expression with + - * / and parentheses and return its value, "
               "e.g. the number of years between two dates.")
PARAMETERS = {"type": "object", "additionalProperties": False, "required": ["expression"],
              "properties": {"expression": {"type": "string", "minLength": 1, "maxLength": 200,
                                            "description": "The arithmetic to evaluate, e.g. '1863 - 1783'."}}}
MAX_DIGITS = 30  # a longer result is refused: a chain of products could grow without bound

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculator_row() -> dict:
    """The calculator as a `tools` row (base tool: no `variant_of`)."""
    return make_row(COMPUTE, NAME, DESCRIPTION, PARAMETERS, None, {"base": True, "entity_types": []})


def is_compute(row: dict) -> bool:
    return row.get("domain") == COMPUTE


def _value(node: ast.AST) -> int | float:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _value(node.operand)
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        out = _OPS[type(node.op)](_value(node.left), _value(node.right))
        if not math.isfinite(out) or abs(out) >= 10 ** MAX_DIGITS:
            raise ValueError("the result is too large")
        return out
    raise ValueError(f"only numbers, + - * / and parentheses are allowed, not {ast.unparse(node)!r}")


def evaluate(expression: str) -> int | float:
    """The value of `expression`; ValueError with a readable reason when it is not plain arithmetic."""
    text = expression.replace(",", "").strip()  # "1,975,600" as written on a page
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    try:
        value = _value(tree.body)
    except ZeroDivisionError:
        raise ValueError("division by zero") from None
    return int(value) if isinstance(value, float) and value.is_integer() else value


def answer(expression: str) -> str:
    """The tool message for one call (module docstring)."""
    try:
        value = evaluate(expression)
    except ValueError as e:
        return json.dumps({"error": "invalid_expression", "detail": str(e)}, ensure_ascii=False)
    if isinstance(value, float):
        value = round(value, 6)
    return json.dumps({"expression": expression, "result": value}, ensure_ascii=False)
