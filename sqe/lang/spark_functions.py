"""SQE's functions as Spark Columns: one translation per function, Spark built-ins only.

The table (also in docs/topologies.md):

============  ==================================================================
SQE           Spark
============  ==================================================================
+ - * / %     ``try_add`` ``try_subtract`` ``try_multiply`` ``try_divide``
              ``try_mod`` (NULL on overflow or division by zero) of operands
              promoted as SQE's Clojure arithmetic: integers as bigint, all
              double when one is a float or double; ``/`` is a double
And Or Not    ``&`` ``|`` ``~``; Xor: the count of true arguments is odd
= (Equals)    ``<=>`` of promoted numbers (NULL-safe, as SQE); values of
              different kinds (a number and a string) are unequal:
              ``a IS NULL AND b IS NULL``, never a cast error
!= > >= < <=  SQL comparisons of promoted numbers
In            ``isin`` of the values of the value's kind (promoted as for =)
RLike         ``regexp_like(v, '\\A(?:' || pattern || ')\\z')``: the whole value,
              as Java's ``matches()`` (:func:`~sqe.lang.functions.whole_match`)
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

The types come from the input frame (:class:`CompileContext`); without one,
fields are of unknown type and Spark's own coercion applies.  One difference
stays: SQE's integer ``/`` is a long when exact and a double otherwise, a Spark
column has one type, so it is always a double (docs/migrating.md's "Differences from
SQE").

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
from sqe.lang.expressions import Constant, Expression, Field
from sqe.lang.functions import WHOLE_MATCH, whole_match
from sqe.wire.murmur import hash_bytes

__all__ = ["CompileContext", "DEFAULT_LG_K", "HLL_INPUT_TYPES", "translate"]

#: SQE's default log2m / precision of CreateHll and CreateHllp, used as Spark's lg_k.
DEFAULT_LG_K = 11
#: Types ``hll_sketch_agg`` takes as they are; others are hashed as their string form.
HLL_INPUT_TYPES = (T.IntegerType, T.LongType, T.StringType, T.BinaryType)

_UNITS_MS = {"second": 1000, "minute": 60_000, "hour": 3_600_000, "day": 86_400_000}
_REFUSED_LETTERS = "YwWuec"


def _constant_type(value: Any) -> T.DataType:
    if value is None:
        return T.NullType()
    if isinstance(value, bool):
        return T.BooleanType()
    if isinstance(value, str):
        return T.StringType()
    return T.DoubleType() if isinstance(value, float) else T.LongType()


@dataclass
class CompileContext:
    """What compiling one query needs besides the expression: the input frame (for
    types), and what compiling found."""

    frame: DataFrame | None = None
    #: (counter name, condition): rows the runner counts as warnings (e.g. unparseable dates)
    warnings: list[tuple[str, Column]] = field(default_factory=list)
    generators: int = 0

    _columns: dict[str, list[T.DataType]] | None = field(default=None, init=False, repr=False)

    def dtype(self, col: Column) -> T.DataType | None:
        """The Spark type of ``col`` over the input frame (analysis only, no job)."""
        if self.frame is None:
            return None
        return self.frame.select(col).schema[0].dataType

    def type_of(self, expr: Expression, col: Column) -> T.DataType | None:
        """The Spark type of argument ``expr`` compiled to ``col``: a constant's from its value,
        a field's from the frame's schema, others by :meth:`dtype`."""
        if isinstance(expr, Constant):
            return _constant_type(expr.value)
        if isinstance(expr, Field) and self.frame is not None:
            if self._columns is None:
                self._columns = {}
                for f in self.frame.schema.fields:  # Spark resolves names case-insensitively
                    self._columns.setdefault(f.name.lower(), []).append(f.dataType)
            found = self._columns.get(expr.name.lower(), [])
            if len(found) == 1:
                return found[0]
        return self.dtype(col)


def _arg(here: str, n: int) -> str:
    """Argument ``n`` (numbered from 1, as everywhere in messages) of the call at ``here``."""
    return f"{here} -> argument {n}"


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
        algorithm = str(_constant(args[0], _arg(here, 1), "the algorithm"))
        if algorithm.lower() != "murmur2":
            raise TopologyError(f"{_arg(here, 1)}: algorithm {algorithm!r} is not supported; "
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
    amount = _constant(args[1], _arg(here, 2), "the amount")
    unit = str(_constant(args[2], _arg(here, 3), "the unit")).lower()
    if unit not in _UNITS_MS:
        raise TopologyError(f"{_arg(here, 3)}: unit {unit!r} is not one of "
                            f"{', '.join(_UNITS_MS)}")
    if not isinstance(amount, int) or isinstance(amount, bool) or amount < 1:
        raise TopologyError(f"{_arg(here, 2)}: the amount must be a whole number >= 1, "
                            f"got {amount!r}")
    step = amount * _UNITS_MS[unit]
    millis = F.unix_millis(cols[0])
    return F.timestamp_millis(millis - millis % F.lit(step))


def _get_map_value(ctx: CompileContext, args: list[Expression], cols: list[Column], here: str
                   ) -> Column:
    m, key = cols
    kind = ctx.dtype(m)
    if isinstance(kind, T.StructType):
        return m.getField(str(_constant(args[1], _arg(here, 2), "the key of a struct field")))
    return F.try_element_at(_as_map(ctx, m), key)


def _explode(ctx: CompileContext, values: Callable[[Column], Column], m: Column) -> Column:
    ctx.generators += 1
    mm = _as_map(ctx, m)
    return F.explode(values(mm))


def _hll(ctx: CompileContext, args: list[Expression], cols: list[Column], here: str) -> Column:
    lg_k = DEFAULT_LG_K
    if len(args) == 2:
        lg_k = _constant(args[1], _arg(here, 2), "the sketch size (log2m)")
        if not isinstance(lg_k, int) or not 4 <= lg_k <= 21:
            raise TopologyError(f"{_arg(here, 2)}: log2m must be a whole number 4..21 "
                                f"(Spark's lg_k range), got {lg_k!r}")
    value = cols[0]
    if not isinstance(ctx.dtype(value), HLL_INPUT_TYPES) and ctx.frame is not None:
        value = value.cast("string")
    return F.hll_sketch_agg(value, lg_k)


_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)


def _kind(kind: T.DataType | None) -> str | None:
    """What SQE's ``equals`` tells apart: numbers (compared by value across types), strings,
    dates, ...; ``None`` when unknown (no frame, or VARIANT): Spark's own rules apply."""
    if kind is None or isinstance(kind, T.VariantType):
        return None
    if isinstance(kind, T.NullType):
        return "null"
    if isinstance(kind, T.NumericType):
        return "number"
    if isinstance(kind, (T.StringType, T.CharType, T.VarcharType)):
        return "string"
    if isinstance(kind, (T.TimestampType, T.TimestampNTZType, T.DateType)):
        return "date"
    return kind.simpleString()


