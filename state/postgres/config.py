"""Where one query's Postgres state writes: its table, the server, the fields and the key
fields a row replaces its key's by, and how long a commit is sent again
(:class:`PostgresStateConfig`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.postgres.batches import qualified
from state.sink import SinkTarget

__all__ = ["PostgresStateConfig"]


@dataclass(frozen=True)
class PostgresStateConfig:
    """Where one query writes in Postgres."""

    table: str
    dsn: str
    fields: tuple[str, ...]
    retry_s: float = 30.0  # jw.sqe.state.postgres.commitRetrySeconds
    keys: tuple[str, ...] = ()  # jw.sqe.state.postgres.keyFields: a row replaces its key's

    @classmethod
    def of(cls, target: SinkTarget) -> PostgresStateConfig:
        """The config of a query's Postgres state (its DSN checked by :meth:`PostgresSink.problems`)."""
        settings = target.settings.postgres
        return cls(target.name, settings.dsn or "", target.fields, settings.commit_retry,
                   tuple(settings.key_fields or ()))

    @property
    def schema_and_table(self) -> tuple[str | None, str]:
        """``(schema or None, table)`` of ``objectName`` (``schema.table`` or ``table``)."""
        schema, dot, table = self.table.partition(".")
        return (schema, table) if dot else (None, self.table)

    @property
    def target(self) -> Any:
        """The quoted (maybe schema-qualified) name of the table."""
        return qualified(*self.schema_and_table)
