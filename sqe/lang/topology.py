"""Topology files: the SQE command model, loaded from YAML or JSON and validated.

A topology file is a list of single-key commands, exactly as in the original
SQE (``Set``, ``CreateStream``, ``Query``; command names matched
case-insensitively).  :func:`load_topology` parses and validates a file with
pydantic and returns a frozen :class:`Topology`; every problem is reported
with the file, the 1-based command index and the path inside the command::

    topologies/enrich.yaml: command 2 (Query) -> insertInto -> stateName:
    expected one of KAFKA, REDIS, POSTGRES, CONSOLE

Cross-command checks (unknown ``from`` streams, field counts) are made
here as well; option values are validated by :mod:`sqe.config.plan`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, Union, cast

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from sqe.errors import TopologyError
from sqe.lang.documents import SyntaxProblem, load_text
from sqe.lang.expressions import (
    Expression,
    ExpressionError,
    Sql,
    contains_aggregate,
    parse_expression,
    walk,
)
from sqe.lang.sql import SqlSyntaxError, position, sql_columns

__all__ = [
    "SetCommand",
    "CreateStream",
    "InsertInto",
    "Select",
    "From",
    "Query",
    "Command",
    "Topology",
    "load_topology",
    "parse_commands",
    "sql_error",
]

StateType = Literal["TRANSACTIONAL", "OPAQUE", "NON_TRANSACTIONAL"]
SpoutName = Literal["KAFKA", "FIXED"]
Deserializer = Literal["identity", "json"]


def _upper(value: Any) -> Any:
    return value.strip().upper() if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.strip().lower() if isinstance(value, str) else value


def _empty_as_none(value: Any) -> Any:
    value = _upper(value)
    return None if value == "" else value


def _expression(value: Any) -> Expression:
    try:
        expr = parse_expression(value)
        for path, node in walk(expr):
            if isinstance(node, Sql):
                try:
                    sql_columns(node.text)
                except SqlSyntaxError as exc:
                    raise ExpressionError((*path, "sql"), sql_error(node.text, exc)) from None
        return expr
    except ExpressionError as exc:
        raise PydanticCustomError(
            "sqe_expression", "{message}", {"message": exc.message, "subpath": list(exc.path)}
        ) from None


def sql_error(text: str, exc: SqlSyntaxError) -> str:
    """The message of a Spark SQL string that does not parse: where in it, and why."""
    return f"{exc.kind} at {position(text, exc.offset)} of {json.dumps(text)}: {exc.problem}"


Expr = Annotated[Any, BeforeValidator(_expression)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SetCommand(_Model):
    """``Set {key, value}``: a topology-wide option for the commands after it."""

    key: str
    value: Any


class CreateStream(_Model):
    """``CreateStream``: an input stream named ``streamName`` reading ``objectName``."""

    streamName: str = Field(min_length=1)
    objectName: str = Field(min_length=1)
    spoutName: Annotated[SpoutName, BeforeValidator(_upper)]
    spoutType: Annotated[StateType | None, BeforeValidator(_upper)] = None
    deserializer: Annotated[Deserializer | None, BeforeValidator(_lower)] = None
    options: dict[str, Any] = Field(default_factory=dict)


class InsertInto(_Model):
    """Where a query's rows go: a state (``stateName``) or, without one, a named stream."""

    objectName: str = Field(min_length=1)
    stateName: Annotated[str | None, BeforeValidator(_empty_as_none)] = None
    stateType: Annotated[StateType | None, BeforeValidator(_upper)] = None
    fields: list[str] = Field(min_length=1)
    options: dict[str, Any] = Field(default_factory=dict)

    @field_validator("stateName")
    @classmethod
    def _known_state(cls, name: str | None, info: ValidationInfo) -> str | None:
        known = (info.context or {}).get("state_names")
        if name is not None and known is not None and name not in known:
            raise PydanticCustomError("state_name", "expected one of {names}",
                                      {"names": ", ".join(known)})
        return name


