"""Checks of what the machine must provide before Spark starts: Java 17 or newer.

PySpark 4 needs Java 17+.  Without it Spark fails with a long JVM trace;
:func:`require_java` says the same in one sentence with what to do.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from sqe.errors import PrerequisiteError

__all__ = ["MIN_JAVA", "java_version", "require_java"]

MIN_JAVA = 17
_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def _java_binary() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java")


def java_version() -> tuple[int, str] | None:
    """``(major version, java binary)`` of the Java Spark will use, or ``None`` if none is found."""
    binary = _java_binary()
    if binary is None:
        return None
    try:
        out = subprocess.run([binary, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = _VERSION.search(out.stderr + out.stdout)
    if not match:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_292" is Java 8
        major = int(match.group(2))
    return major, binary


def require_java() -> None:
    """Raise :class:`PrerequisiteError` unless Java 17+ is available to Spark."""
    found = java_version()
    if found is None:
        raise PrerequisiteError(
            f"Java {MIN_JAVA}+ is required by Spark but no java was found on PATH or in "
            "JAVA_HOME; install a JDK (e.g. apt-get install openjdk-17-jre-headless) "
            "and try again"
        )
    major, binary = found
    if major < MIN_JAVA:
        raise PrerequisiteError(
            f"Java {MIN_JAVA}+ is required by Spark, but {binary} is Java {major}; "
            f"install Java {MIN_JAVA} or newer and point JAVA_HOME at it"
        )
