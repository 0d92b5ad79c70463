"""The ``sqe`` command line: validate topologies, list options, inspect keys.

Exit codes: 0 success, 2 invalid input (a topology, an option, a key),
1 a failure at run time (a service that cannot be reached, a batch that
failed) or of the machine (missing prerequisite).  Errors are printed as
sentences on stderr, never as stack traces.

    sqe validate topologies/*.yaml --config conf/local.yaml
    sqe demo
    sqe run topologies/enrich.yaml --config conf/local.yaml --once
    sqe hwm show load.Enriched --redis redis://localhost:6379/0
    sqe report checkpoints/enrich --plot enrich.png
    sqe options --markdown
    sqe keys decode 0000011f71fb04cb00000007000000000000002a
    sqe keys encode 1234567890123 7 42
    sqe keys pid enrich Events <cluster id>/events
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from sqe import __version__
from sqe.config.options import CLIENT_PROPERTIES, REGISTRY, RETIRED, Option
from sqe.config.plan import plan_topology
from sqe.config.settings import Settings, load_config, parse_conf_pairs
from sqe.errors import SqeError
from sqe.lang.topology import load_topology
from sqe.wire.keys import StreamMetadata, pid_for

__all__ = ["main"]


def _cmd_validate(args: argparse.Namespace) -> int:
    configs = [load_config(c) for c in args.config]
    conf = parse_conf_pairs(args.conf)
    failed = False
    for path in args.files:
        try:
            plan = plan_topology(load_topology(path, args.name), configs, conf)
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


def _cmd_run(args: argparse.Namespace) -> int:
    import logging
    from pathlib import Path

    from sqe.config.settings import spark_conf_options
    from sqe.errors import SourceError, StateError
    from sqe.run.runner import RunError, run_topology
    from sqe.run.session import build_session, quiet_failure_traces

    configs = [load_config(c) for c in args.config]
    conf = parse_conf_pairs(args.conf)
    topology = load_topology(args.topology, args.name)
    plan = plan_topology(topology, configs, conf)  # invalid input fails before Spark starts
    for warning in plan.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    logging.basicConfig(level=logging.INFO, format="sqe: %(message)s", stream=sys.stderr)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    spark = build_session(f"sqe {topology.name}", plan.spark_conf)
    if not args.verbose:
        quiet_failure_traces(spark)
    from_spark = spark_conf_options(spark.sparkContext.getConf().getAll())
    if from_spark:
        plan = plan_topology(topology, configs, conf, from_spark)
    checkpoint = args.checkpoint or str(Path("checkpoints") / topology.name)
    mode = "once" if args.once else ("runtime" if args.runtime is not None else "forever")
    try:
        reports = run_topology(plan, spark, topology.name, checkpoint, mode, args.runtime)
    except (RunError, SourceError, StateError) as exc:
        print(f"error: {topology.path}: {exc}", file=sys.stderr)
        return 1
    read = sum(r.records_read for r in reports)
    dropped = sum(r.replays_dropped for r in reports)
    written = sum(sum(r.written.values()) for r in reports)
    print(f"{topology.name}: {len(reports)} batch(es), {read} records read, "
          f"{dropped} replays dropped, {written} rows written")
    print(f"progress of every batch: sqe report {checkpoint}")
    return 0


def _cmd_hwm(args: argparse.Namespace) -> int:
    import redis

    from sqe.config.redis_endpoint import hwm_endpoint
    from state.hwm import HwmStore

    settings = _settings(args)
    if args.redis:
        settings = settings.overlay({"jw.sqe.spout.kafka.filterReplays.redis.url": args.redis},
                                    "--redis")
    try:
        endpoint = hwm_endpoint(settings)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        store = HwmStore.from_url(endpoint, args.consumer, args.ttl)
    except redis.RedisError as exc:
        print(f"error: HWM store: {endpoint.describe_error(exc)}", file=sys.stderr)
        return 1
    try:
        if args.hwm_command == "reset":
            deleted = store.reset()
            print(f"consumer {args.consumer}: {deleted} key(s) deleted from {endpoint.display}")
            if args.postgres:
                from state.postgres import forget_batches

                rows = forget_batches(args.postgres, args.consumer)
                print(f"consumer {args.consumer}: {rows} batch row(s) deleted from the "
                      "Postgres batch tables")
            return 0
        snapshot = store.load()
    except redis.RedisError as exc:
        print(f"error: HWM store: {endpoint.describe_error(exc)}", file=sys.stderr)
        return 1
    finally:
        store.client.close()
    print(f"consumer {args.consumer}: committed batch "
          f"{'-' if snapshot.batch_id is None else snapshot.batch_id}, "
          f"{len(snapshot.hwm)} high-water mark(s)")
    for (pid, partition), offset in sorted(snapshot.hwm.items()):
        print(f"pid={pid} partition={partition} offset={offset}")
    return 0


def _cmd_services(args: argparse.Namespace) -> int:
    import signal
    import threading

    from sqe.cli.local_services import start_local_kafka, start_local_redis

    started = []
    try:
        kafka = start_local_kafka(os.path.join(args.data_dir, "kafka"), args.kafka_port)
        started.append(kafka)
        print(f"kafka: {kafka.address} (logs in {kafka.log_path})", flush=True)
        if args.redis_port:
            rds = start_local_redis(os.path.join(args.data_dir, "redis"), args.redis_port)
            started.append(rds)
            print(f"redis: {rds.address} (logs in {rds.log_path})", flush=True)
        print("running; Ctrl-C stops them", flush=True)
        stop = threading.Event()
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, lambda *_: stop.set())
        while not stop.wait(1.0):
            dead = [s for s in started if s.process.poll() is not None]
            if dead:
                print(f"error: {dead[0].name} exited: {dead[0].log_tail(5)}", file=sys.stderr)
                return 1
        return 0
    finally:
        for service in reversed(started):
            service.stop()


def _cmd_demo(args: argparse.Namespace) -> int:
    from sqe.cli.demo import run_demo

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


def _cmd_report(args: argparse.Namespace) -> int:
    from sqe.cli import report

    progress = report.load(args.checkpoints)  # a missing or empty file: ProgressError, exit 2
    if args.plot:
        report.plot(progress, args.plot)  # fails before anything is printed without matplotlib
    print(report.write_json(progress) if args.json else report.summary_table(progress))
    if args.plot:
        print(f"plot written to {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return 0


def _cmd_sample_events(args: argparse.Namespace) -> int:
    from sqe.cli.sample_events import produce_events

    n = produce_events(args.brokers, args.topic, args.count, start=args.start)
    print(f"{n} sample events written to {args.topic} on {args.brokers}")
    return 0


def _default_text(option: Option) -> str:
    if option.default is None:
        return "-"
    if isinstance(option.default, bool):
        return str(option.default).lower()
    if isinstance(option.default, list):
        return "[]" if not option.default else ",".join(option.default)
    return str(option.default)


def _settings(args: argparse.Namespace) -> Settings:
    """The options of ``--config`` files and ``--conf`` pairs, in that order of precedence."""
    settings = Settings.defaults()
    for path in args.config:
        cfg = load_config(path)
        settings = settings.overlay(cfg.sqe, f"{cfg.path} (SQE)")
    return settings.overlay(parse_conf_pairs(args.conf), "--conf")


def _cmd_options(args: argparse.Namespace) -> int:
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
            print(f"| `{o.key}` | {o.type_name} | `{_default_text(o)}` | {doc} |")
        for key, why in RETIRED.items():
            print(f"| `{key}` | retired | - | {why[0].upper() + why[1:]}. |")
        return 0
    width = max(len(o.key) for o in options)
    for o in options:
        print(f"{o.key:<{width}}  {o.type_name}  (default {_default_text(o)})")
        print(f"{'':<{width}}  {o.doc}" + (f" Ignored on Spark: {o.ignored}." if o.ignored else ""))
    for key, why in RETIRED.items():
        print(f"{key:<{width}}  retired: {why}")
    return 0


def _cmd_keys(args: argparse.Namespace) -> int:
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


def _option_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that resolve a topology's options: --config, --conf, --name."""
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="YAML config with SQE: options and Spark: conf (repeatable)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a jw.sqe.* option that wins over the files (repeatable)")
    parser.add_argument("--name", help="topology name used in PIDs and HWM keys "
                        "(default: the file's stem)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sqe", description="SQE on Spark: declarative streaming topologies on Spark.")
    parser.add_argument("--version", action="version", version=f"sqe {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = sub.add_parser("validate", help="check topology files without starting Spark")
    v.add_argument("files", nargs="+", metavar="FILE", help="topology files (YAML or JSON)")
    _option_arguments(v)
    v.set_defaults(func=_cmd_validate)

    r = sub.add_parser("run", help="run a topology on Spark (locally, or under spark-submit)")
    r.add_argument("topology", metavar="TOPOLOGY", help="topology file (YAML or JSON)")
    _option_arguments(r)
    r.add_argument("--checkpoint", metavar="DIR",
                   help="checkpoint directory (default: checkpoints/<name>); one sub-directory "
                   "per stream")
    when = r.add_mutually_exclusive_group()
    when.add_argument("--once", action="store_true",
                      help="process everything available now, then exit 0")
    when.add_argument("--runtime", type=float, metavar="SECONDS",
                      help="run for this many seconds, then stop")
    r.add_argument("--verbose", action="store_true",
                   help="keep Spark's stack traces of a failure (it is always reported as a "
                   "sentence)")
    r.set_defaults(func=_cmd_run)

    h = sub.add_parser("hwm", help="show or reset a consumer's high-water marks in Redis")
    hsub = h.add_subparsers(dest="hwm_command", required=True, metavar="ACTION")
    for action, text in (("show", "print the committed batch id and the HWMs"),
                         ("reset", "delete them (after deleting the query's checkpoint)")):
        a = hsub.add_parser(action, help=text)
        a.add_argument("consumer", metavar="CONSUMER", help="<topology name>.<streamName>")
        a.add_argument("--redis", metavar="URL",
                       help="the HWM store's URL (default: jw.sqe.spout.kafka.filterReplays."
                       "redis.url of --config/--conf, else redis://localhost:6379/0); its "
                       "password and TLS files come from the filterReplays.redis.* options")
        a.add_argument("--config", action="append", default=[], metavar="FILE",
                       help="YAML config whose SQE: options name the HWM store (repeatable)")
        a.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                       help="a jw.sqe.* option, e.g. jw.sqe.spout.kafka.filterReplays.redis."
                       "password=${REDIS_PASSWORD} (repeatable)")
        a.add_argument("--ttl", type=int, default=172800, metavar="SECONDS",
                       help="entries older than this are not shown")
        if action == "reset":
            a.add_argument("--postgres", metavar="DSN", help="also forget the consumer's "
                           "batches in this database's Postgres batch tables (sqe_batches)")
    h.set_defaults(func=_cmd_hwm)

    sv = sub.add_parser("services", help="run a local Kafka-protocol broker and redis-server "
                        "for trying topologies on a machine without them (needs .[local])")
    sv.add_argument("--kafka-port", type=int, default=9092)
    sv.add_argument("--redis-port", type=int, default=6379,
                    help="0 to start no redis-server (e.g. one already runs)")
    sv.add_argument("--data-dir", default=".sqe-services", metavar="DIR")
    sv.set_defaults(func=_cmd_services)

    dm = sub.add_parser("demo", help="the exactly-once chain end to end on local services, with "
                        "a crash of enrich mid-batch, and a report")
    dm.add_argument("--events", type=int, default=5000, help="sample events to produce "
                    "(default 5000)")
    dm.add_argument("--workdir", metavar="DIR", help="where services, checkpoints and logs go "
                    "(default: a new temporary directory)")
    dm.set_defaults(func=_cmd_demo)

    rp = sub.add_parser("report", help="summarize the batches of sqe run from a checkpoint's "
                        "progress file, optionally as a plot")
    rp.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT_DIR",
                    help="the --checkpoint directory of sqe run (or its sqe-progress.jsonl)")
    rp.add_argument("--json", action="store_true", help="print the summary as JSON")
    rp.add_argument("--plot", metavar="PNG", help="also draw records in, replays dropped, "
                    "Bloom chunks skipped and batch duration per batch (needs .[plot])")
    rp.set_defaults(func=_cmd_report)

    se = sub.add_parser("sample-events", help="write sample JSON events for enrich.yaml to Kafka")
    se.add_argument("--brokers", default="localhost:9092")
    se.add_argument("--topic", default="events")
    se.add_argument("--count", type=int, default=1000)
    se.add_argument("--start", type=int, default=0, help="first event number (ids e<start>...)")
    se.set_defaults(func=_cmd_sample_events)

    o = sub.add_parser("options", help="list every jw.sqe.* option, or with --show the values "
                       "that --config files and --conf pairs set (secrets as ***)")
    o.add_argument("--markdown", action="store_true", help="print a Markdown table")
    o.add_argument("--show", action="store_true", help="print the options set by --config and "
                   "--conf, with their values and where each comes from")
    o.add_argument("--config", action="append", default=[], metavar="FILE")
    o.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE")
    o.set_defaults(func=_cmd_options)

    k = sub.add_parser("keys", help="encode and decode 20-byte StreamMetadata keys")
    ksub = k.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    d = ksub.add_parser("decode", help="hex key(s) to pid, partition, offset")
    d.add_argument("hex", nargs="+", metavar="HEX")
    e = ksub.add_parser("encode", help="pid, partition, offset to a hex key")
    e.add_argument("pid", type=int)
    e.add_argument("partition", type=int)
    e.add_argument("offset", type=int)
    p = ksub.add_parser("pid", help="the PID of topology + stream + secondary id")
    p.add_argument("topology")
    p.add_argument("stream")
    p.add_argument("secondary_id", metavar="SECONDARY_ID",
                   help="for a Kafka stream: '<cluster id>/<topic>'")
    k.set_defaults(func=_cmd_keys)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sqe`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `sqe options | head`: the reader left, not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except SqeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        # Errors of bad input are ValueErrors; the others failed at run time.
        return 1 if isinstance(exc, RuntimeError) else 2


if __name__ == "__main__":
    sys.exit(main())
