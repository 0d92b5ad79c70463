"""The JSON field types a stream without declared types learned from its batches, kept in its
checkpoint, so that its batches are planned once like a stream with declared types.

A JSON stream whose ``jw.sqe.spout.fields`` gives no types (every original SQE file) has its
fields typed by what a batch holds: the per-batch way infers the schema of its values
(``schema_of_variant_agg``) and reads each field as that type, which costs a Spark job of its
own and a plan built through py4j each batch.  Most streams keep their types from one batch to
the next, so what a batch inferred is kept (:func:`learn`) for the fields the queries read:

* a field of a batch whose values are all strings, all integers (BIGINT) or all booleans is
  learned as that type; a field no value of the batch holds keeps what earlier batches
  learned, and is a string (NULL, as the per-batch way makes it) while none did;
* a batch that types a field otherwise (a decimal, a double, an object, a mix), that holds a
  key differing from a field only in case, or two such keys, teaches nothing.

Learned types are written to ``<stream checkpoint>/sqe-json-types`` (:func:`save_learned`),
and the runner then plans the stream once with them (restarting its query; the next run starts
so from the file).  A batch of that plan whose record does not read exactly as the learned
types (a field of another type, or a value the source cannot read) writes nothing in its one
pass: the per-batch way takes it, infers again, and what it learns replaces the file.  So a
record's fields always have the types the per-batch way would give them in some batch of the
stream's, and the same batch read again reads the same.

Example::

    >>> learn([("id", "STRING"), ("n", "BIGINT"), ("extra", "DOUBLE")], ["id", "n"], None)
    {'id': 'string', 'n': 'bigint'}
    >>> learn([("id", "STRING")], ["id", "n"], {"id": "string", "n": "bigint"})
    {'id': 'string', 'n': 'bigint'}
    >>> learn([("n", "DECIMAL(3,1)")], ["n"], None) is None
    True
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from sqe.engine.spark.checkpoint import StreamCheckpoint
from sqe.wire.columns import CARRIED, SCHEMA

__all__ = ["LEARNABLE", "LEARNED_FILE", "json_wanted", "learn", "load_learned", "save_learned"]

#: The file of a stream's checkpoint that holds its learned types.
LEARNED_FILE = "sqe-json-types"
#: The inferred types a field is learned as (the source reads them in its Python worker).
LEARNABLE = frozenset({"string", "bigint", "boolean"})
#: What ``schema_of_variant_agg`` calls a field no value of the batch gives a value.
_NO_VALUE = "VOID"


#: The columns a record has beside its JSON fields (a field named so is the column).
_COLUMNS = frozenset(name.lower() for name in (*SCHEMA.names, *CARRIED))


def json_wanted(wanted: Sequence[str]) -> list[str]:
    """The fields of ``wanted`` (the names the queries read) that are JSON fields: not the
    record's own columns (``_offset``, ``_partition``, ...), which a JSON key does not hide."""
    return [name for name in dict.fromkeys(wanted)
            if name.lower() not in _COLUMNS and not name.lower().startswith("_sqe_")]


def learn(inferred: Sequence[tuple[str, str]], wanted: Sequence[str],
          before: Mapping[str, str] | None) -> dict[str, str] | None:
    """The types of the ``wanted`` fields after a batch whose values inferred ``inferred``
    (``[(key, type)]`` of ``schema_of_variant_agg``), given what earlier batches learned
    (``before``); None when the batch teaches nothing (see the module docstring)."""
    by_lower: dict[str, list[tuple[str, str]]] = {}
    for name, dtype in inferred:
        by_lower.setdefault(name.lower(), []).append((name, dtype))
    learned: dict[str, str] = {}
    for field in dict.fromkeys(wanted):
        found = by_lower.get(field.lower(), [])
        if len(found) > 1 or (found and found[0][0] != field):
            return None  # Spark resolves the field to another key, or cannot choose one
        dtype = found[0][1].strip().upper() if found else _NO_VALUE
        if dtype == _NO_VALUE:
            learned[field] = (before or {}).get(field, "string")
        elif dtype.lower() in LEARNABLE:
            learned[field] = dtype.lower()
        else:
            return None
    if len({f.lower() for f in learned}) < len(learned):
        return None  # fields differing only in case: Spark's columns cannot tell them apart
    return learned


def load_learned(checkpoint: StreamCheckpoint, wanted: Sequence[str]) -> dict[str, str] | None:
    """The types the stream's checkpoint learned for the ``wanted`` fields, or None (none
    learned, or not for all of them: the file of an older topology)."""
    text = checkpoint.files.read(LEARNED_FILE)
    if not text:
        return None
    try:
        types = json.loads(text)
    except ValueError:
        return None  # a file cut short: the next batch learns them again
    if not isinstance(types, dict):
        return None
    chosen = {f: types.get(f) for f in wanted}
    if not all(isinstance(t, str) and t in LEARNABLE for t in chosen.values()):
        return None
    return {f: str(t) for f, t in chosen.items()}


def save_learned(checkpoint: StreamCheckpoint, types: Mapping[str, str]) -> None:
    """Record ``types`` as what the stream learned."""
    checkpoint.files.write(LEARNED_FILE, json.dumps(dict(types), sort_keys=True) + "\n")
