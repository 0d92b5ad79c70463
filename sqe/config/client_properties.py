"""Which librdkafka properties a stream's consumers and a Kafka state's producers are built with.

A stream's consumers get, in order: SQE's own stream keys translated to
properties (``clientid`` -> ``client.id``, ``fetchSizeBytes`` ->
``max.partition.fetch.bytes``, ``bufferSizeBytes`` ->
``socket.receive.buffer.bytes``), then every
``jw.sqe.spout.kafka.consumer.<property>``.  A Kafka state's producers get
every ``jw.sqe.state.kafka.producer.<property>``.  The same properties reach
every client of that stream or state: the executors' consumers and
producers, the driver's metadata look-ups and a stream's dead-letter
producer (its connection properties only).

:func:`property_problems` checks them before Spark starts: an SQE key and
the property it stands for given with different values, and whatever
librdkafka itself refuses (unknown names, bad values, unreadable
certificate files), each named by key and origin.

    >>> from sqe.config.settings import Settings
    >>> s = Settings.defaults().overlay({"jw.sqe.spout.kafka.clientid": "etl",
    ...     "jw.sqe.spout.kafka.consumer.security.protocol": "SSL"}, "conf.yaml")
    >>> consumer_properties(s)
    {'client.id': 'etl', 'security.protocol': 'SSL'}
"""

from __future__ import annotations

import re
from typing import Literal

from sqe.clients.kafka import check_properties
from sqe.config.registry import CONSUMER_PREFIX, JAVA_PROPERTIES, PRODUCER_PREFIX
from sqe.config.settings import Settings

__all__ = ["SQE_PROPERTY_KEYS", "consumer_properties", "producer_properties", "property_problems"]

#: SQE stream keys that stand for a consumer property.
SQE_PROPERTY_KEYS = {
    "jw.sqe.spout.kafka.clientid": "client.id",
    "jw.sqe.spout.kafka.fetchSizeBytes": "max.partition.fetch.bytes",
    "jw.sqe.spout.kafka.bufferSizeBytes": "socket.receive.buffer.bytes",
}

_UNKNOWN = re.compile(r'No such configuration property: "([^"]+)"')


def consumer_properties(settings: Settings) -> dict[str, str]:
    """The librdkafka properties of a stream's consumers."""
    out = {prop: str(settings[key]) for key, prop in SQE_PROPERTY_KEYS.items()
           if settings[key] is not None}
    out.update(settings.properties(CONSUMER_PREFIX))
    return out


def producer_properties(settings: Settings) -> dict[str, str]:
    """The librdkafka properties of a Kafka state's producers."""
    return settings.properties(PRODUCER_PREFIX)


def property_problems(settings: Settings, role: Literal["consumer", "producer"],
                      where: str) -> list[str]:
    """What is wrong with the client properties of one stream (consumer) or state (producer)."""
    prefix = CONSUMER_PREFIX if role == "consumer" else PRODUCER_PREFIX
    given = settings.properties(prefix)
    problems = []
    if role == "consumer":
        for key, prop in SQE_PROPERTY_KEYS.items():
            if settings[key] is not None and prop in given and str(settings[key]) != given[prop]:
                problems.append(
                    f"{where}: {key} ({settings.origin(key)}) and {prefix}{prop} "
                    f"({settings.origin(prefix + prop)}) set the same property differently; "
                    "keep one")
    for name in given:
        if name in JAVA_PROPERTIES:
            problems.append(f"{where}: {prefix}{name} ({settings.origin(prefix + name)}): "
                            f"librdkafka has no {role} property {name} ({name} is a Java "
                            f"client property; {JAVA_PROPERTIES[name]})")
    properties = consumer_properties(settings) if role == "consumer" else given
    properties = {k: v for k, v in properties.items() if k not in JAVA_PROPERTIES}
    while properties:  # librdkafka names one unknown property at a time: report them all
        refused = check_properties(role, properties)
        if refused is None:
            return problems
        unknown = _UNKNOWN.search(refused)
        if not (unknown and unknown.group(1) in given):
            break
        name = unknown.group(1)
        problems.append(f"{where}: {prefix}{name} ({settings.origin(prefix + name)}): "
                        f"librdkafka has no {role} property {name}")
        del properties[name]
    else:
        return problems
    origins = ", ".join(sorted({settings.origin(prefix + k) for k in given})) or "SQE keys"
    problems.append(f"{where}: the Kafka {role} properties ({origins}) are refused by "
                    f"librdkafka: {refused}")
    return problems
