"""The real services that the tests and the benchmarks run against, and the faults they cause.

A Kafka-protocol broker and Redis found or started (:mod:`~support.services`), private Redis
servers with passwords, ACLs, TLS, replicas, Sentinels and a Cluster (:mod:`~support.secured_redis`,
:mod:`~support.replicated_redis`, :mod:`~support.proxied_redis`), a Schema Registry
(:mod:`~support.schema_registry`), a Spark standalone cluster and a Spark Connect server
(:mod:`~support.spark_cluster`, :mod:`~support.connect_server`), the TCP proxy that makes the
network lie on loopback (:mod:`~support.fault_proxy`), service processes stopped and started
on purpose (:mod:`~support.fault_services`), and a process's clock stepped for real
(:mod:`~support.clock`).  ``tests/`` and ``bench/`` both import it; it is not installed.

May import: :mod:`sqe` (the binaries and ports of its local services); never ``tests`` or
``bench``.
"""
