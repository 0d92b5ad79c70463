"""A topology with its options resolved: the settings of every stream and every state.

:func:`plan_topology` applies the precedence of :mod:`sqe.config.settings` to a
loaded :class:`~sqe.lang.topology.Topology` -- config files, then ``Set`` commands
in file order (each applies to the commands after it, as in SQE), then the
command's own ``options``, then ``--conf``, then Spark conf -- and checks what
each stream and state needs (brokers of a Kafka stream, the rows of a FIXED
stream, the two fields of ``keytype: field``).  The result, a
:class:`TopologyPlan`, is what ``sqe validate`` reports and what the runner
compiles.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqe.config.client_properties import property_problems
from sqe.config.redis_endpoint import hwm_endpoint, state_endpoint
from sqe.config.settings import ConfigFile, Settings
from sqe.errors import OptionError, TopologyError
from sqe.lang.expressions import is_aggregate
from sqe.lang.topology import CreateStream, Query, SetCommand, Topology

__all__ = ["TopologyPlan", "plan_topology"]


@dataclass(frozen=True)
class TopologyPlan:
    """Resolved settings per stream (by ``streamName``) and per query (by position)."""

    topology: Topology
    streams: Mapping[str, Settings]
    states: Mapping[int, Settings]
    spark_conf: Mapping[str, str]
    warnings: tuple[str, ...] = field(default=())

    def state_settings(self, query: Query) -> Settings:
        """The settings of the state a query writes to."""
        return self.states[self.topology.commands.index(query)]


def _stream_problems(stream: CreateStream, s: Settings, where: str) -> list[str]:
    problems = []
    if stream.spoutName == "KAFKA" and not s["jw.sqe.spout.kafka.brokers"]:
        problems.append(f"{where}: a KAFKA stream needs jw.sqe.spout.kafka.brokers "
                        "(in its options, a Set command, a --config file or --conf)")
    if s["jw.sqe.spout.kafka.corruptChunkPolicy"] == "deadletter" and not s[
            "jw.sqe.spout.kafka.deadLetterTopic"]:
        problems.append(f"{where}: corruptChunkPolicy deadletter needs "
                        "jw.sqe.spout.kafka.deadLetterTopic")
    problems += _filter_problems(s, where)
    if stream.spoutName == "KAFKA":
        problems += property_problems(s, "consumer", where)
        if s["jw.sqe.spout.kafka.filterReplays"]:
            problems += _endpoint_problems(hwm_endpoint, s, where)
    if stream.spoutName == "FIXED" and s["jw.sqe.spout.kafka.filterReplays"]:
        problems.append(f"{where}: filterReplays reads the StreamMetadata keys of a Kafka topic; "
                        "a FIXED stream has none")
    if stream.spoutName == "FIXED":
        fields, rows = s["jw.sqe.spout.fixed.fields"], s["jw.sqe.spout.fixed.values"]
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


def _filter_problems(s: Settings, where: str) -> list[str]:
    """Chunk and filter options of a stream that cannot work as given."""
    problems = []
    filters = [name for name in ("jw.sqe.spout.kafka.chunks", "jw.sqe.spout.kafka.filterValues",
                                 "jw.sqe.spout.kafka.postFilter") if s[name]]
    if filters and s["jw.sqe.spout.kafka.format"] == "native":
        problems.append(f"{where}: {', '.join(filters)} run(s) in SQE's own Kafka source; "
                        "jw.sqe.spout.kafka.format native cannot read chunks or filter values")
    post = s["jw.sqe.spout.kafka.postFilter"]
    if post is not None:
        from sqe.lang.post_filter import compile_filter
        from sqe.source.rows import RECORD_COLUMNS

        try:
            compile_filter(post, RECORD_COLUMNS, f"{where} -> jw.sqe.spout.kafka.postFilter")
        except TopologyError as exc:
            problems.append(str(exc))
    return problems


def _endpoint_problems(endpoint: Callable[[Settings], Any], s: Settings, where: str) -> list[str]:
    try:
        endpoint(s)
    except ValueError as exc:
        return [f"{where}: {exc}"]
    return []


def _redis_state_problems(s: Settings, where: str) -> list[str]:
    url_key = "jw.sqe.state.redis.url"
    problems = _endpoint_problems(state_endpoint, s, where)
    if s[url_key] is not None:
        clashing = [f"{k} ({s.origin(k)})" for k in ("jw.sqe.state.redis.host",
                    "jw.sqe.state.redis.port", "jw.sqe.state.redis.database",
                    "jw.sqe.state.redis.tls") if s.origin(k) != "default"]
        if clashing:
            problems.append(f"{where}: {url_key} ({s.origin(url_key)}) names the server, so "
                            f"{', '.join(clashing)} would be ignored; keep one of the two")
    return problems


def _state_problems(query: Query, s: Settings, where: str) -> list[str]:
    into = query.insertInto
    problems = []
    if into.stateName == "KAFKA":
        if not s["jw.sqe.state.kafka.brokers"]:
            problems.append(f"{where}: a KAFKA state needs jw.sqe.state.kafka.brokers")
        if s["jw.sqe.state.kafka.chunking"] and s["jw.sqe.state.kafka.keytype"] != "streammetadata":
            problems.append(f"{where}: jw.sqe.state.kafka.chunking keys each chunk by the "
                            "StreamMetadata of its last message, so it needs keytype "
                            "StreamMetadata")
        problems += property_problems(s, "producer", where)
        if s["jw.sqe.state.kafka.keytype"] == "field" and len(into.fields) != 2:
            problems.append(f"{where} -> insertInto -> fields: keytype field writes the first "
                            f"field as key and the second as value, so it needs exactly 2 "
                            f"fields, got {len(into.fields)}")
    if into.stateName == "POSTGRES" and any(is_aggregate(e) for e in query.select.expressions):
        problems.append(f"{where}: an aggregating query (Sum, Max, CreateHll) merges into a "
                        "REDIS or KAFKA state, not POSTGRES")
    if into.stateName == "POSTGRES" and not s["jw.sqe.state.postgres.dsn"]:
        problems.append(f"{where}: a POSTGRES state needs jw.sqe.state.postgres.dsn")
    if into.stateName == "REDIS":
        problems += _redis_state_problems(s, where)
        for key in ("jw.sqe.state.redis.keyname.fields", "jw.sqe.state.redis.fieldname.fields"):
            missing = [f for f in s[key] if f not in into.fields]
            if missing:
                problems.append(f"{where}: {key} names {', '.join(missing)}, which "
                                f"insertInto.fields does not have ({', '.join(into.fields)})")
    return problems


def plan_topology(
    topology: Topology,
    configs: Sequence[ConfigFile] = (),
    conf: Mapping[str, Any] | None = None,
    spark_conf: Mapping[str, Any] | None = None,
) -> TopologyPlan:
    """Resolve and check every command's options; all problems are raised together."""
    problems: list[str] = []
    base = Settings.defaults()
    spark: dict[str, str] = {}
    try:
        for cfg in configs:
            base = base.overlay(cfg.sqe, f"{cfg.path} (SQE)")
            spark.update(cfg.spark)
        # Validate the command-line layers once, up front, so their errors are reported once.
        Settings.defaults().overlay(conf, "--conf").overlay(spark_conf, "Spark conf")
    except OptionError as exc:
        raise TopologyError(str(exc)) from None

    def top_layers(s: Settings) -> Settings:
        return s.overlay(conf, "--conf").overlay(spark_conf, "Spark conf (spark.jw.sqe.*)")

    streams: dict[str, Settings] = {}
    states: dict[int, Settings] = {}
    warnings: list[str] = []
    current = base
    for index, command in enumerate(topology.commands):
        where = f"{topology.path}: {topology.label(command)}"
        try:
            if isinstance(command, SetCommand):
                current = current.overlay({command.key: command.value}, where)
            elif isinstance(command, CreateStream):
                s = top_layers(current.overlay(command.options, f"{where} -> options"))
                streams[command.streamName] = s
                problems += _stream_problems(command, s, where)
                warnings += s.warnings()
            elif isinstance(command, Query):
                s = top_layers(current.overlay(command.insertInto.options,
                                               f"{where} -> insertInto -> options"))
                states[index] = s
                problems += _state_problems(command, s, where)
                warnings += s.warnings()
        except OptionError as exc:
            problems.append(str(exc))
    warnings += current.warnings()  # Set commands after the last stream or query
    if problems:
        raise TopologyError(problems)
    return TopologyPlan(topology, streams, states, spark, tuple(dict.fromkeys(warnings)))
