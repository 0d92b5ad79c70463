"""Build ``sqe/engine/spark/java/sqe-spark.jar``, the JVM classes a local run puts on its driver's
class path, from the Java sources beside it, against the installed pyspark's jars.

    .venv/bin/python tools/build_jar.py [--check]

It needs a JDK (``javac``); the jar is committed, so neither installing nor running SQE does.
The classes target Java 17 (``--release 17``), and the jar's entries carry a fixed time, so
the same sources and JDK make the same bytes: ``--check`` builds into memory and exits 1 when
the committed jar differs (``tests/engine/test_checkpoint_manager.py`` runs it).  Its
manifest records the ``javac`` that built it.
"""

from __future__ import annotations

import argparse
import io
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
JAVA = ROOT / "sqe" / "engine" / "spark" / "java"
JAR = JAVA / "sqe-spark.jar"
#: Every entry's time: the jar depends on its sources only.
STAMP = (2026, 1, 1, 0, 0, 0)


def javac_version() -> str:
    """What ``javac -version`` prints, e.g. ``javac 17.0.15``."""
    done = subprocess.run(["javac", "-version"], capture_output=True, text=True, check=True)
    return (done.stdout or done.stderr).strip()


def build() -> bytes:
    """The jar's bytes, compiled from ``sqe/engine/spark/java/*.java`` now."""
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    sources = sorted(JAVA.glob("*.java"))
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(["javac", "--release", "17", "-nowarn", "-d", out, "-cp",
                        f"{jars}/*", *map(str, sources)], check=True)
        classes = sorted(Path(out).rglob("*.class"))
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as jar:
            manifest = f"Manifest-Version: 1.0\r\nCreated-By: {javac_version()}\r\n\r\n"
            jar.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", STAMP), manifest)
            for path in classes:
                info = zipfile.ZipInfo(str(path.relative_to(out)), STAMP)
                info.compress_type = zipfile.ZIP_DEFLATED
                jar.writestr(info, path.read_bytes())
        return buffer.getvalue()


def built_by(jar: Path = JAR) -> str:
    """The ``javac`` the jar's manifest says built it."""
    with zipfile.ZipFile(jar) as z:
        text = z.read("META-INF/MANIFEST.MF").decode()
    return next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.startswith("Created-By:")), "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--check", action="store_true",
                    help="exit 1 when the committed jar is not what the sources make")
    args = ap.parse_args(argv)
    data = build()
    if args.check:
        if JAR.read_bytes() != data:
            print(f"{JAR.relative_to(ROOT)} is not what its sources make: run "
                  "tools/build_jar.py", file=sys.stderr)
            return 1
        return 0
    JAR.write_bytes(data)
    print(f"wrote {JAR.relative_to(ROOT)} ({len(data):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
