"""A JSON stream's declared fields read in the source's Python worker, vectorised, for the
values that read the same there as in Spark's JVM.

Spark reads a JSON value's declared field (:mod:`sqe.source.deserializers`) by parsing the
whole value into a VARIANT and casting the field out of it, in its JVM: about 11 us of CPU a
record with the client compiler (``conf/low-latency.yaml``), 3 us with the full one, two thirds
of what a one-pass task's JVM does for the chain's load step.  Arrow's C++ JSON reader reads the
same fields from a whole batch of values at once for under 1 us a record.  The ``sqe-kafka``
source does it when given ``jsonFields`` (:func:`read_fields`) and yields, beside each record
row, whether its value was read here (:data:`OK`) and each field (:func:`json_column`), in
:func:`with_fields`; the deserializer takes those and leaves Spark's parse to the rest.

A value is read here only where both readers agree, so no record reads differently:

* the value is valid UTF-8, at most :data:`MAX_BYTES` bytes (under every limit of Spark's JSON
  parser: numbers of 1,000 digits, nesting 500 deep), on one line, starts with ``{`` (after
  blanks), and has no ``NaN`` or ``Inf`` in it (Arrow's reader takes those non-standard
  numbers, Spark's does not);
* Arrow's reader takes it as one object whose declared fields have exactly their declared
  types (a string for ``string``, an integer in range for ``bigint``, ``true``/``false`` for
  ``boolean``; ``"12"`` for a ``bigint`` is Spark's cast to make, so that value goes to Spark).
  Arrow does not look for a key given twice outside the declared fields, so the deserializer
  takes these columns only when Spark keeps a repeated key's last value too
  (``spark.sql.variant.allowDuplicateKeys``, which SQE sets).

Only fields of the types in :data:`TYPES` are read here; a stream declaring another type reads
every value in Spark.  A batch Arrow refuses is halved until the values it refuses are found
(at most :data:`MAX_PARSES` parses a batch; what is left goes to Spark).
:func:`read_fields_reference` is the same statement a value at a time, with Python's ``json``;
``tests/source/test_json_fields.py`` holds them equal, and both to Spark's own reading.

Example::

    >>> from sqe.wire.arrays import binaries
    >>> ok, cols = read_fields(binaries([b'{"n": 7, "s": "x"}', b'{"n": "7"}', b'[1]']),
    ...                        (("n", "bigint"), ("s", "string")))
    >>> ok.to_pylist(), cols[0].to_pylist(), cols[1].to_pylist()
    ([True, False, False], [7, None, None], ['x', None, None])
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql.types import (
    BooleanType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructField,
    StructType,
)

from sqe.wire.arrays import booleans, from_numpy, scalar, to_numpy

__all__ = ["MAX_BYTES", "MAX_PARSES", "OK", "PREFIX", "TYPES", "arrow_fields", "arrow_type",
           "fields_problem", "json_column", "read_fields", "read_fields_reference", "schema_with",
           "spark_type", "with_fields"]

#: The column, true where the source read the value's declared fields (NULL in a tally row).
OK = "_sqe_json_ok"
#: The prefix of a field's column.
PREFIX = "_sqe_jf_"
#: The longest value read in the source (Spark's JSON parser refuses numbers over 1,000 digits).
MAX_BYTES = 1000
#: The most JSON parses one batch of values costs before the rest is left to Spark.
MAX_PARSES = 64

#: The declared types read in the source, by their Spark names, as Arrow types.
TYPES: Mapping[str, pa.DataType] = {
    "string": pa.string(), "bigint": pa.int64(), "long": pa.int64(), "int": pa.int32(),
    "integer": pa.int32(), "smallint": pa.int16(), "short": pa.int16(), "tinyint": pa.int8(),
    "byte": pa.int8(), "boolean": pa.bool_(),
}
_RANGES = {pa.int64(): (-2**63, 2**63 - 1), pa.int32(): (-2**31, 2**31 - 1),
           pa.int16(): (-2**15, 2**15 - 1), pa.int8(): (-2**7, 2**7 - 1)}
_STARTS = r"^[ \t]*\{"
_FALSE = scalar(False)


_SPARK: Mapping[pa.DataType, DataType] = {
    pa.string(): StringType(), pa.int64(): LongType(), pa.int32(): IntegerType(),
    pa.int16(): ShortType(), pa.int8(): ByteType(), pa.bool_(): BooleanType()}


def spark_type(arrow_type: pa.DataType) -> DataType:
    """The Spark type of a field's column read as ``arrow_type`` (of :data:`TYPES`)."""
    return _SPARK[arrow_type]


