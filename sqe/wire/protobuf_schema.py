"""Protobuf schemas as SQE holds them: a serialized ``FileDescriptorProto`` and its imports,
built into a descriptor pool of their own.

A :class:`ProtoSchema` is the Schema Registry's ``format=serialized`` form: the file in base64
(what confluent-kafka's ``ProtobufSerializer`` registers), the files it imports the same way by
the names it imports them by (the registry's references; the well-known types,
``google/protobuf/timestamp.proto`` and the rest, come from protobuf itself and need none), and
its message's full name (None: the file's first message).  :func:`read_descriptor_file` makes
one from a descriptor-set file (``protoc --descriptor_set_out=x.desc --include_imports``, what
Spark's ``from_protobuf`` takes).  :func:`descriptor` builds one in a
``DescriptorPool`` of its own, never the process's default one, its imports first; a schema that
does not build is a :class:`~sqe.errors.SchemaError` saying what and where.  Read by
:mod:`sqe.wire.protobuf`, made by :mod:`sqe.wire.protobuf_write`.

Example::

    >>> from google.protobuf import descriptor_pb2 as d
    >>> file = d.FileDescriptorProto(name="e.proto", package="t", syntax="proto3")
    >>> _ = file.message_type.add(name="E")
    >>> schema = ProtoSchema.of(file)
    >>> descriptor(schema).full_name, message_path(descriptor(schema))
    ('t.E', [0])
"""

from __future__ import annotations

import base64
import binascii
import sys
from dataclasses import dataclass
from functools import lru_cache
from importlib import import_module
from pathlib import Path
from typing import Any

from sqe.errors import SchemaError

__all__ = ["ProtoSchema", "descriptor", "file_proto", "message_names", "message_path",
           "protobuf_module", "read_descriptor_file"]

_WELL_KNOWN = {f"google/protobuf/{n}.proto" for n in (
    "any", "api", "descriptor", "duration", "empty", "field_mask", "source_context", "struct",
    "timestamp", "type", "wrappers")}


def protobuf_module() -> Any:
    """``google.protobuf``, with its descriptors, pools and message classes loaded."""
    try:
        for name in ("descriptor_pb2", "descriptor_pool", "message", "message_factory"):
            import_module(f"google.protobuf.{name}")
    except ImportError:
        raise SchemaError("reading or writing Protobuf needs the package protobuf: "
                          "pip install 'sqe-spark[protobuf]'") from None
    return sys.modules["google.protobuf"]


@dataclass(frozen=True)
class ProtoSchema:
    """A Protobuf schema: a serialized ``FileDescriptorProto`` in base64, its imports' as
    ``(name, base64)`` pairs, and its message's full name (None: the file's first message)."""

    file: str
    references: tuple[tuple[str, str], ...] = ()
    message: str | None = None

    @classmethod
    def of(cls, file: Any, references: Any = (), message: str | None = None) -> ProtoSchema:
        """The schema of ``FileDescriptorProto`` ``file``, importing ``references`` (more)."""
        def text(f: Any) -> str:
            return base64.b64encode(f.SerializeToString()).decode("ascii")
        return cls(text(file), tuple((f.name, text(f)) for f in references), message)


def file_proto(text: str, what: str) -> Any:
    """The ``FileDescriptorProto`` of base64 ``text`` (named ``what`` in the error)."""
    pb = protobuf_module()
    try:
        return pb.descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(text.encode("ascii"), validate=True))
    except (binascii.Error, UnicodeEncodeError, pb.message.DecodeError) as exc:
        raise SchemaError(f"{what} is not a serialized Protobuf schema (a FileDescriptorProto "
                          f"in base64: {exc})") from None


def message_names(file: Any) -> dict[str, tuple[int, ...]]:
    """The full names of the messages of ``FileDescriptorProto`` ``file``, nested ones too, and
    their message indexes."""
    out: dict[str, tuple[int, ...]] = {}

    def walk(messages: Any, scope: str, path: tuple[int, ...]) -> None:
        for i, m in enumerate(messages):
            out[f"{scope}{m.name}"] = (*path, i)
            walk(m.nested_type, f"{scope}{m.name}.", (*path, i))
    walk(file.message_type, f"{file.package}." if file.package else "", ())
    return out


@lru_cache(maxsize=64)
def descriptor(schema: ProtoSchema, what: str = "the Protobuf schema") -> Any:
    """The message descriptor of ``schema``, built in a pool of its own, imports first."""
    pb = protobuf_module()
    pool, done = pb.descriptor_pool.DescriptorPool(), set()
    refs = {name: file_proto(text, f"{what}'s import {name}") for name, text in schema.references}
    main = file_proto(schema.file, what)
    main.name = main.name or "schema.proto"

    def add(f: Any) -> None:
        for dep in f.dependency:
            if dep in refs:
                refs[dep].name = dep
                add(refs.pop(dep))
            elif dep in _WELL_KNOWN and dep not in done:
                add(pb.descriptor_pb2.FileDescriptorProto.FromString(import_module(
                    f"google.protobuf.{dep[16:-6]}_pb2").DESCRIPTOR.serialized_pb))
            elif dep not in done:
                raise SchemaError(f"{what}: {f.name} imports {dep}, which is neither among its "
                                  "references nor a well-known type")
        try:
            pool.Add(f)
        except (TypeError, ValueError) as exc:
            raise SchemaError(f"{what}: {f.name} does not build ({exc})") from None
        done.add(f.name)

    add(main)
    name = schema.message or next(iter(message_names(main)), None)
    try:
        return pool.FindMessageTypeByName(name)
    except (KeyError, TypeError):
        held = ", ".join(message_names(main)) or "none"
        raise SchemaError(f"{what} has no message {name} ({main.name} holds {held})") from None


def read_descriptor_file(path: str, option: str, message: str | None = None) -> ProtoSchema:
    """The schema of ``message`` (None: the first of the set's last file) in the descriptor-set
    file at ``path`` (named by option ``option``), with the files it imports."""
    pb = protobuf_module()
    where = Path(path).expanduser()
    try:
        files = pb.descriptor_pb2.FileDescriptorSet.FromString(where.read_bytes()).file
    except OSError as exc:
        raise SchemaError(f"{option} {where} cannot be read ({exc.strerror or exc})") from None
    except pb.message.DecodeError:
        raise SchemaError(f"{option} {where} is not a descriptor set (protoc "
                          "--descriptor_set_out)") from None
    main = next((f for f in reversed(files) if message in (None, *message_names(f))), None)
    if main is None:
        raise SchemaError(f"{option} {where} has no message {message}" if message else
                          f"{option} {where} holds no file")
    by_name, wanted, todo = {f.name: f for f in files}, [], list(main.dependency)
    while todo:
        dep = by_name.get(todo.pop())
        if dep is not None and dep not in wanted:
            wanted.append(dep)
            todo.extend(dep.dependency)
    return ProtoSchema.of(main, wanted, message)


def message_path(d: Any) -> list[int]:
    """The message indexes of message descriptor ``d`` in its file."""
    file = protobuf_module().descriptor_pb2.FileDescriptorProto.FromString(d.file.serialized_pb)
    return list(message_names(file)[d.full_name])
