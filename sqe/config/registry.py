"""The ``jw.sqe.*`` option registry: every key declared once, with type, default and doc.

This module owns the declarations (:data:`REGISTRY`), the families of keys that
end in a librdkafka property name (:data:`CLIENT_PROPERTIES`, with the properties
SQE owns, :data:`OWNED_PROPERTIES`), the retired keys and what to do instead
(:data:`RETIRED`), and finding the option of a key (:func:`lookup`, with a
did-you-mean).  What an option is lives in :mod:`sqe.config.options`; where
values come from and which one wins, in :mod:`sqe.config.settings`.

    >>> REGISTRY["jw.sqe.state.kafka.keytype"].choices
    ('messagehash', 'field', 'streammetadata')
"""

from __future__ import annotations

import difflib
from dataclasses import replace

from sqe.clients.redis_endpoint import check_url
from sqe.config.format_options import SPOUT_FORMAT_OPTIONS, STATE_FORMAT_OPTIONS
from sqe.config.option_checks import (
    check_bloom_size,
    check_brokers,
    check_declared_fields,
    check_interval,
    check_partitioner,
    check_starting_offsets,
    check_state_redis_url,
)
from sqe.config.options import PREFIX, Option, Scope
from sqe.errors import OptionError
from sqe.secrets import is_secret_key

__all__ = ["CLIENT_PROPERTIES", "CONSUMER_PREFIX", "JAVA_PROPERTIES", "OWNED_PROPERTIES",
           "PREFIX", "PRODUCER_PREFIX", "REGISTRY", "RETIRED", "client_property_option",
           "lookup", "suggest"]


def _policy(name: str, text: str) -> Option:
    """A stream's choice between failing the batch and dead-lettering a record."""
    return Option(f"jw.sqe.spout.kafka.{name}", "choice", "fail", text, scope="stream",
                  choices=("fail", "deadletter"))


def _redis_security(prefix: str, what: str, scope: Scope) -> list[Option]:
    """The credential and TLS options of one Redis connection (HWM store or Redis state)."""
    return [
        Option(f"{prefix}.username", "str", None,
               f"ACL user name for {what} (Redis 6+; default: the URL's, else 'default').",
               scope=scope),
        Option(f"{prefix}.password", "str", None,
               f"Password for {what} (requirepass or the ACL user's); write ${{ENV_VAR}} rather "
               "than the password itself.", scope=scope, secret=True),
        Option(f"{prefix}.tls.caFile", "str", None,
               f"CA certificate file that signed the TLS certificate of {what} (needs rediss://).",
               scope=scope),
        Option(f"{prefix}.tls.certFile", "str", None,
               f"Client certificate file for {what}, for servers that verify clients "
               "(tls-auth-clients).", scope=scope),
        Option(f"{prefix}.tls.keyFile", "str", None,
               f"Private key file of the client certificate for {what}.", scope=scope),
    ]



def _replicas(prefix: str, what: str, scope: Scope) -> list[Option]:
    return [
        Option(f"{prefix}.replicas", "int", -1,
               f"Replicas of {what} that must hold each batch's writes (Redis WAIT) before the "
               "batch counts as done, so a failover to a replica cannot lose them; -1: 1 "
               "behind Sentinel (redis+sentinel://), else 0.", scope=scope, minimum=-1),
        Option(f"{prefix}.replicaTimeout", "int", 10,
               "Seconds a batch waits for those replicas; a batch they do not acknowledge in "
               "time stops the run, and its next run finishes it without writing it twice.",
               scope=scope, minimum=1),
    ]


