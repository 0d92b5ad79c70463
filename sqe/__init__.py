"""SQE on Spark: declarative stream-processing topologies on Spark Structured Streaming.

The public surface is small: the StreamMetadata codec, topology loading and
planning, and the error classes.  Everything else is reached through its
module (``sqe.config.options``, ``sqe.config.settings``, ...).
"""

from __future__ import annotations

__version__ = "0.1.0"

from sqe.config.plan import TopologyPlan, plan_topology
from sqe.errors import OptionError, PrerequisiteError, SqeError, TopologyError
from sqe.lang.topology import Topology, load_topology
from sqe.wire.keys import StreamMetadata, decode_keys, encode_keys, pid_for

__all__ = [
    "__version__",
    "StreamMetadata",
    "decode_keys",
    "encode_keys",
    "pid_for",
    "Topology",
    "load_topology",
    "TopologyPlan",
    "plan_topology",
    "SqeError",
    "OptionError",
    "TopologyError",
    "PrerequisiteError",
]
