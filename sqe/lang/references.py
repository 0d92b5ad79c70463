"""What each query reads: the field names of its expressions, with where they are.

A query reads fields in its ``select`` expressions (aggregations' arguments included)
and its ``where``: a field expression names one, and a ``{sql: ...}`` string names the
columns :func:`~sqe.lang.sql.sql_columns` finds in it.  :func:`query_references`
lists them with their place in the query (``select -> expression 2``, ``where -> and
-> argument 1 -> sql``), for the messages of a check against a stream's fields
(:mod:`sqe.config.fields`); :func:`stream_references` gives, per stream, the names
its queries read (what a JSON stream without declared fields must supply at run
time; the deserializer makes the missing ones NULL).

Example::

    >>> from sqe.lang.expressions import parse_expression
    >>> expr = parse_expression({"If": ["ok", {"sql": "upper(region)"}, 0]})
    >>> [(r.where, r.name) for r in expression_references(expr, ("where",))]
    [('where -> if -> argument 1', 'ok'), ('where -> if -> argument 2 -> sql', 'region')]
"""

from __future__ import annotations

from dataclasses import dataclass

from sqe.lang.expressions import Expression, Field, Sql, walk
from sqe.lang.sql import SqlSyntaxError, sql_columns
from sqe.lang.topology import Query, Topology

__all__ = ["Reference", "expression_references", "query_fields", "query_references",
           "stream_references"]


@dataclass(frozen=True)
class Reference:
    """One field a query reads: its name, its place in the query and, for a name read in a
    Spark SQL string, the string and the name's 0-based offset in it."""

    place: tuple[str, ...]
    name: str
    sql: str | None = None
    offset: int = 0

    @property
    def where(self) -> str:
        """The place as messages say it (``select -> expression 2``)."""
        return " -> ".join(self.place)


def expression_references(expr: Expression, place: tuple[str, ...]) -> list[Reference]:
    """The fields ``expr`` reads, in order; a Spark SQL string that does not parse reads
    none (its syntax error is reported where it is loaded)."""
    found = []
    for path, node in walk(expr, place):
        if isinstance(node, Field):
            found.append(Reference(path, node.name))
        elif isinstance(node, Sql):
            try:
                columns = sql_columns(node.text)
            except SqlSyntaxError:
                continue
            found += [Reference((*path, "sql"), c.name, node.text, c.offset) for c in columns]
    return found


def query_references(query: Query) -> list[Reference]:
    """The fields a query reads: its selected expressions' in order, then its where's."""
    found = []
    for i, expr in enumerate(query.select.expressions):
        found += expression_references(expr, ("select", f"expression {i + 1}"))
    if query.where is not None:
        found += expression_references(query.where, ("where",))
    return found


def query_fields(query: Query) -> list[str]:
    """The names of the fields a query reads, each once, in order."""
    return list(dict.fromkeys(r.name for r in query_references(query)))


def stream_references(topology: Topology) -> dict[str, list[str]]:
    """Per stream a query reads (a ``CreateStream``'s ``streamName``, or a query's output by
    its ``objectName``), the names of the fields its queries read, each once, in file order."""
    found: dict[str, list[str]] = {}
    for query in topology.queries:
        names = found.setdefault(query.from_.objectName, [])
        names += [n for n in query_fields(query) if n not in names]
    return found