_DECLARED = [
    # -- topology-wide ---------------------------------------------------------------
    Option("jw.sqe.pid", "int", None,
           "Override the PID stamped on this topology's records (default: MurmurHash64A of "
           "topology + stream + '<cluster id>/<topic>')."),
    Option("jw.sqe.parallelism.hint", "int", 1,
           "SQE (Storm) parallelism hint; accepted for compatibility.", minimum=1,
           ignored="Spark's parallelism follows the Kafka partitions and "
                   "spark.sql.shuffle.partitions"),
    # -- Kafka streams (CreateStream spoutName KAFKA) --------------------------------
    Option("jw.sqe.spout.kafka.brokers", "list", ["localhost:9092"],
           "Bootstrap servers of the source topic (list or comma-separated host:port).",
           scope="stream", check=check_brokers),
    Option("jw.sqe.spout.kafka.clientid", "str", None,
           "Kafka client.id of the source consumers (SQE key).", scope="stream"),
    Option("jw.sqe.spout.kafka.startingOffsets", "str", "earliest",
           "Where a query without a checkpoint starts reading: earliest, latest, or the next "
           'offset per partition as JSON, e.g. {"0": 42} (partitions not named start at '
           "their earliest).", scope="stream", check=check_starting_offsets),
    Option("jw.sqe.spout.kafka.maxRecordsPerBatch", "int", None,
           "Upper bound on records read per micro-batch across all partitions "
           "(default: no bound).", scope="stream", minimum=1),
    Option("jw.sqe.spout.kafka.minRecordsPerTask", "int", 10_000,
           "A micro-batch's Kafka partitions are read by as few tasks as hold at least this many "
           "records each (a partition's range is never split): a small batch is one task "
           "instead of one per partition, a large one still a task per partition. 1: always "
           "one task per partition.", scope="stream", minimum=1),
    Option("jw.sqe.spout.kafka.fetchSizeBytes", "int", None,
           "SQE key: per-partition fetch size, passed to the consumer as "
           "max.partition.fetch.bytes.", scope="stream", minimum=1),
    Option("jw.sqe.spout.kafka.bufferSizeBytes", "int", None,
           "SQE key: socket receive buffer, passed to the consumer as "
           "socket.receive.buffer.bytes.", scope="stream", minimum=1),
    Option("jw.sqe.spout.kafka.format", "choice", "python",
           "Kafka reader: 'python' is SQE's own source (confluent-kafka on the executors, no JVM "
           "connector); 'native' is Spark's Kafka connector, which must be on the classpath "
           "(spark-submit --packages org.apache.spark:spark-sql-kafka-0-10_2.13:<spark version>).",
           scope="stream", choices=("python", "native")),
    Option("jw.sqe.spout.observedMetrics", "bool", False,
           "Also give the source's counters (records, replays dropped, keys that cannot be "
           "judged, the chunk counters) to Spark as the observed metrics sqe.<stream> of each "
           "streaming query progress.  Spark then counts every record a second time, which cost "
           "5-14 % of a 2,000-record batch's cycle here; the same counters are always in the "
           "batch line, the progress file, sqe report and the Prometheus metrics.",
           scope="stream"),
    Option("jw.sqe.trigger.intervalSeconds", "float", 0.0,
           "Seconds from the start of one micro-batch to the start of the next (Spark's "
           "processing-time trigger): fewer, larger batches and no work while idle, for later "
           "results. 0: the next batch starts as soon as the last one ends (the lowest latency). "
           "sqe run --once ignores it.", scope="stream", check=check_interval),
    Option("jw.sqe.spout.kafka.readTimeoutSeconds", "int", 120,
           "Seconds a source task may wait for records the broker reported but did not deliver "
           "before the batch fails with the topic, partition and offsets it was waiting for.",
           scope="stream", minimum=1),
    Option("jw.sqe.spout.kafka.filterReplays", "bool", False,
           "Drop records at or below the high-water mark of their (pid, partition).",
           scope="stream"),
    Option("jw.sqe.spout.kafka.filterReplays.metadata.ttl", "int", 172800,
           "Seconds after its last update that a high-water mark entry expires.",
           scope="stream", minimum=1),
    Option("jw.sqe.spout.kafka.filterReplays.maxAdvance", "int", 2**40,
           "The most source offsets a key may claim above the mark its (pid, partition) had "
           "when the batch began (-1 without one).  A key beyond it (forged, or a corrupt "
           "upstream) would drop every good record after it as a replay: it is a bad record "
           "(badRecordPolicy) and never moves the mark.", scope="stream", minimum=1),
    Option("jw.sqe.spout.kafka.filterReplays.redis.url", "str", "redis://localhost:6379/0",
           "Redis URL of the high-water mark store: redis://, rediss:// (TLS), unix://, "
           "redis+sentinel://host:port[,host:port]/<service>[/db] or "
           "redis+cluster://host:port[,host:port].", scope="stream", check=check_url),
    *_redis_security("jw.sqe.spout.kafka.filterReplays.redis", "the high-water mark store",
                     "stream"),
    *_replicas("jw.sqe.spout.kafka.filterReplays.redis", "the high-water mark store", "stream"),
    Option("jw.sqe.spout.kafka.filterReplays.redis.commitRetrySeconds", "int", 30,
           "Seconds a batch's commit is sent again, on a new connection, when the connection "
           "to the high-water mark store drops or times out (a reset, a reply lost after the "
           "commit ran, a failover): a commit is idempotent by its batch id, so such a blip "
           "heals inside the run, with a warning; a store away longer fails the batch and "
           "ends the run.  0: the first such error does.", scope="stream", minimum=0),
    # -- chunks: Bloom-filtered reading (sqe.wire.chunk) ----------------------------------
    Option("jw.sqe.spout.kafka.chunks", "bool", False,
           "The topic holds SQE chunks (written with jw.sqe.state.kafka.chunking): each record "
           "is decoded into its messages.  Without it, a chunk met in the topic is an error.",
           scope="stream"),
    Option("jw.sqe.spout.kafka.filterValues", "list", None,
           "Filter values this stream wants: chunks whose Bloom filter has none of them are "
           "skipped undecoded, and decoded messages are post-filtered exactly.", scope="stream"),
    Option("jw.sqe.spout.kafka.matchUnfiltered", "bool", False,
           "With filterValues, also accept messages (and chunks holding messages) without a "
           "filter value.", scope="stream"),
    Option("jw.sqe.spout.kafka.postFilter", "expression", None,
           "The exact filter applied after decoding, instead of 'the message's filter value "
           "is in filterValues'.  It runs in the source before Spark, over the record columns "
           "(_filter_value, _value, _key, _partition, _offset, _pid, ...), with the functions "
           "And, Or, Xor, Not, If, comparisons, In and RLike.", scope="stream"),
    _policy("corruptChunkPolicy",
            "A chunk that cannot be decoded: fail the batch (naming topic/partition/offset), "
            "or send the raw record to deadLetterTopic and go on (counted)."),
    _policy("badRecordPolicy",
            "A record a step cannot take (a value that does not decode, a value a query cannot "
            "cast or a store cannot hold, a key claiming an offset beyond filterReplays."
            "maxAdvance): fail the batch with a sentence naming its topic/partition/offset, or "
            "send the record unchanged to deadLetterTopic, with its reason and position in "
            "headers, and commit the rest (counted)."),
    Option("jw.sqe.spout.kafka.includeHeaders", "bool", False,
           "Each record's Kafka headers as the column _headers (an array of key/value structs, "
           "as Spark's Kafka source's headers); off, a record costs no header read.",
           scope="stream"),
    Option("jw.sqe.spout.kafka.deadLetterTopic", "str", None,
           "Topic for records sent away under corruptChunkPolicy or badRecordPolicy "
           "deadletter.", scope="stream"),
    Option("jw.sqe.spout.fields", "fields", None,
           "The fields of a stream with deserializer json, as a map of name: Spark SQL type "
           "(e.g. {event_id: string, amount: bigint}) or a list of names.  Queries may then "
           "read only these fields and the record columns (checked by sqe validate), and "
           "the values are extracted as the declared types instead of types inferred per "
           "batch.  With every type declared, each micro-batch is one Spark job (queries "
           "that read the stream directly and do not aggregate); without this option the "
           "stream learns the types from its batches and is planned so once they are known.",
           scope="stream",
           check=check_declared_fields),
    *SPOUT_FORMAT_OPTIONS,
    # -- FIXED streams (test and demo data declared in the file) ---------------------
    Option("jw.sqe.spout.fixed.fields", "list", None,
           "Field names of a FIXED stream.", scope="stream"),
    Option("jw.sqe.spout.fixed.values", "rows", None,
           "Rows of a FIXED stream, one list of values per row.", scope="stream"),
    # -- Kafka state ------------------------------------------------------------------
    Option("jw.sqe.state.kafka.brokers", "list", ["localhost:9092"],
           "Bootstrap servers of the destination topic (list or comma-separated host:port).",
           scope="state", check=check_brokers),
    Option("jw.sqe.state.kafka.keytype", "choice", "messagehash",
           "Record key: a hash of the value, a named field, or the record's "
           "20-byte StreamMetadata.", scope="state",
           choices=("messagehash", "field", "streammetadata")),
    Option("jw.sqe.state.kafka.partitionClass", "str", None,
           "Partitioner by dotted path, e.g. partitioners.SourcePartitionPartitioner "
           "(SQE's Java class name is accepted); default: the client's partitioner.",
           scope="state", check=check_partitioner),
    Option("jw.sqe.state.kafka.chunking", "bool", False,
           "Pack messages of one source partition into chunks with a Bloom filter of their "
           "filter values in the header (docs/bloom-chunks.md).", scope="state"),
    Option("jw.sqe.state.kafka.chunk.maxMessages", "int", 1000,
           "Most messages in one chunk.", scope="state", minimum=1),
    Option("jw.sqe.state.kafka.chunk.maxBytes", "int", 1048576,
           "Most body bytes (before compression) in one chunk; a larger message gets a chunk "
           "of its own.", scope="state", minimum=1024),
    Option("jw.sqe.state.kafka.chunk.compression", "choice", "none",
           "Codec of chunk bodies.", scope="state", choices=("none", "zstd", "lz4")),
    Option("jw.sqe.state.kafka.filterValue", "expression", None,
           "Each message's filter value (NULL: unfiltered); carried in chunk Bloom filters, "
           "or in the record header sqe-filter-value without chunking.", scope="state"),
    Option("jw.sqe.state.kafka.filterSizeBytes", "int", 16,
           "Bloom filter size of a chunk, 16..255 bytes.", scope="state",
           check=check_bloom_size),
    *STATE_FORMAT_OPTIONS,
    # -- Redis state ------------------------------------------------------------------
    Option("jw.sqe.state.redis.url", "str", None,
           "Redis URL of the Redis state (redis://, rediss://, unix:// or redis+sentinel://); "
           "when set, host, port, database and tls are not used.", scope="state",
           check=check_state_redis_url),
    Option("jw.sqe.state.redis.host", "str", "localhost", "Redis host of the Redis state.",
           scope="state"),
    Option("jw.sqe.state.redis.port", "int", 6379, "Redis port of the Redis state.",
           scope="state", minimum=1),
    Option("jw.sqe.state.redis.database", "int", 0, "Redis database index of the Redis state.",
           scope="state", minimum=0),
    Option("jw.sqe.state.redis.tls", "bool", False,
           "Connect to host:port over TLS (rediss://).", scope="state"),
    *_redis_security("jw.sqe.state.redis", "the Redis state", "state"),
    Option("jw.sqe.state.redis.datatype", "choice", "STRING",
           "STRING writes SET key value; HASH writes HSET key field value.", scope="state",
           choices=("STRING", "HASH")),
    Option("jw.sqe.state.redis.keyname.fields", "list", [],
           "Fields whose values, joined by the delimiter, form the Redis key.", scope="state"),
    Option("jw.sqe.state.redis.fieldname.fields", "list", [],
           "HASH only: fields whose values, joined by the delimiter, form the hash field.",
           scope="state"),
    Option("jw.sqe.state.redis.delimiter", "str", ":",
           "Separator between joined key and field values.", scope="state"),
    Option("jw.sqe.state.redis.expireintervalsec", "int", 0,
           "Seconds until written keys expire; 0 never expires.", scope="state", minimum=0),
    *_replicas("jw.sqe.state.redis", "the Redis state's server (rows it stages in the "
               "high-water mark store's database count with that store's replicas)", "state"),
    # -- Postgres state ---------------------------------------------------------------
    Option("jw.sqe.state.postgres.dsn", "str", None,
           "Postgres connection string of the Postgres state (libpq URI or key=value), e.g. "
           "postgresql://postgres@localhost:5432/postgres.", scope="state"),
    Option("jw.sqe.state.postgres.keyFields", "list", [],
           "Fields that key the table's rows: a batch's row replaces the stored row with the "
           "same key (an aggregate's newer value) instead of adding one; a new table gets them "
           "as its primary key, an existing one needs a unique index on exactly them. Empty: "
           "rows are appended.", scope="state"),
    Option("jw.sqe.state.postgres.commitRetrySeconds", "int", 30,
           "Seconds a batch's Postgres transaction is sent again on a new connection after "
           "its connection dropped (a restart, a reset, a reply lost after the COMMIT ran); "
           "idempotent by batch id. 0: the batch fails at once.", scope="state", minimum=0),
]

