"""SQE from Python: load, validate and run topologies, with the arguments of the ``sqe`` command.

``sqe validate FILE --config C --conf K=V --name N`` is
``sqe.validate(FILE, config=[C], conf={K: V}, name=N)``, and ``sqe run`` is
``sqe.run(sqe.prepare(FILE, config=[C], ..., checkpoint=...), once=..., runtime=...)``: every
run is planned by :func:`prepare`.  Errors
are the ones the command prints as sentences: :class:`~sqe.errors.TopologyError`
and :class:`~sqe.errors.OptionError` for input that is wrong (every problem, each
located in its file), :class:`~sqe.errors.RunError` (and its kin, all
:class:`~sqe.errors.SqeError`) for a run that fails.

Example::

    >>> import sqe                                                    # doctest: +SKIP
    >>> plan = sqe.validate("topologies/load.yaml", config=["conf/local.yaml"])
    >>> result = sqe.run(sqe.prepare("topologies/enrich.yaml", config=["conf/local.yaml"]),
    ...                  once=True)
    >>> result.records_read, result.rows_written
    (1000, 1000)
"""

from __future__ import annotations

import dataclasses
import shlex
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from sqe.config.plan import TopologyPlan
from sqe.config.settings import ConfigFile, load_config
from sqe.engine.run.planning import plan_run, session_options
from sqe.engine.run.recovery import Rerun
from sqe.engine.run.runner import Mode, run_topology
from sqe.engine.spark.checkpoint import default_checkpoint, not_a_directory
from sqe.engine.spark.session import build_session, quiet_failure_traces
from sqe.errors import ArgumentError, OptionError
from sqe.lang.topology import Topology, read_topology
from sqe.lang.topology import load_topology as _load
from sqe.observe.batch_report import BatchReport
from sqe.observe.watch import RunWatcher
from state.registry import SINKS

__all__ = ["PreparedRun", "RunResult", "load_topology", "prepare", "run", "validate"]

TopologyArg = str | Path | Topology
ConfigArg = str | Path | ConfigFile


def load_topology(path: str | Path, name: str | None = None) -> Topology:
    """Load and check a topology file's commands (YAML, or JSON by its ``.json`` suffix).

    Its options are not resolved yet: :func:`validate` does that.

    Args:
        path: the topology file.
        name: the topology name in PIDs and consumer names (default: the file's stem).

    Returns:
        The file's commands (``.streams``, ``.queries``), checked.

    Raises:
        TopologyError: the file cannot be read or parsed, or a command is malformed; every
            problem at once, each located in the file.
    """
    return _load(path, name, state_names=tuple(SINKS))


def _configs(config: Sequence[ConfigArg]) -> list[ConfigFile]:
    return [c if isinstance(c, ConfigFile) else load_config(c) for c in config]


def _topology(topology: TopologyArg, name: str | None) -> Topology:
    """The topology to plan: every problem of reading a file is kept for the plan to report
    with the others (a :class:`Topology` given keeps its own)."""
    if isinstance(topology, Topology):
        return topology if name is None else dataclasses.replace(topology, name=name)
    return read_topology(topology, name, state_names=tuple(SINKS))


def validate(topology: TopologyArg, *, config: Sequence[ConfigArg] = (),
             conf: Mapping[str, Any] | None = None, name: str | None = None,
             spark_conf: Mapping[str, Any] | None = None) -> TopologyPlan:
    """Check a topology with its options, as ``sqe validate``, without starting Spark.

    Args:
        topology: a topology file, or a :class:`Topology` from :func:`load_topology`.
        config: config files (``--config``): their ``SQE:`` options and ``Spark:`` conf.
        conf: options that win over the files (``--conf KEY=VALUE``).
        name: the topology name in PIDs and consumer names (default: the file's stem).
        spark_conf: the ``jw.sqe.*`` options carried by Spark conf (``spark.jw.sqe.*``),
            which win over all the others.

    Returns:
        The plan: every stream's and state's settings (``plan.streams[name]``, typed) and
        ``plan.warnings``.

    Raises:
        TopologyError: the topology, an option or a config file is wrong; every problem
            together, each located.
        OptionError: a config file cannot be read as one.
    """
    return plan_run(_topology(topology, name), _configs(config), conf, spark_conf)


