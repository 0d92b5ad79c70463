"""docker/Dockerfile, built step by step on paper: no Docker engine runs here (and base images
cannot be pulled), so this walks the Dockerfile's instructions over a model of the image's
file system and fails on a step that would fail in `docker build`:

* a ``COPY`` source that the build context lacks, or that ``.dockerignore`` leaves out;
* a ``RUN`` step that writes into a directory nothing made (``ln -s X /a/b/c`` after only
  ``mkdir -p /a/b``: what broke the image once), or changes one that is not there;
* a ``pip install`` of the project whose extras the stack does not need, or an unknown extra.

The model starts from the directories of the ``python:3.11-slim-bookworm`` base image and the
packages the Dockerfile installs; ``mkdir``, ``COPY``, ``WORKDIR`` and ``useradd`` add to it.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import tomllib

from tests.support import ROOT

DOCKERFILE = ROOT / "docker" / "Dockerfile"

#: Directories of python:3.11-slim-bookworm that the Dockerfile may rely on.
BASE_DIRS = ["/", "/tmp", "/opt", "/home", "/root", "/etc", "/var", "/usr", "/usr/local",
             "/usr/local/bin", "/usr/local/lib", "/usr/local/lib/python3.11",
             "/usr/local/lib/python3.11/site-packages", "/usr/local/share", "/usr/share",
             "/usr/bin", "/usr/lib", "/var/lib", "/var/lib/apt", "/var/lib/apt/lists"]


@dataclass
class Image:
    """The directories and files the build has made so far."""

    dirs: set[str] = field(default_factory=lambda: set(BASE_DIRS))
    files: set[str] = field(default_factory=set)
    env: dict[str, str] = field(default_factory=dict)
    workdir: str = "/"
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


def _instructions(text: str) -> list[tuple[str, str]]:
    """(instruction, arguments) with continuation lines joined and comments dropped."""
    out, pending = [], ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            word, _, rest = pending.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
            pending = ""
    return out


def _commands(script: str) -> list[list[str]]:
    """The simple commands of a RUN line (split at ``&&``, ``;`` and ``||`` outside quotes),
    each as its words up to a redirection; a ``$(...)`` word is kept whole."""
    script = re.sub(r"\$\(([^)]*)\)", lambda m: "__SUB__" + m.group(1).replace(" ", "_"),
                    script)
    lexer = shlex.shlex(script, posix=True, punctuation_chars=";&|<>")
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    redirected = False
    for token in lexer:
        if token in ("&&", ";", "||", "|"):
            commands.append([])
            redirected = False
        elif token in (">", ">>", "<"):
            redirected = True
        elif not redirected:
            commands[-1].append(token)
    return [c for c in commands if c]


def _ignored(path: str, patterns: list[str]) -> bool:
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


def build(text: str, context_files: set[str], ignore: list[str]) -> Image:
    """Walk the Dockerfile ``text`` over the model of the image; ``context_files`` are the
    paths of the build context, ``ignore`` the .dockerignore patterns."""
    image = Image()
    for n, (word, rest) in enumerate(_instructions(text), 1):
        step = f"step {n} ({word} {rest[:60]})"
        if word in ("ENV", "ARG"):
            for pair in shlex.split(rest):
                key, _, value = pair.partition("=")
                image.env[key] = value
        elif word == "WORKDIR":
            image.workdir = image.path(rest)
            image.make_dirs(image.workdir)
        elif word == "COPY":
            *sources, dest = shlex.split(rest)
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
            for words in _commands(rest):
                _run(image, words, step)
    return image


def _context() -> tuple[set[str], list[str]]:
    ignore = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    files = {str(p.relative_to(ROOT)) for p in ROOT.rglob("*")
             if ".git" not in p.relative_to(ROOT).parts}
    return files, ignore


def test_every_step_of_the_dockerfile_has_what_it_needs():
    files, ignore = _context()
    image = build(DOCKERFILE.read_text(), files, ignore)
    assert image.problems == []
    assert "/usr/local/share/sqe/cli/submit.py" in image.files  # what spark-submit runs
    assert {"/opt/sqe/topologies", "/opt/sqe/checkpoints"} <= image.dirs


def test_the_walk_notices_the_step_that_broke_the_image_once():
    files, ignore = _context()
    broken = DOCKERFILE.read_text().replace("mkdir -p /usr/local/share/sqe/cli",
                                            "mkdir -p /usr/local/share/sqe")
    assert broken != DOCKERFILE.read_text()
    problems = build(broken, files, ignore).problems
    assert len(problems) == 1 and "/usr/local/share/sqe/cli does not exist" in problems[0]
    missing = DOCKERFILE.read_text().replace("COPY conf /opt/sqe/conf", "COPY confs /opt/sqe/conf")
    assert any("no confs" in p for p in build(missing, files, ignore).problems)
    ignored = build(DOCKERFILE.read_text(), files, [*ignore, "topologies"]).problems
    assert any("no topologies" in p for p in ignored)


def test_the_image_installs_the_extras_the_stack_uses():
    text = DOCKERFILE.read_text()
    extras = re.search(r"^ARG SQE_EXTRAS=(\S+)", text, re.M)
    assert extras, "the Dockerfile names no SQE_EXTRAS"
    known = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    wanted = set(extras.group(1).split(","))
    assert wanted <= set(known)
    conf = (ROOT / "docker" / "conf.yaml").read_text()
    if "postgres" in conf:
        assert "postgres" in wanted  # docker/conf.yaml has a Postgres state's DSN
    assert '"/tmp/sqe-src[$SQE_EXTRAS]"' in text and '"$SQE_EXTRAS"' in text