#: Every declared option by key.
REGISTRY: dict[str, Option] = {o.key: o for o in _DECLARED}

CONSUMER_PREFIX = "jw.sqe.spout.kafka.consumer."
PRODUCER_PREFIX = "jw.sqe.state.kafka.producer."

#: Families of keys that end in a librdkafka property name (``<prefix><property>``).
CLIENT_PROPERTIES: dict[str, Option] = {
    CONSUMER_PREFIX: Option(
        CONSUMER_PREFIX + "<property>", "property", None,
        "Any librdkafka consumer property for this stream's consumers (on the executors, the "
        "driver's metadata look-ups and the dead-letter producer's connection), e.g. "
        "security.protocol, sasl.mechanism, sasl.username, sasl.password, ssl.ca.location. "
        "Checked against librdkafka before Spark starts; secrets (*password*, *secret*, "
        "ssl.key.*) are shown as ***.", scope="stream"),
    PRODUCER_PREFIX: Option(
        PRODUCER_PREFIX + "<property>", "property", None,
        "Any librdkafka producer property for this Kafka state's producers, e.g. "
        "security.protocol, sasl.*, ssl.*, linger.ms, compression.type.  Checked against "
        "librdkafka before Spark starts.", scope="state"),
}

_OFFSETS_IN_CHECKPOINT = ("offsets live in Spark's checkpoint and each task reads an assigned "
                          "offset range")
