"""Fixtures shared by the chart's test modules."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.charts.test_release import VERSION, clean_copy, release


@pytest.fixture(scope="session")
def released(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder scripts/release built, once per session, on a clean copy of the checkout (its image the one
    the tier C lane built: tests/charts/test_release.py's docstring). tests/charts/test_release.py checks each
    artifact; tests/charts/test_install_from_release.py installs from them."""
    copy = clean_copy(tmp_path_factory.mktemp("release") / "src")
    out = tmp_path_factory.mktemp("release-out")
    result = release(copy, VERSION, "--out", str(out), timeout=1500)
    assert result.returncode == 0, f"scripts/release exited {result.returncode}:\n{result.stderr[-4000:]}"
    return out
