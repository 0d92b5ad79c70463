"""SQE on Spark: declarative stream-processing topologies on Spark Structured Streaming.

The public Python API (:mod:`sqe.api`), with the arguments of the ``sqe`` command::

    import sqe

    topology = sqe.load_topology("topologies/enrich.yaml")
    plan = sqe.validate(topology, config=["conf/local.yaml"])   # what `sqe validate` checks
    result = sqe.run(sqe.prepare(topology, config=["conf/local.yaml"]), once=True)
    print(result.records_read, result.replays_dropped, result.rows_written)

the types their signatures name, the StreamMetadata key codec and the error classes
(``docs/api.md`` documents each).  The package is layered; each
sub-package's docstring says what it owns and what it may import:

* :mod:`sqe.wire` -- formats: StreamMetadata keys and PIDs, MurmurHash64A, chunks,
  Bloom filters, record headers, the columns of SQE's frames;
* :mod:`sqe.lang` -- the topology command model, expressions, their compilation;
* :mod:`sqe.config` -- options: registry, settings, typed views, secrets, endpoints;
* :mod:`sqe.source` -- reading: the ``sqe-kafka`` source, replay filter, FIXED rows;
* :mod:`sqe.engine` -- running a planned topology: pipelines, batches, progress;
* :mod:`sqe.cli` -- the ``sqe`` command; and, beside the package, ``state`` (where
  topologies write) and ``partitioners``.

The API names below are loaded on first use, so the executors, which import only
the modules their tasks need, never load the driver's side.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from sqe.version import __version__

#: Public name -> the module that defines it, in the order docs/api.md documents them.
_EXPORTS = {
    # load, validate, run
    "load_topology": "sqe.api", "validate": "sqe.api", "run": "sqe.api",
    "RunResult": "sqe.api", "prepare": "sqe.api", "PreparedRun": "sqe.api",
    # a hop of plain PySpark code
    "Hop": "sqe.hop", "HopBatch": "sqe.hop",
    # what they take and give
    "Topology": "sqe.lang.topology", "SetCommand": "sqe.lang.topology",
    "CreateStream": "sqe.lang.topology", "Query": "sqe.lang.topology",
    "InsertInto": "sqe.lang.topology", "Select": "sqe.lang.topology",
    "From": "sqe.lang.topology", "ConfigFile": "sqe.config.settings",
    "TopologyPlan": "sqe.config.plan", "Settings": "sqe.config.settings",
    "StreamSettings": "sqe.config.views", "StateSettings": "sqe.config.views",
    "KafkaStateSettings": "sqe.config.views", "RedisStateSettings": "sqe.config.views",
    "PostgresStateSettings": "sqe.config.views", "RedisEndpoint": "sqe.clients.redis_endpoint",
    "BatchReport": "sqe.observe.batch_report", "Tally": "sqe.wire.columns",
    # watching a run
    "RunWatcher": "sqe.observe.watch", "StreamView": "sqe.observe.watch",
    "PartitionLag": "sqe.source.kafka.lag", "PrometheusWatcher": "sqe.observe.metrics",
    "Rerun": "sqe.engine.run.recovery",
    # keys
    "StreamMetadata": "sqe.wire.keys", "decode_keys": "sqe.wire.keys",
    "encode_keys": "sqe.wire.keys", "pid_for": "sqe.wire.keys",
    # errors
    **{name: "sqe.errors" for name in (
        "SqeError", "OptionError", "TopologyError", "PrerequisiteError", "SourceError",
        "StateError", "ReplicaLagError", "StaleBatchError", "RedisBusyError", "RunError",
        "RunStopped",
        "CheckpointMismatch", "TopologyChanged", "BadRecordError", "ProgressError",
        "ReportError", "ArgumentError", "WireError", "ChunkError")},
}

__all__ = [
    "__version__", "load_topology", "validate", "run", "RunResult", "prepare", "PreparedRun",
    "Hop", "HopBatch",
    "Topology", "SetCommand",
    "CreateStream", "Query", "InsertInto", "Select", "From", "ConfigFile", "TopologyPlan",
    "Settings", "StreamSettings", "StateSettings", "KafkaStateSettings", "RedisStateSettings",
    "PostgresStateSettings", "RedisEndpoint", "BatchReport", "Tally", "RunWatcher",
    "StreamView", "PartitionLag", "PrometheusWatcher", "Rerun", "StreamMetadata", "decode_keys",
    "encode_keys", "pid_for", "SqeError", "OptionError", "TopologyError", "PrerequisiteError",
    "SourceError", "StateError", "ReplicaLagError", "StaleBatchError", "RedisBusyError",
    "RunError", "RunStopped",
    "CheckpointMismatch", "TopologyChanged", "BadRecordError", "ProgressError", "ReportError",
    "ArgumentError", "WireError", "ChunkError",
]

if TYPE_CHECKING:
    from sqe.api import PreparedRun, RunResult, load_topology, prepare, run, validate
    from sqe.clients.redis_endpoint import RedisEndpoint
    from sqe.config.plan import TopologyPlan
    from sqe.config.settings import ConfigFile, Settings
    from sqe.config.views import (
        KafkaStateSettings,
        PostgresStateSettings,
        RedisStateSettings,
        StateSettings,
        StreamSettings,
    )
    from sqe.engine.run.recovery import Rerun
    from sqe.errors import (
        ArgumentError,
        BadRecordError,
        CheckpointMismatch,
        ChunkError,
        OptionError,
        PrerequisiteError,
        ProgressError,
        RedisBusyError,
        ReplicaLagError,
        ReportError,
        RunError,
        RunStopped,
        SourceError,
        SqeError,
        StaleBatchError,
        StateError,
        TopologyChanged,
        TopologyError,
        WireError,
    )
    from sqe.hop import Hop, HopBatch
    from sqe.lang.topology import CreateStream, From, InsertInto, Query, Select, SetCommand, Topology
    from sqe.observe.batch_report import BatchReport
    from sqe.observe.metrics import PrometheusWatcher
    from sqe.observe.watch import RunWatcher, StreamView
    from sqe.source.kafka.lag import PartitionLag
    from sqe.wire.columns import Tally
    from sqe.wire.keys import StreamMetadata, decode_keys, encode_keys, pid_for


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sqe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
