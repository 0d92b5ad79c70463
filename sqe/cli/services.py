"""``sqe services``: a local Kafka-protocol broker and redis-server for trying topologies, with
``status`` and ``stop``.

``sqe services`` (or ``sqe services start``) checks both ports first -- a port taken is one
sentence naming the process that holds it, and nothing starts -- then starts the broker and
a redis-server with the append-only file on (:mod:`sqe.cli.local_services`), writes
``services.json`` in the data directory (its own PID, and each service's name, PID,
address, log and data directory) and stays in the foreground until Ctrl-C or SIGTERM,
when it stops them and removes the file.  ``sqe services status`` and ``sqe services
stop`` read that file: status probes each service (a metadata request, a PING and
``CONFIG GET appendonly``); stop signals the ``sqe services`` process, or the services
themselves when it is gone.

The data directory defaults to ``$XDG_CACHE_HOME/sqe/services`` (else
``~/.cache/sqe/services``); a relative one is taken from the current directory.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import redis
from confluent_kafka.admin import AdminClient

from sqe.cli.local_services import LocalService, start_local_kafka, start_local_redis
from sqe.cli.processes import alive, port_holder, port_is_free, start_time, terminate, wait_gone
from sqe.errors import PrerequisiteError

__all__ = ["STATE_FILE", "ServiceRecord", "State", "add_parser", "default_data_dir", "run",
           "start", "status", "stop"]

#: The file in the data directory that says what runs.
STATE_FILE = "services.json"
_LOCK_FILE = "services.lock"
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def default_data_dir() -> Path:
    """``$XDG_CACHE_HOME/sqe/services``, else ``~/.cache/sqe/services``."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(cache) if os.path.isabs(cache) else Path.home() / ".cache"
    return base / "sqe" / "services"


@dataclass
class ServiceRecord:
    """One started service as ``services.json`` keeps it."""

    name: str
    pid: int
    started: int | None
    address: str
    log: str
    data_dir: str

    @classmethod
    def of(cls, service: LocalService) -> ServiceRecord:
        pid = service.process.pid
        return cls(service.name, pid, start_time(pid), service.address, str(service.log_path),
                   str(service.log_path.parent))

    def running(self) -> bool:
        return alive(self.pid, self.started)


@dataclass
class State:
    """What ``services.json`` says: the ``sqe services`` process and its services."""

    pid: int
    started: int | None
    data_dir: str
    services: list[ServiceRecord] = field(default_factory=list)

    def running(self) -> bool:
        """Whether the ``sqe services`` process or any of its services still runs."""
        return self.sqe_running() or any(s.running() for s in self.services)

    def sqe_running(self) -> bool:
        return alive(self.pid, self.started)

    def write(self, path: Path) -> None:
        temp = path.with_suffix(".tmp")
        try:
            temp.write_text(json.dumps(asdict(self), indent=2) + "\n")
            temp.replace(path)
        except OSError as exc:
            raise PrerequisiteError(f"sqe services cannot write {path}: {_why(exc)}") from None

    @classmethod
    def read(cls, path: Path) -> State | None:
        """The file's state; ``None`` when there is none (or it cannot be read)."""
        try:
            data: dict[str, Any] = json.loads(path.read_text())
            records = [ServiceRecord(**s) for s in data.pop("services", [])]
            return cls(**data, services=records)
        except (OSError, ValueError, TypeError):
            return None


def _data_dir(args: argparse.Namespace) -> Path:
    return Path(args.data_dir).expanduser().absolute()


def _command(action: str, data: Path) -> str:
    """The command line that runs ``sqe services <action>`` on ``data``."""
    option = "" if data == default_data_dir().absolute() else f" --data-dir {data}"
    return f"sqe services {action}{option}"


def _port_taken(port: int, option: str, kind: str | None) -> str | None:
    """One clause when ``port`` is taken, naming its holder; ``None`` when it is free."""
    if not port or port_is_free(port):
        return None
    holder = port_holder(port)
    same_kind = kind is None or holder.name is None or kind in holder.name
    use = f"pass {option} 0 to use it, or " if same_kind else "pass "
    return f"port {port} is taken by {holder}; stop it, or {use}{option} N for another port"


def _already_running(state: State, data: Path) -> str:
    if state.sqe_running():
        return (f"sqe services already runs with data in {data} (pid {state.pid}); "
                f"`{_command('stop', data)}` stops it")
    left = ", ".join(f"{s.name} pid {s.pid}" for s in state.services if s.running())
    return (f"services of an earlier sqe services still run with data in {data} ({left}); "
            f"`{_command('stop', data)}` stops them")


def _error(text: str) -> int:
    print(f"error: {text}", file=sys.stderr, flush=True)
    return 1


class _Stopped(BaseException):
    """A signal asked ``sqe services`` to stop (a BaseException, so no probe swallows it)."""


