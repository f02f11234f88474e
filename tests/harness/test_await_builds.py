"""harness.binaries.await_builds: tests that need what scripts/test builds beside the first tests wait for it."""

import threading
from pathlib import Path

import pytest

from harness.binaries import PENDING_BUILDS_ENV, MissingBinaryError, await_builds


def test_no_background_builds_means_no_wait():
    await_builds({}, timeout=0)


def test_finished_builds_return_at_once(tmp_path: Path):
    status = tmp_path / "status"
    status.write_text("done\n")
    await_builds({PENDING_BUILDS_ENV: str(status)}, timeout=0)


def test_failed_builds_fail_the_test_with_the_log(tmp_path: Path):
    status = tmp_path / "status"
    status.write_text("failed /tmp/x/builds.log\n")
    with pytest.raises(MissingBinaryError, match=r"failed /tmp/x/builds\.log"):
        await_builds({PENDING_BUILDS_ENV: str(status)}, timeout=0)


def test_running_builds_are_waited_for_until_they_end(tmp_path: Path):
    status = tmp_path / "status"
    status.write_text("running\n")
    timer = threading.Timer(0.3, status.write_text, args=("done\n",))
    timer.start()
    try:
        await_builds({PENDING_BUILDS_ENV: str(status)}, poll=0.05, timeout=30)
    finally:
        timer.cancel()
    assert status.read_text() == "done\n"


def test_builds_that_never_end_fail_after_the_timeout(tmp_path: Path):
    status = tmp_path / "status"
    status.write_text("running\n")
    with pytest.raises(MissingBinaryError, match="still ran after"):
        await_builds({PENDING_BUILDS_ENV: str(status)}, poll=0.01, timeout=0.05)


def test_a_caller_waits_only_until_what_it_needs_is_built(tmp_path: Path):
    status, tool = tmp_path / "status", tmp_path / "promtool"
    status.write_text("running\n")
    timer = threading.Timer(0.3, tool.write_text, args=("",))
    timer.start()
    try:
        await_builds({PENDING_BUILDS_ENV: str(status)}, poll=0.05, timeout=30, built=tool.exists)
    finally:
        timer.cancel()
    assert status.read_text() == "running\n"  # the rest of the builds still run
