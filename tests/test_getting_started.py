"""docs/getting-started.md runs as written: the tutorial is read from the page itself and
done step by step, as a new user does it, in an empty directory.

The page's conventions, which this test holds:

* a ``yaml`` block after the line ``<!-- file: NAME -->`` is the whole of file NAME, written
  (or written again) where the tutorial says; a ``diff`` block after ``<!-- edit: NAME -->``
  changes the ``-`` lines of NAME into the ``+`` lines;
* every line of an ``sh`` block is a command, run in order; ``sqe services &`` starts the
  services (a real ``sqe services``, on two free ports), and an ``sqe run`` without ``--once``
  is the long-running run of a terminal of its own, stopped by Ctrl-C (SIGINT to its
  process group);
* a ``python`` block is run in the tutorial's directory;
* a ``text`` block is what the ``sh`` or ``python`` block just before it prints (all its
  commands together; for Python, its standard output); after ``<!-- output: first terminal
  -->``, what the long-running run printed.  A line ``...`` stands for any lines, ``...``
  inside a line for any text; the lines shown must all be printed, in any order (Spark
  prints a topic's partitions in the order their tasks end), and a block without ``...`` is
  all that is printed.

The only substitutions are the services' ports (the page says 9092 and 6379, which other
servers may hold): the page's ``conf/local.yaml`` is written with the free ports,
``sqe sample-events`` gets ``--brokers`` and ``redis-cli`` gets ``-p``, and the ports printed
are read back as 9092 and 6379.  What varies from run to run is compared by its shape only:
PIDs, batch times and rates, the pids of StreamMetadata keys (a hash of the broker's cluster
id) and the high-water marks' offsets (which partition a sample event lands in).
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
import yaml

from sqe.cli.local_services import free_port
from sqe.cli.main import main
from sqe.cli.sample_events import sample_events
from tests.support import ROOT

PAGE = ROOT / "docs" / "getting-started.md"
BIN = Path(sys.executable).parent  # the venv the tests run in: its sqe is the page's sqe
INSTALL = "python3 -m venv .venv && .venv/bin/pip install 'sqe-spark[local]'"
FIRST_TERMINAL = "output: first terminal"


@dataclass
class Block:
    """A fenced block of the page: its language, its text, and the ``<!-- ... -->`` marker
    on the line before it (or None)."""

    lang: str
    text: str
    marker: str | None
    line: int


def _blocks(page: str) -> list[Block]:
    lines = page.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = re.fullmatch(r"```(\w*)", lines[i])
        if opening is None:
            i += 1
            continue
        end = lines.index("```", i + 1)
        marker = re.fullmatch(r"<!-- (.+?) -->", lines[i - 1].strip()) if i else None
        blocks.append(Block(opening.group(1), "\n".join(lines[i + 1:end]) + "\n",
                            marker.group(1) if marker else None, i + 1))
        i = end + 1
    return blocks


def _normalised(line: str, ports: dict[int, int]) -> str:
    """``line`` with what varies between runs written one way (ports as the page's)."""
    for port, shown in ports.items():
        line = re.sub(rf":{port}\b", f":{shown}", line)
    line = re.sub(r"\bpid \d+", "pid N", line)
    line = re.sub(r"\bpid=-?\d+", "pid=P", line)
    line = re.sub(r"(partition=\d+) offset=\d+", r"\1 offset=O", line)
    line = re.sub(r"in \d+(?:\.\d+)? s \([\d,]+ records/s\)", "in T s (R records/s)", line)
    return line.rstrip()


def _pattern(shown: str, ports: dict[int, int], shape_only: bool) -> re.Pattern[str]:
    parts = [re.escape(part) for part in _normalised(shown, ports).split("...")]
    if shape_only:
        parts = [re.sub(r"\d+", r"\\d+", part) for part in parts]
    return re.compile(".*".join(parts))


def _check_output(shown: str, printed: str, ports: dict[int, int], where: str,
                  shape_only: bool = False) -> None:
    """Every line of ``shown`` is a line of ``printed``; all of it, without a ``...`` line."""
    got = [_normalised(line, ports) for line in printed.splitlines() if line.strip()]
    lines = shown.splitlines()
    for line in lines:
        if line == "...":
            continue
        pattern = _pattern(line, ports, shape_only)
        assert any(pattern.fullmatch(g) for g in got), (
            f"{where}: the page shows\n  {line}\nwhich was not printed; printed:\n"
            + "\n".join(got))
    if "..." not in lines:
        assert len(got) == len(lines), (f"{where}: printed more than the page shows:\n"
                                        + "\n".join(got))


@dataclass
class Tutorial:
    """The state of the tutorial's run: its directory, the services and what ran."""

    work: Path
    env: dict[str, str]
    kafka_port: int
    redis_port: int
    services: subprocess.Popen | None = None
    reader: subprocess.Popen | None = None
    ran: list[str] = field(default_factory=list)
    results: dict[str, object] = field(default_factory=dict)

    @property
    def ports(self) -> dict[int, int]:
        return {self.kafka_port: 9092, self.redis_port: 6379}

    def log(self, name: str) -> Path:
        return self.work.parent / name

    def background_output(self, name: str) -> str:
        return self.log(name).read_text()


def _start_services(t: Tutorial) -> None:
    out = open(t.log("services.out"), "w")
    t.services = subprocess.Popen(
        [str(BIN / "sqe"), "services", "--kafka-port", str(t.kafka_port), "--redis-port",
         str(t.redis_port)], cwd=t.work, env=t.env, stdout=out, stderr=subprocess.STDOUT)
    out.close()
    deadline = time.monotonic() + 120
    while "running (pid" not in t.background_output("services.out"):
        assert t.services.poll() is None, t.background_output("services.out")
        assert time.monotonic() < deadline, "sqe services did not start: " + \
            t.background_output("services.out")
        time.sleep(0.2)


def _start_reader(t: Tutorial, args: list[str]) -> None:
    out = open(t.log("reader.out"), "w")
    t.reader = subprocess.Popen([str(BIN / "sqe"), *args], cwd=t.work, env=t.env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    out.close()


def _printed(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    """What the command run since the last call printed: its output, and its log lines as
    ``sqe run``'s handler writes them (``sqe: <message>``; under pytest, whose handler makes
    ``logging.basicConfig`` a no-op, they are in ``caplog``)."""
    captured = capfd.readouterr()
    logged = "".join(f"sqe: {record.getMessage()}\n" for record in caplog.records)
    caplog.clear()
    return captured.out + captured.err + logged


def _check_stores(t: Tutorial) -> None:
    """Before the page stops the services: the chain was exactly-once.  ``big_spends`` holds
    every record of filter_spends.yaml's runs, 985 of them replays, and Redis holds each
    event over 50 once, with its amount in cents."""
    over_50 = [e for start in (0, 1000, 2000) for e in sample_events(1000, start=start)
               if e["amount"] > 50]
    client = redis.Redis(port=t.redis_port, decode_responses=True)
    try:
        assert client.hlen("spends_log") == len(over_50) == 1476
        loaded = {k: v for key in client.scan_iter("spends:*")
                  for k, v in client.hgetall(key).items()}
        assert loaded == {e["event_id"]: str(e["amount"] * 100) for e in over_50}
        assert sorted(client.hgetall("spends_log").values()) == \
            sorted(e["event_id"] for e in over_50)
    finally:
        client.close()
    t.ran.append("stores checked")


def _command(t: Tutorial, line: str, capfd: pytest.CaptureFixture[str],
             caplog: pytest.LogCaptureFixture) -> str:
    """Run one command of the page as a user does; what it printed."""
    background = line.endswith(" &")
    args = shlex.split(line.removesuffix(" &"))
    t.ran.append(" ".join(args[:2]))
    if line == INSTALL or line == ". .venv/bin/activate":
        return ""  # the venv these tests run in is the page's
    if args[:2] == ["sqe", "services"]:
        if background:
            assert args == ["sqe", "services"], line
            _start_services(t)
            return t.background_output("services.out")
        if args[2:] == ["stop"]:
            _check_stores(t)
        done = subprocess.run([str(BIN / "sqe"), *args[1:]], cwd=t.work, env=t.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"$ {line}\n{done.stdout}{done.stderr}"
        return done.stdout + done.stderr
    if args[0] == "redis-cli":
        done = subprocess.run(["redis-cli", "-p", str(t.redis_port), *args[1:]], cwd=t.work,
                              capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"$ {line}\n{done.stdout}{done.stderr}"
        return done.stdout + done.stderr
    assert args[0] == "sqe" and not background, f"the page runs {line!r}, which this test " \
        "does not know how to run"
    if args[1] == "run" and "--once" not in args:
        _start_reader(t, args[1:])
        return ""
    if args[1] == "sample-events":
        args += ["--brokers", f"localhost:{t.kafka_port}"]
    _printed(capfd, caplog)
    status = main(args[1:])
    text = _printed(capfd, caplog)
    failed = args[1] == "validate" and "error:" in text
    assert status == (2 if failed else 0), f"$ {line} exits {status}:\n{text}"
    return text


def _write_config(t: Tutorial, block: Block) -> None:
    shown = yaml.safe_load(block.text)
    assert shown == yaml.safe_load((ROOT / "conf" / "local.yaml").read_text()), \
        "the page's conf/local.yaml is not the clone's"
    text, n = re.subn(r"localhost:9092", f"localhost:{t.kafka_port}", block.text)
    text, m = re.subn(r"localhost:6379", f"localhost:{t.redis_port}", text)
    text, k = re.subn(r"port: 6379", f"port: {t.redis_port}", text)
    assert (n, m, k) == (2, 1, 1), "the page's conf/local.yaml changed its addresses"
    (t.work / "conf").mkdir(exist_ok=True)
    (t.work / "conf" / "local.yaml").write_text(text)


def _edit(t: Tutorial, block: Block, name: str) -> None:
    lines = block.text.splitlines()
    old = "\n".join(line[1:] for line in lines if line.startswith("-"))
    new = "\n".join(line[1:] for line in lines if line.startswith("+"))
    assert all(line[:1] in "-+" for line in lines), f"line {block.line}: not a plain diff"
    text = (t.work / name).read_text()
    assert text.count(old + "\n") == 1, f"line {block.line}: {name} has no one place {old!r}"
    (t.work / name).write_text(text.replace(old + "\n", new + "\n"))


def _stop_reader(t: Tutorial, rows: int) -> str:
    """Once the long-running run loaded ``rows`` records, Ctrl-C; what it printed."""
    assert t.reader is not None, "the page shows a first terminal's output, but no run in it"
    deadline = time.monotonic() + 600
    while True:
        text = t.background_output("reader.out")
        read = sum(int(n) for n in re.findall(r"batch \d+: (\d+) records read", text))
        if read >= rows:
            break
        assert t.reader.poll() is None, f"the long-running run ended:\n{text}"
        assert time.monotonic() < deadline, f"it loaded {read} of {rows} records:\n{text}"
        time.sleep(0.5)
    os.killpg(t.reader.pid, signal.SIGINT)  # what Ctrl-C at a terminal does
    assert t.reader.wait(180) == 130
    return t.background_output("reader.out")


def _stop_everything(t: Tutorial) -> None:
    if t.reader is not None and t.reader.poll() is None:
        os.killpg(t.reader.pid, signal.SIGKILL)
        t.reader.wait(30)
    if t.services is not None and t.services.poll() is None:
        subprocess.run([str(BIN / "sqe"), "services", "stop"], cwd=t.work, env=t.env,
                       capture_output=True, timeout=120)
        if t.services.poll() is None:
            t.services.kill()
        t.services.wait(30)


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.kafka
@pytest.mark.redis
def test_the_tutorial_runs_as_written(spark: object, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capfd: pytest.CaptureFixture[str],
                                      caplog: pytest.LogCaptureFixture) -> None:
    work = tmp_path / "tutorial"
    work.mkdir()
    (tmp_path / "home").mkdir()
    env = dict(os.environ, HOME=str(tmp_path / "home"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    t = Tutorial(work, env, free_port(), free_port())
    caplog.set_level(logging.INFO)
    monkeypatch.chdir(work)
    blocks = _blocks(PAGE.read_text())
    last: Block | None = None  # the sh or python block a text block shows the output of
    printed = ""
    try:
        for block in blocks:
            where = f"{PAGE.name}:{block.line}"
            if block.lang == "yaml":
                found = re.fullmatch(r"file: (\S+)", block.marker or "")
                assert found, f"{where}: a yaml block that is no file"
                if found.group(1) == "conf/local.yaml":
                    _write_config(t, block)
                else:
                    (work / found.group(1)).write_text(block.text)
            elif block.lang == "diff":
                found = re.fullmatch(r"edit: (\S+)", block.marker or "")
                assert found, f"{where}: a diff that edits no file"
                _edit(t, block, found.group(1))
            elif block.lang == "json":  # what one sample event looks like
                assert json.loads(block.text) == next(sample_events(1)), where
            elif block.lang == "sh":
                printed = "".join(_command(t, line, capfd, caplog)
                                  for line in block.text.splitlines() if line.strip())
                last = block
            elif block.lang == "python":
                _printed(capfd, caplog)
                namespace: dict = {}
                exec(compile(block.text, where, "exec"), namespace)
                printed = capfd.readouterr().out
                t.results.update(namespace)
                t.ran.append("python")
                last = block
            elif block.lang == "text" and block.marker == FIRST_TERMINAL:
                result = t.results["result"]
                rows = result.rows_written  # type: ignore[attr-defined]
                shown = _stop_reader(t, rows)
                _check_output(block.text, shown, t.ports, where, shape_only=True)
                assert f'(the next run starts at offsets {{"0": {985 * 2 + rows}}})' in shown
                assert "Traceback" not in shown
            elif block.lang == "text":
                assert last is not None, f"{where}: output of no command"
                _check_output(block.text, printed, t.ports, where)
                last = None
            else:
                raise AssertionError(f"{where}: a {block.lang or 'plain'} block, which the "
                                     "tutorial's conventions do not have")
        assert t.services is not None and t.services.wait(60) == 0, "sqe services stop left it"
    finally:
        _stop_everything(t)

    # The tutorial did what it says: every step ran ...
    assert {"sqe validate", "sqe run", "sqe hwm", "sqe status", "sqe sample-events",
            "sqe services", "redis-cli hlen", "python", "stores checked"} <= set(t.ran)


def test_the_page_installs_and_links_only_docs_pages() -> None:
    text = PAGE.read_text()
    blocks = _blocks(text)
    assert any(b.lang == "sh" and INSTALL in b.text.splitlines() for b in blocks), \
        "the page lost its install command"
    assert "pip install -e '.[local]'" in text, "the page lost the install from a clone"
    files = [m.group(1) for b in blocks if (m := re.fullmatch(r"file: (\S+)", b.marker or ""))]
    assert {"conf/local.yaml", "my_first.yaml", "filter_spends.yaml", "load_spends.yaml"} \
        <= set(files)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links and all(re.fullmatch(r"[\w-]+\.md(?:#[\w-]+)?", link) for link in links), \
        f"the page links only pages of docs/: {links}"
