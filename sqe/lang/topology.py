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
:func:`read_topology` is the same check keeping every problem instead of raising
them: it gives the commands the checks after this one can take (``sqe validate``
reports everything in one run).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
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
from sqe.lang.problems import (
    describe_error,
    in_file_order,
    known_keys_only,
    stream_names,
    what,
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
    "read_topology",
    "sql_error",
]

StateType = Literal["TRANSACTIONAL", "OPAQUE", "NON_TRANSACTIONAL"]
SpoutName = Literal["KAFKA", "FIXED"]
Deserializer = Literal["identity", "json", "avro", "protobuf"]


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
    """A topology file: its path, default name and commands in file order.

    :func:`load_topology` gives only a valid one.  :func:`read_topology` gives the commands
    the checks after loading can take, each with its place in the file (``numbers``, when a
    command before it was left out), and ``problems``: every located problem found loading the
    file, in file order.
    """

    path: str
    name: str
    commands: tuple[Command, ...]
    numbers: tuple[int, ...] = ()  # each command's 1-based place in the file; () = its position
    problems: tuple[str, ...] = ()

    @property
    def streams(self) -> list[CreateStream]:
        """The ``CreateStream`` commands."""
        return [c for c in self.commands if isinstance(c, CreateStream)]

    @property
    def queries(self) -> list[Query]:
        """The ``Query`` commands."""
        return [c for c in self.commands if isinstance(c, Query)]

    def label(self, command: Command) -> str:
        """``command N (Kind)`` for messages, N being the 1-based place in the file."""
        index = next(i for i, c in enumerate(self.commands) if c is command)
        number = self.numbers[index] if self.numbers else index + 1
        return f"command {number} ({_kind(command)})"


def _kind(command: Command) -> str:
    return {SetCommand: "Set", CreateStream: "CreateStream", Query: "Query"}[type(command)]


@dataclass(frozen=True)
class _Unloaded:
    """A command that did not load: its place, kind (when known), the stream it defines and,
    a query, the stream it reads (when its body names them)."""

    number: int
    kind: str | None
    defines: str | None = None
    reads: str | None = None


@dataclass(frozen=True)
class _Loaded:
    """What :func:`_load_commands` found: the commands that loaded, with their places."""

    commands: tuple[Command, ...]
    numbers: tuple[int, ...]
    problems: tuple[str, ...]
    unloaded: tuple[_Unloaded, ...]


def _load_commands(raw: Any, source: str, state_names: Sequence[str] | None) -> _Loaded:
    """Every command of a raw command list checked: those that load, and every problem."""
    if not isinstance(raw, list):
        got = "an empty file" if raw is None else f"{what(raw)}"
        raise TopologyError(f"{source}: a topology file must be a list of commands "
                            f"(Set, CreateStream, Query), got {got}")
    commands: list[Command] = []
    numbers: list[int] = []
    problems: list[str] = []
    unloaded: list[_Unloaded] = []
    for i, item in enumerate(raw):
        where = f"{source}: command {i + 1}"
        if not isinstance(item, dict) or len(item) != 1:
            problems.append(f"{where}: expected a map with exactly one key "
                            f"(Set, CreateStream or Query)")
            unloaded.append(_Unloaded(i + 1, None))
            continue
        ((name, body),) = item.items()
        known = _COMMANDS.get(str(name).lower())
        if known is None:
            problems.append(f"{where}: unknown command {name}; expected Set, CreateStream or Query")
            unloaded.append(_Unloaded(i + 1, None))
            continue
        label, model = known
        context = {"state_names": state_names}
        try:
            command = model.model_validate(body, context=context)
        except ValidationError as exc:
            errors = exc.errors()
            for err in errors:
                loc, text = describe_error(dict(err), model)
                problems.append(f"{' -> '.join([f'{where} ({label})', *loc])}: {text}")
            trimmed = known_keys_only(body, errors)
            if trimmed is None:  # more than unknown keys is wrong: the later checks skip it
                unloaded.append(_Unloaded(i + 1, label, *stream_names(label, body)))
                continue
            command = model.model_validate(trimmed, context=context)  # the rest is valid
        commands.append(cast(Command, command))
        numbers.append(i + 1)
    return _Loaded(tuple(commands), tuple(numbers), tuple(problems), tuple(unloaded))


def parse_commands(raw: Any, source: str, state_names: Sequence[str] | None = None
                   ) -> tuple[Command, ...]:
    """Validate a raw command list; all problems are collected into one :class:`TopologyError`.

    ``state_names`` are the ``stateName`` values a query may use (None: any).
    """
    loaded = _load_commands(raw, source, state_names)
    if loaded.problems:
        raise TopologyError(list(loaded.problems))
    return loaded.commands


def _unknown_stream(where: str, name: str, defined: set[str]) -> str:
    known = ", ".join(sorted(defined)) or "none yet"
    return (f"{where} -> from -> objectName: no stream named {name} before this query "
            f"(known: {known})")


