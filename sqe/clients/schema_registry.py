"""A Schema Registry, as SQE asks it: a schema by id, a subject's version, a registration.

confluent-kafka's own ``SchemaRegistryClient`` speaks the registry's REST API (Confluent
Schema Registry, and the registries that speak its API); SQE builds one per configuration per
process (:func:`registry`), so the client's cache of schemas by id lives as long as the Spark
worker does, and a task asks the registry only for an id it has not met.  The configuration is
the client's own properties (:data:`PROPERTIES`: ``url``, ``basic.auth.user.info``,
``ssl.ca.location``...).

What the registry answers becomes one sentence: an id or subject it does not hold is None (a
record of an unknown schema is a bad record, not a broken registry); any other answer, and a
registry that cannot be reached, is a :class:`~sqe.errors.RegistryError` naming the URL
(credentials masked) and what was asked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, TypeVar

from sqe.errors import RegistryError, SchemaError
from sqe.secrets import redact_url, scrub

__all__ = ["INT_PROPERTIES", "PROPERTIES", "Registry", "registry"]

#: The client properties a user may set (``jw.sqe.*.schemaRegistry.<property>``).
PROPERTIES = ("url", "basic.auth.user.info", "basic.auth.credentials.source",
              "ssl.ca.location", "ssl.certificate.location", "ssl.key.location",
              "ssl.key.password", "timeout", "max.retries", "retries.wait.ms",
              "retries.max.wait.ms")
#: Those of them that are numbers.
INT_PROPERTIES = ("timeout", "max.retries", "retries.wait.ms", "retries.max.wait.ms")

#: The registry's error code for a subject, version or schema it does not hold.
_NOT_FOUND = {40401, 40402, 40403}

T = TypeVar("T")


def _module() -> Any:
    try:
        from confluent_kafka import schema_registry
    except ImportError as exc:
        raise SchemaError("a Schema Registry needs confluent-kafka's registry client: pip "
                          f"install 'sqe-spark[avro]' ({exc})") from None
    return schema_registry


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The errors of a request that reached no answer (the client's HTTP library's, and the
    system's)."""
    try:
        from confluent_kafka.schema_registry.common._httpx_compat import httpx
    except ImportError:  # an older client: httpx itself
        import httpx  # type: ignore[import-not-found, no-redef]
    return (OSError, httpx.HTTPError)


class Registry:
    """One registry, by its client properties (see the module docstring)."""

    def __init__(self, conf: Mapping[str, Any], fmt: str | None = None) -> None:
        self.conf = {k: v for k, v in conf.items() if v is not None}
        self.fmt = fmt  # the form of the schemas asked for ("serialized": Protobuf's binary)
        if not str(self.conf.get("url") or "").strip():
            raise SchemaError("a Schema Registry needs its url")
        self.url = ", ".join(redact_url(u.strip()) for u in str(self.conf["url"]).split(","))
        self._client: Any = None
        self._lock = threading.Lock()

    def _secrets(self) -> list[str]:
        info = str(self.conf.get("basic.auth.user.info") or "")
        return [s for s in (info, info.partition(":")[2], self.conf.get("ssl.key.password"))
                if s]

    def client(self) -> Any:
        """confluent-kafka's client of this registry (made once)."""
        with self._lock:
            if self._client is None:
                module = _module()
                try:
                    self._client = module.SchemaRegistryClient(
                        {k: (int(v) if k in INT_PROPERTIES else str(v))
                         for k, v in self.conf.items()})
                except (ValueError, TypeError) as exc:
                    raise SchemaError(f"the Schema Registry settings for {self.url}: "
                                      f"{scrub(str(exc), self._secrets())}") from None
            return self._client

    def _ask(self, what: str, call: Callable[[Any], T]) -> T | None:
        """``call(client)``; None where the registry does not hold what was asked."""
        client = self.client()
        try:
            return call(client)
        except _module().SchemaRegistryError as exc:
            if exc.http_status_code == 404 and exc.error_code in _NOT_FOUND:
                return None
            message = scrub(str(exc.error_message), self._secrets())
            raise RegistryError(f"the Schema Registry at {self.url} answered the request "
                                f"{what} with HTTP {exc.http_status_code} (error "
                                f"{exc.error_code}: {message})") from None
        except _transport_errors() as exc:
            raise RegistryError(f"cannot reach the Schema Registry at {self.url} ({what}): "
                                f"{scrub(str(exc) or type(exc).__name__, self._secrets())}"
                                ) from None

    def by_id(self, schema_id: int) -> tuple[str, str] | None:
        """``(schema type, schema text)`` of ``schema_id``, or None when the registry has no
        such id."""
        found = self._ask(f"for schema id {schema_id}",
                          lambda c: c.get_schema(schema_id, fmt=self.fmt))
        if found is None:
            return None
        return str(found.schema_type or "AVRO"), str(found.schema_str)

    def version(self, subject: str, version: int | None
                ) -> tuple[int, str, str, tuple[tuple[str, str], ...]]:
        """``(id, schema type, schema text, references)`` of ``subject``'s ``version`` (None:
        its latest), where the references are the schemas it imports, each ``(import name,
        text)``, theirs before them (what a Protobuf schema's pool needs first); a subject or
        version the registry does not hold is a :class:`SchemaError`."""
        imports: dict[str, str] = {}

        def visit(subject: str, version: int | None) -> Any:
            which = "its latest version" if version is None else f"version {version}"
            found = self._ask(f"for subject {subject} {which}",
                              lambda c: _latest(c, subject, self.fmt) if version is None
                              else c.get_version(subject, version, fmt=self.fmt))
            if found is None:
                raise SchemaError(f"the Schema Registry at {self.url} has no subject {subject} "
                                  f"with {which}")
            for ref in found.schema.references or []:
                if ref.name not in imports:
                    imports[ref.name] = str(visit(ref.subject, int(ref.version)).schema.schema_str)
            return found

        found = visit(subject, version)
        schema = found.schema
        return (int(found.schema_id), str(schema.schema_type or "AVRO"), str(schema.schema_str),
                tuple(imports.items()))

    def register(self, subject: str, kind: str, text: str) -> int:
        """The id of schema ``text`` (type ``kind``) under ``subject``, registered when the
        subject does not hold it yet."""
        module = _module()
        schema = module.Schema(text, kind.upper())
        found = self._ask(f"when {subject} was asked for its schema",
                          lambda c: c.lookup_schema(subject, schema))
        if found is not None:
            return int(found.schema_id)
        registered = self._ask(f"when a schema was registered under {subject}",
                               lambda c: c.register_schema(subject, schema))
        if registered is None:
            raise RegistryError(f"the Schema Registry at {self.url} registered no schema under "
                                f"{subject}")
        return int(registered)


def _latest(client: Any, subject: str, fmt: str | None) -> Any:
    """``subject``'s latest version as the registry has it now (the client would keep the
    first answer for the life of the process)."""
    client.clear_latest_caches()
    return client.get_latest_version(subject, fmt=fmt)


def registry(conf: Mapping[str, Any], fmt: str | None = None) -> Registry:
    """The process's :class:`Registry` for client properties ``conf``, asking for schemas in
    form ``fmt`` (a client's cache by id keeps the first form it was given, so each form has a
    client of its own)."""
    return _registry(tuple(sorted((str(k), str(v)) for k, v in conf.items() if v is not None)),
                     fmt)


@cache
def _registry(conf: tuple[tuple[str, str], ...], fmt: str | None) -> Registry:
    return Registry(dict(conf), fmt)
