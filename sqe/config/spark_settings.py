"""Spark settings given to SQE: which ``spark.*`` keys Spark knows, and the warning for one it
does not.

A config file's ``Spark:`` section goes to the SparkSession, and Spark ignores a key it does
not know without a word, so a misspelt ``spark.sql.shuffle.partition`` would change nothing
unseen.  A key is known when it is one of Spark 4.3's registered settings
(:func:`registered_spark_settings`, read from the package's ``data/spark-settings.txt``), a
key Spark reads by name
without registering it (:data:`UNREGISTERED_SPARK_SETTINGS`: ``spark.master``,
``spark.local.dir``, ...), or one of a family Spark passes on by prefix
(:data:`SPARK_SETTING_FAMILIES`: ``spark.hadoop.*``, ``spark.executorEnv.*``,
``spark.sql.catalog.*``, ...).  Any other ``spark.*`` key is warned about, never refused
(plugins and connectors read settings of their own), naming the closest known setting::

    >>> print(unknown_spark_setting("spark.ui.enable", "c.yaml (Spark)"))
    c.yaml (Spark): spark.ui.enable is not a known Spark setting; did you mean spark.ui.enabled?
    >>> unknown_spark_setting("spark.hadoop.fs.s3a.endpoint", "c.yaml (Spark)") is None
    True
"""

from __future__ import annotations

import difflib
from functools import lru_cache
from importlib import resources

__all__ = ["SPARK_SETTING_FAMILIES", "UNREGISTERED_SPARK_SETTINGS", "closest_spark_setting",
           "is_spark_setting", "registered_spark_settings", "unknown_spark_setting"]


@lru_cache(maxsize=1)
def registered_spark_settings() -> frozenset[str]:
    """Every setting Spark 4.3 registers (``ConfigEntry.knownConfigs`` once the holders of
    settings are loaded: internal ones and the old names Spark still reads included)."""
    text = resources.files("sqe.config").joinpath("data/spark-settings.txt").read_text("utf-8")
    return frozenset(line.strip() for line in text.splitlines()
                     if line.strip() and not line.startswith("#"))

#: Keys Spark reads by name without registering them as settings (SparkConf, SparkContext,
#: the launcher, the network layer), so ``knownConfigs`` does not list them.
UNREGISTERED_SPARK_SETTINGS: frozenset[str] = frozenset("""
spark.master spark.remote spark.app.name spark.app.id spark.app.startTime spark.home
spark.local.dir spark.logConf spark.logLineage spark.port.maxRetries spark.ui.proxyBase
spark.driver.defaultJavaOptions spark.executor.defaultJavaOptions spark.driver.libraryPath
spark.launcher.childConnectionTimeout spark.launcher.childProcLoggerName spark.r.shell.command
spark.files.fetchTimeout spark.files.overwrite spark.files.useFetchCache spark.callstack.depth
spark.io.mode.default spark.network.auth.rpcTimeout spark.network.crypto.authEngineVersion
spark.network.crypto.cipher spark.network.io.preferDirectBufs spark.network.sasl.maxEncryptedBlockSize
spark.network.sasl.serverAlwaysEncrypt spark.network.sharedByteBufAllocators.enabled
spark.network.ssl.maxEncryptedBlockSize spark.shuffle.maxChunksBeingTransferred
spark.shuffle.sasl.enableRetries spark.shuffle.server.chunkFetchHandlerThreadsPercent
spark.shuffle.server.finalizeShuffleMergeThreadsPercent
spark.sql.streaming.checkpointFileManagerClass
""".split())

#: Prefixes of the keys Spark passes on or reads by family: Hadoop and Hive conf, environment
#: variables, resources, catalogs and their options, data source options, TLS per
#: namespace, the network modules' settings, Kubernetes labels, annotations, secrets and
#: volumes, and SQE's own options as Spark conf (checked as options).
SPARK_SETTING_FAMILIES: tuple[str, ...] = tuple("""
spark.hadoop. spark.hive. spark.executorEnv. spark.yarn.appMasterEnv. spark.yarn.am.resource.
spark.yarn.driver.resource. spark.yarn.executor.resource. spark.driver.resource.
spark.executor.resource. spark.task.resource. spark.worker.resource. spark.sql.catalog.
spark.sql.streaming.stateStore.rocksdb. spark.datasource. spark.metrics.conf. spark.ssl.
spark.rpc.io. spark.shuffle.io. spark.files.io. spark.network.crypto.config.
spark.plugins.internal.conf. spark.security.credentials. spark.port.maxRetries.
spark.kubernetes.driverEnv. spark.kubernetes.node.selector. spark.kubernetes.driver.node.selector.
spark.kubernetes.executor.node.selector. spark.kubernetes.driver.label.
spark.kubernetes.driver.annotation. spark.kubernetes.driver.service.label.
spark.kubernetes.driver.service.annotation. spark.kubernetes.executor.label.
spark.kubernetes.executor.annotation. spark.kubernetes.driver.secrets.
spark.kubernetes.executor.secrets. spark.kubernetes.driver.secretKeyRef.
spark.kubernetes.executor.secretKeyRef. spark.kubernetes.driver.volumes.
spark.kubernetes.executor.volumes. spark.kubernetes.authenticate. spark.jw.sqe.
""".split())



@lru_cache(maxsize=1)
def _known() -> tuple[frozenset[str], dict[str, str], list[str]]:
    """The known keys, by their lower case, and sorted (read on first use)."""
    known = registered_spark_settings() | UNREGISTERED_SPARK_SETTINGS
    return known, {key.lower(): key for key in known}, sorted(known)


def is_spark_setting(key: str) -> bool:
    """Whether Spark 4.3 reads ``key``: a registered or unregistered setting, or a key of one
    of :data:`SPARK_SETTING_FAMILIES`."""
    if key in _known()[0]:
        return True
    return any(key.startswith(prefix) and len(key) > len(prefix)
               for prefix in SPARK_SETTING_FAMILIES)


def closest_spark_setting(key: str) -> str | None:
    """The known Spark setting closest to ``key`` (another case first), or ``None``."""
    _, by_lower, ordered = _known()
    if key.lower() in by_lower:
        return by_lower[key.lower()]
    match = difflib.get_close_matches(key, ordered, n=1, cutoff=0.8)
    return match[0] if match else None


def unknown_spark_setting(key: str, origin: str) -> str | None:
    """The warning for a Spark setting ``key`` given in ``origin`` that Spark does not know,
    with the closest known one; ``None`` for a known key."""
    if is_spark_setting(key):
        return None
    if not key.startswith("spark."):
        hint = closest_spark_setting(f"spark.{key}")
        return (f"{origin}: {key} is not a Spark setting (they start with spark.), so Spark "
                "ignores it" + (f"; did you mean {hint}?" if hint else ""))
    hint = closest_spark_setting(key)
    if hint:
        return f"{origin}: {key} is not a known Spark setting; did you mean {hint}?"
    return (f"{origin}: {key} is not a known Spark setting; Spark ignores it unless a plugin "
            "reads it")
