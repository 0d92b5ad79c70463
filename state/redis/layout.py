"""Where a Redis state's rows go: the server, and how keys and hash fields are built from fields.

Both Redis states, plain (:mod:`sqe.state.redis.sink`) and aggregating
(:mod:`sqe.state.redis.aggregates`), join the values of ``keyname.fields`` (and,
for ``datatype: HASH``, of ``fieldname.fields``) with the delimiter, and may
expire what they write; :class:`RedisLayout` holds that, :func:`joined` builds
the joined column with Spark built-ins.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column
from pyspark.sql import functions as F

from sqe.config.redis_endpoint import RedisEndpoint
from sqe.wire.columns import field_column

__all__ = ["RedisLayout", "joined"]


@dataclass(frozen=True)
class RedisLayout:
    """A Redis state's server and key layout (what each of its tasks is sent)."""

    name: str  # the state's objectName
    endpoint: RedisEndpoint
    datatype: str  # STRING | HASH
    key_fields: tuple[str, ...]
    hash_fields: tuple[str, ...]
    delimiter: str
    expire_seconds: int

    @property
    def url(self) -> str:
        """The Redis URL of this state, without its password (for messages)."""
        return self.endpoint.display


def joined(parts: Sequence[str | Column], delimiter: str) -> Column:
    """The parts joined by ``delimiter``: a field name as its value's string, a Column as it is."""
    return F.concat_ws(delimiter, *[field_column(p).cast("string") if isinstance(p, str) else p
                                    for p in parts])