def _stop_on_signal(signum: int, _frame: object) -> None:
    for sig in _SIGNALS:
        signal.signal(sig, signal.SIG_IGN)  # the clean-up must not be interrupted
    raise _Stopped(signum)


def start(args: argparse.Namespace) -> int:
    """``sqe services [start]``: check the ports, start the services, wait for a signal."""
    data = _data_dir(args)
    if args.kafka_port == args.redis_port:
        _error(f"--kafka-port and --redis-port are both {args.kafka_port}: "
               + ("nothing to start" if not args.kafka_port else "give two ports"))
        return 2
    state = State.read(data / STATE_FILE)
    if state is not None and state.running():
        return _error(_already_running(state, data))
    taken = [t for t in (_port_taken(args.kafka_port, "--kafka-port", None),
                         _port_taken(args.redis_port, "--redis-port", "redis")) if t]
    if taken:
        return _error("; and ".join(taken))
    if data.exists() and not data.is_dir():
        return _error(f"the data directory of sqe services, {data}, is a file; pass "
                      "--data-dir DIR for another one")
    try:
        data.mkdir(parents=True, exist_ok=True)
        lock = open(data / _LOCK_FILE, "a")
    except OSError as exc:
        return _error(f"sqe services cannot use its data directory {data}: {_why(exc)}")
    with lock:  # held while it runs: two starts at once cannot both pass the checks above
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return _error(f"another sqe services is starting with data in {data}")
        return _run_until_stopped(args, data)


def _why(exc: OSError) -> str:
    return f"{exc.strerror or exc}{f' ({exc.filename})' if exc.filename else ''}"


def _start_all(args: argparse.Namespace, data: Path, state: State,
               started: list[LocalService]) -> None:
    path = data / STATE_FILE
    state.write(path)

    def record(service: LocalService, what: str = "") -> None:  # in the file as soon as it runs
        started.append(service)
        state.services.append(ServiceRecord.of(service))
        state.write(path)
        print(f"{service.name}: {service.address}{what} (pid {service.process.pid}; data and "
              f"log in {service.log_path.parent})", flush=True)

    if args.kafka_port:
        record(start_local_kafka(data / "kafka", args.kafka_port))
    if args.redis_port:
        record(start_local_redis(data / "redis", args.redis_port, persistent=True),
               " with the append-only file on")


def _run_until_stopped(args: argparse.Namespace, data: Path) -> int:
    pid = os.getpid()
    state = State(pid, start_time(pid), str(data))
    started: list[LocalService] = []
    previous = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    for sig in _SIGNALS:  # an ignored SIGINT or SIGHUP (`cmd &` in a script, nohup) stays so
        if sig == signal.SIGTERM or previous[sig] != signal.SIG_IGN:
            signal.signal(sig, _stop_on_signal)
    try:
        _start_all(args, data, state, started)
        print(f"running (pid {pid}); Ctrl-C or `{_command('stop', data)}` stops them, "
              f"`{_command('status', data)}` shows them", flush=True)
        return _watch(started)
    except _Stopped:
        return 0
    finally:
        for sig in _SIGNALS:
            signal.signal(sig, signal.SIG_IGN)
        _stop_all(started, data / STATE_FILE)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watch(started: list[LocalService]) -> int:
    """Sleep until a signal (:class:`_Stopped`) or until a service dies (exit 1)."""
    while True:
        time.sleep(1.0)
        for service in started:
            code = service.process.poll()
            if code is not None:
                tail = service.log_tail(5)
                return _error(f"{service.name} (pid {service.process.pid}) exited with code "
                              f"{code}, so sqe services stops"
                              + (f"; the last lines of {service.log_path}:\n{tail}" if tail
                                 else ""))


def _stop_all(started: list[LocalService], state_file: Path) -> None:
    """Stop the services, remove ``services.json``, then say so (if anyone still listens)."""
    for service in reversed(started):
        service.stop()
    state_file.unlink(missing_ok=True)
    if started:
        with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
            print("stopped " + " and ".join(f"{s.name} (pid {s.process.pid})"
                                            for s in started), flush=True)


def _kafka_answer(address: str) -> str:
    admin = AdminClient({"bootstrap.servers": address, "log_level": 0})
    metadata = admin.list_topics(timeout=5)
    return f"answers ({len(metadata.brokers)} broker(s), {len(metadata.topics)} topic(s))"


def _redis_answer(address: str) -> str:
    client = redis.Redis.from_url(address, socket_timeout=5, socket_connect_timeout=5)
    try:
        client.ping()
        aof = client.config_get("appendonly").get("appendonly")
    finally:
        client.close()
    return f"answers PING, AOF {'on' if aof in ('yes', b'yes') else 'off'}"


def _answer(record: ServiceRecord) -> tuple[bool, str]:
    """Whether the service answers, and what it says (or the client's error)."""
    try:
        return True, (_kafka_answer(record.address) if record.name == "kafka" else
                      _redis_answer(record.address))
    except Exception as exc:  # any client error means "does not answer"
        return False, f"does not answer ({str(exc).strip() or type(exc).__name__})"


