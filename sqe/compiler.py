"""Compiling SQE expression trees to Spark Columns, and queries to DataFrames.

Every function becomes Spark built-ins, never a Python UDF.  Arithmetic
uses Spark's ``try_*`` forms, so a division by zero or an overflow gives
NULL for that row instead of failing the whole micro-batch (SQE dropped such
a row; a NULL lets ``where`` drop it or the sink keep it, as the user
chooses).  ``=`` is NULL-safe, as SQE's ``Equals`` (``null = null`` is
true); the other comparisons follow SQL (a NULL operand gives NULL, which
``where`` treats as false).

Every query output keeps the carried StreamMetadata columns
(:data:`CARRIED`), so a Kafka state can stamp each record with the
pid of this topology's stream and the source partition and offset of the
record it came from, without the user selecting them.

Example::

    >>> compile_expression(parse_expression({">": ["amount", 50]}))   # doctest: +SKIP
    Column<'(amount > 50)'>
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sqe.errors import TopologyError
from sqe.expressions import Constant, Expression, Field, Function, Sql
from sqe.topology import Query

__all__ = ["CARRIED", "compile_expression", "compile_query", "field_column"]

#: Columns every record carries from the source to the states: (pid, partition, offset).
CARRIED = ("_sqe_pid", "_sqe_partition", "_sqe_offset")


def field_column(name: str) -> Column:
    """A reference to a field, quoted so names with dots or spaces work."""
    return F.col("`" + name.replace("`", "``") + "`")


def _xor(*cols: Column) -> Column:
    trues = reduce(lambda a, b: a + b, [c.cast("int") for c in cols])
    return (trues % 2) == 1


def _rlike(value: Column, pattern: Column) -> Column:
    return F.regexp_like(value.cast("string"), pattern)


_COMPILERS: dict[str, Callable[..., Column]] = {
    "+": F.try_add,
    "-": F.try_subtract,
    "*": F.try_multiply,
    "/": F.try_divide,
    "%": F.try_mod,
    "and": lambda *c: reduce(lambda a, b: a & b, c),
    "or": lambda *c: reduce(lambda a, b: a | b, c),
    "xor": _xor,
    "not": lambda c: ~c,
    "=": lambda a, b: a.eqNullSafe(b),
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "in": lambda a, *rest: a.isin(*rest),
    "rlike": _rlike,
    "if": lambda c, a, b: F.when(c, a).otherwise(b),
}


def compile_expression(expr: Expression, where: str = "expression") -> Column:
    """The Spark Column of an SQE expression; an unsupported function is a TopologyError."""
    if isinstance(expr, Field):
        return field_column(expr.name)
    if isinstance(expr, Constant):
        return F.lit(expr.value)
    if isinstance(expr, Sql):
        return F.expr(expr.text)
    if isinstance(expr, Function):
        build = _COMPILERS.get(expr.name)
        if build is None:
            raise TopologyError(
                f"{where}: function {expr.name} is not available in sqe run yet; "
                f"write it as a Spark SQL expression ({{sql: ...}}) meanwhile")
        args = [compile_expression(a, f"{where} -> {expr.name}") for a in expr.args]
        return build(*args)
    raise TypeError(f"not an expression: {expr!r}")


def compile_query(query: Query, frame: DataFrame, where: str) -> DataFrame:
    """``frame`` filtered by ``where`` and projected to ``insertInto.fields`` (+ carried columns)."""
    if query.where is not None:
        frame = frame.where(compile_expression(query.where, f"{where} -> where"))
    columns: list[Any] = [
        compile_expression(e, f"{where} -> select -> expression {i + 1}").alias(name)
        for i, (e, name) in enumerate(zip(query.select.expressions, query.insertInto.fields,
                                          strict=True))
    ]
    chosen = {f.lower() for f in query.insertInto.fields}  # Spark names are case-insensitive
    carried = [c for c in CARRIED if c in frame.columns and c not in chosen]
    return frame.select(*columns, *carried)
