"""Typed, read-only views of one command's resolved options: the only readers of option keys.

A :class:`~sqe.config.settings.Settings` maps every ``jw.sqe.*`` key to its
effective value.  The rest of the code reads options through these views, by
attribute, with types: :class:`StreamSettings` for a ``CreateStream``,
:class:`StateSettings` for a query's state, with one view per kind of state
(:class:`KafkaStateSettings`, :class:`RedisStateSettings`,
:class:`PostgresStateSettings`).  Each attribute is one registry key
(:class:`OptionKey`, checked against the registry when this module is imported),
so no option key is spelled outside :mod:`sqe.config`; a test holds the views and
the registry to each other (every declared key is read by exactly one view).

Views are immutable and picklable (a stream's view travels to the executors
inside its source's config).

Example::

    >>> from sqe.config.settings import Settings
    >>> s = Settings.defaults().overlay({"jw.sqe.spout.kafka.brokers": "a:1,b:2"}, "--conf")
    >>> StreamSettings(s).brokers, StreamSettings(s).filter_replays
    (('a:1', 'b:2'), False)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, cast, overload

from sqe.clients.redis_endpoint import RedisEndpoint
from sqe.clients.schema_registry import PROPERTIES
from sqe.config.client_properties import consumer_properties, producer_properties
from sqe.config.registry import REGISTRY
from sqe.config.settings import Settings
from sqe.lang.expressions import Expression

__all__ = ["KafkaStateSettings", "OptionKey", "PostgresStateSettings", "RedisStateSettings",
           "StateSettings", "StreamSettings", "view_keys"]

T = TypeVar("T")


class OptionKey(Generic[T]):
    """One registry key read as an attribute of a view, optionally converted."""

    def __init__(self, key: str, convert: Callable[[Any], T] | None = None) -> None:
        if key not in REGISTRY:
            raise KeyError(f"{key} is not a declared option")
        self.key = key
        self.convert = convert

    @overload
    def __get__(self, view: None, owner: type) -> OptionKey[T]: ...

    @overload
    def __get__(self, view: _View, owner: type) -> T: ...

    def __get__(self, view: _View | None, owner: type) -> OptionKey[T] | T:
        if view is None:
            return self
        value = view.settings[self.key]
        return self.convert(value) if self.convert is not None else cast(T, value)


def _registry_keys(prefix: str) -> tuple[OptionKey[Any], ...]:
    """The keys of one Schema Registry client's properties (:data:`PROPERTIES`)."""
    return tuple(OptionKey[Any](f"{prefix}.{name}") for name in PROPERTIES)


def _registry(settings: Settings, keys: tuple[OptionKey[Any], ...]) -> dict[str, str]:
    """The Schema Registry client properties of ``keys`` that are set, by property name."""
    return {key.key.rsplit("schemaRegistry.", 1)[1]: str(settings[key.key]) for key in keys
            if settings[key.key] is not None}


def _tuple(value: list[str] | None) -> tuple[str, ...]:
    return tuple(value or ())


def _replicas_for(option: int, endpoint: RedisEndpoint) -> int:
    """The replicas a Redis store's commits wait for: the ``replicas`` option, or with -1
    (its default) 1 behind Sentinel and 0 elsewhere."""
    if option >= 0:
        return option
    return 1 if endpoint.kind == "sentinel" else 0


def _login_keys(prefix: str) -> tuple[OptionKey[str | None], ...]:
    """The keys of one Redis connection's ACL user, password and TLS files, in
    :class:`~sqe.clients.redis_endpoint.RedisEndpoint`'s order."""
    return tuple(OptionKey[str | None](f"{prefix}.{name}")
                 for name in ("username", "password", "tls.caFile", "tls.certFile", "tls.keyFile"))


@dataclass(frozen=True)
class _View:
    settings: Settings

    def origin(self, key: OptionKey[Any]) -> str:
        """Where the value of an attribute's key came from (``"default"`` when unset)."""
        return self.settings.origin(key.key)

    def _redis(self, url: str, login: tuple[OptionKey[str | None], ...]) -> RedisEndpoint:
        """The Redis at ``url`` with the user, password and TLS files of ``login``'s keys."""
        return RedisEndpoint(url, *(self.settings[key.key] for key in login))


_HWM = "jw.sqe.spout.kafka.filterReplays.redis"
_STATE_REDIS = "jw.sqe.state.redis"


