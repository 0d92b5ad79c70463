"""The states a topology may write to, by ``stateName``: one line each.

A new state is a module with a :class:`~state.sink.Sink` subclass and a line in
:data:`SINKS`; ``sqe validate`` and ``sqe run`` know it from here (a
``stateName`` outside :data:`SINKS` is refused when the topology is loaded).
"""

from __future__ import annotations

from state.console import ConsoleSink
from state.kafka.sink import KafkaSink
from state.postgres.sink import PostgresSink
from state.redis.sink import RedisSink
from state.sink import Sink, SinkTarget

__all__ = ["SINKS", "sink_for", "sink_problems"]

#: Every state, by stateName.
SINKS: dict[str, type[Sink]] = {
    "KAFKA": KafkaSink,
    "REDIS": RedisSink,
    "POSTGRES": PostgresSink,
    "CONSOLE": ConsoleSink,
}


def sink_for(state_name: str, target: SinkTarget) -> Sink:
    """The sink of a query that writes ``target`` to the state ``state_name``."""
    return SINKS[state_name].create(target)


def sink_problems(state_name: str, target: SinkTarget) -> list[str]:
    """What ``target`` lacks to be written to ``state_name``, one located sentence each."""
    return SINKS[state_name].problems(target)
