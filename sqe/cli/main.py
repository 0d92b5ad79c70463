"""The ``sqe`` command line: validate topologies, list options, inspect keys.

Exit codes: 0 success, 2 invalid input (a topology, an option, a key),
1 a failure at run time (a service that cannot be reached, a batch that
failed) or of the machine (missing prerequisite).  Errors are printed as
sentences on stderr, never as stack traces.

    sqe validate topologies/*.yaml --config conf/local.yaml
    sqe demo
    sqe services &                  # then: sqe services status, sqe services stop
    sqe run topologies/enrich.yaml --config conf/local.yaml --once
    sqe pipelines run --spec examples/pipeline/spark-pipeline.yml
    sqe status topologies/load.yaml --config conf/local.yaml
    sqe hwm show load.Enriched --redis redis://localhost:6379/0
    sqe reset topologies/load.yaml --config conf/local.yaml
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
from sqe.cli import commands, pipelines, reset, services, status
from sqe.cli.suggest import SuggestingParser, parse_or_suggest
from sqe.errors import SqeError, TopologyError
from sqe.logs import LEVELS

__all__ = ["main"]


def _conf_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that set options: --config files and --conf pairs."""
    parser.add_argument("--config", action="append", default=[], metavar="FILE",
                        help="YAML config with SQE: options and Spark: conf (repeatable)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a jw.sqe.* option that wins over the files (repeatable)")


def _option_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments that resolve a topology's options: --config, --conf, --name."""
    _conf_arguments(parser)
    parser.add_argument("--name", help="topology name used in PIDs and HWM keys "
                        "(default: the file's stem)")


def _checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """A topology, its options and its run's checkpoint: what sqe status and sqe hwm rebuild
    read."""
    parser.add_argument("topology", metavar="TOPOLOGY", help="topology file (YAML or JSON)")
    _option_arguments(parser)
    parser.add_argument("--checkpoint", metavar="DIR",
                        help="the run's checkpoint directory (default: checkpoints/<name>)")


