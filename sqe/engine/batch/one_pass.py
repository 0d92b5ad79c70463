"""A stream's micro-batch as one pass: one Spark job, planned once for the run.

The per-batch way (:mod:`sqe.engine.batch.per_batch`) builds every batch's DataFrames again on
the driver (the deserializer's, each query's, each state's) and runs a Spark job to read and
count, then one to write.  For a stream whose plan does not depend on its data, this module
plans all of it once, as one streaming DataFrame that Spark re-plans on the JVM side each
batch, so a batch is one Spark job and no DataFrame is built through py4j:

* the source's rows (replays dropped in its ``read()``) are stamped with the StreamMetadata
  they carry and deserialized with the stream's declared types;
* each record stays one row: its source columns the high-water marks and the counters need
  (prefixed :data:`RAW`), whether its value could not be read, its warnings, and per query
  whether the query's ``where`` keeps it, and its fields, under names of SQE's own;
* each state, in turn, sees its query's fields by their names, adds its columns
  (:meth:`~state.sink.Sink.columns`) and gives, as Spark built-ins, the columns its executor
  task writes (:meth:`~state.sink.Sink.pass_columns`), as one struct column per state,
  NULL in a row its query does not keep.  Spark collapses the steps into one projection.

A record is one row however many queries read it: the rows Spark hands to Python are the
records, not the records times one plus the queries.  The row is one struct column,
:data:`ROW`.  On classic Spark the executor side is planned too: the stream's query runs the
``mapInArrow`` of :func:`~sqe.engine.batch.one_pass_task.planned_task` over it, and a batch only
gives its states' contexts (a stage key) to its job as a local property; over Spark Connect
each batch makes its ``mapInArrow`` (one column's py4j calls, not one per column).

The executor side is :mod:`sqe.engine.batch.one_pass_task`; the driver's batch,
:mod:`sqe.engine.batch.one_pass_batch`.  :func:`plan_one_pass` says in one sentence why a stream
cannot be planned so: its JSON fields' types are neither all declared nor learned
(:mod:`sqe.engine.batch.learned_types`; they are inferred per batch), it reads with Spark's own
connector or is FIXED, a query aggregates, expands keys or reads an intermediate stream, or a
state is not written in one pass (an aggregating Redis state, the console).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import reduce

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from sqe.engine.batch.one_pass_task import RESULT_SCHEMA, planned_task
from sqe.engine.batch.pipeline import QueryStep, StreamPipeline
from sqe.engine.spark.spark_api import is_connect, optimized_once
from sqe.errors import TopologyError
from sqe.lang.compiler import aggregates_of, compile_projection
from sqe.ledger.hwm import HwmStore
from sqe.source.deserializers import Deserialized, Summary, deserialize, read_in_source
from sqe.source.json_fields import OK, arrow_fields
from sqe.wire.columns import CARRIED, TALLY, carried_offset

__all__ = ["BAD", "MARKED", "OnePassPlan", "RAW", "ROW", "plan_one_pass", "state_column",
           "stream_records", "why_not_one_pass"]

#: The prefix of a record's source columns in its row.
RAW = "_sqe_raw"
#: The source columns a record's row carries: what a task counts and finds the marks by.
MARKED = ("_offset", "_pid", "_source_partition", "_source_offset", *TALLY)
#: True in a record's row when the deserializer cannot read its value (not a JSON object).
BAD = "_sqe_bad"
#: The prefix of the column, one per query, that is true when the query's ``where`` keeps the
#: record (until the query's state has made its columns).
KEPT = "_sqe_kept"
#: The prefix of a state's column that is true in a row the state cannot hold.
REFUSED = "_sqe_refused"
_WARN = "_sqe_warn"
#: The one column of the planned frame: a struct of a record's columns.
ROW = "_sqe_row"


def state_column(index: int) -> str:
    """The struct column that holds the task columns of the state of query ``index``."""
    return f"_sqe_state{index}"


def _raw(name: str) -> str:
    return f"{RAW}{name}"


@dataclass(frozen=True)
class OnePassPlan:
    """A stream planned once: the streaming DataFrame of its records, a row each, with what
    each state's task writes."""

    frame: DataFrame
    #: (query index, its step) of every query that writes a state
    states: tuple[tuple[int, QueryStep], ...]
    #: the warning counter of each warning column, in order (``_sqe_warn<k>``)
    warnings: tuple[str, ...]
    #: ``frame`` planned with its task (classic Spark): a batch's job is the ``collect()`` of
    #: it, the tasks reading the batch's states' contexts from local property :attr:`key`;
    #: None (Spark Connect, which sets no local property): each batch makes its ``mapInArrow``
    tasks: DataFrame | None = None
    key: str = ""

    @property
    def stream(self) -> DataFrame:
        """The streaming DataFrame the stream's query runs."""
        return self.frame if self.tasks is None else self.tasks


def why_not_one_pass(p: StreamPipeline) -> str | None:
    """Why stream ``p`` cannot be planned once (None: it can, as far as its topology tells;
    :func:`plan_one_pass` may still find a reason in the types)."""
    name = p.stream.streamName
    if p.source is None:
        return (f"stream {name} is read by Spark's own Kafka connector" if p.native
                else f"stream {name} is FIXED")
    kind, declared = p.stream.deserializer, p.json_types
    if kind == "json" and (declared is None or None in declared.values()):
        return (f"stream {name} infers its JSON fields' types in every batch until it learns "
                "them; declare them with types in jw.sqe.spout.fields to plan it once")
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
    des = deserialize(stamped, p.stream.deserializer, p.wanted_fields, p.json_types,
                      summary=Summary(None, 0))
    if p.learned and des.undecodable is not None:  # a record the source did not read as the
        #                     learned types is the per-batch way's, which infers them again
        return replace(des, undecodable=des.undecodable | (
            F.col("_value").isNotNull() & ~F.coalesce(F.col(OK), F.lit(False))))
    return des


