"""What Spark's launcher reads on this machine before a local JVM starts: the Spark
installation (``SPARK_HOME``, else the installed pyspark), its conf directory
(``SPARK_CONF_DIR``, else ``$SPARK_HOME/conf``) and the settings of that directory's
``spark-defaults.conf``, where an administrator sets JVM options for every application."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

__all__ = ["spark_conf_dir", "spark_default_set", "spark_home"]


def spark_home() -> Path:
    """The Spark installation the launcher runs."""
    import pyspark

    return Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent).resolve()


def spark_conf_dir(env: Mapping[str, str]) -> Path:
    """The directory the launcher reads ``spark-defaults.conf`` from (and puts on the
    driver's class path)."""
    return Path(env.get("SPARK_CONF_DIR") or spark_home() / "conf")


def spark_default_set(key: str, env: Mapping[str, str]) -> bool:
    """Whether ``spark-defaults.conf`` sets ``key`` (a line ``key value`` or ``key=value``)."""
    try:
        text = (spark_conf_dir(env) / "spark-defaults.conf").read_text(errors="replace")
    except OSError:  # none there
        return False
    for raw in text.splitlines():
        line = raw.strip()
        if line.split(None, 1)[:1] == [key] or line.startswith(f"{key}="):
            return True
    return False