class Select(_Model):
    """The selected expressions, in output order."""

    expressions: list[Expr] = Field(min_length=1)


class From(_Model):
    """The stream a query reads: a ``CreateStream`` or an earlier query's output."""

    objectName: str = Field(min_length=1)


class Query(_Model):
    """``Query {insertInto, select, from, where}``."""

    insertInto: InsertInto
    select: Select
    from_: From = Field(alias="from")
    where: Expr | None = None


Command = Union[SetCommand, CreateStream, Query]
_COMMANDS: dict[str, tuple[str, type[_Model]]] = {
    "set": ("Set", SetCommand),
    "createstream": ("CreateStream", CreateStream),
    "query": ("Query", Query),
}


@dataclass(frozen=True)
class Topology:
    """A validated topology file: its path, default name and commands in file order."""

    path: str
    name: str
    commands: tuple[Command, ...]

    @property
    def streams(self) -> list[CreateStream]:
        """The ``CreateStream`` commands."""
        return [c for c in self.commands if isinstance(c, CreateStream)]

    @property
    def queries(self) -> list[Query]:
        """The ``Query`` commands."""
        return [c for c in self.commands if isinstance(c, Query)]

    def label(self, command: Command) -> str:
        """``command N (Kind)`` for messages, N being the 1-based position in the file."""
        index = next(i for i, c in enumerate(self.commands) if c is command)
        return f"command {index + 1} ({_kind(command)})"


def _kind(command: Command) -> str:
    return {SetCommand: "Set", CreateStream: "CreateStream", Query: "Query"}[type(command)]


#: A list's name in pydantic's locations -> what one of its items is called in messages.
_ITEMS = {"expressions": "expression", "fields": "field"}


def _location(loc: Sequence[Any]) -> list[str]:
    """Pydantic's location as the messages say it: ``select -> expression 1`` (1-based, as
    commands, arguments and rows are) for ``select -> expressions -> 0``; an index right after
    another (a list in a list) is ``item N`` of its own: ``values item 1 -> item 3``."""
    out: list[str] = []
    after_index = False
    for i, part in enumerate(loc):
        if part == "[key]":  # pydantic's mark after a map key that is wrong
            continue
        if i + 1 < len(loc) and loc[i + 1] == "[key]":
            out.append(f"key {part}")
        elif isinstance(part, int) and not isinstance(part, bool):
            if out and not after_index:
                name = out.pop()
                out.append(f"{_ITEMS.get(name, name + ' item')} {part + 1}")
            else:
                out.append(f"item {part + 1}")
            after_index = True
            continue
        else:
            out.append("from" if part == "from_" else str(part))
        after_index = False
    return out


def _describe_error(err: dict[str, Any], model: type[_Model]) -> tuple[list[str], str]:
    loc = _location(err["loc"])
    kind, ctx = err["type"], err.get("ctx") or {}
    if kind == "sqe_expression":
        return loc + ctx.get("subpath", []), ctx["message"]
    if kind == "literal_error":
        expected = ctx.get("expected", "").replace("'", "").replace(" or ", ", ")
        return loc, f"expected one of {expected}"
    if kind == "missing":
        return loc, "is required"
    if kind == "extra_forbidden":
        return loc, "is not a known field" + _known_fields(model, loc)
    texts = {
        "string_type": "expected a string",
        "list_type": "expected a list",
        "dict_type": "expected a map of key: value",
        "model_type": "expected a map",
        "too_short": "must not be empty",
        "string_too_short": "must not be empty",
    }
    return loc, texts.get(kind, err["msg"])


def _known_fields(model: type[_Model], loc: list[str]) -> str:
    for part in loc[:-1]:
        info = model.model_fields.get(part if part != "from" else "from_")
        inner = getattr(info, "annotation", None) if info else None
        if isinstance(inner, type) and issubclass(inner, _Model):
            model = inner
        else:
            return ""
    names = [f.alias or n for n, f in model.model_fields.items()]
    return f" (expected {', '.join(names)})"