def _parser() -> argparse.ArgumentParser:
    parser = SuggestingParser(
        prog="sqe", description="SQE on Spark: declarative streaming topologies on Spark.")
    parser.add_argument("-V", "--version", action="version", version=f"sqe {__version__}",
                        help="print the version and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    v = sub.add_parser("validate", help="check topology files without starting Spark")
    v.add_argument("files", nargs="+", metavar="FILE", help="topology files (YAML or JSON)")
    _option_arguments(v)
    v.set_defaults(func=commands.validate)

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
    r.add_argument("--resume-from-store", action="store_true",
                   help="on an empty checkpoint: start where the stores' last commits end "
                   "(their offsets), as the lost checkpoint would have")
    r.add_argument("--accept-lost-marks", type=int, metavar="BATCH",
                   help="go on although the HWM store lost the commits up to BATCH (the batch "
                   "a refusal names): replays of those batches' records then pass the filter "
                   "once")
    r.add_argument("--remote", metavar="sc://HOST:PORT",
                   help="run on a Spark Connect server (default: SPARK_REMOTE, or spark.remote "
                   "in a config file's Spark: section; without one, a local session or the "
                   "spark-submit one); needs pip install 'sqe-spark[connect]' and no Java")
    r.add_argument("--adopt-layout", action="store_true",
                   help="Kafka states place records over their topics' partitions as they are "
                   "now, with the partitioner, key type and chunking the topology says; use it "
                   "once, after every topology that reads those topics has caught up "
                   "(docs/operations.md, 'Adding partitions')")
    r.add_argument("--log-level", choices=list(LEVELS), default="quiet",
                   help="how much librdkafka and Spark say (default quiet: SQE's own lines and "
                   "Spark's errors; repeated lines are collapsed)")
    r.add_argument("--verbose", action="store_true",
                   help="keep Spark's stack traces of a failure (it is always reported as a "
                   "sentence)")
    r.add_argument("--progress", choices=("auto", "bar", "lines", "off"), default="auto",
                   help="per stream: records done, rate, replays dropped, backlog and time to "
                   "go; auto (the default): updating lines on a terminal, a plain line per "
                   "batch elsewhere")
    r.add_argument("--metrics-port", type=int, metavar="PORT",
                   help="serve Prometheus metrics on this port (/metrics) while the run runs")
    r.add_argument("--metrics-address", default="0.0.0.0", metavar="ADDRESS",
                   help="the address the metrics are served on (default 0.0.0.0: every "
                   "interface)")
    r.set_defaults(func=commands.run)

    rs = sub.add_parser("reset", help="forget what a topology's consumers committed (marks, "
                        "offsets) in every store it commits to; asks first")
    rs.add_argument("topology", metavar="TOPOLOGY", help="topology file (YAML or JSON)")
    _option_arguments(rs)
    rs.add_argument("--stream", action="append", default=[], metavar="NAME",
                    help="only this stream's consumer (repeatable; default: every stream)")
    rs.add_argument("--yes", action="store_true", help="do not ask (for scripts)")
    rs.set_defaults(func=reset.reset)

    st = sub.add_parser("status", help="how far behind a topology's run is (per partition), "
                        "its high-water marks, its stores' last commits and its last batches; "
                        "works while the run runs")
    _checkpoint_arguments(st)
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    st.add_argument("--batches", type=int, default=5, metavar="N",
                    help="the last N batches of each stream (default 5)")
    st.add_argument("--marks", type=int, default=10, metavar="N",
                    help="the N high-water marks updated last, per stream (default 10)")
    st.set_defaults(func=status.status)

    h = sub.add_parser("hwm", help="show a consumer's high-water marks in Redis, or rebuild "
                       "those a store lost (sqe reset forgets them)")
    hsub = h.add_subparsers(dest="hwm_command", required=True, metavar="ACTION")
    for action, text in (("show", "print the committed batch and the HWMs"),):
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
        a.add_argument("--ttl", type=int, metavar="SECONDS",
                       help="entries older than this are not shown (default: jw.sqe.spout.kafka."
                       "filterReplays.metadata.ttl of --config/--conf, else 172800)")
    rb = hsub.add_parser("rebuild", help="give a topology's HWM stores that lost commits "
                         "their marks back, read again from the topics up to where the "
                         "checkpoint's last batch ended; asks first")
    _checkpoint_arguments(rb)
    rb.add_argument("--stream", action="append", default=[], metavar="NAME",
                    help="only this stream's consumer (repeatable; default: every stream)")
    rb.add_argument("--yes", action="store_true", help="do not ask (for scripts)")
    gone = hsub.add_parser("reset", help="replaced by sqe reset TOPOLOGY")
    gone.add_argument("rest", nargs=argparse.REMAINDER, metavar="...",
                      help="anything: the command says what replaced it")
    h.set_defaults(func=commands.hwm)

    services.add_parser(sub)  # sqe services [start|status|stop]
    pipelines.add_parser(sub)  # sqe pipelines run --spec ...

    dm = sub.add_parser("demo", help="the exactly-once chain end to end on local services, with "
                        "a crash of enrich mid-batch, and a report")
    dm.add_argument("--events", type=int, default=5000, help="sample events to produce "
                    "(default 5000)")
    dm.add_argument("--workdir", metavar="DIR", help="where services, checkpoints and logs go "
                    "(default: a new temporary directory)")
    dm.set_defaults(func=commands.demo)

    pk = sub.add_parser("pack", help="pack a virtualenv with this SQE for a cluster's executors "
                        "(spark-submit --archives FILE#environment)")
    pk.add_argument("-o", "--output", default="sqe-env.tar.gz", metavar="FILE",
                    help="the archive to write (default sqe-env.tar.gz)")
    pk.add_argument("--extras", default="", metavar="NAMES",
                    help="sqe-spark extras the executors need, comma-separated (e.g. postgres)")
    pk.add_argument("--python", metavar="PATH", help="the interpreter of the environment "
                    "(default: this one's); the executors must have it at the same path")
    pk.set_defaults(func=commands.pack)

    rp = sub.add_parser("report", help="summarize the batches of sqe run from a checkpoint's "
                        "progress file, optionally as a plot")
    rp.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT_DIR",
                    help="the --checkpoint directory of sqe run (or its sqe-progress.jsonl)")
    rp.add_argument("--json", action="store_true", help="print the summary as JSON")
    rp.add_argument("--plot", metavar="PNG", help="also draw records in, replays dropped, "
                    "Bloom chunks skipped and batch duration per batch (needs .[plot])")
    rp.set_defaults(func=commands.report)

    se = sub.add_parser("sample-events", help="write sample JSON events for enrich.yaml to Kafka")
    se.add_argument("--brokers", default="localhost:9092", metavar="HOST:PORT[,...]",
                    help="Kafka bootstrap servers (default: localhost:9092)")
    se.add_argument("--topic", default="events", help="the topic to write (default: events)")
    se.add_argument("--count", type=int, default=1000, metavar="N",
                    help="how many events (default: 1000)")
    se.add_argument("--start", type=int, default=0, help="first event number (ids e<start>...)")
    se.set_defaults(func=commands.sample_events)

    o = sub.add_parser("options", help="list every jw.sqe.* option, or with --show the values "
                       "that --config files and --conf pairs set (secrets as ***)")
    o.add_argument("--markdown", action="store_true", help="print a Markdown table")
    o.add_argument("--show", action="store_true", help="print the options set by --config and "
                   "--conf, with their values and where each comes from")
    _conf_arguments(o)
    o.set_defaults(func=commands.options)

    k = sub.add_parser("keys", help="encode and decode 20-byte StreamMetadata keys")
    ksub = k.add_subparsers(dest="keys_command", required=True, metavar="ACTION")
    d = ksub.add_parser("decode", help="hex key(s) to pid, partition, offset")
    d.add_argument("hex", nargs="+", metavar="HEX", help="a 20-byte key as 40 hex digits "
                   "(repeatable)")
    e = ksub.add_parser("encode", help="pid, partition, offset to a hex key")
    e.add_argument("pid", type=int, help="the writer's PID (sqe keys pid)")
    e.add_argument("partition", type=int, help="the source partition")
    e.add_argument("offset", type=int, help="the source offset")
    p = ksub.add_parser("pid", help="the PID of topology + stream + secondary id")
    p.add_argument("topology", help="the topology's name (its file's stem, or --name)")
    p.add_argument("stream", help="the stream's streamName")
    p.add_argument("secondary_id", metavar="SECONDARY_ID",
                   help="for a Kafka stream: '<cluster id>/<topic>'")
    k.set_defaults(func=commands.keys)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``sqe`` console script; returns the exit code."""
    args = parse_or_suggest(_parser(), argv)
    try:
        return args.func(args)
    except BrokenPipeError:  # e.g. `sqe options | head`: the reader left, not an error
        sys.stdout = open(os.devnull, "w")
        return 0
    except SqeError as exc:
        # Every problem of bad input is a line of its own, each an error (as sqe validate
        # prints them); other errors are one sentence, perhaps with a log's tail after it.
        lines = exc.messages if isinstance(exc, TopologyError) else [str(exc)]
        print("\n".join(f"error: {line}" for line in lines), file=sys.stderr)
        # Errors of bad input are ValueErrors; the others failed at run time.
        return 1 if isinstance(exc, RuntimeError) else 2


if __name__ == "__main__":
    sys.exit(main())