@dataclass(frozen=True)
class StreamSettings(_View):
    """The options of one stream (a ``CreateStream``)."""

    pid = OptionKey[int | None]("jw.sqe.pid")
    brokers = OptionKey("jw.sqe.spout.kafka.brokers", _tuple)
    starting_offsets = OptionKey[str]("jw.sqe.spout.kafka.startingOffsets",
                                      lambda v: v.strip().lower()
                                      if v.strip().lower() in ("earliest", "latest") else v)
    max_records = OptionKey[int | None]("jw.sqe.spout.kafka.maxRecordsPerBatch")
    trigger_interval = OptionKey[float]("jw.sqe.trigger.intervalSeconds")
    observed_metrics = OptionKey[bool]("jw.sqe.spout.observedMetrics")
    min_records_per_task = OptionKey[int]("jw.sqe.spout.kafka.minRecordsPerTask")
    format = OptionKey[Literal["python", "native"]]("jw.sqe.spout.kafka.format")
    read_timeout = OptionKey[int]("jw.sqe.spout.kafka.readTimeoutSeconds")
    filter_replays = OptionKey[bool]("jw.sqe.spout.kafka.filterReplays")
    hwm_ttl = OptionKey[int]("jw.sqe.spout.kafka.filterReplays.metadata.ttl")
    max_advance = OptionKey[int]("jw.sqe.spout.kafka.filterReplays.maxAdvance")
    hwm_url = OptionKey[str](f"{_HWM}.url")
    hwm_login = _login_keys(_HWM)
    hwm_wait = OptionKey[int](f"{_HWM}.replicas")
    hwm_replica_timeout = OptionKey[int](f"{_HWM}.replicaTimeout")
    hwm_commit_retry = OptionKey[int](f"{_HWM}.commitRetrySeconds")
    chunks = OptionKey[bool]("jw.sqe.spout.kafka.chunks")
    include_headers = OptionKey[bool]("jw.sqe.spout.kafka.includeHeaders")
    filter_values = OptionKey("jw.sqe.spout.kafka.filterValues", _tuple)
    match_unfiltered = OptionKey[bool]("jw.sqe.spout.kafka.matchUnfiltered")
    post_filter = OptionKey[Expression | None]("jw.sqe.spout.kafka.postFilter")
    corrupt_policy = OptionKey[Literal["fail", "deadletter"]](
        "jw.sqe.spout.kafka.corruptChunkPolicy")
    bad_record_policy = OptionKey[Literal["fail", "deadletter"]](
        "jw.sqe.spout.kafka.badRecordPolicy")
    dead_letter_topic = OptionKey[str | None]("jw.sqe.spout.kafka.deadLetterTopic")
    declared_fields = OptionKey[dict[str, str | None] | None]("jw.sqe.spout.fields")
    fixed_fields = OptionKey[list[str] | None]("jw.sqe.spout.fixed.fields")
    schema_file = OptionKey[str | None]("jw.sqe.spout.schema.file")
    registry_keys = _registry_keys("jw.sqe.spout.schemaRegistry")
    schema_subject = OptionKey[str | None]("jw.sqe.spout.schema.subject")
    schema_version = OptionKey[int | None]("jw.sqe.spout.schema.version")
    schema_message = OptionKey[str | None]("jw.sqe.spout.schema.message")
    fixed_rows = OptionKey[list[list[Any]] | None]("jw.sqe.spout.fixed.values")

    @property
    def bootstrap(self) -> str:
        """The brokers as one bootstrap string."""
        return ",".join(self.brokers)

    @property
    def hwm_store(self) -> RedisEndpoint:
        """The Redis of the high-water marks; a ``ValueError`` when it cannot work as given."""
        return self._redis(self.hwm_url, self.hwm_login)

    @property
    def hwm_replicas(self) -> int:
        """The replicas each HWM commit waits for (``replicas`` -1: 1 behind Sentinel)."""
        return _replicas_for(self.hwm_wait, self.hwm_store)

    @property
    def consumer_properties(self) -> dict[str, str]:
        """The librdkafka properties of this stream's consumers."""
        return consumer_properties(self.settings)

    @property
    def schema_registry(self) -> dict[str, str]:
        """The Schema Registry client properties given (none: no registry)."""
        return _registry(self.settings, self.registry_keys)

    @property
    def post_filtering(self) -> bool:
        """Whether messages are post-filtered (by filterValues or postFilter)."""
        return bool(self.filter_values) or self.post_filter is not None


