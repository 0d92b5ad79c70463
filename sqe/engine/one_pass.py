"""A stream's micro-batch as one pass: one Spark job, planned once for the run.

The per-batch way (:mod:`sqe.engine.per_batch`) builds every batch's DataFrames again on
the driver (the deserializer's, each query's, each state's) and runs a Spark job to read and
count, then one to write.  For a stream whose plan does not depend on its data, this module
plans all of it once, as one streaming DataFrame that Spark re-plans on the JVM side each
batch, so a batch is one Spark job and no DataFrame is built through py4j:

* the source's rows (replays dropped in its ``read()``) are stamped with the StreamMetadata
  they carry and deserialized with the stream's declared types;
* each record becomes one row for itself (``_q`` = -1: the source columns the high-water
  marks and the counters need, prefixed :data:`RAW`) and one row per query (``_q`` = the
  query's index: the query's fields, in one namespace shared by the queries, computed in the
  rows its ``where`` keeps);
* each state adds its columns (:meth:`~sqe.state.sink.Sink.columns`) and gives, as Spark
  built-ins, the columns its executor task writes (:meth:`~sqe.state.sink.Sink.pass_columns`),
  as one struct column per state.

The executor side is :mod:`sqe.engine.one_pass_task`; the driver's batch,
:mod:`sqe.engine.one_pass_batch`.  :func:`plan_one_pass` says in one sentence why a stream
cannot be planned so: its JSON fields' types are not all declared (they are inferred per
batch), it reads with Spark's own connector or is FIXED, a query aggregates, expands keys or
reads an intermediate stream, two queries make a field of one name with two types, or a state
is not written in one pass (Postgres, an aggregating Redis state, the console).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import reduce

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType

from sqe.engine.pipeline import QueryStep, StreamPipeline
from sqe.errors import TopologyError
from sqe.lang.compiler import aggregates_of, compile_projection
from sqe.ledger.hwm import HwmStore
from sqe.source.deserializers import Deserialized, Summary, deserialize
from sqe.wire.columns import CARRIED, TALLY, carried_offset

__all__ = ["BAD", "MARKED", "OnePassPlan", "QUERY", "RAW", "plan_one_pass", "state_column",
           "stream_records", "why_not_one_pass"]

#: The column that tells a record's own row (-1) from a query's row (the query's index).
QUERY = "_q"
#: The prefix of a record row's source columns (NULL in a query's row).
RAW = "_sqe_raw"
#: The source columns a record row carries: what a task counts and finds the marks by.
MARKED = ("_offset", "_pid", "_source_partition", "_source_offset", *TALLY)
#: True in a record row whose value the deserializer cannot read (not a JSON object).
BAD = "_sqe_bad"
#: True in a record's row, and in a query's row when the query's ``where`` keeps it.
KEPT = "_sqe_kept"
#: The prefix of a state's column that is true in a row the state cannot hold.
REFUSED = "_sqe_refused"
_WARN = "_sqe_warn"


def state_column(index: int) -> str:
    """The struct column that holds the task columns of the state of query ``index``."""
    return f"_sqe_state{index}"


def _raw(name: str) -> str:
    return f"{RAW}{name}"


@dataclass(frozen=True)
class OnePassPlan:
    """A stream planned once: the streaming DataFrame of its records' rows (each record once
    for itself, ``_q`` = -1, and once per query) with what each state's task writes."""

    frame: DataFrame
    #: (query index, its step) of every query that writes a state
    states: tuple[tuple[int, QueryStep], ...]
    #: the warning counter of each warning column, in order (``_sqe_warn<k>``)
    warnings: tuple[str, ...]


def why_not_one_pass(p: StreamPipeline) -> str | None:
    """Why stream ``p`` cannot be planned once (None: it can, as far as its topology tells;
    :func:`plan_one_pass` may still find a reason in the types)."""
    name = p.stream.streamName
    if p.source is None:
        return (f"stream {name} is read by Spark's own Kafka connector" if p.native
                else f"stream {name} is FIXED")
    kind, declared = p.stream.deserializer, p.settings.declared_fields
    if kind == "json" and (declared is None or None in declared.values()):
        return (f"stream {name} infers its JSON fields' types in every batch; declare them "
                "with types in jw.sqe.spout.fields to plan it once")
    for step in p.steps:
        if step.query.from_.objectName != name:
            return f"{step.where} reads stream {step.query.from_.objectName}, not {name}"
        if step.sink is None:
            return f"{step.where} feeds an intermediate stream"
        if aggregates_of(step.query):
            return f"{step.where} aggregates"
    return None


def stream_records(p: StreamPipeline, source: DataFrame) -> Deserialized:
    """Stream ``p``'s ``source`` rows, each stamped with the StreamMetadata it carries to the
    next hop (:data:`~sqe.wire.columns.CARRIED`) and deserialized by the stream's declared
    fields, planned once (no batch is looked at)."""
    stamped = source.select(
        "*", F.lit(p.pid).cast("long").alias(CARRIED[0]),
        F.col("_partition").alias(CARRIED[1]), carried_offset().alias(CARRIED[2]))
    return deserialize(stamped, p.stream.deserializer, p.wanted_fields,
                       p.settings.declared_fields, summary=Summary(None, 0))


