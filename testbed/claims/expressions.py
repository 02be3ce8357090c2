"""The little language of predicates and preconditions, parsed with `ast` and never evaluated by Python.

A comparison of two arithmetic expressions::

    bisam.test_accuracy > sam.test_accuracy
    optimised.sensor_error / kmeans.sensor_error < 0.5
    abs(eta0["chi2_p"]) >= 0.05

Operands are numbers and ``arm.metric`` (or ``arm["metric"]`` for a metric name that is not an
identifier); operators ``+ - * /``, unary minus, ``abs``, ``min``, ``max`` and parentheses; the
comparison is one of ``> >= < <=``. Its *margin* for one seed is left minus right (right minus left
for ``<``, ``<=``): positive where the comparison holds. Nothing else parses, so a claim in a
scenario file cannot run code.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass

ArmMetrics = Mapping[str, Mapping[str, float]]  # arm -> metric -> value (one seed)


_BINARY: dict[type, Callable[[float, float], float]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
}
_FUNCTIONS: dict[str, Callable[..., float]] = {"abs": abs, "min": min, "max": max}
_ARITY: dict[str, tuple[int, float]] = {"abs": (1, 1), "min": (2, math.inf), "max": (2, math.inf)}
ROUNDING = 1e-9
# Bounds a predicate meets before it is parsed or evaluated: a claim is a short comparison, and its
# numbers are thresholds, far inside the floats (a 400-digit integer is no float at all).
MAX_LENGTH = 1000  # characters
MAX_DEPTH = 100  # levels of nesting, as `_check_size` bounds them: operators and open brackets
MAX_CONSTANT = 1e15
_SYMBOL = {ast.Gt: ">", ast.GtE: ">=", ast.Lt: "<", ast.LtE: "<="}


class ExpressionError(ValueError):
    """A predicate that does not parse, or that names what it may not."""


@dataclass(frozen=True)
class Comparison:
    """A parsed ``left OP right``."""

    text: str
    left: ast.expr
    right: ast.expr
    op: str  # > >= < <=

    @property
    def greater(self) -> bool:
        """``>`` or ``>=``: the margin is left minus right."""
        return self.op.startswith(">")

    def arms(self) -> set[str]:
        return {arm for arm, _ in self.operands()}

    def operands(self) -> list[tuple[str, str]]:
        """Every ``(arm, metric)`` the comparison reads, in order of appearance."""
        found: list[tuple[str, str]] = []
        for side in (self.left, self.right):
            found.extend(_operand(node) for node in ast.walk(side) if _is_operand(node))
        return list(dict.fromkeys(found))

    def values(self, metrics: ArmMetrics) -> tuple[float, float]:
        return _value(self.left, metrics), _value(self.right, metrics)

    def margin(self, metrics: ArmMetrics) -> float:
        """Positive where the comparison holds for these metrics (one seed). A difference within
        `ROUNDING` of the sides' size is floating-point rounding (the same number computed two
        ways), and counts as zero: it must not call a claim reproduced."""
        left, right = self.values(metrics)
        margin = left - right if self.greater else right - left
        return 0.0 if abs(margin) <= ROUNDING * max(abs(left), abs(right)) else margin


@dataclass(frozen=True)
class Expression:
    """A parsed arithmetic expression over arm metrics (a statement's ``secondary`` detail):
    ``packed.invented_rate - concat.invented_rate``."""

    text: str
    node: ast.expr

    def arms(self) -> set[str]:
        return {arm for arm, _ in self.operands()}

    def operands(self) -> list[tuple[str, str]]:
        """Every ``(arm, metric)`` the expression reads, in order of appearance."""
        return list(dict.fromkeys(_operand(node) for node in ast.walk(self.node) if _is_operand(node)))

    def value(self, metrics: ArmMetrics) -> float:
        return _value(self.node, metrics)


def parse_expression(text: str) -> Expression:
    """Parse an expression (no comparison) over ``arm.metric`` operands, or raise `ExpressionError`."""
    _check_size(text)
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise ExpressionError(f"'{text}' does not parse: {err.msg}") from None
    if isinstance(tree, ast.Compare):
        raise ExpressionError(f"'{text}': expected a value such as 'a.metric' or 'a.metric - b.metric', "
                              "not a comparison")
    _check(tree, text)
    expression = Expression(text.strip(), tree)
    if not expression.operands():
        raise ExpressionError(f"'{text}': names no arm metric")
    return expression


def parse_comparison(text: str) -> Comparison:
    """Parse ``text`` or raise `ExpressionError` saying what is wrong."""
    _check_size(text)
    try:
        tree = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as err:
        raise ExpressionError(f"'{text}' does not parse: {err.msg}") from None
    if not isinstance(tree, ast.Compare) or len(tree.ops) != 1:
        raise ExpressionError(f"'{text}': expected one comparison, e.g. 'a.test_accuracy > b.test_accuracy'")
    op = type(tree.ops[0])
    if op not in _SYMBOL:
        raise ExpressionError(f"'{text}': compare with >, >=, < or <=")
    for side in (tree.left, tree.comparators[0]):
        _check(side, text)
    comparison = Comparison(text.strip(), tree.left, tree.comparators[0], _SYMBOL[op])
    if not comparison.operands():
        raise ExpressionError(f"'{text}': names no arm metric")
    return comparison


def _check_size(text: str) -> None:
    """Refuse, before `ast.parse` (whose parser, like `_check` and `_value`, recurses once per level),
    a predicate too long or nested too deeply: a long sum or a run of unary minuses is as deep as it
    is long, and thousands of levels end in a RecursionError."""
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"'{_shortened(text)}' is {len(text)} characters; a predicate has at most {MAX_LENGTH}")
    brackets = deepest = 0
    for char in text:
        brackets += (char in "([") - (char in ")]")
        deepest = max(deepest, brackets)
    levels = deepest + sum(text.count(op) for op in "+-*/")  # each operator can nest one level (a sum's terms do)
    if levels > MAX_DEPTH:
        raise ExpressionError(f"'{_shortened(text)}' nests up to {levels} levels (operators "
                              f"and brackets); a predicate has at most {MAX_DEPTH}")


def _check(node: ast.expr, text: str) -> None:
    if _is_operand(node):
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        if abs(node.value) > MAX_CONSTANT or not math.isfinite(node.value):  # a huge int is no float
            raise ExpressionError(f"'{_shortened(text)}': the number {_short(node.value)} is out of range (a "
                                  f"predicate's numbers are finite, at most {MAX_CONSTANT:g} in size)")
        return
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        _check(node.left, text)
        _check(node.right, text)
        if isinstance(node.op, ast.Div) and _constant(node.right) and _value(node.right, {}) == 0:
            raise ExpressionError(f"'{text}': '{ast.unparse(node)}' divides by zero")
        if _constant(node) and not math.isfinite(_value(node, {})):
            raise ExpressionError(f"'{text}': '{ast.unparse(node)}' is no finite number")
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand, text)
        return
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
            and not node.keywords and not any(isinstance(arg, ast.Starred) for arg in node.args)):
        low, high = _ARITY[node.func.id]
        if not low <= len(node.args) <= high:
            raise ExpressionError(f"'{text}': {node.func.id}() takes {_arity_text(low, high)}, "
                                  f"'{ast.unparse(node)}' gives {len(node.args)}")
        for arg in node.args:
            _check(arg, text)
        return
    raise ExpressionError(f"'{text}': '{ast.unparse(node)}' is not allowed (numbers, arm.metric, "
                          f"+ - * /, {', '.join(_FUNCTIONS)})")


def _constant(node: ast.expr) -> bool:
    """Reads no metric: its value is known when the predicate is checked."""
    return not any(_is_operand(n) for n in ast.walk(node))


def _arity_text(low: int, high: float) -> str:
    if low == high:
        return f"{low} argument{'s' * (low != 1)}"
    return f"at least {low} arguments"


def _shortened(text: str) -> str:
    """A predicate as an error quotes it: its first 60 characters."""
    return text if len(text) <= 60 else f"{text[:60]}..."


def _short(number: int | float) -> str:
    """A number as an error shows it: a huge integer by its size, not its 400 digits."""
    if isinstance(number, int) and abs(number) > MAX_CONSTANT:
        return f"of {len(str(abs(number)))} digits"
    return repr(number)


def _is_operand(node: ast.AST) -> bool:
    if isinstance(node, ast.Attribute):
        return isinstance(node.value, ast.Name)
    return (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
            and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str))


def _operand(node: ast.AST) -> tuple[str, str]:
    if isinstance(node, ast.Attribute):
        assert isinstance(node.value, ast.Name)
        return node.value.id, node.attr
    assert isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name)
    assert isinstance(node.slice, ast.Constant)
    return node.value.id, str(node.slice.value)


def _value(node: ast.expr, metrics: ArmMetrics) -> float:
    if _is_operand(node):
        arm, metric = _operand(node)
        return float(metrics[arm][metric])
    if isinstance(node, ast.Constant):
        assert isinstance(node.value, int | float)  # `_check` let only numbers through
        return float(node.value)
    if isinstance(node, ast.BinOp):
        return _BINARY[type(node.op)](_value(node.left, metrics), _value(node.right, metrics))
    if isinstance(node, ast.UnaryOp):
        return -_value(node.operand, metrics)
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    return float(_FUNCTIONS[node.func.id](*(_value(arg, metrics) for arg in node.args)))

