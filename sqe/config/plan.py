"""A topology with its options resolved: the typed settings of every stream and every state.

:func:`plan_topology` applies the precedence of :mod:`sqe.config.settings` to a
loaded :class:`~sqe.lang.topology.Topology` -- config files, then ``Set`` commands
in file order (each applies to the commands after it, as in SQE), then the
command's own ``options``, then ``--conf``, then Spark conf -- and checks what
each stream needs (brokers of a Kafka stream, the rows of a FIXED stream, a
post-filter that compiles, client properties librdkafka accepts) and that every
field a query reads is one its stream has (:mod:`sqe.config.fields`).  The result,
a :class:`TopologyPlan`, holds one :class:`~sqe.config.views.StreamSettings`
per stream and one :class:`~sqe.config.views.StateSettings` per query; what a
state needs of its options is checked by the state itself (``state.registry``).

Every problem is found in one call, each located, in file order (by command, then
by check): the problems found loading the topology
(:attr:`~sqe.lang.topology.Topology.problems`), every option refused (each key of
a layer is checked on its own, and the others apply), then each check of what
the options, fields and states say.  A check that needs an option whose value was
refused is left out (it raises :class:`~sqe.errors.RefusedOption`): its value is
unknown, and the refusal is reported already.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqe.config.client_properties import property_problems
from sqe.config.fields import field_problems
from sqe.config.record_schemas import reader_schemas
from sqe.config.settings import ConfigFile, Settings, spark_conf_options, unless_refused
from sqe.config.views import OptionKey, StateSettings, StreamSettings
from sqe.errors import TopologyError
from sqe.lang.post_filter import compile_filter
from sqe.lang.problems import in_file_order
from sqe.lang.topology import CreateStream, Query, SetCommand, Topology
from sqe.wire.columns import RECORD_COLUMNS

__all__ = ["TopologyPlan", "plan_topology"]


@dataclass(frozen=True)
class TopologyPlan:
    """Resolved settings per stream (by ``streamName``) and per query (by position)."""

    topology: Topology
    streams: Mapping[str, StreamSettings]
    states: Mapping[int, StateSettings]
    spark_conf: Mapping[str, str]
    warnings: tuple[str, ...] = field(default=())
    spark_origins: Mapping[str, str] = field(default_factory=dict)  # key -> "FILE (Spark)"
    #: the reader schema of each stream of records (deserializer avro or protobuf), by
    #: streamName: :class:`sqe.config.record_schemas.ReaderSchema`, an internal type
    reader_schemas: Mapping[str, Any] = field(default_factory=dict)

    def state_settings(self, query: Query) -> StateSettings:
        """The settings of the state a query writes to."""
        return self.states[self.topology.commands.index(query)]


def _brokers_problems(stream: CreateStream, s: StreamSettings, where: str) -> list[str]:
    if stream.spoutName == "KAFKA" and not s.brokers:
        return [f"{where}: a KAFKA stream needs jw.sqe.spout.kafka.brokers "
                "(in its options, a Set command, a --config file or --conf)"]
    return []


def _policy_problems(stream: CreateStream, s: StreamSettings, where: str,
                     name: str, policy: str) -> list[str]:
    problems = []
    if policy == "deadletter":
        if not s.dead_letter_topic:
            problems.append(f"{where}: {name} deadletter needs "
                            "jw.sqe.spout.kafka.deadLetterTopic")
        if stream.spoutName != "KAFKA":
            problems.append(f"{where}: {name} deadletter sends the Kafka record as it was; "
                            f"a {stream.spoutName} stream has none (use fail)")
    return problems


def _replay_problems(stream: CreateStream, s: StreamSettings, where: str) -> list[str]:
    if not s.filter_replays:
        return []
    if stream.spoutName == "FIXED":
        return [f"{where}: filterReplays reads the StreamMetadata keys of a Kafka topic; "
                "a FIXED stream has none"]
    try:
        _ = s.hwm_store
    except ValueError as exc:
        return [f"{where}: {exc}"]
    return []


def _fixed_problems(s: StreamSettings, where: str) -> list[str]:
    fields, rows = s.fixed_fields, s.fixed_rows
    if not fields:
        return [f"{where}: a FIXED stream needs jw.sqe.spout.fixed.fields"]
    if rows is None:
        return [f"{where}: a FIXED stream needs jw.sqe.spout.fixed.values"]
    return [f"{where} -> jw.sqe.spout.fixed.values -> row {i + 1}: "
            f"{len(row)} value(s) for {len(fields)} field(s)"
            for i, row in enumerate(rows) if len(row) != len(fields)]


def _stream_problems(stream: CreateStream, s: StreamSettings, where: str) -> list[str]:
    """What a stream's options say that cannot work, each check on its own (one that reads a
    refused option is left out, the others run)."""
    kafka, fixed = stream.spoutName == "KAFKA", stream.spoutName == "FIXED"
    checks: list[Callable[[], list[str]]] = [
        lambda: _brokers_problems(stream, s, where),
        lambda: _policy_problems(stream, s, where, "corruptChunkPolicy", s.corrupt_policy),
        lambda: _policy_problems(stream, s, where, "badRecordPolicy", s.bad_record_policy),
        lambda: _native_problems(s, where),
        lambda: _post_filter_problems(s, where),
        lambda: property_problems(s.settings, "consumer", where) if kafka else [],
        lambda: _replay_problems(stream, s, where) if kafka or fixed else [],
        lambda: _fixed_problems(s, where) if fixed else [],
    ]
    none: list[str] = []
    return [problem for check in checks for problem in unless_refused(check, none)]


def _native_problems(s: StreamSettings, where: str) -> list[str]:
    """Chunk and filter options of a stream that Spark's own Kafka connector cannot run."""
    given: list[tuple[OptionKey[Any], object]] = [
        (StreamSettings.chunks, s.chunks), (StreamSettings.filter_values, s.filter_values),
        (StreamSettings.post_filter, s.post_filter)]
    filters = [key.key for key, value in given if value]
    if filters and s.format == "native":
        return [f"{where}: {', '.join(filters)} run(s) in SQE's own Kafka source; "
                "jw.sqe.spout.kafka.format native cannot read chunks or filter values"]
    return []


