"""What reading and writing Protobuf values costs SQE's source and Kafka state, against
protobuf's own loops in the same process.

    PYTHONPATH=. .venv/bin/python bench/protobuf_read.py [--records 100000] [--repeat 3] [--json]

The values are messages of ten fields (three strings, three 64-bit and one 32-bit integer, a
double, a bool, a ``google.protobuf.Timestamp``; two of them proto3 ``optional``), about 75
bytes each, in the Confluent wire format (message indexes ``[0]``), in batches of 5,000 as a
source task reads them, in this process (one thread), ``--repeat`` rounds (the first left out):

* ``FromString + MessageToDict loop`` (the baseline): each value's message parsed by the upb
  class and made a dict by ``json_format.MessageToDict``: a plain Python consumer;
* ``FromString loop``: the parsing alone, the floor of any reader that makes messages;
* ``decode``: :class:`sqe.wire.protobuf.ProtobufDecoder` as a task runs it: headers and
  indexes read from the buffers, messages parsed, one Arrow struct array made a field at a time;
* ``message loop`` and ``encode``: the Kafka state's side, rows of an Arrow struct array to
  framed messages (:class:`sqe.wire.protobuf_write.ProtobufEncoder`) against making each
  message from a dict and ``SerializeToString``.

Each row: records per second and its time over its baseline's (the MessageToDict loop for
reading, the message loop for writing).
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta, timezone

from bench.harness.report import columns, finish, parser, per_item

BATCH = 5000


def main(argv: list[str] | None = None) -> int:
    import pyarrow as pa
    from google.protobuf import json_format, message_factory
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import (
        BooleanType,
        DoubleType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from sqe.wire.arrays import binaries
    from sqe.wire.framing import frame
    from sqe.wire.protobuf import ProtobufDecoder
    from sqe.wire.protobuf_schema import descriptor
    from sqe.wire.protobuf_write import ProtobufEncoder, protobuf_schema

    ap = parser(__doc__)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    n = args.records
    struct = StructType([
        StructField("event_id", StringType(), False), StructField("user", StringType(), False),
        StructField("region", StringType(), True), StructField("amount", LongType(), False),
        StructField("amount_cents", LongType(), False), StructField("seq", LongType(), True),
        StructField("items", IntegerType(), False), StructField("score", DoubleType(), False),
        StructField("big_spender", BooleanType(), False), StructField("at", TimestampType())])
    schema = protobuf_schema(struct, "sqe.Enriched")
    cls = message_factory.GetMessageClass(descriptor(schema))
    start = datetime(2026, 1, 1, tzinfo=timezone.utc)
    rows = [{"event_id": f"e-{i:08d}", "user": f"u{i % 977}", "region": ["eu", "us", None][i % 3],
             "amount": i % 500, "amount_cents": (i % 500) * 100 + i % 100, "seq": i,
             "items": i % 7, "score": i / 7, "big_spender": i % 500 > 400,
             "at": start + timedelta(microseconds=i * 1_000_003)} for i in range(n)]

    def message(row: dict) -> object:
        micros = (row["at"] - datetime(1970, 1, 1, tzinfo=timezone.utc)) // timedelta(microseconds=1)
        return cls(**{**row, "at": {"seconds": micros // 1_000_000,
                                    "nanos": micros % 1_000_000 * 1000}})

    framed = [frame(1, b"\x00" + message(r).SerializeToString()) for r in rows]
    cut = range(0, n, BATCH)
    batches = [binaries(framed[i:i + BATCH]) for i in cut]
    payloads = [[v[6:] for v in framed[i:i + BATCH]] for i in cut]
    decoder = ProtobufDecoder(schema, {1: ("PROTOBUF", schema.file)}.get)
    arrow = to_arrow_type(struct, timezone="UTC")
    struct_batches = [pa.array(rows[i:i + BATCH], type=arrow) for i in cut]
    encoder = ProtobufEncoder(schema, 1, arrow)
    row_batches = [rows[i:i + BATCH] for i in cut]
    parse, to_dict = cls.FromString, json_format.MessageToDict

    def to_dicts() -> None:
        for batch in payloads:
            _ = [to_dict(parse(p)) for p in batch]

    def parse_only() -> None:
        for batch in payloads:
            _ = [parse(p) for p in batch]

    def decode() -> None:
        for batch in batches:
            assert not decoder.decode(batch).bad

    def write_loop() -> None:
        for batch in row_batches:
            _ = [message(r).SerializeToString() for r in batch]

    def encode() -> None:
        for batch in struct_batches:
            encoder.encode(batch)

    ways = {"FromString + MessageToDict loop": to_dicts, "FromString loop": parse_only,
            "decode": decode, "message loop": write_loop, "encode": encode}
    per = {name: per_item(work, args.repeat, n) for name, work in ways.items()}
    base = dict.fromkeys(list(ways)[:3], "FromString + MessageToDict loop") | dict.fromkeys(
        list(ways)[3:], "message loop")
    out = [{"way": name, "records_per_s": round(1 / t), "us_per_record": round(t * 1e6, 2),
            "x_baseline": round(t / per[base[name]], 2)} for name, t in per.items()]
    size = sum(map(len, framed)) / n
    lines = [f"{n:,} records of {size:.0f} bytes in batches of {BATCH:,}, median of "
             f"{args.repeat} rounds, one thread"]
    lines += columns([("way", "records/s", "us/record", "x its baseline")] + [
        (str(r["way"]), f"{r['records_per_s']:,}", f"{r['us_per_record']:.2f}",
         f"{r['x_baseline']:.2f}") for r in out])
    return finish(lines, [], {"records": n, "ways": out} if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
