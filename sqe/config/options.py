"""What a ``jw.sqe.*`` option is, and turning a raw value into a typed one and back.

:class:`Option` declares one key: its kind, default, doc, scope and checks.
:func:`coerce` turns a raw value into the option's type: values arrive typed from
YAML/JSON files and as strings from ``--conf``, Spark conf and reader options, so
every kind accepts its string spelling too (``"true"``, ``"42"``, ``"a,b"``).
:func:`render` is its inverse, the string a value travels as in Spark reader
options.  The declarations themselves are :mod:`sqe.config.registry`.

Example::

    >>> o = Option("jw.sqe.x", "list", None, "doc")
    >>> coerce(o, "a,b", "--conf"), render(o, ["a", "b"])
    (['a', 'b'], '["a", "b"]')
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from sqe.errors import OptionError
from sqe.lang.documents import SyntaxProblem, load_yaml
from sqe.lang.expressions import Constant, ExpressionError, Field, parse_expression, to_raw

__all__ = ["Option", "OptionKind", "PREFIX", "Scope", "coerce", "render"]

PREFIX = "jw.sqe."

OptionKind = Literal["bool", "int", "float", "str", "list", "choice", "rows", "expression",
                     "property", "fields"]
Scope = Literal["topology", "stream", "state"]


@dataclass(frozen=True, slots=True)
class Option:
    """One declared option.

    ``choices`` (for ``kind="choice"``) are matched case-insensitively and
    normalised to the spelling given here.  ``check`` validates a coerced
    value further and returns an error text or ``None``.  ``ignored`` is set
    for SQE keys accepted for compatibility that have no effect on Spark: it
    says why, and validation reports it as a warning.  ``secret`` values
    (passwords) are shown as ``***`` wherever SQE prints a value.
    """

    key: str
    kind: OptionKind
    default: Any
    doc: str
    scope: Scope = "topology"
    choices: tuple[str, ...] = ()
    minimum: int | None = None
    check: Callable[[Any], str | None] | None = None
    ignored: str | None = None
    secret: bool = False

    @property
    def type_name(self) -> str:
        """A short human name of the accepted type, for docs and errors."""
        if self.kind == "choice":
            return " | ".join(self.choices)
        return {
            "bool": "boolean",
            "int": "integer" if self.minimum is None else f"integer >= {self.minimum}",
            "float": "number",
            "str": "string",
            "list": "list of strings (or comma-separated string)",
            "rows": "list of lists",
            "expression": "SQE expression (a field name, a function tree or {sql: ...})",
            "property": "string, number or boolean (passed to librdkafka as a string)",
            "fields": "map of field name: Spark SQL type (or a list of names)",
        }[self.kind]

    @property
    def expected(self) -> str:
        """What a value must be, as a message says it (``one of a, b``, ``an integer >= 1``)."""
        if self.kind == "choice":
            return "one of " + ", ".join(self.choices)
        name = self.type_name
        return ("an " if name[0] in "aeiou" else "a ") + name

    @property
    def default_text(self) -> str:
        """The default as ``sqe options`` shows it (``-``: none)."""
        if self.default is None:
            return "-"
        if isinstance(self.default, bool):
            return str(self.default).lower()
        if isinstance(self.default, list):
            return "[]" if not self.default else ",".join(self.default)
        return str(self.default)


_INT = re.compile(r"^[+-]?\d+$")


def _parse_structured(text: str) -> Any:
    """An inline YAML/JSON value (``[[a, 1]]``, ``{sql: ...}``); a syntax error says where in
    the value (line and column of the value's text)."""
    try:
        return load_yaml(text, "YAML/JSON")
    except SyntaxProblem as exc:
        at = f"line {exc.line}, column {exc.column}" if "\n" in text else f"column {exc.column}"
        raise OptionError(f"{exc.problem}, at {at} of the value") from None


def _what(value: Any) -> str:
    """What a YAML/JSON value is, in a message: ``a map``, ``a number``, ``null``, ..."""
    if value is None:
        return "null"
    names = {dict: "a map", list: "a list", tuple: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number"}
    return names.get(type(value), f"a {type(value).__name__}")


def _bad_item(items: list[Any] | tuple[Any, ...], ok: type | tuple[type, ...],
              noun: str = "item") -> str:
    """``; item 2 is a map``: the first item of ``items`` that is not ``ok``, numbered from 1
    as everywhere in messages (empty when every item is)."""
    for n, item in enumerate(items, start=1):
        if not isinstance(item, ok):
            return f"; {noun} {n} is {_what(item)}"
    return ""


def _coerce(option: Option, value: Any) -> Any:
    kind = option.kind
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in ("true", "false"):
            return value.strip().lower() == "true"
        raise OptionError("expected true or false")
    if kind == "int":
        if isinstance(value, int) and not isinstance(value, bool):
            result = value
        elif isinstance(value, str) and _INT.match(value.strip()):
            result = int(value.strip())
        else:
            result = None
        if result is None or (option.minimum is not None and result < option.minimum):
            raise OptionError(f"expected an {option.type_name}")
        return result
    if kind == "float":
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                pass
        raise OptionError("expected a number")
    if kind == "str":
        if isinstance(value, str):
            return value
        raise OptionError("expected a string")
    if kind == "choice":
        if isinstance(value, str):
            for choice in option.choices:
                if choice.lower() == value.strip().lower():
                    return choice
        raise OptionError(f"expected one of {', '.join(option.choices)}")
    if kind == "list":
        if isinstance(value, str):
            text = value.strip()
            value = _parse_structured(text) if text.startswith("[") else text.split(",")
        if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            return [v.strip() for v in value if v.strip()]
        raise OptionError("expected a list of strings or a comma-separated string"
                         + (_bad_item(value, str) if isinstance(value, (list, tuple)) else ""))
    if kind == "rows":
        if isinstance(value, str):
            value = _parse_structured(value)
        if isinstance(value, (list, tuple)) and all(isinstance(r, (list, tuple)) for r in value):
            return [list(r) for r in value]
        raise OptionError("expected a list of rows, each a list of values" + (
            _bad_item(value, (list, tuple), "row") if isinstance(value, (list, tuple)) else ""))
    if kind == "fields":
        return _fields(value)
    if kind == "property":
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, (str, int, float)):
            return str(value)
        raise OptionError("expected a string, number or boolean")
    if kind == "expression":
        if isinstance(value, str) and value.strip().startswith("{"):
            value = _parse_structured(value.strip())
        try:
            return parse_expression(value)
        except ExpressionError as exc:
            raise OptionError(str(exc)) from None
    raise AssertionError(f"unhandled option kind {kind}")


def _fields(value: Any) -> dict[str, str | None]:
    """``{name: type}`` (a ``None`` type: not declared) of a map, a list or ``a,b``."""
    if isinstance(value, str):
        text = value.strip()
        value = _parse_structured(text) if text.startswith(("{", "[")) else text.split(",")
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        value = {v: None for v in value if v.strip()}
    if isinstance(value, dict) and all(isinstance(k, str) and k.strip() for k in value) \
            and all(v is None or isinstance(v, str) for v in value.values()):
        return {k.strip(): v.strip() if v else None for k, v in value.items()}
    raise OptionError("expected a map of field name: Spark SQL type (e.g. {id: string, "
                     "amount: bigint}) or a list of field names"
                     + (_bad_item(value, str) if isinstance(value, (list, tuple)) else ""))


def coerce(option: Option, value: Any, origin: str) -> Any:
    """Turn ``value`` into the option's type; a wrong value is an :class:`OptionError`.

    The error names the key, the value and where the value came from.  ``null`` (``None``)
    is no value of any kind: an option is given a value, or left out for its default.
    """
    if value is None:
        default = (f"the default ({option.default_text})" if option.default is not None
                   else "it to stay unset")
        raise OptionError(f"{origin}: {option.key}: null is not a value; expected "
                          f"{option.expected}; leave the key out for {default}")
    try:
        result = _coerce(option, value)
        problem = option.check(result) if option.check else None
    except ValueError as exc:
        problem = str(exc)
    if problem:
        shown = "***" if option.secret else repr(value)
        raise OptionError(f"{origin}: {option.key} = {shown}: {problem}")
    return result


def render(option: Option, value: Any) -> str:
    """The string form of a coerced value that :func:`coerce` reads back as the same value."""
    if option.kind == "bool":
        return "true" if value else "false"
    if option.kind in ("list", "rows", "fields"):
        return json.dumps(value)
    if option.kind == "expression":
        if isinstance(value, Field) and not value.name.startswith(("{", '"')):
            return value.name
        if isinstance(value, Constant):
            return json.dumps({"C": value.value})
        return json.dumps(to_raw(value))
    return str(value)
