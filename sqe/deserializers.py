"""Deserializers: how a stream's record values become the fields queries refer to.

* ``identity`` (SQE's default): no parsing; queries see the source columns
  ``_key``, ``_value`` (bytes), ``_topic``, ``_partition``, ``_offset``,
  ``_timestamp`` and the decoded key ``_pid``, ``_source_partition``,
  ``_source_offset``.
* ``json``: the value is a JSON object; each top-level key becomes a field
  with the type its values have in this micro-batch (SQE's JSON deserializer
  was dynamically typed; Spark needs a type, so it is inferred per batch with
  ``schema_of_variant_agg``: numbers as BIGINT or DECIMAL, strings, booleans;
  nested objects and arrays stay VARIANT).  A key absent from the whole batch
  but named by a query is a NULL string field.  A value that is not JSON
  passes through with every JSON field NULL and is counted, never dropped.

Both keep the source columns, so ``_key``, ``_offset`` etc. remain usable.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

__all__ = ["Deserialized", "deserialize", "top_level_fields"]

_JSON = "_sqe_json"


@dataclass(frozen=True)
class Deserialized:
    """A batch with its fields as columns, and how many values could not be parsed."""

    frame: DataFrame
    unparseable_values: int


def top_level_fields(object_type: str) -> list[tuple[str, str]]:
    """``[(name, type)]`` of an ``OBJECT<a: BIGINT, b: OBJECT<...>>`` type string."""
    text = object_type.strip()
    if not (text.upper().startswith("OBJECT<") and text.endswith(">")):
        return []
    body, fields, depth, start = text[7:-1], [], 0, 0
    parts = []
    for i, ch in enumerate(body):
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    for part in parts:
        if not part.strip():
            continue
        name, _, dtype = part.strip().partition(":")
        name = name.strip()
        if len(name) > 1 and name[0] == name[-1] == "`":
            name = name[1:-1].replace("``", "`")
        fields.append((name, dtype.strip()))
    return fields


def _spark_type(variant_type: str) -> str | None:
    """The type to extract a field as, or ``None`` to keep it as VARIANT."""
    upper = variant_type.upper()
    if upper.startswith(("OBJECT", "ARRAY", "VARIANT")):
        return None
    return "string" if upper == "VOID" else variant_type


def deserialize(frame: DataFrame, kind: str | None, wanted: Iterable[str] = ()) -> Deserialized:
    """The batch ``frame`` with the fields of deserializer ``kind`` (None means identity)."""
    if kind in (None, "identity"):
        return Deserialized(frame, 0)
    if kind != "json":
        raise ValueError(f"unknown deserializer {kind!r}")
    parsed = frame.withColumn(_JSON, F.try_parse_json(F.col("_value").cast("string")))
    row = parsed.agg(
        F.schema_of_variant_agg(_JSON).alias("schema"),
        F.count_if(F.col("_value").isNotNull() & F.col(_JSON).isNull()).alias("bad"),
    ).first()
    fields = top_level_fields(row["schema"] or "") if row is not None else []
    taken = set(parsed.columns)
    columns = []
    for name, vtype in fields:
        if name in taken:  # a JSON key named like a source column: the source column wins
            continue
        path = "$['" + name + "']"
        target = _spark_type(vtype)
        value = (F.try_variant_get(_JSON, path, target) if target
                 else F.try_variant_get(_JSON, path, "variant"))
        columns.append(value.alias(name))
        taken.add(name)
    columns += [F.lit(None).cast("string").alias(n) for n in dict.fromkeys(wanted) if n not in taken]
    out = parsed.select(*[parsed[c] for c in frame.columns], *columns)
    return Deserialized(out, int(row["bad"]) if row is not None else 0)
