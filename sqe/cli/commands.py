"""What each ``sqe`` command does, given its parsed arguments; returns the exit code.

The parser is :mod:`sqe.cli.main`; the commands that run topologies go through
the public API (:mod:`sqe.api`), so ``sqe run`` and ``sqe.run()`` are one path.
``sqe services`` is :mod:`sqe.cli.services`.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import sys
import threading

import redis

from sqe import __version__, api
from sqe.cli import pack as packing
from sqe.cli import rebuild
from sqe.cli import report as summary
from sqe.cli.demo import run_demo
from sqe.cli.live import LiveProgress
from sqe.cli.sample_events import produce_events
from sqe.config.registry import CLIENT_PROPERTIES, REGISTRY, RETIRED
from sqe.config.settings import Settings, load_config, parse_conf_pairs
from sqe.config.views import StreamSettings
from sqe.engine.run.lock import CheckpointLock
from sqe.engine.run.recovery import Rerun
from sqe.engine.spark.checkpoint import CheckpointFiles
from sqe.engine.spark.session import build_session, quiet_failure_traces
from sqe.errors import RunError, RunStopped, SourceError, SqeError, StateError
from sqe.lang.topology import read_topology
from sqe.ledger.hwm import HwmStore
from sqe.logs import set_log_level
from sqe.observe.metrics import PrometheusWatcher
from sqe.observe.watch import RunWatcher
from sqe.secrets import mask_value
from sqe.wire.keys import StreamMetadata, pid_for
from state.registry import SINKS

__all__ = ["demo", "hwm", "keys", "options", "report", "run", "sample_events", "validate"]


def validate(args: argparse.Namespace) -> int:
    """``sqe validate``: every file checked, one located line per problem; exit 2 if any."""
    configs = [load_config(c) for c in args.config]
    conf = parse_conf_pairs(args.conf)
    failed = False
    for path in args.files:
        try:
            # Read with every problem kept, so that the checks after loading run on the
            # commands that loaded, and api.validate raises all of them together.
            topology = read_topology(path, args.name, state_names=tuple(SINKS))
            plan = api.validate(topology, config=configs, conf=conf)
        except SqeError as exc:
            failed = True
            print(f"error: {exc}".replace("\n", "\nerror: "), file=sys.stderr)
            continue
        for warning in plan.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        t = plan.topology
        print(f"OK {path}: topology {t.name!r}, {len(t.streams)} stream(s), "
              f"{len(t.queries)} query(ies)")
    return 2 if failed else 0


def run(args: argparse.Namespace) -> int:
    """``sqe run``: the topology on Spark; a failure is one sentence and exit 1."""
    # Validated once, the checkpoint settled: bad input is exit 2 before a JVM starts.
    prepared = api.prepare(args.topology, config=[load_config(c) for c in args.config],
                           conf=parse_conf_pairs(args.conf), name=args.name,
                           checkpoint=args.checkpoint, resume_from_store=args.resume_from_store,
                           adopt_layout=args.adopt_layout,
                           accept_lost_marks=args.accept_lost_marks, rerun=_rerun_command(args))
    topology, plan = prepared.topology, prepared.plan
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    logging.basicConfig(level=logging.INFO, format="sqe: %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    set_log_level(args.log_level)
    held = _held_elsewhere(prepared.checkpoint)
    if held:  # say so at once, before a JVM starts
        print(f"error: {topology.path}: {held}", file=sys.stderr)
        return 1
    watchers = _watchers(args)  # a metrics port in use: said before Spark starts
    spark = build_session(f"sqe {topology.name}", plan.spark_conf, origins=plan.spark_origins,
                          remote=args.remote)
    if not args.verbose:
        quiet_failure_traces(spark)
    stop, signals = _stop_on_signals()  # after the SparkContext, which sets a SIGINT handler
    try:
        result = api.run(prepared, once=args.once, runtime=args.runtime, spark=spark,
                         stop=stop, watchers=watchers)
    except RunStopped as exc:
        print(f"sqe: {topology.name} {exc}", file=sys.stderr)
        return 128 + (signals[0] if signals else signal.SIGINT)
    except (RunError, SourceError, StateError) as exc:
        text = str(exc)  # a topology error or a bad record names its file and command already
        located = text if f"{topology.path}: " in text else f"{topology.path}: {text}"
        print(f"error: {located}", file=sys.stderr)
        return 1
    merged = (f", {result.entries_merged} aggregate entries merged"
              if any(r.merged for r in result.reports) else "")
    print(f"{result.topology}: {len(result.reports)} batch(es), {result.records_read} records "
          f"read, {result.replays_dropped} replays dropped, {result.rows_written} rows "
          f"written{merged}")
    print(f"progress of every batch: sqe report {result.checkpoint}")
    return 0


def _watchers(args: argparse.Namespace) -> list[RunWatcher]:
    """What watches ``sqe run``: its live progress and, with --metrics-port, Prometheus."""
    watchers: list[RunWatcher] = []
    if args.progress != "off":
        terminal = None if args.progress == "auto" else args.progress == "bar"
        watchers.append(LiveProgress(sys.stderr, terminal))
    if args.metrics_port is not None:
        metrics = PrometheusWatcher(args.metrics_port, args.metrics_address)
        metrics.serve()
        print(f"sqe: metrics on http://{args.metrics_address}:{args.metrics_port}/metrics",
              file=sys.stderr)
        watchers.append(metrics)
    return watchers


def _held_elsewhere(checkpoint: str) -> str | None:
    """Who holds ``checkpoint``, when it is on this machine and another run holds it (the run
    itself takes the lock; this only answers early)."""
    if "://" in checkpoint or "PYSPARK_GATEWAY_PORT" in os.environ:  # remote: the run decides
        return None
    return CheckpointLock(CheckpointFiles(None, os.path.abspath(checkpoint))).holder()


def _stop_on_signals() -> tuple[threading.Event, list[int]]:
    """An event SIGINT and SIGTERM set (the run then stops after the batch being written),
    and the signals received; a second signal stops at once."""
    stop, received = threading.Event(), list[int]()

    def handle(signum: int, _frame: object) -> None:
        if stop.is_set():  # asked twice: do not wait for the batch
            sys.exit(128 + received[0])
        received.append(signum)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, handle)
    return stop, received


def _rerun_command(args: argparse.Namespace) -> Rerun:
    """How a refusal names this ``sqe run`` again with some flags changed (secrets masked)."""
    def command(flags: dict[str, str | None]) -> str:
        verb = ["reset"] if "reset" in flags else ["hwm", "rebuild"] if "rebuild" in flags \
            else ["run"]
        argv = ["sqe", *verb, args.topology]
        for path in args.config:
            argv += ["--config", path]
        for pair in args.conf:
            key, _, value = pair.partition("=")
            argv += ["--conf", f"{key}={mask_value(key, value)}"]
        if args.name:
            argv += ["--name", args.name]
        if "reset" in flags:
            return shlex.join(argv)
        checkpoint = flags.get("--checkpoint", args.checkpoint)
        if checkpoint:
            argv += ["--checkpoint", checkpoint]
        if "rebuild" in flags:
            return shlex.join(argv)
        argv += (["--once"] if args.once else
                 ["--runtime", str(args.runtime)] if args.runtime is not None else [])
        argv += ["--resume-from-store"] if "--resume-from-store" in flags else []
        lost = flags.get("--accept-lost-marks")
        argv += ["--accept-lost-marks", lost] if lost is not None else []
        return shlex.join(argv)

    return command


def hwm(args: argparse.Namespace) -> int:
    """``sqe hwm show``: a consumer's high-water marks and last batch in its HWM store
    (``sqe hwm rebuild``: :mod:`sqe.cli.rebuild`)."""
    if args.hwm_command == "rebuild":
        return rebuild.rebuild(args)
    if args.hwm_command == "reset":
        print("error: sqe hwm reset is replaced by sqe reset TOPOLOGY [--config FILE]..., which "
              "resets every store the topology commits to (the HWM store, Postgres and Redis "
              "aggregate states) and shows what it changes first", file=sys.stderr)
        return 2
    settings = _settings(args)
    if args.redis:
        settings = settings.overlay({StreamSettings.hwm_url.key: args.redis}, "--redis")
    try:
        endpoint = StreamSettings(settings).hwm_store
        ttl = args.ttl if args.ttl is not None else StreamSettings(settings).hwm_ttl
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        store = HwmStore.from_url(endpoint, args.consumer, ttl)
    except redis.RedisError as exc:
        print(f"error: HWM store: {endpoint.describe_error(exc)}", file=sys.stderr)
        return 1
    try:
        snapshot = store.load()
    except redis.RedisError as exc:
        print(f"error: HWM store: {endpoint.describe_error(exc)}", file=sys.stderr)
        return 1
    finally:
        store.client.close()
    commit = snapshot.commit
    done = "-" if commit is None else (f"{commit.batch_id} (ended at offsets {commit.offsets})"
                                       if commit.offsets else str(commit.batch_id))
    print(f"consumer {args.consumer} in {endpoint.display}: committed batch {done}, "
          f"{len(snapshot.hwm)} high-water mark(s)")
    for (pid, partition), offset in sorted(snapshot.hwm.items()):
        print(f"pid={pid} partition={partition} offset={offset}")
    return 0


def pack(args: argparse.Namespace) -> int:
    """``sqe pack``: the executors' environment as one archive, and how to ship it."""
    extras = [e.strip() for e in args.extras.split(",") if e.strip()]
    print(f"sqe pack: packing a virtualenv with sqe-spark {__version__}"
          + (f" [{','.join(extras)}]" if extras else "") + f" into {args.output} ...",
          file=sys.stderr, flush=True)
    out = packing.pack(args.output, extras, args.python)
    size = out.stat().st_size / 1e6
    print(f"{out} ({size:,.0f} MB): ship it with spark-submit --archives {out}#environment "
          "and PYSPARK_PYTHON=./environment/bin/python (docs/deploy.md)")
    return 0