def json_column(name: str) -> str:
    """The source's column of field ``name``."""
    return PREFIX + name


def schema_with(schema: StructType, fields: Sequence[tuple[str, str]]) -> StructType:
    """The source's ``schema`` with the columns of ``fields`` (none when there are none)."""
    if not fields:
        return schema
    return StructType([*schema.fields, StructField(OK, BooleanType()),
                       *[StructField(json_column(n), _SPARK[TYPES[t]]) for n, t in fields]])


def with_fields(batch: pa.RecordBatch, fields: Sequence[tuple[str, str]]) -> pa.RecordBatch:
    """The source's ``batch`` with the columns of ``fields`` read from its ``_value`` (record
    rows; a tally row, whose ``_offset`` is NULL, gets NULLs)."""
    if not fields:
        return batch
    n = batch.num_rows
    if batch.column("_offset").null_count == n:
        ok, columns = pa.nulls(n, pa.bool_()), [pa.nulls(n, TYPES[t]) for _, t in fields]
    else:
        ok, columns = read_fields(batch.column("_value"), fields)
    return pa.RecordBatch.from_arrays(
        [*batch.columns, ok, *columns],
        names=[*batch.schema.names, OK, *[json_column(name) for name, _ in fields]])


def arrow_type(spark_type: str | None) -> pa.DataType | None:
    """The Arrow type a field declared as ``spark_type`` is read as here (None: not here)."""
    return TYPES.get((spark_type or "").strip().lower())


def fields_problem(fields: Mapping[str, str | None]) -> str | None:
    """Why ``fields`` (name -> declared type) cannot be read here, in one sentence, or None."""
    if len({name.lower() for name in fields}) < len(fields):
        return ("names two fields that differ only in case, which Spark's columns cannot tell "
                "apart")
    for name, spark_type in fields.items():
        if arrow_type(spark_type) is None:
            return f"field {name!r} has type {spark_type!r}; the reader reads {', '.join(TYPES)}"
    return None


def arrow_fields(declared: Mapping[str, str | None] | None
                 ) -> tuple[tuple[str, str], ...] | None:
    """The declared fields as ``jsonFields`` takes them (their types' names normalised), or
    None when :func:`fields_problem` finds one (the stream then reads every value in Spark)."""
    if not declared or fields_problem(declared) is not None:
        return None
    return tuple((name, (spark_type or "").strip().lower())
                 for name, spark_type in declared.items())


def _schema(fields: Sequence[tuple[str, str]]) -> pa.Schema:
    return pa.schema([(name, TYPES[spark_type]) for name, spark_type in fields])


def _screened(values: pa.Array) -> np.ndarray:
    """True for the values Arrow may read (see the module docstring)."""
    if not len(values):
        return np.zeros(0, dtype=bool)
    size = pc.binary_length(values)
    keep = pc.and_kleene(pc.is_valid(values), pc.less_equal(size, scalar(MAX_BYTES, size.type)))
    keep = pc.and_kleene(keep, pc.match_substring_regex(values, _STARTS))
    for bad in ("\n", "\r", "NaN", "Inf"):
        keep = pc.and_kleene(keep, pc.invert(pc.match_substring(values, bad)))
    return to_numpy(pc.fill_null(keep, _FALSE))


def _lines(values: pa.Array) -> pa.Buffer:
    """``values`` (no NULL) one per line, as one buffer."""
    n = len(values)
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int32)[values.offset:values.offset + n + 1]
    data = np.frombuffer(values.buffers()[2], dtype=np.uint8)[offsets[0]:offsets[-1]]
    out = np.empty(len(data) + n, dtype=np.uint8)
    ends = offsets[1:] - offsets[0] + np.arange(n)  # where each value's newline goes
    newline = np.zeros(len(out), dtype=bool)
    newline[ends] = True
    out[newline] = 10
    out[~newline] = data
    return pa.py_buffer(out)


def _parse(values: pa.Array, schema: pa.Schema) -> pa.Table | None:
    """``values`` read as one object each, or None when Arrow refuses one of them."""
    try:
        values.cast(pa.string())  # invalid UTF-8 anywhere: Spark reads it with U+FFFD
        table = pj.read_json(pa.BufferReader(_lines(values)), parse_options=pj.ParseOptions(
            explicit_schema=schema, unexpected_field_behavior="ignore",
            newlines_in_values=False), read_options=pj.ReadOptions(
            use_threads=False, block_size=max(1 << 20, values.nbytes * 2)))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return table if table.num_rows == len(values) else None