def _structure_problems(topology: Topology, unloaded: Sequence[_Unloaded]
                        ) -> tuple[list[str], set[int]]:
    """The checks across commands, and the indices of the commands they find unusable by the
    checks after them (every stream of a name defined twice, a query whose fields do not match
    its expressions or with an aggregation in where).  A command that did not load counts as
    there, with the stream it names, so that nothing is said twice about it; the stream a
    query that did not load reads is still checked."""
    path = topology.path
    unusable: set[int] = set()
    kinds = {u.kind for u in unloaded}
    problems: list[str] = []
    if not topology.streams and "CreateStream" not in kinds:
        problems.append(f"{path}: no CreateStream command; a topology needs an input stream")
    if not topology.queries and "Query" not in kinds:
        problems.append(f"{path}: no Query command; a topology needs at least one query")
    numbers = topology.numbers or tuple(range(1, len(topology.commands) + 1))
    defined: set[str] = set()
    entries: list[tuple[int, int | _Unloaded]] = [
        *((n, i) for i, n in enumerate(numbers)), *((u.number, u) for u in unloaded)]
    for _, entry in sorted(entries, key=lambda e: e[0]):
        if isinstance(entry, _Unloaded):
            if entry.reads is not None and entry.reads not in defined:
                where = f"{path}: command {entry.number} ({entry.kind})"
                problems.append(_unknown_stream(where, entry.reads, defined))
            defined |= {entry.defines} if entry.defines is not None else set()
            continue
        command = topology.commands[entry]
        where = f"{path}: {topology.label(command)}"
        broken: list[str] = []  # what makes the command unusable by the checks after these
        if isinstance(command, CreateStream):
            if command.streamName in defined:  # which of the streams a query means: not known
                broken.append(f"{where} -> streamName: {command.streamName} is already defined")
                unusable |= {i for i, c in enumerate(topology.commands)
                             if isinstance(c, CreateStream) and c.streamName == command.streamName}
            defined.add(command.streamName)
        elif isinstance(command, Query):
            if command.from_.objectName not in defined:  # the query itself is still sound
                problems.append(_unknown_stream(where, command.from_.objectName, defined))
            n_fields, n_expr = len(command.insertInto.fields), len(command.select.expressions)
            if n_fields != n_expr:
                broken.append(f"{where} -> insertInto -> fields: {n_fields} field name(s) for "
                              f"{n_expr} selected expression(s); they must match one to one")
            if command.where is not None and contains_aggregate(command.where):
                broken.append(f"{where} -> where: an aggregation cannot be used in where")
            # As in SQE, every query's output is a stream later queries may read.
            defined.add(command.insertInto.objectName)
        problems += broken
        unusable |= {entry} if broken else set()
    return problems, unusable


def read_topology(path: str | Path, name: str | None = None,
                  state_names: Sequence[str] | None = None) -> Topology:
    """Read a topology file (YAML, or JSON by its ``.json`` suffix) and check its commands,
    keeping every problem: the result holds the commands that loaded and are sound across
    commands (an unknown key is left out of its command) and, in ``problems``, every located
    problem, in file order.

    A file that cannot be read, does not parse or is not a list of commands raises
    :class:`TopologyError`, as nothing in it can be checked.  ``name`` and ``state_names`` are
    those of :func:`load_topology`.
    """
    p = Path(path)
    try:
        raw = load_text(p)
    except OSError as exc:
        raise TopologyError(f"{p}: cannot read topology file ({exc.strerror})") from None
    except SyntaxProblem as exc:
        raise TopologyError(exc.located(str(p))) from None
    loaded = _load_commands(raw, str(p), state_names)
    topology = Topology(str(p), name or p.stem, loaded.commands, loaded.numbers)
    across, unusable = _structure_problems(topology, loaded.unloaded)
    kept = [i for i in range(len(loaded.commands)) if i not in unusable]
    numbers = tuple(loaded.numbers[i] for i in kept)
    return replace(topology, commands=tuple(loaded.commands[i] for i in kept),
                   numbers=numbers if numbers != tuple(range(1, len(raw) + 1)) else (),
                   problems=tuple(in_file_order(str(p), [*loaded.problems, *across])))


def load_topology(path: str | Path, name: str | None = None,
                  state_names: Sequence[str] | None = None) -> Topology:
    """Load and validate a topology file (YAML, or JSON by its ``.json`` suffix); every
    problem of its commands is raised together in one :class:`TopologyError`.

    ``name`` is the topology name used in PIDs; it defaults to the file's stem.
    ``state_names`` are the states a query may write to (None: any; ``sqe`` passes
    those of ``state.registry``).
    """
    topology = read_topology(path, name, state_names)
    if topology.problems:
        raise TopologyError(list(topology.problems))
    return topology