def _what(value: Any) -> str:
    """What a YAML/JSON value is, in a message: ``a map``, ``a string``, ..."""
    names = {dict: "a map", str: "a string", bool: "a boolean", int: "a number",
             float: "a number"}
    return names.get(type(value), f"a {type(value).__name__}")


def parse_commands(raw: Any, source: str, state_names: Sequence[str] | None = None
                   ) -> tuple[Command, ...]:
    """Validate a raw command list; all problems are collected into one :class:`TopologyError`.

    ``state_names`` are the ``stateName`` values a query may use (None: any).
    """
    if not isinstance(raw, list):
        got = "an empty file" if raw is None else f"{_what(raw)}"
        raise TopologyError(f"{source}: a topology file must be a list of commands "
                            f"(Set, CreateStream, Query), got {got}")
    commands: list[Command] = []
    problems: list[str] = []
    for i, item in enumerate(raw):
        where = f"{source}: command {i + 1}"
        if not isinstance(item, dict) or len(item) != 1:
            problems.append(f"{where}: expected a map with exactly one key "
                            f"(Set, CreateStream or Query)")
            continue
        ((name, body),) = item.items()
        known = _COMMANDS.get(str(name).lower())
        if known is None:
            problems.append(f"{where}: unknown command {name}; expected Set, CreateStream or Query")
            continue
        label, model = known
        try:
            command = model.model_validate(body, context={"state_names": state_names})
            commands.append(cast(Command, command))
        except ValidationError as exc:
            for err in exc.errors():
                loc, text = _describe_error(dict(err), model)
                path = " -> ".join([f"{where} ({label})", *loc])
                problems.append(f"{path}: {text}")
    if problems:
        raise TopologyError(problems)
    return tuple(commands)


def _check_structure(path: str, topology: Topology) -> None:
    problems: list[str] = []
    if not topology.streams:
        problems.append(f"{path}: no CreateStream command; a topology needs an input stream")
    if not topology.queries:
        problems.append(f"{path}: no Query command; a topology needs at least one query")
    defined: set[str] = set()
    for command in topology.commands:
        where = f"{path}: {topology.label(command)}"
        if isinstance(command, CreateStream):
            if command.streamName in defined:
                problems.append(f"{where} -> streamName: {command.streamName} is already defined")
            defined.add(command.streamName)
        elif isinstance(command, Query):
            if command.from_.objectName not in defined:
                known = ", ".join(sorted(defined)) or "none yet"
                problems.append(f"{where} -> from -> objectName: no stream named "
                                f"{command.from_.objectName} before this query (known: {known})")
            n_fields, n_expr = len(command.insertInto.fields), len(command.select.expressions)
            if n_fields != n_expr:
                problems.append(f"{where} -> insertInto -> fields: {n_fields} field name(s) for "
                                f"{n_expr} selected expression(s); they must match one to one")
            if command.where is not None and contains_aggregate(command.where):
                problems.append(f"{where} -> where: an aggregation cannot be used in where")
            # As in SQE, every query's output is a stream later queries may read.
            defined.add(command.insertInto.objectName)
    if problems:
        raise TopologyError(problems)


def load_topology(path: str | Path, name: str | None = None,
                  state_names: Sequence[str] | None = None) -> Topology:
    """Load and validate a topology file (YAML, or JSON by its ``.json`` suffix).

    ``name`` is the topology name used in PIDs; it defaults to the file's stem.
    ``state_names`` are the states a query may write to (None: any; ``sqe`` passes
    those of ``sqe.state.registry``).
    """
    p = Path(path)
    try:
        raw = load_text(p)
    except OSError as exc:
        raise TopologyError(f"{p}: cannot read topology file ({exc.strerror})") from None
    except SyntaxProblem as exc:
        raise TopologyError(exc.located(str(p))) from None
    commands = parse_commands(raw, str(p), state_names)
    topology = Topology(str(p), name or p.stem, commands)
    _check_structure(str(p), topology)
    return topology

