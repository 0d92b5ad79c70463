"""The script ``sqe pipelines`` runs on the ``spark-pipelines`` JVM: pyspark's pipelines
command line, with the fix of SPARK-59135 where the installed pyspark lacks it, its local
Spark Connect server on a port of its own, a spec's ``storage`` path read beside the spec, and
a failed run said in one sentence (see :mod:`sqe.cli.pipelines`)."""

from __future__ import annotations

import inspect
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqe.cli.pipelines import storage_uri
from sqe.engine.run.failure import describe_failure

#: The Spark option that sets the local Spark Connect server's port (15002 unless set).
PORT_OPTION = "spark.connect.grpc.binding.port"
#: The JVM object that knows the port the server bound.
SERVICE = "org.apache.spark.sql.connect.service.SparkConnectService$"


def _fixed() -> None:
    """Let the Spark Connect client's command iterator pass over the metrics responses that
    come beside a command's results, as apache/spark#58435 does."""
    from pyspark.errors import PySparkValueError
    from pyspark.sql.connect.client import core
    from pyspark.sql.metrics import PlanMetrics

    client = core.SparkConnectClient
    if "ObservedMetrics" in inspect.getsource(client.execute_command_as_iterator):
        return  # this pyspark has the fix

    def execute_command_as_iterator(self: Any, command: Any, observations: Any = None
                                    ) -> Iterator[dict[str, Any]]:
        req = self._execute_plan_request_with_metadata()
        self._set_command_in_plan(req.plan, command)
        for response in self._execute_and_fetch_as_iterator(req, observations or {}):
            if isinstance(response, dict):
                yield response
            elif not isinstance(response, (PlanMetrics, core.PlanObservedMetrics)):
                raise PySparkValueError(errorClass="UNKNOWN_RESPONSE",
                                        messageParameters={"response": str(response)})

    client.execute_command_as_iterator = execute_command_as_iterator  # type: ignore[method-assign]


def _storage_beside_spec() -> None:
    """Read a spec's ``storage`` path as a directory beside the spec (relative to its
    directory, as its ``libraries`` are), as a ``file:`` URI: the server of pyspark 4.3 takes
    only a URI (:func:`sqe.cli.pipelines.storage_uri`)."""
    import yaml
    from pyspark.pipelines import cli

    def load_with_storage_uri(spec_path: Path) -> Any:  # cli.load_pipeline_spec, and the URI
        with spec_path.open("r", encoding="utf-8") as f:
            doc = yaml.safe_load(f)
        if isinstance(doc, dict) and isinstance(doc.get("storage"), str):
            doc = {**doc, "storage": storage_uri(doc["storage"], spec_path)}
        return cli.unpack_pipeline_spec(doc)  # which says what a spec gets wrong

    cli.load_pipeline_spec = load_with_storage_uri


def _port_given(opts: dict[str, Any]) -> bool:
    """Whether the spec's configuration (``opts``) or ``spark-pipelines --conf`` (which
    spark-submit hands the Python process as ``PYSPARK_REMOTE_INIT_CONF_<i>``) sets the port."""
    chunks = range(int(os.environ.get("PYSPARK_REMOTE_INIT_CONF_LEN", "0")))
    return PORT_OPTION in opts or any(
        PORT_OPTION in json.loads(os.environ[f"PYSPARK_REMOTE_INIT_CONF_{i}"]) for i in chunks)


def _own_port() -> None:
    """Start the pipeline's local Spark Connect server on a free port, unless the spec's
    configuration or ``--conf`` names one, and point its client at the port it bound.

    ``spark-pipelines`` binds 15002, so a second pipeline on the same host fails with a
    ``BindException``, and one given another port still has its client dial 15002 -- another
    pipeline's server, which refuses its token.  pyspark does both right only for its own
    tests (``SPARK_TESTING``); this does them for every run."""
    from pyspark.sql.connect.client.core import DefaultChannelBuilder
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    start = ConnectSession._start_connect_server
    default_port = DefaultChannelBuilder.default_port

    def start_on_its_own_port(master: str, opts: dict[str, Any]) -> None:
        # the system picks a free port; on a copy, since the caller sets what ``opts`` holds
        # on the session afterwards, where a static option is refused with a UserWarning
        start(master, opts if _port_given(opts) else {**opts, PORT_OPTION: "0"})

    def bound_port() -> int:
        from pyspark.sql.session import SparkSession

        session = SparkSession._instantiatedSession
        if session is None:
            return default_port()
        service = getattr(session._jvm, SERVICE)
        return int(getattr(service, "MODULE$").localPort())

    ConnectSession._start_connect_server = staticmethod(  # type: ignore[method-assign]
        start_on_its_own_port)
    DefaultChannelBuilder.default_port = staticmethod(bound_port)  # type: ignore[method-assign]


def _run() -> int:
    """pyspark's pipelines command line; a run that fails ends in one sentence, SQE's own where
    a flow's SQE source or sink refused (:func:`sqe.engine.run.failure.describe_failure`),
    instead of the client's traceback with Spark's streaming query dump."""
    _fixed()
    _own_port()
    _storage_beside_spec()
    from pyspark.errors import PySparkException
    from pyspark.pipelines.cli import main

    try:
        main()
    except PySparkException as exc:
        print(f"error: the pipeline's run failed: {describe_failure(exc)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(_run())