def plan_one_pass(p: StreamPipeline, source: DataFrame, hwm: HwmStore | None
                  ) -> OnePassPlan | str:
    """Stream ``p`` over its ``source`` frame as one streaming DataFrame, or why it cannot be
    (one sentence).  ``hwm``: its HWM store (a Redis state in its database stages its rows)."""
    why = why_not_one_pass(p)
    if why is not None:
        return why
    des = stream_records(p, source)
    base = des.frame
    data = F.col("_offset").isNotNull()
    if not p.steps:
        return f"stream {p.stream.streamName} has no query"
    try:
        projections = [compile_projection(step.query, base, step.where) for step in p.steps]
        shared: dict[str, tuple[str, DataType]] = {}  # lower name -> (name, type)
        for step, proj in zip(p.steps, projections, strict=True):
            if proj.generators:
                return f"{step.where} expands keys or values (one row makes several)"
            for f in base.select(*proj.columns).schema.fields:
                seen = shared.setdefault(f.name.lower(), (f.name, f.dataType))
                if seen[1] != f.dataType:
                    return (f"two queries of stream {p.stream.streamName} make field {f.name}, "
                            f"as {seen[1].simpleString()} and {f.dataType.simpleString()}")
        warnings: list[tuple[str, Column, int]] = []  # (counter, condition, -1 or query)
        for i, proj in enumerate(projections):
            warnings += [(n, c, -1) for n, c in proj.where_warnings]
            warnings += [(n, c, i) for n, c in proj.select_warnings]
        q = F.col(QUERY)

        def by_query(parts: dict[int, Column]) -> Column:  # CASE _q WHEN i THEN ... END
            col = None
            for i, c in parts.items():
                col = F.when(q == i, c) if col is None else col.when(q == i, c)
            assert col is not None
            return col

        fields: dict[str, dict[int, Column]] = {key: {} for key in shared}
        for i, proj in enumerate(projections):
            for f, col in zip(base.select(*proj.columns).schema.fields, proj.columns,
                              strict=True):
                fields[f.name.lower()][i] = col
        kept_by = {i: data if proj.condition is None
                   else data & F.coalesce(proj.condition, F.lit(False))
                   for i, proj in enumerate(projections)}
        kept = (q == -1) | by_query(kept_by)
        # A record's own row first, then one per query; a query's columns are computed in
        # the rows its where keeps only.
        frame = base.select("*", F.explode(F.sequence(F.lit(-1), F.lit(len(p.steps) - 1)))
                            .alias(QUERY))
        bad = (F.coalesce(des.undecodable, F.lit(False)) if des.undecodable is not None
               else F.lit(False))
        rows = frame.select(
            QUERY, kept.alias(KEPT),
            *[F.when(q == -1, F.col(n)).alias(_raw(n)) for n in MARKED],
            F.when(q == -1, bad).otherwise(False).alias(BAD),
            *[F.when(((q == -1) & data) if owner < 0 else ((q == owner) & kept_by[owner]),
                     F.coalesce(c, F.lit(False))).otherwise(False).alias(f"{_WARN}{k}")
              for k, (_, c, owner) in enumerate(warnings)],
            *[F.when(q >= 0, F.col(c)).alias(c) for c in CARRIED],
            *[by_query({i: F.when(kept_by[i], col) for i, col in fields[key].items()})
              .alias(name) for key, (name, _) in shared.items()])
        extra = _state_columns(rows, p.steps)
        if extra:
            rows = rows.select("*", *extra)
        states, structs = [], []
        for i, step in enumerate(p.steps):
            assert step.sink is not None
            cols = step.sink.pass_columns(rows, hwm)
            if cols is None:
                return f"{step.where}: {step.sink.describe()} is not written in one pass"
            states.append((i, step))
            mine = F.col(KEPT) & (q == i)
            structs.append(F.when(mine, F.struct(*cols)).alias(state_column(i)))
            rejects = [c for c, _ in step.sink.rejects(rows)]
            if rejects:  # a row the state cannot hold: the per-batch way finds and judges it
                structs.append(F.when(mine, F.coalesce(reduce(lambda a, b: a | b, rejects),
                                                       F.lit(False))).otherwise(False)
                               .alias(f"{REFUSED}{i}"))
        frame = rows.select(QUERY, BAD, *[_raw(n) for n in MARKED],
                            *[f"{_WARN}{k}" for k in range(len(warnings))], *structs)
    except AnalysisException as exc:
        raise TopologyError(f"stream {p.stream.streamName}: Spark cannot plan its queries as "
                            f"one pass: {exc.getMessage()}") from None
    return OnePassPlan(frame, tuple(states), tuple(n for n, _, _ in warnings))


def _state_columns(rows: DataFrame, steps: tuple[QueryStep, ...]) -> list[Column]:
    """The states' extra columns over ``rows``, each computed in its query's rows only;
    states that add a column of one name share it."""
    by_name: dict[str, list[tuple[int, Column]]] = {}
    for i, step in enumerate(steps):
        for name, col in step.state_columns(rows).items():
            by_name.setdefault(name, []).append((i, col))
    extra = []
    for name, parts in by_name.items():
        col = F.when(F.col(QUERY) == parts[0][0], parts[0][1])
        for i, c in parts[1:]:
            col = col.when(F.col(QUERY) == i, c)
        extra.append(col.alias(name))
    return extra
