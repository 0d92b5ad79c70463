"""SQE expression trees: parsing, validation and inspection (compilation to Spark lives elsewhere).

An expression in a topology file is, as in the original SQE:

* a string -- a field reference (``"UserName"``);
* a number, boolean or null -- a constant (``0.0``, ``false``);
* ``{"C": value}`` -- a constant, the way to write a string constant;
* ``{"Fn": [arg, ...]}`` -- a function call, names matched case-insensitively
  against :data:`sqe.lang.functions.FUNCTIONS`;
* beyond SQE, ``{"sql": "upper(name)"}`` -- a Spark SQL expression string.

:func:`parse_expression` turns the raw JSON/YAML value into the frozen
dataclasses below or raises :class:`ExpressionError` carrying the path
inside the expression, so errors point at the exact argument.

Example::

    >>> e = parse_expression({"FormatDate": [{"ParseDate": ["d", {"C": "yyyy"}]}, {"C": "yy"}]})
    >>> output_name(e)
    'formatdate(parsedate(d,yyyy),yy)'
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Union

from sqe.lang.functions import FUNCTIONS, FunctionSpec, find_function, known_function_names

__all__ = [
    "Field",
    "Constant",
    "Function",
    "Sql",
    "Expression",
    "ExpressionError",
    "parse_expression",
    "to_raw",
    "output_name",
    "fields_of",
    "walk",
    "is_aggregate",
    "contains_aggregate",
]


@dataclass(frozen=True, slots=True)
class Field:
    """A reference to a field of the input stream."""

    name: str


@dataclass(frozen=True, slots=True)
class Constant:
    """A constant: None, bool, int, float or str."""

    value: None | bool | int | float | str


@dataclass(frozen=True, slots=True)
class Function:
    """A call of an SQE function (``name`` is the catalogue's canonical spelling)."""

    name: str
    args: tuple[Expression, ...]

    @property
    def spec(self) -> FunctionSpec:
        """The catalogue entry of this function."""
        return FUNCTIONS[self.name]


@dataclass(frozen=True, slots=True)
class Sql:
    """A Spark SQL expression string (beyond SQE)."""

    text: str


Expression = Union[Field, Constant, Function, Sql]


class ExpressionError(ValueError):
    """A malformed expression; ``path`` locates the problem inside it."""

    def __init__(self, path: tuple[str, ...], message: str) -> None:
        self.path = path
        self.message = message
        where = " -> ".join(path)
        super().__init__(f"{where}: {message}" if where else message)


_PRIMITIVES = (bool, int, float, str, type(None))


def _constant(value: Any, path: tuple[str, ...]) -> Constant:
    if not isinstance(value, _PRIMITIVES):
        raise ExpressionError(
            path, f"a constant must be a string, number, boolean or null, got {type(value).__name__}"
        )
    return Constant(value)


def _arity_text(spec: FunctionSpec) -> str:
    if spec.max_args is None:
        return f"at least {spec.min_args}"
    if spec.min_args == spec.max_args:
        return str(spec.min_args)
    return f"{spec.min_args} to {spec.max_args}"


#: How deeply function calls may nest in one expression: deeper trees are refused, as
#: every step after parsing (checks, compilation) walks them recursively.
MAX_NESTING = 64


def _nesting(raw: Any) -> int:
    """How deeply maps and lists nest in ``raw`` (counted without recursion)."""
    deepest, stack = 0, [(raw, 0)]
    while stack:
        value, depth = stack.pop()
        deepest = max(deepest, depth)
        if isinstance(value, dict):
            stack += [(v, depth + 1) for v in value.values()]
        elif isinstance(value, list):
            stack += [(v, depth) for v in value]  # an argument list is no level of its own
    return deepest


def parse_expression(raw: Any, path: tuple[str, ...] = ()) -> Expression:
    """Parse one raw expression (see the module docstring for the forms).  Function calls
    nested deeper than :data:`MAX_NESTING` are an :class:`ExpressionError`."""
    if not path and _nesting(raw) > MAX_NESTING:
        raise ExpressionError(path, f"function calls nest {_nesting(raw)} deep; at most "
                                    f"{MAX_NESTING} levels are allowed")
    if isinstance(raw, str):
        if not raw:
            raise ExpressionError(path, "a field name must not be empty")
        return Field(raw)
    if isinstance(raw, (bool, int, float)) or raw is None:
        return Constant(raw)
    if isinstance(raw, dict):
        if len(raw) != 1:
            keys = ", ".join(map(str, raw)) or "nothing"
            raise ExpressionError(
                path, f"an expression object must have exactly one key (C, sql or a function), "
                      f"got {keys}"
            )
        ((key, value),) = raw.items()
        key = str(key)
        if key == "C":
            return _constant(value, (*path, "C"))
        if key.lower() == "sql":
            if not isinstance(value, str) or not value.strip():
                raise ExpressionError((*path, key), "expected a non-empty Spark SQL string")
            return Sql(value)
        spec = find_function(key)
        if spec is None:
            raise ExpressionError(
                path, f"unknown function {key}; known functions: {', '.join(known_function_names())}"
            )
        here = (*path, spec.name)
        if not isinstance(value, list):
            raise ExpressionError(here, f"arguments of {spec.name} must be a list")
        n = len(value)
        if n < spec.min_args or (spec.max_args is not None and n > spec.max_args):
            raise ExpressionError(
                here, f"{spec.name} takes {_arity_text(spec)} argument(s), got {n}"
            )
        args = tuple(
            parse_expression(arg, (*here, f"argument {i + 1}")) for i, arg in enumerate(value)
        )
        for i, arg in enumerate(args):
            if contains_aggregate(arg):
                raise ExpressionError(
                    (*here, f"argument {i + 1}"),
                    "an aggregation cannot be nested inside another function",
                )
        return Function(spec.name, args)
    raise ExpressionError(
        path, f"expected a field name, a constant or a one-key object, got {type(raw).__name__}"
    )


def to_raw(expr: Expression) -> Any:
    """The JSON-able form of an expression (SQE's serialisation; parses back to the same)."""
    if isinstance(expr, Field):
        return expr.name
    if isinstance(expr, Constant):
        return {"C": expr.value} if isinstance(expr.value, str) else expr.value
    if isinstance(expr, Sql):
        return {"sql": expr.text}
    return {expr.name: [to_raw(a) for a in expr.args]}


def output_name(expr: Expression) -> str:
    """SQE's output field name: ``Fn(arg,...)`` for functions, the name for fields."""
    if isinstance(expr, Field):
        return expr.name
    if isinstance(expr, Constant):
        return "null" if expr.value is None else str(expr.value).lower() if isinstance(
            expr.value, bool) else str(expr.value)
    if isinstance(expr, Sql):
        return expr.text
    return f"{expr.name}({','.join(output_name(a) for a in expr.args)})"


def walk(expr: Expression, path: tuple[str, ...] = ()
         ) -> Iterator[tuple[tuple[str, ...], Expression]]:
    """Every node of an expression with its path, named as :func:`parse_expression`'s errors
    name it (``("if", "argument 2")``), the root first."""
    yield path, expr
    if isinstance(expr, Function):
        for i, arg in enumerate(expr.args):
            yield from walk(arg, (*path, expr.name, f"argument {i + 1}"))


def fields_of(expr: Expression) -> set[str]:
    """Every field name an expression reads (Spark SQL strings are opaque here)."""
    if isinstance(expr, Field):
        return {expr.name}
    if isinstance(expr, Function):
        return set().union(*(fields_of(a) for a in expr.args)) if expr.args else set()
    return set()


def is_aggregate(expr: Expression) -> bool:
    """True when the expression itself is an aggregation call (Sum, Max, CreateHll, ...)."""
    return isinstance(expr, Function) and expr.spec.aggregate


def contains_aggregate(expr: Expression) -> bool:
    """True when an aggregation appears anywhere in the expression."""
    return is_aggregate(expr) or (
        isinstance(expr, Function) and any(contains_aggregate(a) for a in expr.args)
    )
