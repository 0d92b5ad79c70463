"""The ``sqe`` command: its parser (:mod:`~sqe.cli.main`), its commands
(:mod:`~sqe.cli.commands`), and the operator tools behind them: ``sqe report``
(:mod:`~sqe.cli.report`), ``sqe demo`` (:mod:`~sqe.cli.demo`), local services for
trying topologies (:mod:`~sqe.cli.local_services`, run by ``sqe services``:
:mod:`~sqe.cli.services`, with :mod:`~sqe.cli.processes` for ports and PIDs), sample
events and the ``spark-submit`` entry script (:mod:`~sqe.cli.submit`).

May import: :mod:`sqe.api` and every layer below it.
"""
