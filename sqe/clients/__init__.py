"""Clients of the services SQE talks to: Kafka's producers and consumers, Redis's connections.

Owns where a Redis lives and how a connection to it is made and logged in to
(:mod:`~sqe.clients.redis_endpoint`: URL, ACL user, TLS, Sentinel, Cluster), waiting out a
Redis that answers ``BUSY`` (:mod:`~sqe.clients.redis_busy`), the Redis clients a Spark Python
worker keeps between tasks (:mod:`~sqe.clients.redis_clients`), and librdkafka's producers and
consumers with the settings every one of them shares (:mod:`~sqe.clients.kafka`). What a
client is built *from* (the options) is :mod:`sqe.config`'s; this package only connects.

May import: :mod:`sqe.errors`, :mod:`sqe.secrets` (redaction of what a client says),
:mod:`sqe.logs` (librdkafka's log level), and the client libraries.
"""