def _read(values: pa.Array, schema: pa.Schema, budget: list[int]
          ) -> tuple[np.ndarray, list[pa.Table]]:
    """Which of ``values`` Arrow reads, and their rows in order (halving a refused batch)."""
    if budget[0] <= 0:
        return np.zeros(len(values), dtype=bool), []
    budget[0] -= 1
    table = _parse(values, schema)
    if table is not None:
        return np.ones(len(values), dtype=bool), [table]
    if len(values) == 1:
        return np.zeros(1, dtype=bool), []
    half = len(values) // 2
    ok_a, rows_a = _read(values.slice(0, half), schema, budget)
    ok_b, rows_b = _read(values.slice(half), schema, budget)
    return np.concatenate([ok_a, ok_b]), rows_a + rows_b


def read_fields(values: pa.Array, fields: Sequence[tuple[str, str]], budget: int = MAX_PARSES
                ) -> tuple[pa.BooleanArray, list[pa.Array]]:
    """Whether each of the binary ``values`` was read here, and each declared field of
    ``fields`` (name, type of :data:`TYPES`) as an array of its Arrow type, NULL where the
    value was not read here or has no such field.  ``budget``: the most JSON parses it
    costs (the values not yet read then are not read here)."""
    n = len(values)
    screened = _screened(values)
    where = np.flatnonzero(screened)
    ok = np.zeros(n, dtype=bool)
    rows: list[pa.Table] = []
    if len(where):
        read, rows = _read(values.take(from_numpy(where.astype(np.int64))), _schema(fields),
                           [budget])
        ok[where[read]] = True
    index = np.full(n, -1, dtype=np.int64)
    index[ok] = np.arange(int(ok.sum()))
    take = from_numpy(np.maximum(index, 0), valid=ok)
    columns = []
    for i, (_, spark_type) in enumerate(fields):
        if rows:
            column = pa.concat_arrays([c for t in rows for c in t.column(i).chunks])
            columns.append(column.take(take))
        else:
            columns.append(pa.nulls(n, TYPES[spark_type]))
    return booleans(ok), columns


def read_fields_reference(values: Sequence[bytes | None], fields: Sequence[tuple[str, str]]
                          ) -> tuple[list[bool], list[list[Any]]]:
    """:func:`read_fields`, a value at a time with Python's ``json`` (no parse budget)."""
    ok: list[bool] = []
    columns: list[list[Any]] = [[] for _ in fields]
    for value in values:
        got = _one(value, fields)
        ok.append(got is not None)
        for column, field in zip(columns, got or [None] * len(fields), strict=True):
            column.append(field)
    return ok, columns


def _one(value: bytes | None, fields: Sequence[tuple[str, str]]) -> list[Any] | None:
    if (value is None or len(value) > MAX_BYTES or not re.match(rb"[ \t]*\{", value)
            or any(bad in value for bad in (b"\n", b"\r", b"NaN", b"Inf"))):
        return None
    try:
        obj = json.loads(value.decode("utf-8"), object_pairs_hook=_pairs, parse_constant=_refuse,
                         parse_float=_finite)
        _encodable(obj)  # a lone surrogate (\\ud83d): Arrow refuses the value
    except (ValueError, UnicodeError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    out = []
    for name, spark_type in fields:
        got = obj.get(name)
        if isinstance(got, _Twice):
            return None
        if got is not None and not _fits(got, TYPES[spark_type]):
            return None
        out.append(got)
    return out


class _Twice:
    """A declared key given twice in one object: Arrow refuses the value."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        out[key] = _Twice() if key in out else value
    return out


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(text: str) -> float:
    number = float(text)
    if not np.isfinite(number):
        raise ValueError(f"{text} is too large for a double")
    return number


def _encodable(value: Any) -> None:
    if isinstance(value, str):
        value.encode("utf-8")
    elif isinstance(value, dict):
        for key, item in value.items():
            _encodable(key)
            _encodable(item)
    elif isinstance(value, list):
        for item in value:
            _encodable(item)


def _fits(value: Any, arrow_type: pa.DataType) -> bool:
    if arrow_type == pa.string():
        return isinstance(value, str)
    if arrow_type == pa.bool_():
        return isinstance(value, bool)
    low, high = _RANGES[arrow_type]
    return type(value) is int and low <= value <= high