def _status_line(record: ServiceRecord) -> bool:
    """Print one service's line; whether it runs and answers."""
    running = record.running()
    ok, what = _answer(record) if running else (False, "")
    what = f"running, {what}" if running else "not running"
    print(f"{record.name}: {record.address}, pid {record.pid}, {what}; log {record.log}",
          flush=True)
    return ok


def status(args: argparse.Namespace) -> int:
    """``sqe services status``: each service's address, PID, and whether it runs and answers;
    exit 0 when all do."""
    data = _data_dir(args)
    state = State.read(data / STATE_FILE)
    if state is None:
        print(f"no sqe services run with data in {data} (there is no {STATE_FILE})")
        return 1
    if not state.sqe_running():
        what = f"not running (`{_command('stop', data)}` stops what it left)"
    else:
        what = "running" if state.services else "running, starting its services"
    print(f"sqe services: pid {state.pid}, {what}, data in {data}", flush=True)
    ok = [_status_line(record) for record in state.services]
    return 0 if ok and all(ok) else 1


def stop(args: argparse.Namespace) -> int:
    """``sqe services stop``: SIGTERM the ``sqe services`` process (or, when it is gone, its
    services), wait for them to end, and remove ``services.json``."""
    data = _data_dir(args)
    path = data / STATE_FILE
    state = State.read(path)
    if state is None or not state.running():
        path.unlink(missing_ok=True)
        print(f"nothing to stop: no sqe services run with data in {data}")
        return 0
    running = [s for s in state.services if s.running()]
    stopped = []
    if terminate(state.pid, state.started, timeout=40.0):  # it stops its services first
        stopped.append(f"sqe services (pid {state.pid})")
    for record in running:
        if not wait_gone(record.pid, record.started, 5.0):
            terminate(record.pid, record.started)
        stopped.append(f"{record.name} (pid {record.pid})")
    path.unlink(missing_ok=True)
    print("stopped " + ", ".join(stopped), flush=True)
    return 0


def run(args: argparse.Namespace) -> int:
    """The ``sqe services`` command: start (the default), status or stop."""
    action = getattr(args, "services_action", None) or "start"
    return {"start": start, "status": status, "stop": stop}[action](args)


def _start_arguments(parser: argparse.ArgumentParser, suppress: bool) -> None:
    default = (lambda value: argparse.SUPPRESS) if suppress else (lambda value: value)
    parser.add_argument("--kafka-port", type=int, default=default(9092), metavar="PORT",
                        help="the broker's port on 127.0.0.1 (default 9092; 0 to start no "
                        "broker, e.g. one already runs)")
    parser.add_argument("--redis-port", type=int, default=default(6379), metavar="PORT",
                        help="redis-server's port on 127.0.0.1 (default 6379; 0 to start no "
                        "redis-server, e.g. one already runs)")
    _data_dir_argument(parser, suppress)


def _data_dir_argument(parser: argparse.ArgumentParser, suppress: bool) -> None:
    here = str(default_data_dir()).replace("%", "%%")
    parser.add_argument("--data-dir", metavar="DIR",
                        default=argparse.SUPPRESS if suppress else str(default_data_dir()),
                        help="where the services keep their data and logs, and services.json "
                        "says what runs (default $XDG_CACHE_HOME/sqe/services, else "
                        f"~/.cache/sqe/services: here {here}); a relative DIR is taken from "
                        "the current directory")


_USAGE = ("sqe services [start] [--kafka-port PORT] [--redis-port PORT] [--data-dir DIR]\n"
          "       sqe services status|stop [--data-dir DIR]")


def add_parser(sub: Any) -> None:
    """Add ``sqe services [start|status|stop]`` to the ``sqe`` subcommands ``sub``."""
    sv = sub.add_parser("services", usage=_USAGE, help="run a local Kafka-protocol broker and redis-server "
                        "(AOF on) in the foreground until Ctrl-C, for trying topologies on a "
                        "machine without them (needs .[local]); status, stop",
                        description="Run a local Kafka-protocol broker (noida-db) and "
                        "redis-server (append-only file on) until Ctrl-C or SIGTERM; "
                        "`sqe services status` shows them, `sqe services stop` stops them.")
    _start_arguments(sv, suppress=False)
    actions = sv.add_subparsers(dest="services_action", metavar="ACTION")
    _start_arguments(actions.add_parser("start", help="the same as sqe services without an "
                                        "action"), suppress=True)
    _data_dir_argument(actions.add_parser("status", help="each service's address and pid, "
                                          "and whether it runs and answers; exit 1 if one "
                                          "does not"), suppress=True)
    _data_dir_argument(actions.add_parser("stop", help="stop the services sqe services "
                                          "started, and wait until they have ended"),
                       suppress=True)
    sv.set_defaults(func=run)
