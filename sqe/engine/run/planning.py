"""The one way a run is planned: a topology with its config files, its ``--conf`` options and
the session's ``spark.jw.sqe.*`` options, each layer applied once, and what each state needs
of its options checked.

``sqe run``, :func:`sqe.prepare` and :func:`sqe.run`, :class:`sqe.Hop` (also in a Declarative
Pipeline) all plan through :func:`plan_run`.  The session's options are known only once a
session exists, and a session is built from the plan's ``Spark:`` conf: a run planned before
its session is planned again, by the same function, only when the session carries
``spark.jw.sqe.*`` options beyond the ones its config files gave it (:func:`session_options`;
``spark-submit --conf``, a session of the caller's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import SparkSession

from sqe.config.plan import TopologyPlan, plan_topology
from sqe.config.settings import ConfigFile, spark_conf_options
from sqe.engine.batch.pipeline import state_problems
from sqe.engine.spark.spark_api import session_conf
from sqe.lang.topology import Topology

__all__ = ["plan_run", "session_options"]


def plan_run(topology: Topology, configs: Sequence[ConfigFile] = (),
             conf: Mapping[str, Any] | None = None,
             spark_conf: Mapping[str, Any] | None = None) -> TopologyPlan:
    """``topology`` planned for a run: its commands' options under the ``configs``' ``SQE:``
    sections, ``conf`` over them and ``spark_conf`` (the ``jw.sqe.*`` options a session
    carries as ``spark.jw.sqe.*``) on top; every problem raised together as one
    :class:`~sqe.errors.TopologyError`, each located."""
    return plan_topology(topology, configs, conf, spark_conf or None, check=state_problems)


def session_options(plan: TopologyPlan, spark: SparkSession) -> dict[str, str] | None:
    """The ``jw.sqe.*`` options ``spark`` carries (as ``spark.jw.sqe.*``) when they are not
    just the ones ``plan``'s config files gave it, which the plan holds already; else None."""
    carried = spark_conf_options(session_conf(spark))
    given = {k: str(v) for k, v in spark_conf_options(plan.spark_conf).items()}
    return carried if carried and carried != given else None
