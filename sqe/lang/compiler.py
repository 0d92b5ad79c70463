"""Compiling SQE expression trees to Spark Columns, and queries to DataFrames.

Every function becomes Spark built-ins (:mod:`sqe.lang.spark_functions` holds the
translations), never a Python UDF where Spark has a built-in.  Arithmetic
uses Spark's ``try_*`` forms, so a division by zero or an overflow gives
NULL for that row instead of failing the whole micro-batch (SQE dropped such
a row; a NULL lets ``where`` drop it or the sink keep it, as the user
chooses).  Numbers are promoted as SQE's Clojure arithmetic does (integers
are longs, a float makes every operand a double), with the types of the
query's input frame.  ``=`` is NULL-safe, as SQE's ``Equals`` (``null =
null`` is true), and values of different kinds are unequal (``1 = "Cat"`` is
false); the other comparisons follow SQL (a NULL operand gives NULL, which
``where`` treats as false).

A query whose select mixes plain and aggregate expressions (``Sum``, ``Max``,
``CreateHll``, ``CreateHllp``) groups the micro-batch by the plain ones.  For
a Kafka state the grouping is *partition-local*: also by the carried pid and
source partition, with the largest carried offset of the group as the
aggregate's offset, so the next hop can replay-filter aggregates.

Every query output keeps the carried StreamMetadata columns
(:data:`~sqe.wire.columns.CARRIED`), so a Kafka state can stamp each record with the
pid of this topology's stream and the source partition and offset of the
record it came from, without the user selecting them.

Example::

    >>> compile_expression(parse_expression({">": ["amount", 50]}))   # doctest: +SKIP
    Column<'(amount > 50)'>
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sqe.errors import ArgumentError, TopologyError
from sqe.lang.expressions import Constant, Expression, Field, Function, Sql, is_aggregate
from sqe.lang.spark_functions import CompileContext, translate
from sqe.lang.topology import Query
from sqe.wire.columns import CARRIED, field_column

__all__ = ["CompiledQuery", "Projection", "aggregates_of", "analysis_error", "carried_columns",
           "compile_expression", "compile_projection", "compile_query"]


def compile_expression(expr: Expression, where: str = "expression",
                       ctx: CompileContext | None = None) -> Column:
    """The Spark Column of an SQE expression; a bad argument is a TopologyError located as
    validation locates it (``where -> if -> argument 2 -> rounddate -> argument 3``)."""
    ctx = ctx or CompileContext()
    if isinstance(expr, Field):
        return field_column(expr.name)
    if isinstance(expr, Constant):
        return F.lit(expr.value)
    if isinstance(expr, Sql):
        return F.expr(expr.text)
    if isinstance(expr, Function):
        here = f"{where} -> {expr.name}"
        args = [compile_expression(a, f"{here} -> argument {i + 1}", ctx)
                for i, a in enumerate(expr.args)]
        return translate(expr.name, list(expr.args), args, ctx, where)
    raise ArgumentError(f"not an expression: {expr!r}")


@dataclass
class CompiledQuery:
    """A compiled query: its output frame and what the runner counts about it."""

    frame: DataFrame
    #: aggregate output field -> SQE function name (empty: not an aggregating query)
    aggregates: dict[str, str] = field(default_factory=dict)
    #: (frame, counter name, condition) of rows to count as warnings
    warnings: list[tuple[DataFrame, str, Column]] = field(default_factory=list)

    def warning_counts(self) -> dict[str, int]:
        """Rows per warning counter (one Spark job per input frame that has any)."""
        counts: dict[str, int] = {}
        frames: dict[int, tuple[DataFrame, list[tuple[str, Column]]]] = {}
        for frame, name, cond in self.warnings:
            frames.setdefault(id(frame), (frame, []))[1].append((name, cond))
        for frame, conds in frames.values():
            row = frame.agg(*[F.count_if(c).alias(f"w{i}") for i, (_, c) in enumerate(conds)]
                            ).first()
            for i, (name, _) in enumerate(conds):
                counts[name] = counts.get(name, 0) + int((row[f"w{i}"] if row is not None else 0) or 0)
        return counts


def _place(i: int, expr: Expression) -> str:
    """Where select expression ``i`` (0-based) is, as messages say it (numbered from 1); for an
    aggregation, its first argument (what is compiled row by row)."""
    here = f"select -> expression {i + 1}"
    return f"{here} -> {expr.name} -> argument 1" if isinstance(expr, Function) \
        and is_aggregate(expr) else here


def _select(query: Query, frame: DataFrame, where: str, ctx: CompileContext,
            exprs: list[tuple[str, Expression, str]]) -> list[Column]:
    cols = [compile_expression(e, f"{where} -> {place}", ctx).alias(name)
            for place, e, name in exprs]
    if ctx.generators > 1:
        raise TopologyError(f"{where} -> select: ExpandKeys/ExpandValues may appear once in a "
                            f"select (Spark allows one generator per select), found "
                            f"{ctx.generators}")
    return cols


def aggregates_of(query: Query) -> dict[str, str]:
    """Aggregate output field -> SQE function name of a query (empty: it does not aggregate)."""
    return {name: e.name for e, name in zip(query.select.expressions, query.insertInto.fields,
                                            strict=True)
            if isinstance(e, Function) and is_aggregate(e)}


def compile_query(query: Query, frame: DataFrame, where: str) -> CompiledQuery:
    """``frame`` filtered by ``where`` and projected to ``insertInto.fields`` (plus the
    carried columns), grouped when the query aggregates, with its warning counters.  What
    Spark cannot analyse (a ``{sql: ...}`` over a column of the wrong type, a function
    sqlglot knows but Spark lacks) is a TopologyError naming the expression."""
    try:
        return _compile_query(query, frame, where)
    except AnalysisException as exc:
        raise _located(query, frame, where, exc) from None


def analysis_error(where: str, exc: AnalysisException) -> TopologyError:
    """Spark's analysis error of the expression at ``where``, as a located sentence."""
    return TopologyError(f"{where}: Spark cannot compile it: {exc.getMessage()}")


