"""A Dockerfile built step by step on paper: no Docker engine runs here (and base images
cannot be pulled), so :func:`build` walks a Dockerfile's instructions over a model of the
image's file system and notes each step that would fail in ``docker build``:

* a ``COPY`` source that the build context lacks, or that ``.dockerignore`` leaves out;
* a ``RUN`` step that writes into a directory nothing made (``ln -s X /a/b/c`` after only
  ``mkdir -p /a/b``: what broke docker/Dockerfile once), or changes one that is not there.

The model starts from a :class:`Base`, the directories of the base image that the Dockerfile
may rely on and its working directory; ``mkdir``, ``COPY``, ``WORKDIR``, ``useradd`` and
``python -m venv`` add to it, and ``ENV``, ``ARG`` and ``USER`` are kept.  ``tests/test_dockerfile.py`` walks
docker/Dockerfile with it, ``tests/test_kubernetes.py`` deploy/kubernetes/Dockerfile.
"""

from __future__ import annotations

import fnmatch
import functools
import os
import re
import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tests.support import ROOT


@dataclass(frozen=True)
class Base:
    """What a base image gives the Dockerfile built on it."""

    name: str
    dirs: tuple[str, ...]
    workdir: str = "/"
    user: str = "root"
    env: tuple[tuple[str, str], ...] = ()


#: python:3.11-slim-bookworm (docker/Dockerfile).
PYTHON_SLIM = Base("python:3.11-slim-bookworm", (
    "/", "/tmp", "/opt", "/home", "/root", "/etc", "/var", "/usr", "/usr/local",
    "/usr/local/bin", "/usr/local/lib", "/usr/local/lib/python3.11",
    "/usr/local/lib/python3.11/site-packages", "/usr/local/share", "/usr/share",
    "/usr/bin", "/usr/lib", "/var/lib", "/var/lib/apt", "/var/lib/apt/lists"))

#: apache/spark:<version>-python3 (deploy/kubernetes/Dockerfile): Ubuntu with Spark in
#: /opt/spark, whose Dockerfile makes /opt/spark/work-dir its WORKDIR and ``spark`` (uid 185)
#: its user; the python3 variant adds Ubuntu's python3 and pip.
APACHE_SPARK_PYTHON = Base("apache/spark:<version>-python3", (
    "/", "/tmp", "/opt", "/home", "/root", "/etc", "/var", "/usr", "/usr/local",
    "/usr/local/bin", "/usr/share", "/usr/bin", "/usr/lib", "/var/lib", "/var/lib/apt",
    "/var/lib/apt/lists", "/opt/spark", "/opt/spark/bin", "/opt/spark/sbin", "/opt/spark/jars",
    "/opt/spark/python", "/opt/spark/python/lib", "/opt/spark/work-dir"),
    workdir="/opt/spark/work-dir", user="spark", env=(("SPARK_HOME", "/opt/spark"),))


@dataclass
class Image:
    """The directories and files the build has made so far."""

    dirs: set[str] = field(default_factory=lambda: set(PYTHON_SLIM.dirs))
    files: set[str] = field(default_factory=set)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
    user: str = "root"
    problems: list[str] = field(default_factory=list)

    def path(self, raw: str) -> str:
        raw = re.sub(r"\$\{?(\w+)\}?", lambda m: self.env.get(m.group(1), m.group(0)), raw)
        p = PurePosixPath(raw)
        return str(p if p.is_absolute() else PurePosixPath(self.workdir) / p)

    def make_dirs(self, path: str) -> None:
        p = PurePosixPath(path)
        self.dirs.update(str(q) for q in (p, *p.parents))

    def exists(self, path: str) -> bool:
        return path in self.dirs or path in self.files

    def need_parent(self, path: str, step: str) -> None:
        parent = str(PurePosixPath(path).parent)
        if parent not in self.dirs:
            self.problems.append(f"{step}: {parent} does not exist in the image (make it first)")


