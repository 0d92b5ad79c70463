"""The script ``sqe pipelines`` runs on the ``spark-pipelines`` JVM: pyspark's pipelines
command line, with the fix of SPARK-59135 where the installed pyspark lacks it (see
:mod:`sqe.cli.pipelines`)."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any


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


if __name__ == "__main__":
    _fixed()
    from pyspark.pipelines.cli import main

    main()
