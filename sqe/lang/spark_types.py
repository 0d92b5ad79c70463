"""Spark SQL type names (``bigint``, ``decimal(10,2)``, ``array<string>``, ``struct<a: int>``)
checked without Spark, as Spark's ``DataType.fromDDL`` reads them.

Used for the declared fields of a JSON stream (``jw.sqe.spout.fields``), whose types the
deserializer extracts the values as; so a misspelt type fails validation, not the first
batch.  Pure Python (the option registry imports it on the executors too).

Example::

    >>> type_problem("map<string, array<bigint>>") is None
    True
    >>> type_problem("bigitn")
    'bigitn is not a Spark SQL type; did you mean bigint?'
"""

from __future__ import annotations

import difflib
import re

__all__ = ["PRIMITIVE_TYPES", "type_problem"]

#: Spark's type names that take no type arguments (matched case-insensitively).
PRIMITIVE_TYPES = ("boolean", "tinyint", "byte", "smallint", "short", "int", "integer", "bigint",
                   "long", "float", "real", "double", "decimal", "dec", "numeric", "string",
                   "char", "character", "varchar", "binary", "date", "timestamp",
                   "timestamp_ltz", "timestamp_ntz", "time", "variant", "void", "interval")
_SIZED = {"decimal": 2, "dec": 2, "numeric": 2, "char": 1, "character": 1, "varchar": 1,
          "time": 1}
_UNITS = ("year", "month", "day", "hour", "minute", "second")
_TOKEN = re.compile(r"\s*(?:(`(?:[^`]|``)*`)|('(?:[^'\\]|\\.)*')|(\w+)|(\S))")


class _Bad(ValueError):
    pass


class _Reader:
    def __init__(self, text: str) -> None:
        self.tokens = [m.group(0).strip() for m in _TOKEN.finditer(text) if m.group(0).strip()]
        self.i = 0

    def peek(self) -> str:
        return self.tokens[self.i].lower() if self.i < len(self.tokens) else ""

    def take(self, *expected: str) -> str:
        token = self.peek()
        if expected and token not in expected:
            raise _Bad(f"expected {' or '.join(expected)} "
                       f"{'at the end' if not token else 'before ' + self.tokens[self.i]}")
        self.i += 1
        return token

    def type(self) -> None:
        name = self.take()
        if name in ("array", "map", "struct"):
            self.take("<")
            if name == "array":
                self.type()
            elif name == "map":
                self.type()
                self.take(",")
                self.type()
            elif self.peek() != ">":
                self.field()
                while self.peek() == ",":
                    self.take(",")
                    self.field()
            self.take(">")
        elif name == "interval":
            if self.peek() in _UNITS:
                self.take()
                if self.peek() == "to":
                    self.take("to")
                    self.take(*_UNITS)
        elif name in PRIMITIVE_TYPES:
            if name in _SIZED and self.peek() == "(":
                self.take("(")
                self.number()
                if _SIZED[name] == 2 and self.peek() == ",":
                    self.take(",")
                    self.number()
                self.take(")")
            if name == "string" and self.peek() == "collate":
                self.take("collate")
                self.take()
        else:
            close = difflib.get_close_matches(name, PRIMITIVE_TYPES + ("array", "map", "struct"), 1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise _Bad(f"{name or 'nothing'} is not a Spark SQL type{hint}")

    def number(self) -> None:
        if not self.peek().isdigit():
            raise _Bad(f"expected a number before {self.peek() or 'the end'}")
        self.take()

    def field(self) -> None:
        if not self.take():
            raise _Bad("expected a field name")
        if self.peek() == ":":
            self.take(":")
        self.type()
        if self.peek() == "not":
            self.take("not")
            self.take("null")
        if self.peek() == "comment":
            self.take("comment")
            if not self.peek().startswith("'"):
                raise _Bad("expected a quoted comment")
            self.take()


def type_problem(text: str) -> str | None:
    """Why ``text`` is not a Spark SQL type, or ``None`` when it is one."""
    reader = _Reader(text)
    try:
        reader.type()
        if reader.peek():
            raise _Bad(f"unexpected {reader.tokens[reader.i]} after the type")
    except _Bad as exc:
        return str(exc) if reader.i <= 1 and "Spark SQL type" in str(exc) else f"{text}: {exc}"
    return None