@dataclass(frozen=True)
class PreparedRun:
    """A topology validated with its options, the checkpoint its run keeps and how the run
    starts: what :func:`prepare` gives and :func:`run` takes, so that a caller who looks at the
    plan first (its warnings, the session it asks for) validates nothing twice.

    Attributes:
        topology: the topology's commands (``.name`` is the one in PIDs and consumer names).
        plan: every stream's and state's settings, ``plan.warnings`` and the Spark conf the
            config files give.
        checkpoint: the checkpoint directory (one sub-directory per stream).
        config: the config files it was validated with.
        conf: the options that won over them.
        name: the name given instead of the file's stem, if one was.
        resume_from_store: an empty checkpoint starts where the stores' commits end.
        adopt_layout: Kafka states take their topics' partitions as they are now.
        accept_lost_marks: the batch up to which the HWM store's lost commits are accepted.
        rerun: how a refusal names the way to run again (default: as a call of :func:`run`).
    """

    topology: Topology
    plan: TopologyPlan
    checkpoint: str
    config: tuple[ConfigFile, ...] = ()
    conf: Mapping[str, Any] | None = None
    name: str | None = None
    resume_from_store: bool = False
    adopt_layout: bool = False
    accept_lost_marks: int | None = None
    rerun: Rerun | None = None

    def on(self, spark: SparkSession) -> PreparedRun:
        """This run as it runs in ``spark``: planned again, by the same function, with the
        ``spark.jw.sqe.*`` options the session carries beyond its config files' (those of
        ``spark-submit --conf``, or of a session of the caller's) as the top layer; itself
        when it carries none."""
        carried = session_options(self.plan, spark)
        if carried is None:
            return self
        plan = plan_run(self.topology, self.config, self.conf, carried)
        return dataclasses.replace(self, plan=plan)


def prepare(topology: TopologyArg, *, config: Sequence[ConfigArg] = (),
            conf: Mapping[str, Any] | None = None, name: str | None = None,
            checkpoint: str | Path | None = None, resume_from_store: bool = False,
            adopt_layout: bool = False, accept_lost_marks: int | None = None,
            rerun: Rerun | None = None) -> PreparedRun:
    """Validate a topology for a run, settle its checkpoint and how it starts, without Spark.

    Args:
        topology: a topology file, or a :class:`Topology` from :func:`load_topology`.
        config: config files (``--config``): their ``SQE:`` options and ``Spark:`` conf.
        conf: options that win over the files (``--conf KEY=VALUE``).
        name: the topology name in PIDs and consumer names (default: the file's stem).
        checkpoint: the checkpoint directory (default ``checkpoints/<name>``).
        resume_from_store: start an empty checkpoint where the stores' commits end.
        adopt_layout: Kafka states place records over their topics' partitions as they
            are now, with the partitioners, key types and chunking the topology says (use
            it once every reader of those topics caught up; a changed layout is refused
            without it).
        accept_lost_marks: go on although the HWM store lost the commits up to this batch,
            the one a refusal names (replays of those batches' records then pass the filter
            once); without it such a store is refused before anything is read.
        rerun: formats how a refusal names the way to run again (default: as calls of this
            function and :func:`run`); see :data:`Rerun`.

    Returns:
        What :func:`run` takes.

    Raises:
        TopologyError: the topology, an option or a config file is wrong; every problem
            together, each located.
        OptionError: a config file cannot be read as one, or the checkpoint cannot be a
            directory.
    """
    configs = tuple(_configs(config))
    topo = _topology(topology, name)
    plan = plan_run(topo, configs, conf)
    where = str(checkpoint) if checkpoint is not None else default_checkpoint(topo.name)
    unusable = not_a_directory(where)
    if unusable:
        raise OptionError(f"{topo.path}: {unusable}")
    return PreparedRun(plan.topology, plan, where, configs, conf, name, resume_from_store,
                       adopt_layout, accept_lost_marks, rerun)


@dataclass(frozen=True)
class RunResult:
    """What :func:`run` did: every batch's report, and where its checkpoint is.

    Attributes:
        topology: the topology name.
        checkpoint: the checkpoint directory (one sub-directory per stream).
        reports: one :class:`BatchReport` per micro-batch of every stream, in order (a run
            without ``once`` or ``runtime`` keeps only its last 1,000).
    """

    topology: str
    checkpoint: str
    reports: list[BatchReport] = field(default_factory=list)

    @property
    def records_read(self) -> int:
        """Records read, replays included."""
        return sum(r.records_read for r in self.reports)

    @property
    def replays_dropped(self) -> int:
        """Replays dropped by the high-water marks."""
        return sum(r.replays_dropped for r in self.reports)

    @property
    def rows_written(self) -> int:
        """Rows written to every state (aggregate entries merged not counted)."""
        return sum(r.rows_written for r in self.reports)

    @property
    def entries_merged(self) -> int:
        """Aggregate entries merged into the aggregating Redis states."""
        return sum(r.entries_merged for r in self.reports)


#: The keywords :func:`run` took before 0.2.0 that :func:`prepare` takes now.
_MOVED = ("config", "conf", "name", "checkpoint", "resume_from_store", "adopt_layout",
          "accept_lost_marks", "rerun")


