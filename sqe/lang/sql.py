"""Spark SQL expression strings (``{sql: ...}``) read without Spark: their syntax and the
columns they name.

Spark's own parser needs a JVM; :func:`sql_columns` parses with sqlglot instead (its
``databricks`` dialect: Spark's, plus the ``v:path`` extraction Spark 4 reads on VARIANT
and strings), as one expression the way ``F.expr`` does (an alias is allowed, a second
expression or a clause such as ``FROM`` is not).  A string that does not parse is a
:class:`SqlSyntaxError` with its 0-based ``offset`` (:func:`position` says it as
``column N`` or ``line L, column N``).  The columns are the names the string reads from
its frame: the first part of ``s.field`` (``s``), not lambda variables (``x -> x + 1``),
columns of a subquery, or SQL's functions without parentheses (``current_date``,
``user``, ...).  A call of a function that is not one of Spark's built-ins
(:data:`~sqe.lang.spark_names.SPARK_FUNCTIONS`) is refused the same way, naming the
closest built-in; a catalog-qualified ``db.f(...)`` is left to Spark.

Example::

    >>> [c.name for c in sql_columns("concat(_partition, ':', upper(region))")]
    ['_partition', 'region']
    >>> sql_columns("upper(region))")
    Traceback (most recent call last):
    ...
    sqe.lang.sql.SqlSyntaxError: syntax error at column 14: unexpected ')'
    >>> sql_columns("uppr(region)")
    Traceback (most recent call last):
    ...
    sqe.lang.sql.SqlSyntaxError: unknown function at column 1: uppr; did you mean upper?
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from sqe.lang.spark_names import SPARK_FUNCTIONS

__all__ = ["NILADIC", "SqlColumn", "SqlSyntaxError", "position", "sql_columns"]

_DIALECT = "databricks"
#: Parsed as ``SELECT\n<text>``: positions on the text's first line keep their column.
_PREFIX = "SELECT\n"
#: SQL functions Spark calls without parentheses when no column has the name.
NILADIC = frozenset({"current_date", "current_time", "current_timestamp", "current_user",
                     "session_user", "user"})
#: Spark operators sqlglot's tokenizer lacks -> a spelling of the same length it reads.
_SPELLINGS = ((">>>", ">> "),)


@dataclass(frozen=True, slots=True)
class SqlColumn:
    """A column an SQL string reads, with the 0-based offset of its name in the string."""

    name: str
    offset: int


class SqlSyntaxError(ValueError):
    """An SQL string that is not one Spark SQL expression; ``offset`` is where (0-based),
    ``kind`` what is wrong there (``syntax error``, ``unknown function``)."""

    def __init__(self, text: str, offset: int, problem: str, kind: str = "syntax error"
                 ) -> None:
        self.offset = offset
        self.problem = problem
        self.kind = kind
        super().__init__(f"{kind} at {position(text, offset)}: {problem}")


def position(text: str, offset: int) -> str:
    """``column N`` (1-based) of an offset in ``text``, with ``line L, `` when it has lines."""
    before = text[:max(0, offset)]
    line, column = before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1
    return f"line {line}, column {column}" if "\n" in text else f"column {column}"


def _offset(text: str, line: int, end_column: int, token: str) -> int:
    """The offset in ``text`` of a token sqlglot reports by its line and last column."""
    lines = (_PREFIX + text).split("\n")
    at = sum(len(x) + 1 for x in lines[:max(0, line - 1)]) + end_column - len(token)
    return min(max(0, at - len(_PREFIX)), len(text))


def _unclosed_quote(text: str) -> int:
    """The offset of a quote that is never closed (0 when none is found)."""
    quote, start, i = "", 0, 0
    while i < len(text):
        ch = text[i]
        if quote and ch == "\\" and quote != "`":
            i += 1
        elif quote and ch == quote:
            quote = "" if text[i + 1:i + 2] != quote else quote
            i += 0 if quote == "" else 1
        elif not quote and ch in "'\"`":
            quote, start = ch, i
        i += 1
    return start if quote else 0


def _problem(description: str, token: str) -> str:
    if description.startswith("Required keyword") or description.startswith("Expected"):
        what = description if description.startswith("Expected") else "incomplete expression"
        return f"{what[0].lower()}{what[1:]} near '{token}'"
    if description.startswith("Expecting"):
        return f"expected {description.split(' ', 1)[1]} near '{token}'"
    return f"unexpected '{token}'"


def _parse(text: str) -> exp.Select:
    source = text
    for spelling, same in _SPELLINGS:
        source = source.replace(spelling, same)
    try:
        tree = sqlglot.parse_one(_PREFIX + source, read=_DIALECT)
    except TokenError:
        raise SqlSyntaxError(text, _unclosed_quote(text), "a quote is not closed") from None
    except RecursionError:  # sqlglot parses nested expressions recursively
        raise SqlSyntaxError(text, 0, "it nests too deeply to be read (parentheses, NOT, "
                                      "CASE, ... inside one another)") from None
    except ParseError as exc:
        err = exc.errors[0] if exc.errors else {}
        token = str(err.get("highlight") or "")
        at = _offset(text, int(err.get("line") or 2), int(err.get("col") or 0), token)
        problem = _problem(str(err.get("description") or "not an expression"), token)
        raise SqlSyntaxError(text, at, problem) from None
    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1:
        raise SqlSyntaxError(text, 0, "expected one expression (a list of expressions "
                                      "needs one {sql: ...} each)")
    extra = [key.rstrip("_").rstrip("s").upper() for key, value in tree.args.items()
             if value and key != "expressions"]
    if extra:
        clause = re.search(rf"\b{extra[0]}\b", text, re.IGNORECASE)
        raise SqlSyntaxError(text, clause.start() if clause else 0,
                             f"expected one expression, not a query ({extra[0]} ...)")
    _check_functions(text, tree)
    return tree


def _check_functions(text: str, tree: exp.Select) -> None:
    """Every function the string calls by a name sqlglot does not know must be one of Spark's
    built-ins (a qualified ``catalog.db.f(...)`` is left to Spark)."""
    for call in tree.find_all(exp.Anonymous):
        name = call.name
        if isinstance(call.parent, exp.Dot) or name.lower() in SPARK_FUNCTIONS:
            continue
        close = difflib.get_close_matches(name.lower(), SPARK_FUNCTIONS, n=1, cutoff=0.75)
        hint = f"; did you mean {close[0]}?" if close else " (not one of Spark's built-ins)"
        start = int(call.meta.get("start", len(_PREFIX)))
        raise SqlSyntaxError(text, max(0, start - len(_PREFIX)), f"{name}{hint}",
                             "unknown function")


def _bound(col: exp.Column, name: str) -> bool:
    """Whether ``name`` is a variable of a lambda around ``col`` (``x`` in ``x -> x + 1``)."""
    fn = col.find_ancestor(exp.Lambda)
    while fn is not None:
        if any(v.name.lower() == name.lower() for v in fn.expressions):
            return True
        fn = fn.find_ancestor(exp.Lambda)
    return False


@lru_cache(maxsize=1024)
def sql_columns(text: str) -> tuple[SqlColumn, ...]:
    """The columns an SQL expression string reads, in order of appearance (a name may
    repeat); a string that is not one expression is a :class:`SqlSyntaxError`."""
    tree = _parse(text)
    found = []
    for col in tree.find_all(exp.Column):
        if col.find_ancestor(exp.Select) is not tree or not col.parts:
            continue  # a subquery's column names its own table's
        ident = col.parts[0]
        name = ident.name
        if not name or _bound(col, name):
            continue
        if name.lower() in NILADIC and len(col.parts) == 1 and not ident.args.get("quoted"):
            continue
        start = int(ident.meta.get("start", len(_PREFIX)))
        found.append(SqlColumn(name, max(0, start - len(_PREFIX))))
    return tuple(sorted(found, key=lambda c: c.offset))

