"""docs/compatibility.md says what the repository runs: the tested versions are the pins and the matrix's, the
admitted Kubernetes is the chart's kubeVersion, the reduced set is harness.lanes.MATRIX_TESTS, and the page it points
at for the matrix's last result exists; README.md and docs/install.md link it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from harness.binaries import matrix_versions, parse_versions
from harness.lanes import MATRIX_TESTS
from harness.matrix import RESULT_FILE

ROOT = Path(__file__).resolve().parents[2]
PAGE = (ROOT / "docs" / "compatibility.md").read_text()
PINS = parse_versions((ROOT / "controlplane" / "versions.env").read_text())


def _table(header: str) -> list[list[str]]:
    """The rows of the table under ``header`` (its first line), up to the first line that is not the table's."""
    rows = []
    for line in PAGE[PAGE.index(header) :].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_the_tested_versions_are_the_pins_and_the_matrix():
    tested = " ".join(row[2] for row in _table("| component | admitted"))
    for key in ("K8S_VERSION", "KUEUE_VERSION", "JOBSET_VERSION", "TRAINER_VERSION", "HELM_VERSION"):
        assert f"**{PINS[key]}**" in tested, key
    for version in matrix_versions():
        assert f"**{version}**" in tested, version


def test_the_admitted_kubernetes_is_the_charts():
    chart = yaml.safe_load((ROOT / "charts" / "dispatch-k8s" / "Chart.yaml").read_text())
    assert f'`kubeVersion: "{chart["kubeVersion"]}"`' in PAGE
    (minor,) = re.findall(r">=1\.(\d+)\.0-0", chart["kubeVersion"])
    assert matrix_versions()[0].startswith(f"v1.{minor}."), "the matrix starts at the oldest minor the chart admits"


def test_the_reduced_set_is_the_lanes():
    files = [row[0] for row in _table("| file | what it shows")]
    assert files == list(MATRIX_TESTS)


def test_the_pages_it_names_exist_and_link_it():
    assert RESULT_FILE.name in PAGE
    assert RESULT_FILE.is_file()
    for page in ("README.md", "docs/install.md"):
        assert "compatibility.md" in (ROOT / page).read_text(), page
