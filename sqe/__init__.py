"""SQE on Spark: declarative stream-processing topologies on Spark Structured Streaming.

The public Python API (:mod:`sqe.api`), with the arguments of the ``sqe`` command::

    import sqe

    topology = sqe.load_topology("topologies/enrich.yaml")
    plan = sqe.validate(topology, config=["conf/local.yaml"])   # what `sqe validate` checks
    result = sqe.run(topology, config=["conf/local.yaml"], once=True)
    print(result.records_read, result.replays_dropped, result.rows_written)

and the StreamMetadata key codec and error classes.  The package is layered; each
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

if TYPE_CHECKING:
    from sqe.api import RunResult, load_topology, run, validate
    from sqe.config.plan import TopologyPlan
    from sqe.errors import (
        OptionError,
        PrerequisiteError,
        RunError,
        SourceError,
        SqeError,
        StaleBatchError,
        StateError,
        TopologyError,
    )
    from sqe.lang.topology import Topology
    from sqe.wire.keys import StreamMetadata, decode_keys, encode_keys, pid_for

#: Public name -> the module that defines it.
_EXPORTS = {
    "load_topology": "sqe.api", "validate": "sqe.api", "run": "sqe.api",
    "RunResult": "sqe.api", "TopologyPlan": "sqe.config.plan", "Topology": "sqe.lang.topology",
    "StreamMetadata": "sqe.wire.keys", "decode_keys": "sqe.wire.keys",
    "encode_keys": "sqe.wire.keys", "pid_for": "sqe.wire.keys",
    **{name: "sqe.errors" for name in ("SqeError", "OptionError", "TopologyError",
                                       "PrerequisiteError", "SourceError", "StateError",
                                       "StaleBatchError", "RunError")},
}

__all__ = [
    "__version__", "load_topology", "validate", "run", "RunResult", "TopologyPlan", "Topology",
    "StreamMetadata", "decode_keys", "encode_keys", "pid_for", "SqeError", "OptionError",
    "TopologyError", "PrerequisiteError", "SourceError", "StateError", "StaleBatchError",
    "RunError",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sqe' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
