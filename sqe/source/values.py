"""A stream's record values decoded in its source's tasks (``deserializer: avro`` or
``protobuf``).

The source reads each value against the stream's reader schema
(:class:`~sqe.config.record_schemas.ReaderSchema`) where it reads the records, so every way a
hop runs (``sqe run``, ``sqe.Hop``, the ``sqe-hop`` sink, the pipelines) gets the same columns:
the record as one struct column, :data:`VALUE`, which the deserializer spreads into the
stream's fields (:func:`sqe.source.deserializers.deserialize`).  A value that does not decode
(a wrong magic byte, an unknown schema id, bytes that are not the schema's) never becomes a
row: the source applies ``badRecordPolicy`` to it, failing the batch with its position and
reason or sending it to the dead-letter topic (:mod:`sqe.source.kafka.rows`).  A NULL value (a
tombstone) is a row whose struct is NULL.  Each worker keeps one decoder per reader schema, so
a writer schema is asked of the registry once per process (:func:`decoder`).
"""

from __future__ import annotations

from functools import cache

import pyarrow as pa
from pyspark.sql.types import StructField, StructType

from sqe.clients.schema_registry import registry
from sqe.config.record_schemas import ReaderSchema
from sqe.wire.avro import AvroDecoder
from sqe.wire.protobuf import ProtobufDecoder

__all__ = ["VALUE", "decoder", "schema_with_value", "with_value"]

#: The source's column of a record's decoded value.
VALUE = "_sqe_value"

@cache
def decoder(schema: ReaderSchema) -> AvroDecoder | ProtobufDecoder:
    """This process's decoder of values read as ``schema``."""
    writers = registry(dict(schema.registry), schema.form).by_id if schema.registry else None
    if schema.kind == "protobuf":
        return ProtobufDecoder(schema.proto, writers)
    return AvroDecoder(schema.text, writers)


def schema_with_value(schema: StructType, value: ReaderSchema | None) -> StructType:
    """The source's ``schema`` with the :data:`VALUE` column of reader schema ``value``."""
    if value is None:
        return schema
    return StructType([*schema.fields, StructField(VALUE, value.struct)])


def with_value(batch: pa.RecordBatch, value: ReaderSchema | None,
               decoded: pa.Array | None = None) -> pa.RecordBatch:
    """``batch`` with its :data:`VALUE` column: ``decoded``, or NULLs (a tally row)."""
    if value is None:
        return batch
    if decoded is None:
        decoded = pa.nulls(batch.num_rows, decoder(value).arrow)
    return batch.append_column(VALUE, decoded)