def _post_filter_problems(s: StreamSettings, where: str) -> list[str]:
    """A post-filter that does not compile over the record columns."""
    if s.post_filter is not None:
        try:
            compile_filter(s.post_filter, RECORD_COLUMNS, f"{where} -> jw.sqe.spout.kafka.postFilter")
        except TopologyError as exc:
            return [str(exc)]
    return []


def plan_topology(
    topology: Topology,
    configs: Sequence[ConfigFile] = (),
    conf: Mapping[str, Any] | None = None,
    spark_conf: Mapping[str, Any] | None = None,
    check: Callable[[TopologyPlan], list[str]] | None = None,
) -> TopologyPlan:
    """Resolve and check every command's options; all problems are raised together, with
    those found loading the topology, in file order.

    ``check`` adds problems found in the plan by a layer above this one (what each
    state needs of its options); a check of it that reads a refused option is to be
    left out (:func:`~sqe.config.settings.unless_refused`).
    """
    problems: list[str] = list(topology.problems)
    base = Settings.defaults()
    spark: dict[str, str] = {}
    spark_origins: dict[str, str] = {}
    warnings: list[str] = []
    for cfg in configs:
        base, refused = base.overlay_each(cfg.sqe, f"{cfg.path} (SQE)")
        problems += refused
        spark.update(cfg.spark)
        spark_origins.update(dict.fromkeys(cfg.spark, f"{cfg.path} (Spark)"))
        warnings += cfg.warnings
    # Options given as spark.jw.sqe.* in a Spark: section reach the session's conf, where a
    # run reads them as the top layer: check them now, below what the caller's Spark conf says.
    spark_conf = {**spark_conf_options(spark), **(spark_conf or {})} or None
    # Check the command-line layers once, up front, so their problems are reported once.
    for layer, origin in ((conf, "--conf"), (spark_conf, "Spark conf")):
        problems += Settings.defaults().overlay_each(layer, origin)[1]

    def top_layers(s: Settings) -> Settings:  # their refused keys stay refused
        s = s.overlay_each(conf, "--conf")[0]
        return s.overlay_each(spark_conf, "Spark conf (spark.jw.sqe.*)")[0]

    streams: dict[str, StreamSettings] = {}
    states: dict[int, StateSettings] = {}
    current = base
    for index, command in enumerate(topology.commands):
        where = f"{topology.path}: {topology.label(command)}"
        if isinstance(command, SetCommand):
            current, refused = current.overlay_each({command.key: command.value}, where)
            problems += refused
        elif isinstance(command, CreateStream):
            s, refused = current.overlay_each(command.options, f"{where} -> options")
            s = top_layers(s)
            streams[command.streamName] = StreamSettings(s)
            problems += refused + _stream_problems(command, streams[command.streamName], where)
            warnings += s.warnings()
        elif isinstance(command, Query):
            s, refused = current.overlay_each(command.insertInto.options,
                                              f"{where} -> insertInto -> options")
            s = top_layers(s)
            states[index] = StateSettings(s)
            problems += refused
            warnings += s.warnings()
    warnings += current.warnings()  # Set commands after the last stream or query
    schemas, schema_problems = reader_schemas(topology, streams)
    problems += schema_problems + field_problems(topology, streams, states, schemas)
    plan = TopologyPlan(topology, streams, states, spark, tuple(dict.fromkeys(warnings)),
                        spark_origins, schemas)
    problems += check(plan) if check is not None else []
    if problems:
        raise TopologyError(in_file_order(topology.path, problems))
    return plan