def _located(query: Query, frame: DataFrame, where: str, exc: AnalysisException
             ) -> TopologyError:
    """The expression of ``query`` Spark cannot analyse, found by trying each on its own (only
    when the query failed, so a good query pays nothing for it)."""
    parts: list[tuple[str, Expression]] = [
        (_place(i, e), e.args[0] if isinstance(e, Function) and is_aggregate(e) else e)
        for i, e in enumerate(query.select.expressions)]
    if query.where is not None:
        parts.insert(0, ("where", query.where))
    for place, expr in parts:
        here = f"{where} -> {place}"
        try:
            col = compile_expression(expr, here, CompileContext(frame))
            frame.where(col) if place == "where" else frame.select(col)
        except AnalysisException as inner:
            return analysis_error(here, inner)
    return analysis_error(where, exc)


@dataclass(frozen=True)
class Projection:
    """A query that does not aggregate, as Columns over its input frame's columns: the rows
    it keeps (``condition``; None: all), its output fields (aliased, in order; the carried
    columns are not among them) and its warning conditions, those of ``where`` over every
    input row and those of ``select`` over the rows kept.  ``generators``: whether a select
    expression makes several rows of one (ExpandKeys, ExpandValues)."""

    condition: Column | None
    columns: tuple[Column, ...]
    where_warnings: tuple[tuple[str, Column], ...] = ()
    select_warnings: tuple[tuple[str, Column], ...] = ()
    generators: bool = False


def compile_projection(query: Query, frame: DataFrame, where: str) -> Projection:
    """``query`` (which must not aggregate) as a :class:`Projection` over ``frame``; errors as
    :func:`compile_query`'s."""
    try:
        return _projection(query, frame, where)
    except AnalysisException as exc:
        raise _located(query, frame, where, exc) from None


