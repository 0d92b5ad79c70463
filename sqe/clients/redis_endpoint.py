"""Where a Redis lives and how to log in to it: URL, ACL user, password, TLS, Sentinel, Cluster.

:class:`RedisEndpoint` is what the HWM store, the Redis state and the
aggregate state connect with, on the driver and (pickled) on the
executors.  URL forms::

    redis://[user[:password]@]host[:port][/db]                 plain TCP
    rediss://[user[:password]@]host[:port][/db]                TLS
    unix:///run/redis.sock?db=N                                a local socket
    redis+sentinel://[user[:password]@]host:port[,host:port]/<service>[/db]   via Sentinel
    redis+cluster://[user[:password]@]host:port[,host:port]                   Redis Cluster

``rediss+sentinel://`` and ``rediss+cluster://`` use TLS.  The user name,
password and TLS files may also be given apart from the URL (the SQE options
do that, so the password can come from ``${ENV}``); given both ways, the
separate value wins.  A Sentinel deployment is asked for the current master
of ``<service>`` (the Sentinels themselves are contacted over the same
transport, without the password); a Cluster client follows slot redirects.

:attr:`RedisEndpoint.display` is the URL without its password, for every
message; :meth:`RedisEndpoint.describe_error` turns a client error into one
sentence naming it.

    >>> e = RedisEndpoint("rediss://sqe@redis.example:6380/2", password="hunter2")
    >>> e.display, e.kind
    ('rediss://sqe@redis.example:6380/2', 'single')
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.sentinel import Sentinel

from sqe.clients.redis_busy import BusyRetry
from sqe.errors import OptionError
from sqe.secrets import redact_url, scrub

__all__ = ["RedisEndpoint", "SCHEMES", "check_url", "persistence_warning"]

#: URL schemes understood, by what they connect to.
SCHEMES = {"redis": "single", "rediss": "single", "unix": "single",
           "redis+sentinel": "sentinel", "rediss+sentinel": "sentinel",
           "redis+cluster": "cluster", "rediss+cluster": "cluster"}

_SOCKET_TIMEOUT = 30.0


def check_url(url: str) -> str | None:
    """``None`` for a URL :class:`RedisEndpoint` understands, else what is wrong with it."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        return ("expected a redis://, rediss://, unix://, redis+sentinel:// or redis+cluster:// "
                "URL")
    if SCHEMES[scheme] == "sentinel":
        parts = urlsplit(url)
        if not parts.path.strip("/"):
            return "a redis+sentinel:// URL names the master's service: .../<service>[/db]"
    return None


def _hosts(netloc: str, default_port: int) -> list[tuple[str, int]]:
    hosts = []
    for item in netloc.rpartition("@")[2].split(","):
        host, _, port = item.strip().rpartition(":") if ":" in item else (item.strip(), "", "")
        hosts.append((host or "localhost", int(port) if port else default_port))
    return hosts


