"""SQE expressions as Arrow compute expressions: the source's exact post-filter.

``jw.sqe.spout.kafka.postFilter`` runs inside the source's ``read()``, on
Arrow record batches, before rows reach Spark; so it is compiled to steps of Arrow
compute functions (:class:`Node`) rather than a Spark Column.  It sees the
source's record columns (``_filter_value``, ``_value``, ``_key``,
``_partition``, ``_offset``, ``_pid``, ...), not the fields of the value,
which are deserialized later, in Spark.

The functions are SQE's logic, comparisons and ``If``, with SQE's meaning, as
in the Spark compiler: ``=`` is NULL-safe and a number never equals a string
(false, not an error), ``In`` skips values of another kind, ``RLike`` matches
the whole text (Java's ``matches()``; the pattern runs on RE2 here); a NULL
result drops the message, as ``where`` does.  A Spark SQL string or any other function is a
:class:`~sqe.errors.TopologyError` at validation, naming what is allowed.

Example::

    >>> import pyarrow as pa
    >>> from sqe.lang.expressions import parse_expression
    >>> e = compile_filter(parse_expression({"In": ["_filter_value", {"C": "eu"}]}),
    ...                    ["_filter_value"])
    >>> e.mask(pa.record_batch({"_filter_value": ["eu", "us", None]})).tolist()
    [True, False, False]
    >>> pa.table({"_filter_value": ["eu", "us", None]}).filter(e.expression()).num_rows
    1
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sqe.errors import ArgumentError, TopologyError
from sqe.lang.expressions import Constant, Expression, Field, Function, Sql
from sqe.lang.functions import whole_match
from sqe.wire.arrays import inferred, scalar, to_numpy
from sqe.wire.columns import ARROW_SCHEMA

__all__ = ["FILTER_FUNCTIONS", "Node", "compile_filter"]

class Node:
    """One step of a compiled post-filter: a record column, a constant, or an Arrow compute
    function of steps.

    :meth:`mask` runs it on a record batch at once, function by function; :meth:`expression`
    is the same as an Arrow ``Expression`` (for ``Table.filter``).  The source uses
    :meth:`mask`: filtering by an expression runs Acero, whose import loads pandas into
    every Spark Python worker.
    """

    __slots__ = ("name", "args", "value", "options")

    def __init__(self, name: str, args: Sequence[Node] = (), value: Any = None,
                 options: tuple[type[pc.FunctionOptions], tuple] | None = None) -> None:
        # options as (class, arguments): FunctionOptions cannot be pickled, a config can
        self.name, self.args, self.value, self.options = name, tuple(args), value, options

    def expression(self) -> pc.Expression:
        """This step as a ``pyarrow.compute.Expression``."""
        if self.name == "field":
            return pc.field(self.value)
        if self.name == "constant":
            return pc.scalar(self.value)
        return pc.Expression._call(self.name, [a.expression() for a in self.args], self._options())

    def evaluate(self, batch: pa.RecordBatch) -> pa.Array | pa.Scalar:
        """This step's values over ``batch``: an array, or a scalar when no column is read."""
        if self.name == "field":
            return batch.column(self.value)
        if self.name == "constant":
            return self.value
        return pc.call_function(self.name, [a.evaluate(batch) for a in self.args], self._options())

    def _options(self) -> pc.FunctionOptions | None:
        return None if self.options is None else self.options[0](*self.options[1])

    def mask(self, batch: pa.RecordBatch) -> np.ndarray:
        """The rows of ``batch`` this filter keeps (NULL drops, as ``where`` does)."""
        out = self.evaluate(batch)
        if isinstance(out, pa.Scalar):
            return np.full(batch.num_rows, out.is_valid and bool(out.as_py()), dtype=bool)
        return to_numpy(pc.fill_null(out, _FALSE))


_FALSE = scalar(False)


def _call(name: str, *args: Node, options: tuple[type[pc.FunctionOptions], tuple] | None = None
          ) -> Node:
    return Node(name, args, options=options)


def _null_safe_equal(a: Node, b: Node) -> Node:
    a_null, b_null = _call("is_null", a), _call("is_null", b)
    return _call("if_else", _call("or_kleene", a_null, b_null), _call("and_kleene", a_null, b_null),
                 _call("equal", a, b))


#: The kind of each record column, as SQE's ``equals`` tells values apart.
_COLUMN_KINDS = {f.name: "number" if pa.types.is_integer(f.type) else
                 "string" if pa.types.is_string(f.type) else str(f.type) for f in ARROW_SCHEMA}