def _projection(query: Query, frame: DataFrame, where: str) -> Projection:
    cond: Column | None = None
    where_warnings: tuple[tuple[str, Column], ...] = ()
    if query.where is not None:
        wctx = CompileContext(frame)
        cond = compile_expression(query.where, f"{where} -> where", wctx)
        where_warnings = tuple(wctx.warnings)
        frame = frame.where(cond)
    plain = [(_place(i, e), e, n) for i, (e, n) in enumerate(zip(
        query.select.expressions, query.insertInto.fields, strict=True))]
    ctx = CompileContext(frame)
    columns = tuple(_select(query, frame, where, ctx, plain))
    return Projection(cond, columns, where_warnings, tuple(ctx.warnings), ctx.generators > 0)


def carried_columns(query: Query, frame: DataFrame) -> list[str]:
    """The carried StreamMetadata columns (:data:`~sqe.wire.columns.CARRIED`) that ``frame``
    has and ``query``'s output keeps beside its fields (a field named like one wins)."""
    chosen = {f.lower() for f in query.insertInto.fields}  # Spark names are case-insensitive
    return [c for c in CARRIED if c in frame.columns and c not in chosen]


def _compile_query(query: Query, frame: DataFrame, where: str) -> CompiledQuery:
    warnings: list[tuple[DataFrame, str, Column]] = []
    carried = carried_columns(query, frame)
    if not aggregates_of(query):
        p = _projection(query, frame, where)
        kept = frame.where(p.condition) if p.condition is not None else frame
        warnings += [(frame, n, c) for n, c in p.where_warnings]
        warnings += [(kept, n, c) for n, c in p.select_warnings]
        return CompiledQuery(kept.select(*p.columns, *carried), {}, warnings)
    if query.where is not None:
        wctx = CompileContext(frame)
        cond = compile_expression(query.where, f"{where} -> where", wctx)
        warnings += [(frame, n, c) for n, c in wctx.warnings]
        frame = frame.where(cond)
    numbered = list(enumerate(zip(query.select.expressions, query.insertInto.fields,
                                  strict=True)))
    plain = [(_place(i, e), e, n) for i, (e, n) in numbered if not is_aggregate(e)]
    aggs = [(i, e, n) for i, (e, n) in numbered if isinstance(e, Function) and is_aggregate(e)]
    ctx = CompileContext(frame)
    # 1. the plain expressions and the aggregates' inputs, row by row
    inputs = [(_place(i, e), e.args[0], f"_sqe_agg{i}") for i, e, _ in aggs]
    rows = frame.select(*_select(query, frame, where, ctx, plain + inputs), *carried)
    warnings += [(frame, n, c) for n, c in ctx.warnings]
    local = query.insertInto.stateName == "KAFKA" and len(carried) == len(CARRIED)
    if local and ctx.generators:
        raise TopologyError(f"{where}: an aggregating query into Kafka emits one record per "
                            "group with the largest source offset of the group; ExpandKeys/"
                            "ExpandValues would give several groups the same offset")
    # 2. group by the plain fields (and, for Kafka, the source partition) and aggregate
    actx = CompileContext(rows)
    measures = [translate(e.name, [Field(f"_sqe_agg{i}"), *e.args[1:]],
                          [field_column(f"_sqe_agg{i}"),
                           *[compile_expression(a, f"{where} -> select -> expression {i + 1} -> "
                                                   f"{e.name} -> argument {j + 2}")
                             for j, a in enumerate(e.args[1:])]],
                          actx, f"{where} -> select -> expression {i + 1}").alias(name)
                for i, e, name in aggs]
    keys: list[Any] = [field_column(n) for _, _, n in plain]
    if local:
        keys += [F.col(CARRIED[0]), F.col(CARRIED[1])]
        measures.append(F.max(CARRIED[2]).alias(CARRIED[2]))
    grouped = rows.groupBy(*keys).agg(*measures)
    out = grouped.select(*[field_column(n) for n in query.insertInto.fields],
                         *([F.col(c) for c in CARRIED] if local else []))
    if local:  # each source partition's aggregates in offset order, for the Kafka state
        out = out.repartition(F.col(CARRIED[1])).sortWithinPartitions(CARRIED[1], CARRIED[2])
    return CompiledQuery(out, aggregates_of(query), warnings)
