"""The stream planner's process ends without a traceback when Spark hangs up on it, and
only then."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from sqe.source.hang_up import RUNNER, hung_up, quiet_hang_up


def _chain(*errors: BaseException) -> BaseException:
    """``errors[-1]`` raised while handling ``errors[-2]`` ... as Python chains them."""
    for before, after in zip(errors, errors[1:], strict=False):
        after.__context__ = before
    return errors[-1]


def test_a_hang_up_is_end_of_file_then_a_closed_socket_and_nothing_else() -> None:
    assert hung_up(_chain(EOFError(), BrokenPipeError(32, "Broken pipe")))
    assert hung_up(ConnectionResetError())
    assert not hung_up(_chain(EOFError(), ValueError("a bad offset")))
    assert not hung_up(_chain(ValueError("a bad offset"), BrokenPipeError()))
    assert not hung_up(KeyError("x"))


def test_only_sparks_planning_process_gets_the_hook() -> None:
    before = sys.excepthook
    try:
        assert not quiet_hang_up("pyspark.worker")
        assert not quiet_hang_up()  # pytest is no stream runner
        assert sys.excepthook is before
    finally:
        sys.excepthook = before


def _run(raised: str) -> subprocess.CompletedProcess[str]:
    """A Python process that raises ``raised`` at the top level after the hook is placed as
    in Spark's runner process."""
    program = textwrap.dedent(f"""
        from sqe.source.hang_up import quiet_hang_up
        assert quiet_hang_up({RUNNER!r})
        try:
            raise EOFError
        except EOFError:
            {raised}
    """)
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          env=dict(os.environ), timeout=60, check=False)


def test_the_hooked_process_prints_nothing_for_a_hang_up_and_everything_else_as_before() -> None:
    quiet = _run("raise BrokenPipeError(32, 'Broken pipe')")
    assert quiet.returncode == 1 and quiet.stderr == ""
    loud = _run("raise RuntimeError('the reader failed')")
    assert loud.returncode == 1
    assert "Traceback" in loud.stderr and "RuntimeError: the reader failed" in loud.stderr
