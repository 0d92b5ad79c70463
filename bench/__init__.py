"""The benchmarks: one script per measurement, each run from the repository's root as
``PYTHONPATH=. .venv/bin/python bench/<script>.py ...`` (its docstring says what it measures
and how; ``RESULTS.md`` indexes the results, one file per topic under ``results/``).

What the scripts share is :mod:`bench.harness`: the services they start and stop, the Kafka
topics they make, fill and count, the shipped topologies they point at fresh topics and the
check of what those leave in Redis, the child processes they start, time, sample and kill,
and the end of their reports.  The other modules are the scripts themselves (argument parsing
and their own measurement), the parts some of them start as child processes (``plain_chain``,
``plain_latency``, ``chain_parts``, ``quix_enrich``, ``quix_chain``, ``part_script``: a part
that runs in a virtualenv of its own imports the standard library and ``bench.part_script``
only), and the pieces of one benchmark kept apart (``latency_chain``, ``latency_timing``,
``sustained``, ``chain_report``, ``nemesis_world``, ``nemesis_schedule``, ``state_scale``).

May import: ``sqe``; ``support`` (the real services the tests start too, reached because
``PYTHONPATH=.`` puts the repository's root on the path), never ``tests``; and ``bench``
itself, by its package name only (``from bench import chain``,
``from bench.harness.processes import run_process``).
Run as a file, a script has ``bench/`` itself first on ``sys.path``: a bare ``import chain``
would load a second copy of a module, and a module named like a library or a standard module
would hide it from every script.  No module edits ``sys.path``.  tests/test_bench.py holds
these rules.  This file imports nothing, so that the part-scripts' virtualenvs can import
``bench``.
"""