_BOOLEAN = {"and", "or", "xor", "not", "=", "!=", ">", ">=", "<", "<=", "in", "rlike"}


def _kind(expr: Expression) -> str | None:
    """number, string, boolean, null, another Arrow type's name, or None (unknown)."""
    if isinstance(expr, Field):
        return _COLUMN_KINDS.get(expr.name)
    if isinstance(expr, Constant):
        v = expr.value
        return ("null" if v is None else "boolean" if isinstance(v, bool)
                else "string" if isinstance(v, str) else "number")
    if isinstance(expr, Function) and expr.name in _BOOLEAN:
        return "boolean"
    if isinstance(expr, Function) and expr.name == "if":
        a, b = _kind(expr.args[1]), _kind(expr.args[2])
        return a if a == b else None
    return None


def _may_equal(a: str | None, b: str | None) -> bool:
    return a is None or b is None or a == b or "null" in (a, b)


def _folded(function: str) -> Callable[..., Node]:
    """``function`` of two arguments applied left to right over any number of them."""
    return lambda *args: reduce(lambda a, b: _call(function, a, b), args)


def _called(function: str) -> Callable[..., Node]:
    return lambda *args: _call(function, *args)


_BUILDERS: dict[str, Callable[..., Node]] = {
    "and": _folded("and_kleene"),
    "or": _folded("or_kleene"),
    "xor": _folded("xor"),
    "not": _called("invert"),
    "=": _null_safe_equal,
    "!=": _called("not_equal"),
    ">": _called("greater"),
    ">=": _called("greater_equal"),
    "<": _called("less"),
    "<=": _called("less_equal"),
    "if": _called("if_else"),
}

#: Functions a post-filter may call.
FILTER_FUNCTIONS = (*_BUILDERS, "in", "rlike")


def _constants(args: Sequence[Expression], where: str, what: str
               ) -> list[None | bool | int | float | str]:
    """The values of a call's arguments after the first, each of which must be a constant
    (the first that is not is named by its number, from 1, as everywhere in messages)."""
    values: list[None | bool | int | float | str] = []
    for n, a in enumerate(args[1:], start=2):
        if not isinstance(a, Constant):
            raise TopologyError(f"{where} -> argument {n}: {what} in a post-filter")
        values.append(a.value)
    return values


def compile_filter(expr: Expression, columns: Sequence[str], where: str = "postFilter") -> Node:
    """The Arrow steps of ``expr`` over ``columns``; anything else is a TopologyError."""
    if isinstance(expr, Field):
        if expr.name not in columns:
            raise TopologyError(f"{where}: a post-filter sees the source's record columns "
                                f"({', '.join(columns)}), not {expr.name!r}")
        return Node("field", value=expr.name)
    if isinstance(expr, Constant):
        return Node("constant", value=scalar(expr.value))
    if isinstance(expr, Sql):
        raise TopologyError(f"{where}: a post-filter runs inside the source, before Spark, so it "
                            "cannot be a Spark SQL string; write it with the functions "
                            f"{', '.join(FILTER_FUNCTIONS)}")
    if isinstance(expr, Function):
        here = f"{where} -> {expr.name}"

        def arg(i: int) -> Node:  # argument i (0-based), located as validation locates it
            return compile_filter(expr.args[i], columns, f"{here} -> argument {i + 1}")

        if expr.name == "in":
            values = _constants(expr.args, here, "the values after the first must be constants")
            kind = _kind(expr.args[0])
            kept = [v for a, v in zip(expr.args[1:], values, strict=True)
                    if v is not None and _may_equal(kind, _kind(a))]
            value = arg(0)  # checked even when no value is kept
            if not kept:
                return Node("constant", value=_FALSE)
            return _call("is_in", value, options=(pc.SetLookupOptions, (inferred(kept),)))
        if expr.name == "rlike":
            (pattern,) = _constants(expr.args, here, "the pattern must be a constant")
            return _call("match_substring_regex", arg(0),
                         options=(pc.MatchSubstringOptions, (whole_match(str(pattern)),)))
        if expr.name == "=" and not _may_equal(*map(_kind, expr.args)):
            a, b = arg(0), arg(1)
            # SQE: Integer.equals(String) is false
            return _call("and_kleene", _call("is_null", a), _call("is_null", b))
        build = _BUILDERS.get(expr.name)
        if build is None:
            raise TopologyError(f"{where}: function {expr.name} cannot run in a post-filter; "
                                f"it may call {', '.join(FILTER_FUNCTIONS)}")
        return build(*[arg(i) for i in range(len(expr.args))])
    raise ArgumentError(f"not an expression: {expr!r}")