_ASSIGNED = "partitions are assigned by Spark (a task per partition range), not by a group"

#: Client properties SQE sets itself, with why they cannot be overridden.
OWNED_PROPERTIES: dict[str, dict[str, str]] = {
    CONSUMER_PREFIX: {
        "bootstrap.servers": "set jw.sqe.spout.kafka.brokers instead",
        "group.id": f"SQE names the consumer per source task; {_OFFSETS_IN_CHECKPOINT}",
        "enable.auto.commit": f"{_OFFSETS_IN_CHECKPOINT}, so nothing is committed to Kafka",
        "enable.auto.offset.store": f"{_OFFSETS_IN_CHECKPOINT}, so nothing is stored in Kafka",
        "auto.offset.reset": "a range that retention deleted must fail the batch rather than "
                             "silently skip records; jw.sqe.spout.kafka.startingOffsets says "
                             "where a new query starts",
        "enable.partition.eof": "the source stops at each range's end offset itself",
        "group.instance.id": _ASSIGNED,
        "partition.assignment.strategy": _ASSIGNED,
        "group.protocol": _ASSIGNED,
        "group.remote.assignor": _ASSIGNED,
    },
    PRODUCER_PREFIX: {
        "bootstrap.servers": "set jw.sqe.state.kafka.brokers instead",
        "enable.idempotence": "the idempotent producer keeps each partition in order across "
                              "retries, which the downstream replay filter relies on "
                              "(docs/exactly-once.md, Forged and corrupt keys)",
        "acks": "the idempotent producer needs acks=all",
        "transactional.id": "SQE's chains are exactly-once without Kafka transactions; a "
                            "transactional producer would hold records back from readers "
                            "that do not read_committed",
    },
}

