"""Fixtures shared by the chart's test modules."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.charts.test_release import VERSION, clean_copy, start_release

RELEASE_TIMEOUT = 1500
"""Seconds scripts/release may take, from its start beside the session's first tests."""


class _Release:
    """scripts/release, started once per session as soon as the session's builds are done (its first tests run
    meanwhile: in the tier C lane, the sandbox), and awaited by ``released``."""

    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="dispatch-k8s-release-"))
        self.out = self.folder / "out"
        self.log = self.folder / "release.log"
        with self.log.open("w") as log:
            self.process = start_release(clean_copy(self.folder / "src"), VERSION, "--out", str(self.out), log=log)

    def wait(self) -> Path:
        try:
            code = self.process.wait(timeout=RELEASE_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise
        assert code == 0, f"scripts/release exited {code}:\n{self.log.read_text()[-4000:]}"
        return self.out

    def end(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_release: _Release | None = None


def pytest_runtestloop(session: pytest.Session) -> None:
    """After harness.pytest_plugin's wait for the builds (tryfirst) and before the tests: where a selected test uses
    ``released``, the release starts building now, beside the tests before it."""
    global _release
    if session.config.option.collectonly:
        return
    if _release is None and any("released" in getattr(item, "fixturenames", ()) for item in session.items):
        _release = _Release()


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _release is not None:
        _release.end()


@pytest.fixture(scope="session")
def released() -> Path:
    """The folder scripts/release built, once per session, on a clean copy of the checkout (its image the one
    the tier C lane built: tests/charts/test_release.py's docstring). tests/charts/test_release.py checks each
    artifact; tests/charts/test_install_from_release.py installs from them."""
    assert _release is not None, "scripts/release starts when the session selects a test that uses `released`"
    return _release.wait()
