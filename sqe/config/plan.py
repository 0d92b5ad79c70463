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
state needs of its options is checked by the state itself (``sqe.state.registry``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqe.config.client_properties import property_problems
from sqe.config.fields import field_problems
from sqe.config.settings import ConfigFile, Settings, spark_conf_options
from sqe.config.views import OptionKey, StateSettings, StreamSettings
from sqe.errors import OptionError, TopologyError
from sqe.lang.post_filter import compile_filter
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

    def state_settings(self, query: Query) -> StateSettings:
        """The settings of the state a query writes to."""
        return self.states[self.topology.commands.index(query)]


def _stream_problems(stream: CreateStream, s: StreamSettings, where: str) -> list[str]:
    problems = []
    if stream.spoutName == "KAFKA" and not s.brokers:
        problems.append(f"{where}: a KAFKA stream needs jw.sqe.spout.kafka.brokers "
                        "(in its options, a Set command, a --config file or --conf)")
    for name, policy in (("corruptChunkPolicy", s.corrupt_policy),
                         ("badRecordPolicy", s.bad_record_policy)):
        if policy == "deadletter" and not s.dead_letter_topic:
            problems.append(f"{where}: {name} deadletter needs "
                            "jw.sqe.spout.kafka.deadLetterTopic")
        if policy == "deadletter" and stream.spoutName != "KAFKA":
            problems.append(f"{where}: {name} deadletter sends the Kafka record as it was; "
                            f"a {stream.spoutName} stream has none (use fail)")
    problems += _filter_problems(s, where)
    if stream.spoutName == "KAFKA":
        problems += property_problems(s.settings, "consumer", where)
        if s.filter_replays:
            try:
                _ = s.hwm_store
            except ValueError as exc:
                problems.append(f"{where}: {exc}")
    if stream.spoutName == "FIXED" and s.filter_replays:
        problems.append(f"{where}: filterReplays reads the StreamMetadata keys of a Kafka topic; "
                        "a FIXED stream has none")
    if stream.spoutName == "FIXED":
        fields, rows = s.fixed_fields, s.fixed_rows
        if not fields:
            problems.append(f"{where}: a FIXED stream needs jw.sqe.spout.fixed.fields")
        elif rows is None:
            problems.append(f"{where}: a FIXED stream needs jw.sqe.spout.fixed.values")
        else:
            for i, row in enumerate(rows):
                if len(row) != len(fields):
                    problems.append(f"{where} -> jw.sqe.spout.fixed.values -> row {i + 1}: "
                                    f"{len(row)} value(s) for {len(fields)} field(s)")
    return problems


def _filter_problems(s: StreamSettings, where: str) -> list[str]:
    """Chunk and filter options of a stream that cannot work as given."""
    problems = []
    given: list[tuple[OptionKey[Any], object]] = [
        (StreamSettings.chunks, s.chunks), (StreamSettings.filter_values, s.filter_values),
        (StreamSettings.post_filter, s.post_filter)]
    filters = [key.key for key, value in given if value]
    if filters and s.format == "native":
        problems.append(f"{where}: {', '.join(filters)} run(s) in SQE's own Kafka source; "
                        "jw.sqe.spout.kafka.format native cannot read chunks or filter values")
    if s.post_filter is not None:
        try:
            compile_filter(s.post_filter, RECORD_COLUMNS, f"{where} -> jw.sqe.spout.kafka.postFilter")
        except TopologyError as exc:
            problems.append(str(exc))
    return problems


def plan_topology(
    topology: Topology,
    configs: Sequence[ConfigFile] = (),
    conf: Mapping[str, Any] | None = None,
    spark_conf: Mapping[str, Any] | None = None,
    check: Callable[[TopologyPlan], list[str]] | None = None,
) -> TopologyPlan:
    """Resolve and check every command's options; all problems are raised together.

    ``check`` adds problems found in the plan by a layer above this one (what each
    state needs of its options); it sees the commands whose options resolved.
    """
    problems: list[str] = []
    base = Settings.defaults()
    spark: dict[str, str] = {}
    spark_origins: dict[str, str] = {}
    warnings: list[str] = []
    try:
        for cfg in configs:
            base = base.overlay(cfg.sqe, f"{cfg.path} (SQE)")
            spark.update(cfg.spark)
            spark_origins.update(dict.fromkeys(cfg.spark, f"{cfg.path} (Spark)"))
            warnings += cfg.warnings
        # Options given as spark.jw.sqe.* in a Spark: section reach the session's conf, where a
        # run reads them as the top layer: check them now, below what the caller's Spark conf says.
        spark_conf = {**spark_conf_options(spark), **(spark_conf or {})} or None
        # Validate the command-line layers once, up front, so their errors are reported once.
        Settings.defaults().overlay(conf, "--conf").overlay(spark_conf, "Spark conf")
    except OptionError as exc:
        raise TopologyError(str(exc)) from None

    def top_layers(s: Settings) -> Settings:
        return s.overlay(conf, "--conf").overlay(spark_conf, "Spark conf (spark.jw.sqe.*)")

    streams: dict[str, StreamSettings] = {}
    states: dict[int, StateSettings] = {}
    current = base
    for index, command in enumerate(topology.commands):
        where = f"{topology.path}: {topology.label(command)}"
        try:
            if isinstance(command, SetCommand):
                current = current.overlay({command.key: command.value}, where)
            elif isinstance(command, CreateStream):
                s = top_layers(current.overlay(command.options, f"{where} -> options"))
                streams[command.streamName] = StreamSettings(s)
                problems += _stream_problems(command, streams[command.streamName], where)
                warnings += s.warnings()
            elif isinstance(command, Query):
                s = top_layers(current.overlay(command.insertInto.options,
                                               f"{where} -> insertInto -> options"))
                states[index] = StateSettings(s)
                warnings += s.warnings()
        except OptionError as exc:
            problems.append(str(exc))
    warnings += current.warnings()  # Set commands after the last stream or query
    problems += field_problems(topology, streams, states)
    plan = TopologyPlan(topology, streams, states, spark, tuple(dict.fromkeys(warnings)),
                        spark_origins)
    problems += check(plan) if check is not None else []
    if problems:
        raise TopologyError(problems)
    return plan