#: Java client properties users carry over, and what librdkafka calls them instead.
JAVA_PROPERTIES: dict[str, str] = {
    "sasl.jaas.config": "librdkafka takes sasl.username and sasl.password (PLAIN/SCRAM) or "
                        "sasl.oauthbearer.* instead of a JAAS line",
    "ssl.truststore.location": "librdkafka reads PEM files: ssl.ca.location",
    "ssl.truststore.password": "librdkafka reads PEM files: ssl.ca.location needs no password",
    "key.serializer": "SQE produces bytes; keys are set by jw.sqe.state.kafka.keytype",
    "value.serializer": "SQE produces bytes; values are the selected fields",
    "key.deserializer": "the source reads bytes; values are decoded by the stream's fields",
    "value.deserializer": "the source reads bytes; values are decoded by the stream's fields",
}


def client_property_option(key: str, origin: str) -> Option | None:
    """The option of a ``<prefix><librdkafka property>`` key, or ``None`` for other keys.

    A property SQE owns is an :class:`OptionError` saying why.
    """
    for prefix, family in CLIENT_PROPERTIES.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            name = key[len(prefix):]
            why = OWNED_PROPERTIES[prefix].get(name)
            if why:
                role = "consumer" if prefix == CONSUMER_PREFIX else "producer"
                raise OptionError(f"{origin}: {key}: SQE sets the Kafka {role} property "
                                  f"{name} itself and it cannot be overridden: {why}")
            return replace(family, key=key, secret=is_secret_key(name))
    return None

#: Keys of the original SQE that no longer apply, with what to do instead.
RETIRED: dict[str, str] = {
    "jw.sqe.spout.kafka.zkhosts":
        "ZooKeeper hosts are not used on Spark; set jw.sqe.spout.kafka.brokers "
        "to the Kafka bootstrap servers instead",
}


def suggest(key: str) -> str | None:
    """The closest known key to a misspelt one, or ``None``."""
    known = list(REGISTRY)
    lowered = {k.lower(): k for k in known}
    if key.lower() in lowered:
        return lowered[key.lower()]
    match = difflib.get_close_matches(key, known, n=1, cutoff=0.75)
    return match[0] if match else None


def lookup(key: str, origin: str) -> Option:
    """The declared option for ``key``; an unknown or retired key is an :class:`OptionError`."""
    if key in REGISTRY:
        return REGISTRY[key]
    family = client_property_option(key, origin)
    if family is not None:
        return family
    if key in RETIRED:
        raise OptionError(f"{origin}: {key} is no longer supported: {RETIRED[key]}")
    hint = suggest(key)
    tail = f"; did you mean {hint}?" if hint else "; run 'sqe options' to list the known keys"
    raise OptionError(f"{origin}: unknown option {key}{tail}")