def instructions(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if pending and line.lstrip().startswith("#"):
            continue  # a comment between continuation lines
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def commands(script: str) -> list[list[str]]:
    """The simple commands of a RUN line (split at ``&&``, ``;`` and ``||`` outside quotes),
    each as its words up to a redirection; a ``$(...)`` word is kept whole."""
    script = re.sub(r"\$\(([^)]*)\)", lambda m: "__SUB__" + m.group(1).replace(" ", "_"),
                    script)
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    out: list[list[str]] = [[]]
    redirected = False
    for token in lexer:
        if token in ("&&", ";", "||", "|"):
            out.append([])
            redirected = False
        elif token in (">", ">>", "<"):
            redirected = True
        elif not redirected:
            out[-1].append(token)
    return [c for c in out if c]


def _ignored(path: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatch(path, p) or fnmatch.fnmatch(path.split("/")[0], p)
               for p in patterns)


def _run(image: Image, words: list[str], step: str) -> None:
    cmd, args = words[0], [a for a in words[1:] if not a.startswith("-")]
    if cmd == "mkdir":
        for a in args:
            path = image.path(a)
            if "-p" in words:
                image.make_dirs(path)
            else:
                image.need_parent(path, step)
                image.dirs.add(path)
    elif cmd in ("ln", "cp", "mv", "touch"):
        for target in ([args[-1]] if cmd != "touch" else args):
            path = image.path(target)
            if path in image.dirs:
                continue  # into an existing directory
            image.need_parent(path, step)
            image.files.add(path)
    elif cmd == "chown":
        for a in args[1:]:
            if not image.exists(image.path(a)):
                image.problems.append(f"{step}: chown of {a}, which does not exist")
    elif cmd == "rm":
        for a in args:
            path = image.path(a)
            image.dirs = {d for d in image.dirs if not (d == path or d.startswith(path + "/"))}
            image.files = {f for f in image.files if not (f == path or f.startswith(path + "/"))}
    elif cmd == "useradd":
        image.make_dirs(f"/home/{args[-1]}")
    elif PurePosixPath(cmd).name.startswith("python") and words[1:3] == ["-m", "venv"]:
        # python -m venv DIR makes DIR (and the directories above it) with bin/ inside
        image.make_dirs(image.path(args[-1]) + "/bin")


def build(text: str, context_files: Collection[str], ignore: Sequence[str],
          base: Base = PYTHON_SLIM) -> Image:
    """Walk the Dockerfile ``text`` over the model of the image built on ``base``;
    ``context_files`` are the paths of the build context, ``ignore`` the .dockerignore
    patterns."""
    image = Image(dirs=set(base.dirs), workdir=base.workdir, user=base.user, env=dict(base.env))
    for n, (word, rest) in enumerate(instructions(text), 1):
        step = f"step {n} ({word} {rest[:60]})"
        if word in ("ENV", "ARG"):
            for pair in shlex.split(rest):
                key, eq, value = pair.partition("=")
                if eq or key not in image.env:  # ARG NAME after FROM keeps the value before it
                    image.env[key] = value
        elif word == "WORKDIR":
            image.workdir = image.path(rest)
            image.make_dirs(image.workdir)
        elif word == "USER":
            image.user = rest.split(":")[0]
        elif word == "COPY":
            *sources, dest = [w for w in shlex.split(rest) if not w.startswith("--")]
            for src in sources:
                src = src.rstrip("/")
                present = src == "." or src in context_files or any(
                    f.startswith(src + "/") for f in context_files)
                if not present or (src != "." and _ignored(src, ignore)):
                    image.problems.append(f"{step}: the build context has no {src} (or "
                                          ".dockerignore leaves it out)")
            target = image.path(dest)
            if dest.endswith("/") or len(sources) > 1 or sources == ["."] or any(
                    f.startswith(sources[0].rstrip("/") + "/") for f in context_files):
                image.make_dirs(target)
            else:
                image.make_dirs(str(PurePosixPath(target).parent))
                image.files.add(target)
        elif word == "RUN":
            for words in commands(rest):
                _run(image, words, step)
    return image


@functools.cache
def context() -> tuple[frozenset[str], tuple[str, ...]]:
    """The files of the build context (the repository, as both Dockerfiles build from its
    root; what .dockerignore leaves out is not walked) and the .dockerignore patterns."""
    ignore = tuple(line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                   if line.strip() and not line.startswith("#"))
    files = set()
    for folder, dirs, names in os.walk(ROOT):
        here = Path(folder).relative_to(ROOT)
        dirs[:] = [d for d in dirs if not _ignored(str(here / d), ignore)]
        files.update(str(here / n) for n in [*dirs, *names])
    return frozenset(files), ignore
