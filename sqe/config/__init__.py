"""Options: what every ``jw.sqe.*`` key means, where its value comes from, and the services it
names.

Owns the option registry (:mod:`~sqe.config.registry`, with what an option is in
:mod:`~sqe.config.options`), the layers of settings and their precedence
(:mod:`~sqe.config.settings`), the Spark settings a config file may give and the names
Spark 4.3 knows (:mod:`~sqe.config.spark_settings`), the typed views through which the rest
of the code reads options (:mod:`~sqe.config.views`: no option key is spelled outside this
package), the librdkafka properties a stream's consumers and a state's producers are built
with (:mod:`~sqe.config.client_properties`), and a topology's plan: every command's settings
resolved and checked (:mod:`~sqe.config.plan`), with the fields of its streams and the
queries' field references checked against them (:mod:`~sqe.config.fields`). The clients
themselves are :mod:`sqe.clients`'s; secrets in values are :mod:`sqe.secrets`'s.

May import: :mod:`sqe.errors`, :mod:`sqe.secrets`, :mod:`sqe.logs`, :mod:`sqe.wire`,
:mod:`sqe.clients` (a Redis endpoint is a setting's value), :mod:`sqe.lang` (the command
model and expressions), :mod:`partitioners`.
"""