def _may_equal(a: T.DataType | None, b: T.DataType | None) -> bool:
    ka, kb = _kind(a), _kind(b)
    return ka is None or kb is None or ka == kb or "null" in (ka, kb)


def _promoted(types: list[T.DataType | None], cols: list[Column]) -> list[Column]:
    """Numbers as SQE's Clojure arithmetic takes them: a float or double makes every operand
    a double; integers (Integer or Long) are longs; decimals and non-numbers stay as they are."""
    if not all(isinstance(t, (T.NumericType, T.NullType)) for t in types):
        return cols
    if any(isinstance(t, (T.FloatType, T.DoubleType)) for t in types):
        return [c.cast("double") for c in cols]
    if all(isinstance(t, (*_INTEGRAL, T.NullType)) for t in types):
        return [c.cast("bigint") for c in cols]
    return cols


def _equals(types: list[T.DataType | None], cols: list[Column]) -> Column:
    if not _may_equal(*types):  # SQE: Integer.equals(String) is false; null equals null
        return cols[0].isNull() & cols[1].isNull()
    a, b = _promoted(types, cols)
    return a.eqNullSafe(b)


def _in(types: list[T.DataType | None], cols: list[Column]) -> Column:
    keep = [0, *[i for i in range(1, len(cols)) if _may_equal(types[0], types[i])]]
    value, *values = _promoted([types[i] for i in keep], [cols[i] for i in keep])
    return value.isin(*values)  # a value of another kind never equals (none left: false)


def _rlike(args: list[Expression], cols: list[Column]) -> Column:
    value, pattern = cols
    if isinstance(args[1], Constant) and args[1].value is not None:
        whole = F.lit(whole_match(str(args[1].value)))
    else:
        whole = F.concat(F.lit(WHOLE_MATCH[0]), pattern.cast("string"), F.lit(WHOLE_MATCH[1]))
    return F.regexp_like(value.cast("string"), whole)


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
    "!=": lambda a, b: a != b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    "if": lambda c, a, b: F.when(c, a).otherwise(b),
    "formatdate": lambda d, p: F.call_function("date_format", d, p),
    "sum": F.sum,
    "max": F.max,
}


#: Functions whose operands are promoted as SQE's Clojure ``Numbers`` does (:func:`_promoted`).
_NUMERIC = ("+", "-", "*", "/", "%", "!=", ">", ">=", "<", "<=")


def translate(name: str, args: list[Expression], cols: list[Column], ctx: CompileContext,
              where: str) -> Column:
    """The Column of SQE function ``name`` applied to compiled ``cols`` (from ``args``);
    ``where`` locates the call in errors."""
    here = f"{where} -> {name}"
    if name in ("parsedate", "formatdate"):
        cols = [cols[0], _pattern(args[1], cols[1], _arg(here, 2))]
    if name == "parsedate":
        return _parse(ctx, *cols)
    if name == "gettime":
        date = _parse(ctx, cols[0], _pattern(args[1], cols[1], _arg(here, 2))) \
            if len(cols) == 2 else cols[0]
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
    if name == "rlike":
        return _rlike(args, cols)
    if name in ("=", "in", *_NUMERIC):
        types = [ctx.type_of(a, c) for a, c in zip(args, cols, strict=True)]
        if name == "=":
            return _equals(types, cols)
        if name == "in":
            return _in(types, cols)
        cols = _promoted(types, cols)
    build = _SIMPLE.get(name)
    if build is None:
        raise TopologyError(f"{here}: function {name} has no Spark translation")
    return build(*cols)