def demo(args: argparse.Namespace) -> int:
    """``sqe demo``: the exactly-once chain with a crash, and its report."""
    report = run_demo(args.events, args.workdir, say=lambda text: print(text, flush=True))
    print("\n".join(["", "report:", *("  " + line for line in report.lines())]))
    if report.duplicates_in_store:
        print(f"error: {report.duplicates_in_store} duplicate(s) reached the final store",
              file=sys.stderr)
        return 1
    if not report.replays_in_middle_topic:
        print("warning: the crash left no replays in enriched, so the filter had nothing to "
              "do; run again with more --events", file=sys.stderr)
    print("\nper-batch progress: sqe report " + " ".join(map(str, report.checkpoints))
          + " [--plot demo.png]")
    return 0


def report(args: argparse.Namespace) -> int:
    """``sqe report``: a run's batches from its progress file, as a table, JSON or a plot."""
    progress = summary.load(args.checkpoints)  # a missing or empty file: ProgressError, exit 2
    if args.plot:
        summary.plot(progress, args.plot)  # fails before anything is printed without matplotlib
    print(summary.write_json(progress) if args.json else summary.summary_table(progress))
    if args.plot:
        print(f"plot written to {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def sample_events(args: argparse.Namespace) -> int:
    """``sqe sample-events``: JSON events for enrich.yaml into a topic."""
    n = produce_events(args.brokers, args.topic, args.count, start=args.start)
    print(f"{n} sample events written to {args.topic} on {args.brokers}")
    return 0


def _settings(args: argparse.Namespace) -> Settings:
    """The options of ``--config`` files and ``--conf`` pairs, in that order of precedence."""
    settings = Settings.defaults()
    for path in args.config:
        cfg = load_config(path)
        settings = settings.overlay(cfg.sqe, f"{cfg.path} (SQE)")
    return settings.overlay(parse_conf_pairs(args.conf), "--conf")


def _table_row(*cells: str) -> str:
    """One row of a Markdown table; a ``|`` inside a cell (``python | native``) is escaped, so
    it does not start a new column."""
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def options(args: argparse.Namespace) -> int:
    """``sqe options``: the registry, or the values --config and --conf set."""
    if args.show:
        settings = _settings(args)
        given = sorted(settings.explicit())
        if not given:
            print("no option is set by the given --config files and --conf pairs")
        for key in given:
            print(f"{key} = {settings.shown(key)!s}  ({settings.origin(key)})")
        return 0
    options = [*REGISTRY.values(), *CLIENT_PROPERTIES.values()]
    if args.markdown:
        print("| key | type | default | description |")
        print("| --- | --- | --- | --- |")
        for o in options:
            doc = o.doc + (f" *Ignored on Spark: {o.ignored}.*" if o.ignored else "")
            print(_table_row(f"`{o.key}`", o.type_name, f"`{o.default_text}`", doc))
        for key, why in RETIRED.items():
            print(_table_row(f"`{key}`", "retired", "-", f"{why[0].upper() + why[1:]}."))
        return 0
    width = max(len(o.key) for o in options)
    for o in options:
        print(f"{o.key:<{width}}  {o.type_name}  (default {o.default_text})")
        print(f"{'':<{width}}  {o.doc}" + (f" Ignored on Spark: {o.ignored}." if o.ignored else ""))
    for key, why in RETIRED.items():
        print(f"{key:<{width}}  retired: {why}")
    return 0


def keys(args: argparse.Namespace) -> int:
    """``sqe keys``: StreamMetadata keys and PIDs."""
    if args.keys_command == "decode":
        status = 0
        for text in args.hex:
            try:
                m = StreamMetadata.from_bytes(bytes.fromhex(text))
            except ValueError as exc:
                print(f"error: key {text!r}: {exc}", file=sys.stderr)
                status = 2
                continue
            print(f"pid={m.pid} partition={m.partition} offset={m.offset}")
        return status
    if args.keys_command == "encode":
        try:
            m = StreamMetadata(args.pid, args.partition, args.offset)
        except ValueError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        print(m.to_bytes().hex())
        return 0
    print(pid_for(args.topology, args.stream, args.secondary_id))
    return 0