@dataclass(frozen=True)
class RedisEndpoint:
    """One Redis (server, Sentinel-watched master, or Cluster) and the credentials for it."""

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None

    def __post_init__(self) -> None:
        problem = check_url(self.url)
        if problem:
            raise OptionError(f"Redis URL {self.display}: {problem}")
        if (self.ca_file or self.cert_file or self.key_file) and not self.tls:
            raise OptionError(f"Redis URL {self.display}: TLS files are given but the URL does "
                             "not use TLS; write rediss:// (or rediss+sentinel://, "
                             "rediss+cluster://)")

    @property
    def scheme(self) -> str:
        """The URL scheme, lower case."""
        return self.url.split("://", 1)[0].lower()

    @property
    def kind(self) -> Literal["single", "sentinel", "cluster"]:
        """What the URL connects to."""
        return SCHEMES[self.scheme]  # type: ignore[return-value]

    @property
    def tls(self) -> bool:
        """Whether connections use TLS."""
        return self.scheme.startswith("rediss")

    @property
    def display(self) -> str:
        """The URL without its password: what every message shows."""
        return redact_url(self.url)

    def __str__(self) -> str:
        return self.display

    def _credentials(self) -> dict[str, Any]:
        parts = urlsplit(self.url)
        user = self.username if self.username is not None else (
            unquote(parts.username) if parts.username else None)
        password = self.password if self.password is not None else (
            unquote(parts.password) if parts.password else None)
        out: dict[str, Any] = {}
        if user:
            out["username"] = user
        if password:
            out["password"] = password
        return out

    def _tls(self) -> dict[str, Any]:
        if not self.tls:
            return {}
        out: dict[str, Any] = {"ssl": True}
        if self.ca_file:
            out["ssl_ca_certs"] = self.ca_file
        if self.cert_file:
            out["ssl_certfile"] = self.cert_file
        if self.key_file:
            out["ssl_keyfile"] = self.key_file
        return out

    @property
    def database(self) -> int:
        """The database index (0 for a Cluster, which has only one)."""
        parts = urlsplit(self.url)
        if self.kind == "cluster":
            return 0
        if self.kind == "sentinel":
            segments = [s for s in parts.path.split("/") if s]
            return int(segments[1]) if len(segments) > 1 else 0
        if self.scheme == "unix":
            match = re.search(r"(?:^|&)db=(\d+)", parts.query)
            return int(match.group(1)) if match else 0
        path = parts.path.strip("/")
        return int(path) if path.isdigit() else 0

    def connect(self, **options: Any) -> Any:
        """A new redis-py client (``redis.Redis`` or ``RedisCluster``); ``options`` are passed on.

        A single server's or a Sentinel's client waits out ``BUSY`` (:mod:`sqe.clients.redis_busy`).
        """
        kwargs = {"socket_timeout": _SOCKET_TIMEOUT, "socket_connect_timeout": _SOCKET_TIMEOUT,
                  **self._credentials(), **options}
        if self.kind != "cluster":  # a Cluster client runs its own retries, without Retry
            kwargs.setdefault("retry", BusyRetry())
        if self.kind == "single":
            tls = self._tls()
            tls.pop("ssl", None)  # from_url picks the TLS connection class from rediss://
            return redis.Redis.from_url(self.url, **kwargs, **tls)
        parts = urlsplit(self.url)
        if self.kind == "cluster":
            nodes = [ClusterNode(h, p) for h, p in _hosts(parts.netloc, 6379)]
            return RedisCluster(startup_nodes=nodes, **kwargs, **self._tls())
        service = [s for s in parts.path.split("/") if s][0]
        sentinel = Sentinel(_hosts(parts.netloc, 26379),
                            sentinel_kwargs={"socket_timeout": _SOCKET_TIMEOUT, **self._tls()},
                            **kwargs, **self._tls())
        return sentinel.master_for(service, db=self.database)

    def describe_error(self, exc: BaseException) -> str:
        """A client error as one sentence that names this endpoint and never its password."""
        if isinstance(exc, redis.AuthenticationError) or "WRONGPASS" in str(exc) \
                or "NOAUTH" in str(exc):
            what = f"authentication failed ({exc})"
        else:
            what = str(exc) or type(exc).__name__
        return scrub(f"Redis at {self.display}: {what}", [self.password, urlsplit(self.url).password])


def persistence_warning(client: Any, what: str) -> str | None:
    """A warning when the Redis of ``client`` keeps nothing across a restart, else ``None``.

    Asks ``CONFIG GET appendonly`` and ``save``; a server that refuses CONFIG
    (managed Redis often does) is reported as unknown rather than assumed safe.
    """
    try:
        appendonly = client.config_get("appendonly").get("appendonly", "")
        save = client.config_get("save").get("save", "")
    except redis.ResponseError as exc:
        return (f"{what}: cannot tell whether Redis persists its data (CONFIG GET refused: "
                f"{exc}); without AOF or RDB snapshots a restart loses the high-water marks")
    if isinstance(appendonly, bytes):
        appendonly, save = appendonly.decode(), save.decode() if isinstance(save, bytes) else save
    if str(appendonly).lower() == "yes" or str(save).strip():
        return None
    return (f"{what} has no persistence (appendonly no, save \"\"): a Redis restart loses the "
            "high-water marks and the committed batch id, and replays then pass the filter; "
            "turn on appendonly yes (or RDB snapshots) on that server")
