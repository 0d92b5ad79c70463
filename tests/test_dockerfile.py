"""docker/Dockerfile, built step by step on paper (the model is tests/support/dockerfile.py):
no Docker engine runs here, so this walks the Dockerfile's instructions over a model of the
image's file system and fails on a step that would fail in `docker build`:

* a ``COPY`` source that the build context lacks, or that ``.dockerignore`` leaves out;
* a ``RUN`` step that writes into a directory nothing made (``ln -s X /a/b/c`` after only
  ``mkdir -p /a/b``: what broke the image once), or changes one that is not there;
* a ``pip install`` of the project whose extras the stack does not need, or an unknown extra.

The model starts from the directories of the ``python:3.11-slim-bookworm`` base image and the
packages the Dockerfile installs; ``mkdir``, ``COPY``, ``WORKDIR`` and ``useradd`` add to it.
"""

from __future__ import annotations

import re

import tomllib

from tests.support import ROOT
from tests.support.dockerfile import build, context

DOCKERFILE = ROOT / "docker" / "Dockerfile"


def test_every_step_of_the_dockerfile_has_what_it_needs():
    files, ignore = context()
    image = build(DOCKERFILE.read_text(), files, ignore)
    assert image.problems == []
    assert "/usr/local/share/sqe/cli/submit.py" in image.files  # what spark-submit runs
    assert {"/opt/sqe/topologies", "/opt/sqe/checkpoints"} <= image.dirs


def test_the_walk_notices_the_step_that_broke_the_image_once():
    files, ignore = context()
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
