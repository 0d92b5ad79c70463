"""SQE's functions as Spark Columns: one translation per function, Spark built-ins only.

The table (also in the README):

============  ==================================================================
SQE           Spark
============  ==================================================================
+ - * / %     ``try_add`` ``try_subtract`` ``try_multiply`` ``try_divide``
              ``try_mod`` (NULL on overflow or division by zero)
And Or Not    ``&`` ``|`` ``~``; Xor: the count of true arguments is odd
= (Equals)    ``<=>`` (NULL-safe, as SQE); != > >= < <=: SQL comparisons
In, RLike     ``isin``; ``regexp_like`` (SQE: a full match -- anchor the pattern)
If            ``CASE WHEN c THEN a ELSE b END``
ParseDate     ``try_to_timestamp(s, pattern)``: NULL (and a counted warning)
              when the text does not parse; UTC
FormatDate    ``date_format(d, pattern)``
RoundDate     ``timestamp_millis(ms - ms % (amount x unit))`` with
              ``ms = unix_millis(d)``, unit second/minute/hour/day (SQE floors
              toward zero, and so does ``%``)
GetTime       ``unix_millis(d)``, or of ``ParseDate(s, pattern)``
Hash          MurmurHash64A, seed 0xe17a1465, 8 bytes big-endian: an Arrow UDF
              (:mod:`sqe.wire.murmur`; Spark has no built-in for it)
GetMapValue   ``try_element_at(map, key)``; on a JSON object (VARIANT), its
              member as VARIANT.  NULL when absent (SQE dropped the row)
ExpandKeys    ``explode(array_sort(map_keys(m)))``: a row per key, ascending
ExpandValues  ``explode`` of the values in ascending key order
Sum, Max      ``sum``, ``max``
CreateHll     ``hll_sketch_agg(x, lgConfigK)``; SQE's log2m (default 11) is the
CreateHllp    lg_k, so the register count, 2**11, and the error match SQE
============  ==================================================================

Date patterns are Java's (``yyyy-MM-dd HH:mm``), which Spark's datetime
patterns accept; a constant pattern with a letter Spark refuses (week-based
``Y w W u e c``) is a :class:`~sqe.errors.TopologyError` at compile time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, reduce
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from sqe.errors import TopologyError
from sqe.lang.expressions import Constant, Expression
from sqe.wire.murmur import hash_bytes

__all__ = ["CompileContext", "DEFAULT_LG_K", "HLL_INPUT_TYPES", "translate"]

#: SQE's default log2m / precision of CreateHll and CreateHllp, used as Spark's lg_k.
DEFAULT_LG_K = 11
#: Types ``hll_sketch_agg`` takes as they are; others are hashed as their string form.
HLL_INPUT_TYPES = (T.IntegerType, T.LongType, T.StringType, T.BinaryType)

_UNITS_MS = {"second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
_REFUSED_LETTERS = "YwWuec"


@dataclass
class CompileContext:
    """What compiling one query needs besides the expression: the input frame (for
    types), and what compiling found."""

    frame: DataFrame | None = None
    #: (counter name, condition): rows the runner counts as warnings (e.g. unparseable dates)
    warnings: list[tuple[str, Column]] = field(default_factory=list)
    generators: int = 0

    def dtype(self, col: Column) -> T.DataType | None:
        """The Spark type of ``col`` over the input frame (analysis only, no job)."""
        if self.frame is None:
            return None
        return self.frame.select(col).schema[0].dataType


def _constant(expr: Expression, where: str, what: str) -> Any:
    if not isinstance(expr, Constant):
        raise TopologyError(f"{where}: {what} must be a constant")
    return expr.value


def _pattern(expr: Expression, col: Column, where: str) -> Column:
    if isinstance(expr, Constant):
        text = str(expr.value)
        unquoted = re.sub(r"'[^']*'", "", text)
        bad = sorted({c for c in unquoted if c in _REFUSED_LETTERS})
        if bad:
            raise TopologyError(f"{where}: date pattern {text!r} uses {', '.join(bad)}, which "
                                "Spark's datetime patterns do not support (week-based fields); "
                                "see Spark's 'Datetime Patterns' page")
    return col


def _parse(ctx: CompileContext, text: Column, pattern: Column) -> Column:
    parsed = F.try_to_timestamp(text.cast("string"), pattern)
    ctx.warnings.append(("unparseable_dates", text.isNotNull() & parsed.isNull()))
    return parsed


def _xor(*cols: Column) -> Column:
    trues = reduce(lambda a, b: a + b, [c.cast("int") for c in cols])
    return (trues % 2) == 1


def _as_map(ctx: CompileContext, m: Column) -> Column:
    if isinstance(ctx.dtype(m), T.VariantType):
        return F.try_variant_get(m, "$", "map<string,variant>")
    return m


def _hash(ctx: CompileContext, args: list[Expression], cols: list[Column], here: str
          ) -> Column:
    if len(args) == 2:
        algorithm = str(_constant(args[0], here, "the algorithm"))
        if algorithm.lower() != "murmur2":
            raise TopologyError(f"{here}: algorithm {algorithm!r} is not supported; "
                                "SQE's Hash knows murmur2")
    value = cols[-1]
    if not isinstance(ctx.dtype(value), T.BinaryType):
        value = value.cast("string").cast("binary")
    return _hash_udf()(value)


@cache
def _hash_udf() -> Any:
    # The UDF's kind comes from hash_bytes's type hints (pa.Array -> pa.Array); PySpark's stubs
    # list no overload without an explicit kind, which it warns about at run time.
    return F.arrow_udf(hash_bytes, T.BinaryType())  # type: ignore[call-overload]


def _round_date(args: list[Expression], cols: list[Column], here: str) -> Column:
    amount = _constant(args[1], here, "the amount")
    unit = str(_constant(args[2], here, "the unit")).lower()
    if unit not in _UNITS_MS:
        raise TopologyError(f"{here}: unit {unit!r} is not one of {', '.join(_UNITS_MS)}")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
        raise TopologyError(f"{here}: the amount must be a whole number >= 1, got {amount!r}")
    step = amount * _UNITS_MS[unit]
    millis = F.unix_millis(cols[0])
    return F.timestamp_millis(millis - millis % F.lit(step))


def _get_map_value(ctx: CompileContext, args: list[Expression], cols: list[Column], here: str
                   ) -> Column:
    m, key = cols
    kind = ctx.dtype(m)
    if isinstance(kind, T.StructType):
        return m.getField(str(_constant(args[1], here, "the key of a struct field")))
    return F.try_element_at(_as_map(ctx, m), key)


def _explode(ctx: CompileContext, values: Callable[[Column], Column], m: Column) -> Column:
    ctx.generators += 1
    mm = _as_map(ctx, m)
    return F.explode(values(mm))


def _hll(ctx: CompileContext, args: list[Expression], cols: list[Column], here: str) -> Column:
    lg_k = DEFAULT_LG_K
    if len(args) == 2:
        lg_k = _constant(args[1], here, "the sketch size (log2m)")
        if not isinstance(lg_k, int) or not 4 <= lg_k <= 21:
            raise TopologyError(f"{here}: log2m must be a whole number 4..21 "
                                f"(Spark's lg_k range), got {lg_k!r}")
    value = cols[0]
    if not isinstance(ctx.dtype(value), HLL_INPUT_TYPES) and ctx.frame is not None:
        value = value.cast("string")
    return F.hll_sketch_agg(value, lg_k)


_SIMPLE: dict[str, Callable[..., Column]] = {
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
    "rlike": lambda v, p: F.regexp_like(v.cast("string"), p),
    "if": lambda c, a, b: F.when(c, a).otherwise(b),
    "formatdate": lambda d, p: F.call_function("date_format", d, p),
    "sum": F.sum,
    "max": F.max,
}


def translate(name: str, args: list[Expression], cols: list[Column], ctx: CompileContext,
              where: str) -> Column:
    """The Column of SQE function ``name`` applied to compiled ``cols`` (from ``args``);
    ``where`` locates the call in errors."""
    here = f"{where} -> {name}"
    if name in ("parsedate", "formatdate"):
        cols = [cols[0], _pattern(args[1], cols[1], here)]
    if name == "parsedate":
        return _parse(ctx, *cols)
    if name == "gettime":
        date = _parse(ctx, cols[0], _pattern(args[1], cols[1], here)) if len(cols) == 2 \
            else cols[0]
        return F.unix_millis(date)
    if name == "rounddate":
        return _round_date(args, cols, here)
    if name == "hash":
        return _hash(ctx, args, cols, here)
    if name == "getmapvalue":
        return _get_map_value(ctx, args, cols, here)
    if name == "expandkeys":
        return _explode(ctx, lambda m: F.array_sort(F.map_keys(m)), cols[0])
    if name == "expandvalues":
        return _explode(ctx, lambda m: F.transform(F.array_sort(F.map_keys(m)),
                                                   lambda k: F.element_at(m, k)), cols[0])
    if name in ("createhll", "createhllp"):
        return _hll(ctx, args, cols, here)
    build = _SIMPLE.get(name)
    if build is None:
        raise TopologyError(f"{here}: function {name} has no Spark translation")
    return build(*cols)