def run(topology: TopologyArg | PreparedRun, *, once: bool = False,
        runtime: float | None = None, spark: SparkSession | None = None,
        remote: str | None = None, verbose: bool = False, stop: threading.Event | None = None,
        watchers: Sequence[RunWatcher] = (), **moved: Any) -> RunResult:
    """Run a topology on Spark, as ``sqe run``; returns when it is done.

    Without ``once`` or ``runtime`` it runs until ``stop`` is set, or for ever.

    Args:
        topology: a :class:`PreparedRun` from :func:`prepare` (its config files, options,
            checkpoint and how it starts), or a topology file or :class:`Topology` run as
            ``prepare(topology)`` gives it.
        once: process everything available now, then return.
        runtime: stop after this many seconds.
        spark: a session to run in (its ``spark.jw.sqe.*`` conf applies); without it one
            is made from the config files' ``Spark:`` conf (local unless under
            ``spark-submit``).
        remote: a Spark Connect server, ``sc://host:port`` (default ``SPARK_REMOTE`` or a
            config's ``spark.remote``), to run from a process without a JVM.
        verbose: keep Spark's stack traces of a failure (it is raised as one sentence
            either way).
        stop: set it to stop the run between batches.
        watchers: told each batch and each stream's backlog, e.g.
            :class:`PrometheusWatcher`.
        moved: the keywords that moved to :func:`prepare` in 0.2.0 (``config``, ``conf``,
            ``name``, ``checkpoint``, ``resume_from_store``, ``adopt_layout``,
            ``accept_lost_marks``) are refused in one sentence saying so.

    Returns:
        Every batch's report and the checkpoint.

    Raises:
        TopologyError: the topology or its options are wrong (before Spark starts).
        OptionError: an option or the checkpoint path cannot be used.
        ArgumentError: ``once`` and ``runtime`` are both given, or a keyword of
            :func:`prepare`.
        RunStopped: ``stop`` was set, or the process got SIGINT/SIGTERM; the message says
            where each stream stopped.
        CheckpointMismatch: the checkpoint does not belong to the stores' commits.
        TopologyChanged: a change to the topology the checkpoint cannot follow.
        StaleBatchError: another writer of the consumer is ahead.
        RunError: a streaming query failed; the message is the cause, as one sentence.
    """
    if moved:
        known = [k for k in moved if k in _MOVED]
        if known:
            given = ", ".join(f"{k}=" for k in known)
            raise ArgumentError(f"sqe.run: give {given} to sqe.prepare(topology, {given}...) "
                                "and its result to sqe.run (since 0.2.0)")
        raise ArgumentError(f"sqe.run has no keyword {', '.join(moved)}")
    if once and runtime is not None:
        raise ArgumentError("sqe.run: once=True and runtime= exclude each other; give one "
                            "of them")
    prepared = topology if isinstance(topology, PreparedRun) else prepare(topology)
    if spark is None:
        plan = prepared.plan
        spark = build_session(f"sqe {prepared.topology.name}", plan.spark_conf,
                              origins=plan.spark_origins, remote=remote)
        if not verbose:
            quiet_failure_traces(spark)
    prepared = prepared.on(spark)
    topo, plan, where = prepared.topology, prepared.plan, prepared.checkpoint
    mode: Mode = "once" if once else ("runtime" if runtime is not None else "forever")
    hint = prepared.rerun or _call_hint(prepared, once, runtime)
    reports = run_topology(plan, spark, topo.name, where, mode, runtime,
                           resume=prepared.resume_from_store, rerun=hint, stop=stop,
                           watchers=watchers, adopt_layout=prepared.adopt_layout,
                           accept_lost_marks=prepared.accept_lost_marks)
    return RunResult(topo.name, where, reports)


def _call_hint(prepared: PreparedRun, once: bool, runtime: float | None) -> Rerun:
    """A :data:`Rerun` that names the way to run again as calls of :func:`prepare` and
    :func:`run`."""
    topology, name, checkpoint = prepared.topology, prepared.name, prepared.checkpoint
    config = [c.path for c in prepared.config]
    conf = prepared.conf

    def hint(flags: dict[str, str | None]) -> str:
        if "reset" in flags or "rebuild" in flags:
            names = ["sqe", *(["reset"] if "reset" in flags else ["hwm", "rebuild"]),
                     topology.path, *[a for c in config for a in ("--config", c)]]
            where = ["--checkpoint", checkpoint] if "rebuild" in flags else []
            return shlex.join([*names, *(["--name", name] if name else []), *where])
        args = [repr(topology.path)] + [f"{k}={v!r}" for k, v in (
            ("config", config), ("conf", dict(conf or {})), ("name", name)) if v]
        args.append(f"checkpoint={flags.get('--checkpoint', checkpoint)!r}")
        args += ["resume_from_store=True"] if "--resume-from-store" in flags else []
        if "--accept-lost-marks" in flags:
            args.append(f"accept_lost_marks={flags['--accept-lost-marks']}")
        how = ["once=True"] if once else ([f"runtime={runtime!r}"] if runtime else [])
        prepared_call = "sqe.prepare(" + ", ".join(args) + ")"
        return "sqe.run(" + ", ".join([prepared_call, *how]) + ")"

    return hint
