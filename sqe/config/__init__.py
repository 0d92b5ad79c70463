"""Options and endpoints: what every ``jw.sqe.*`` key means, where its value comes from, and
the services it names.

Owns the option registry (:mod:`~sqe.config.registry`, with what an option is in
:mod:`~sqe.config.options`), the layers of settings and their precedence
(:mod:`~sqe.config.settings`), the Spark settings a config file may give and the names
Spark 4.3 knows (:mod:`~sqe.config.spark_settings`, with :mod:`~sqe.config.spark_core_settings`
and :mod:`~sqe.config.spark_sql_settings`), the typed views through which the rest of the code
reads options (:mod:`~sqe.config.views`: no option key is spelled outside this
package), secrets in values (:mod:`~sqe.config.secrets`), the Redis endpoints
(:mod:`~sqe.config.redis_endpoint`) and Kafka clients (:mod:`~sqe.config.kafka_client`,
:mod:`~sqe.config.client_properties`) they describe, and a topology's plan: every
command's settings resolved and checked (:mod:`~sqe.config.plan`), with the fields of
its streams and the queries' field references checked against them
(:mod:`~sqe.config.fields`).

May import: :mod:`sqe.errors`, :mod:`sqe.wire`, :mod:`sqe.lang` (the command model
and expressions), :mod:`sqe.partitioners`, and the client libraries.
"""
