"""Secrets in option values: ``${ENV}`` references, which keys are secret, and redaction.

Topology and config files should not hold passwords.  Any option value may
instead name an environment variable, expanded when the value is read
(:func:`expand_env`)::

    jw.sqe.state.redis.password: ${REDIS_PASSWORD}
    jw.sqe.spout.kafka.consumer.sasl.username: ${KAFKA_USER:-sqe}
    jw.sqe.state.redis.keyname.fields: $${literal}      # "$$" escapes: the value is ${literal}

A variable that is not set (and has no ``:-default``) is an
:class:`~sqe.errors.OptionError` naming the file and key.

What is secret is decided by the key (:func:`is_secret_key`: passwords,
SASL/OAuth secrets, private keys, tokens).  Secret values are shown as
:data:`MASK` wherever SQE prints or logs a value, and passwords in URLs are
masked by :func:`redact_url`; :func:`scrub` removes known secret values from
any other text (an error message of a client library, say) as a last line
of defence.

    >>> expand_env("redis://${H:-localhost}:6379", "conf.yaml: x", {})
    'redis://localhost:6379'
    >>> redact_url("rediss://sqe:hunter2@redis.example:6380/0")
    'rediss://sqe:***@redis.example:6380/0'
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from sqe.errors import OptionError

__all__ = ["MASK", "SPARK_REDACTION_REGEX", "expand_env", "is_secret_key", "mask_value",
           "redact_url", "scrub"]

MASK = "***"

#: Key names whose values are secret (librdkafka, Redis and SQE spellings).
_SECRET_KEY = re.compile(
    r"(?i)(password|passwd|secret|token|credential|user\.info|jaas|private|key\.pem|"
    r"sasl\.oauthbearer\.config|ssl\.key\.|keystore|truststore\.password)")

#: What Spark should redact in plans, the UI and event logs (``spark.redaction.regex`` and
#: ``spark.sql.redaction.options.regex``): its own defaults plus the keys above.
SPARK_REDACTION_REGEX = (r"(?i)secret|password|token|access[.]?key|url|jaas|credential|"
                         r"user\.info|ssl\.key\.|private|key\.pem|sasl\.oauthbearer\.config")

_REF = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def expand_env(value: Any, where: str, environ: Mapping[str, str] | None = None) -> Any:
    """``value`` with every ``${NAME}`` / ``${NAME:-default}`` replaced from the environment.

    Strings inside lists and maps are expanded too; ``$$`` stands for one
    ``$``.  ``where`` (file and key) starts the error for a missing variable.
    """
    env = os.environ if environ is None else environ
    if isinstance(value, str):
        if "$" not in value:
            return value

        def replace(match: re.Match[str]) -> str:
            if match.group(0) == "$$":
                return "$"
            name, default = match.group(1), match.group(2)
            if name in env:
                return env[name]
            if default is not None:
                return default
            raise OptionError(f"{where}: ${{{name}}} is not set in the environment (write "
                              f"${{{name}:-default}} to give a default)")

        return _REF.sub(replace, value)
    if isinstance(value, list):
        return [expand_env(v, where, env) for v in value]
    if isinstance(value, tuple):
        return tuple(expand_env(v, where, env) for v in value)
    if isinstance(value, dict):
        return {k: expand_env(v, where, env) for k, v in value.items()}
    return value


def is_secret_key(key: str) -> bool:
    """True when the value of option or property ``key`` must never be shown."""
    return bool(_SECRET_KEY.search(key))


def mask_value(key: str, value: Any) -> Any:
    """``value``, or :data:`MASK` when ``key`` is secret; URLs lose their password."""
    if value is None:
        return None
    if is_secret_key(key):
        return MASK
    if isinstance(value, str) and ("://" in value or "password" in value.lower()):
        return redact_url(value)
    return value


_KV_PASSWORD = re.compile(r"(?i)\b(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)")


def redact_url(url: str) -> str:
    """``url`` with the password of its user info (if any) replaced by :data:`MASK`.

    A libpq ``key=value`` connection string loses its ``password=...`` instead, and a Spark
    Connect URL the values of its secret parameters (``;token=...``).
    """
    if "=" in url and "://" not in url:
        return _KV_PASSWORD.sub(lambda m: m.group(1) + MASK, url)
    if url.startswith("sc://") and ";" in url:  # Spark Connect: sc://host:port/;token=...
        head, *params = url.split(";")
        return ";".join([head, *(f"{k}={MASK}" if is_secret_key(k) else f"{k}{eq}{v}"
                                 for k, eq, v in (p.partition("=") for p in params))])
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.netloc or "@" not in parts.netloc:
        return url
    userinfo, _, hosts = parts.netloc.rpartition("@")
    user, colon, _ = userinfo.partition(":")
    if not colon:
        return url
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{hosts}"))


def scrub(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every occurrence of each secret value replaced by :data:`MASK`."""
    for secret in sorted((s for s in secrets if s), key=len, reverse=True):
        text = text.replace(secret, MASK)
    return text
