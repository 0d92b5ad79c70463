"""What reading and writing Avro values costs SQE's source and Kafka state, against fastavro's
own loop in the same process.

    PYTHONPATH=. .venv/bin/python bench/avro_read.py [--records 200000] [--repeat 5] [--json]

The values are the chain's enriched records (``bench/json_read.py``'s: six fields, about 130
bytes as JSON, 40 as Avro) in the Confluent wire format, in batches of 5,000 as a source task
reads them, in this process (one thread), ``--repeat`` rounds interleaved (the first left out):

* ``fastavro loop`` (the baseline): ``schemaless_reader`` over each value's payload, the dicts
  kept in a list: what any Python consumer of Avro pays at least;
* ``decode``: :class:`sqe.wire.avro.AvroDecoder` as a task runs it: the headers read from the
  buffers, values grouped by schema id, decoded, and made one Arrow struct array (the writer
  schemas come from a dict here, as from the registry client's cache after the first batch);
* ``JSON in the source``: :func:`sqe.source.json_fields.read_fields` of the same records as
  JSON, for the three fields load.yaml declares (the JSON stream's reading today);
* ``fastavro write loop`` and ``encode``: the Kafka state's side, rows of an Arrow struct array
  to framed records (:class:`sqe.wire.avro_write.AvroEncoder`) against ``schemaless_writer``
  over the same rows as dicts.

Each row: records per second and its time over its baseline's (the fastavro loop for reading,
the fastavro write loop for writing).
"""

from __future__ import annotations

import io
import json
import sys

from bench.harness.report import columns, finish, parser, per_item
from bench.json_read import FIELDS, values

BATCH = 5000
SCHEMA = json.dumps({"type": "record", "name": "Enriched", "namespace": "sqe", "fields": [
    {"name": "event_id", "type": "string"}, {"name": "user", "type": "string"},
    {"name": "region", "type": "string"}, {"name": "amount", "type": "long"},
    {"name": "amount_cents", "type": "long"}, {"name": "big_spender", "type": "boolean"}]})


def main(argv: list[str] | None = None) -> int:
    import fastavro
    import pyarrow as pa

    from sqe.source.json_fields import read_fields
    from sqe.wire.arrays import binaries
    from sqe.wire.avro import AvroDecoder
    from sqe.wire.avro_write import AvroEncoder
    from sqe.wire.framing import frame

    ap = parser(__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    n = args.records
    parsed = fastavro.parse_schema(json.loads(SCHEMA))
    rows = [json.loads(v) for v in values(n)]

    def avro(row: dict) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, row)
        return frame(1, out.getvalue())

    framed = [avro(r) for r in rows]
    as_json = values(n)
    cut = range(0, n, BATCH)
    avro_batches = [binaries(framed[i:i + BATCH]) for i in cut]
    json_batches = [binaries(as_json[i:i + BATCH]) for i in cut]
    payloads = [[v[5:] for v in framed[i:i + BATCH]] for i in cut]
    decoder = AvroDecoder(SCHEMA, {1: ("AVRO", SCHEMA)}.get)
    struct_batches = [pa.array(rows[i:i + BATCH], type=decoder.arrow) for i in cut]
    encoder = AvroEncoder(SCHEMA, 1, decoder.arrow)
    row_batches = [rows[i:i + BATCH] for i in cut]

    def loop() -> None:
        for batch in payloads:
            _ = [fastavro.schemaless_reader(io.BytesIO(p), parsed) for p in batch]

    def decode() -> None:
        for batch in avro_batches:
            assert not decoder.decode(batch).bad

    def from_json() -> None:
        for batch in json_batches:
            read_fields(batch, FIELDS)

    def write_loop() -> None:
        for batch in row_batches:
            for row in batch:
                fastavro.schemaless_writer(io.BytesIO(), parsed, row)

    def encode() -> None:
        for batch in struct_batches:
            encoder.encode(batch)

    ways = {"fastavro loop": loop, "decode": decode, "JSON in the source": from_json,
            "fastavro write loop": write_loop, "encode": encode}
    per = {name: per_item(work, args.repeat, n) for name, work in ways.items()}
    base = {"fastavro loop": "fastavro loop", "decode": "fastavro loop",
            "JSON in the source": "fastavro loop", "fastavro write loop": "fastavro write loop",
            "encode": "fastavro write loop"}
    out = [{"way": name, "records_per_s": round(1 / t), "us_per_record": round(t * 1e6, 2),
            "x_baseline": round(t / per[base[name]], 2)} for name, t in per.items()]
    lines = [f"{n:,} records in batches of {BATCH:,}, median of {args.repeat} rounds, one thread"]
    lines += columns([("way", "records/s", "us/record", "x its baseline")] + [
        (str(r["way"]), f"{r['records_per_s']:,}", f"{r['us_per_record']:.2f}",
         f"{r['x_baseline']:.2f}") for r in out])
    return finish(lines, [], {"records": n, "ways": out} if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
