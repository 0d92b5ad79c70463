"""What reading a JSON stream's declared fields costs: Spark's ways in its JVM, and the source's.

    PYTHONPATH=. .venv/bin/python bench/json_read.py [--records 200000] [--repeat 5]
        [--java-options=-XX:TieredStopAtLevel=1] [--json]

The values are the chain's enriched records (``topologies/enrich.yaml``'s output: six fields,
about 130 bytes); the fields read are load.yaml's declared ones (``event_id`` and ``region``
strings, ``amount_cents`` a bigint).  In one local session (``local[2]``, the values cached in
two partitions), each way's Spark job writes to the ``noop`` sink, ``--repeat`` times,
interleaved (the first round left out: the JIT's warm-up):

* ``value only``: the value cast to a string and tested for a leading brace (what every way
  pays anyway);
* ``variant`` (SQE's reading in Spark): ``try_parse_json`` and a ``try_variant_get`` per field;
* ``from_json`` with the three fields' schema; ``get_json_object`` per field.

Then the source's reading (:func:`sqe.source.json_fields.read_fields`) of the same values, in
batches of 5,000 as a task reads them, in this process (one thread).  Spark's two tasks run on
both cores, so its CPU per record is about twice its time per record; the table gives both, and
each way's CPU per record over the variant reading's.  ``--java-options`` are the driver's
(the client compiler of ``conf/low-latency.yaml``: ``-XX:TieredStopAtLevel=1``).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time
from typing import Any

from bench.harness.report import columns, finish, parser

BATCH = 5000
FIELDS = (("event_id", "string"), ("region", "string"), ("amount_cents", "bigint"))


def values(n: int) -> list[bytes]:
    """``n`` enriched records as enrich.yaml writes them."""
    rng = random.Random(7)
    out = []
    for i in range(n):
        amount = rng.randrange(100)
        out.append(json.dumps({
            "event_id": f"ev-{i:08d}", "user": f"user-{rng.randrange(1000)}",
            "region": rng.choice(["EU", "US", "APAC"]), "amount": amount,
            "amount_cents": amount * 100, "big_spender": amount > 50}).encode())
    return out


def spark_ways(data: list[bytes], repeat: int, java: str) -> dict[str, float]:
    """Seconds per record (wall) of each Spark way, the median of ``repeat`` rounds."""
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.driver.defaultJavaOptions", java).getOrCreate())
    df = spark.createDataFrame([(v,) for v in data], "_value binary").repartition(2).cache()
    df.count()
    text = F.col("_value").cast("string")
    brace = text.rlike(r"^\s*\{")

    def variant() -> Any:
        v = F.try_parse_json(text)
        return df.select(*[F.try_variant_get(v, f"$['{n}']", t) for n, t in FIELDS],
                         v.isNotNull() & brace)

    def from_json() -> Any:
        s = F.from_json(text, ", ".join(f"{n} {t}" for n, t in FIELDS))
        return df.select(*[s[n] for n, _ in FIELDS], brace)

    def get_json_object() -> Any:
        return df.select(*[F.get_json_object(text, f"$.{n}").cast(t) for n, t in FIELDS], brace)

    ways = {"value only": lambda: df.select(text, brace), "variant": variant,
            "from_json": from_json, "get_json_object": get_json_object}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for round_ in range(repeat + 1):
        for name, way in ways.items():
            start = time.perf_counter()
            way().write.format("noop").mode("overwrite").save()
            if round_:
                times[name].append(time.perf_counter() - start)
    spark.stop()
    return {name: statistics.median(t) / len(data) for name, t in times.items()}


def source_way(data: list[bytes], repeat: int) -> float:
    """Seconds per record of the source's reading, in batches of :data:`BATCH`."""
    from sqe.source.json_fields import read_fields
    from sqe.wire.arrays import binaries

    batches = [binaries(data[i:i + BATCH]) for i in range(0, len(data), BATCH)]
    times = []
    for _ in range(repeat + 1):
        start = time.perf_counter()
        for batch in batches:
            ok, _ = read_fields(batch, FIELDS)
            assert ok.null_count == 0 and all(ok.to_pylist())
        times.append(time.perf_counter() - start)
    return statistics.median(times[1:]) / len(data)


def main(argv: list[str] | None = None) -> int:
    ap = parser(__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--java-options", default="")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    data = values(args.records)
    per = {name: (t, 2 * t) for name, t in spark_ways(data, args.repeat, args.java_options).items()}
    own = source_way(data, args.repeat)
    per["the source (Arrow, one thread)"] = (own, own)
    base = per["variant"][1]
    rows = [{"way": name, "us_per_record": round(t * 1e6, 2), "cpu_us_per_record": round(c * 1e6, 2),
             "x_variant": round(c / base, 2)} for name, (t, c) in per.items()]
    lines = [f"{args.records:,} values, median of {args.repeat} rounds; "
             f"driver Java options: {args.java_options or '(default)'}"]
    lines += columns([("way", "us/record", "CPU us/record", "x variant")] + [
        (str(r["way"]), f"{r['us_per_record']:.2f}", f"{r['cpu_us_per_record']:.2f}",
         f"{r['x_variant']:.2f}") for r in rows])
    return finish(lines, [], {"records": args.records, "java_options": args.java_options,
                              "ways": rows} if args.json else None)


if __name__ == "__main__":
    sys.exit(main())