@dataclass(frozen=True)
class KafkaStateSettings(_View):
    """The options of a Kafka state."""

    brokers = OptionKey("jw.sqe.state.kafka.brokers", _tuple)
    keytype = OptionKey[Literal["messagehash", "field", "streammetadata"]](
        "jw.sqe.state.kafka.keytype")
    partitioner = OptionKey[str | None]("jw.sqe.state.kafka.partitionClass")
    chunking = OptionKey[bool]("jw.sqe.state.kafka.chunking")
    chunk_messages = OptionKey[int]("jw.sqe.state.kafka.chunk.maxMessages")
    chunk_bytes = OptionKey[int]("jw.sqe.state.kafka.chunk.maxBytes")
    chunk_codec = OptionKey[Literal["none", "zstd", "lz4"]]("jw.sqe.state.kafka.chunk.compression")
    filter_value = OptionKey[Expression | None]("jw.sqe.state.kafka.filterValue")
    filter_size = OptionKey[int]("jw.sqe.state.kafka.filterSizeBytes")
    serializer = OptionKey[Literal["json", "avro", "protobuf"]]("jw.sqe.state.kafka.serializer")
    registry_keys = _registry_keys("jw.sqe.state.kafka.schemaRegistry")
    schema_file = OptionKey[str | None]("jw.sqe.state.kafka.schema.file")
    subject_strategy = OptionKey[Literal["topic", "record", "topicrecord"]](
        "jw.sqe.state.kafka.schema.subjectStrategy")
    subject = OptionKey[str | None]("jw.sqe.state.kafka.schema.subject")
    record_name = OptionKey[str | None]("jw.sqe.state.kafka.schema.recordName")

    @property
    def schema_registry(self) -> dict[str, str]:
        """The Schema Registry client properties given (none: no registry)."""
        return _registry(self.settings, self.registry_keys)

    @property
    def bootstrap(self) -> str:
        """The brokers as one bootstrap string."""
        return ",".join(self.brokers)

    @property
    def producer_properties(self) -> dict[str, str]:
        """The librdkafka properties of this state's producers."""
        return producer_properties(self.settings)


@dataclass(frozen=True)
class RedisStateSettings(_View):
    """The options of a Redis state (plain or aggregating)."""

    url = OptionKey[str | None](f"{_STATE_REDIS}.url")
    host = OptionKey[str](f"{_STATE_REDIS}.host")
    port = OptionKey[int](f"{_STATE_REDIS}.port")
    database = OptionKey[int](f"{_STATE_REDIS}.database")
    tls = OptionKey[bool](f"{_STATE_REDIS}.tls")
    login = _login_keys(_STATE_REDIS)
    datatype = OptionKey[Literal["STRING", "HASH"]](f"{_STATE_REDIS}.datatype")
    key_fields = OptionKey(f"{_STATE_REDIS}.keyname.fields", _tuple)
    hash_fields = OptionKey(f"{_STATE_REDIS}.fieldname.fields", _tuple)
    delimiter = OptionKey[str](f"{_STATE_REDIS}.delimiter")
    expire_seconds = OptionKey[int](f"{_STATE_REDIS}.expireintervalsec")
    wait = OptionKey[int](f"{_STATE_REDIS}.replicas")
    replica_timeout = OptionKey[int](f"{_STATE_REDIS}.replicaTimeout")

    @property
    def replicas(self) -> int:
        """The replicas each batch's writes wait for (``replicas`` -1: 1 behind Sentinel)."""
        return _replicas_for(self.wait, self.endpoint)

    @property
    def endpoint(self) -> RedisEndpoint:
        """``url``, else SQE's host/port/database; a ``ValueError`` when it cannot work."""
        url = self.url
        if url is None:
            url = f"{'rediss' if self.tls else 'redis'}://{self.host}:{self.port}/{self.database}"
        return self._redis(url, self.login)

    def server_keys_given_beside_url(self) -> list[str]:
        """``host``, ``port``, ``database``, ``tls`` keys set explicitly (with their origin), and
        not below the URL (a config file's host under a ``--conf`` URL is overridden)."""
        url = RedisStateSettings.url.key
        return [f"{key.key} ({self.origin(key)})"
                for key in (RedisStateSettings.host, RedisStateSettings.port,
                            RedisStateSettings.database, RedisStateSettings.tls)
                if self.origin(key) != "default"
                and not self.settings.overridden(key.key, url)]


@dataclass(frozen=True)
class PostgresStateSettings(_View):
    """The options of a Postgres state."""

    dsn = OptionKey[str | None]("jw.sqe.state.postgres.dsn")
    commit_retry = OptionKey[int]("jw.sqe.state.postgres.commitRetrySeconds")
    key_fields = OptionKey[list[str]]("jw.sqe.state.postgres.keyFields")


@dataclass(frozen=True)
class StateSettings(_View):
    """The options of one query's state, one view per kind of state."""

    @property
    def kafka(self) -> KafkaStateSettings:
        return KafkaStateSettings(self.settings)

    @property
    def redis(self) -> RedisStateSettings:
        return RedisStateSettings(self.settings)

    @property
    def postgres(self) -> PostgresStateSettings:
        return PostgresStateSettings(self.settings)


def view_keys() -> dict[str, list[str]]:
    """Every registry key each view reads (for the test that holds views and registry together)."""
    def keys(view: type) -> list[str]:
        found = [v for v in vars(view).values() if isinstance(v, OptionKey)]
        found += [k for v in vars(view).values() if isinstance(v, tuple)
                  for k in v if isinstance(k, OptionKey)]
        return [k.key for k in found]

    return {view.__name__: keys(view) for view in (StreamSettings, KafkaStateSettings,
                                                   RedisStateSettings, PostgresStateSettings)}