def plan_one_pass(p: StreamPipeline, source: DataFrame, hwm: HwmStore | None
                  ) -> OnePassPlan | str:
    """Stream ``p`` over its ``source`` frame as one streaming DataFrame, or why it cannot be
    (one sentence).  ``hwm``: its HWM store (a Redis state in its database stages its rows)."""
    why = why_not_one_pass(p)
    if why is not None:
        return why
    if p.learned and not read_in_source(source, arrow_fields(p.learned) or ()):
        return (f"stream {p.stream.streamName}: its source does not read the JSON fields its "
                "batches learned")
    des = stream_records(p, source)
    base = des.frame
    data = F.col("_offset").isNotNull()
    if not p.steps:
        return f"stream {p.stream.streamName} has no query"
    try:
        projections = [compile_projection(step.query, base, step.where) for step in p.steps]
        for step, proj in zip(p.steps, projections, strict=True):
            if proj.generators:
                return f"{step.where} expands keys or values (one row makes several)"
        kept = [data if proj.condition is None
                else data & F.coalesce(proj.condition, F.lit(False)) for proj in projections]
        warnings: list[tuple[str, Column]] = []  # (counter, true in a row that warns)
        for proj, mine in zip(projections, kept, strict=True):
            warnings += [(n, data & F.coalesce(c, F.lit(False))) for n, c in proj.where_warnings]
            warnings += [(n, mine & F.coalesce(c, F.lit(False))) for n, c in proj.select_warnings]
        bad = (F.coalesce(des.undecodable, F.lit(False)) if des.undecodable is not None
               else F.lit(False))
        # Everything that reads the source's columns, in one select: the record's own columns,
        # each query's fields and whether its where keeps the record, under names of SQE's own.
        own = [*[F.col(n).alias(_raw(n)) for n in MARKED],
               bad.alias(BAD), *[c.alias(f"{_WARN}{k}") for k, (_, c) in enumerate(warnings)]]
        names = [[f.name for f in base.select(*proj.columns).schema.fields]
                 for proj in projections]
        rows = base.select(
            *own, *[F.col(c).alias(_carried(c)) for c in CARRIED],
            *[mine.alias(f"{KEPT}{i}") for i, mine in enumerate(kept)],
            *[col.alias(_field(i, j)) for i, proj in enumerate(projections)
              for j, col in enumerate(proj.columns)])
        ready = [c for c in rows.columns if not c.startswith(_FIELD)]  # through every step
        made: list[str] = []  # the states' columns made so far
        states: list[tuple[int, QueryStep]] = []
        for i, step in enumerate(p.steps):
            sink = step.sink
            assert sink is not None
            # The query's output as its state sees it: its fields and carried columns by their
            # names, the rest passed through under SQE's.
            later = [_field(k, j) for k in range(i + 1, len(names)) for j in range(len(names[k]))]
            chosen = {n.lower() for n in names[i]}
            view = rows.select(
                *ready, *made, *later,
                *[F.col(_field(i, j)).alias(n) for j, n in enumerate(names[i])],
                *[F.col(_carried(c)).alias(c) for c in CARRIED if c not in chosen])
            view = step.with_state_columns(view)
            cols = sink.pass_columns(view, hwm)
            if cols is None:
                return f"{step.where}: {sink.describe()} is not written in one pass"
            states.append((i, step))
            mine = F.col(f"{KEPT}{i}")
            new = [F.when(mine, F.struct(*cols)).alias(state_column(i))]
            rejects = [c for c, _ in sink.rejects(view)]
            if rejects:  # a row the state cannot hold: the per-batch way finds and judges it
                new.append(F.when(mine, F.coalesce(reduce(lambda a, b: a | b, rejects),
                                                    F.lit(False))).otherwise(False)
                           .alias(f"{REFUSED}{i}"))
            rows = view.select(*ready, *made, *later, *new)
            made += rows.columns[-len(new):]
        # One struct column: the batch's mapInArrow then takes one column, where PySpark asks
        # the JVM for a column object per column of the frame at every batch.
        frame = optimized_once(rows.select(F.struct(
            BAD, *[_raw(n) for n in MARKED], *[f"{_WARN}{k}" for k in range(len(warnings))],
            *made).alias(ROW)))
    except AnalysisException as exc:
        raise TopologyError(f"stream {p.stream.streamName}: Spark cannot plan its queries as "
                            f"one pass: {exc.getMessage()}") from None
    plan = OnePassPlan(frame, tuple(states), tuple(n for n, _ in warnings))
    if is_connect(source.sparkSession):
        return plan
    # Planned with its task: a batch makes no mapInArrow (a UDF pickled and made through py4j).
    key = f"sqe.onePass.{p.consumer}"
    sinks = [(i, step.sink) for i, step in states if step.sink is not None]
    return replace(plan, key=key, tasks=frame.mapInArrow(
        planned_task(sinks, len(warnings), key), RESULT_SCHEMA))


_FIELD = "_sqe_f"


def _field(query: int, index: int) -> str:
    """The name query ``query``'s field ``index`` has until its state's columns are made."""
    return f"{_FIELD}{query}_{index}"


def _carried(name: str) -> str:
    """The name a carried column has beside the queries' fields."""
    return f"_sqe_c{name}"
