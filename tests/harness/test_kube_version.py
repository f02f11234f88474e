"""The Kubernetes version tier A starts: the pin by default, an older one of controlplane/matrix.env on request
(`DISPATCH_K8S_KUBE_VERSION`), built from its own wrapper module into its own cache folder (docs/compatibility.md)."""

from __future__ import annotations

import re
import subprocess

import pytest

from harness.binaries import (
    KUBE_VERSION_ENV,
    MATRIX_FILE,
    REPO_ROOT,
    TIER_A_BINARIES,
    TIER_B_BINARIES,
    MissingBinaryError,
    locate,
    matrix_apiserver,
    matrix_versions,
    matrix_wrapper,
    selected_kube_version,
)
from harness.lanes import MATRIX_NOT_BELOW, MATRIX_TESTS, OLDEST_LANE, matrix_deselect
from harness.report import Phase
from harness.run_lanes import as_oldest, oldest_lane_argv, oldest_row, verdict

PIN = locate(environ={}).versions["K8S_VERSION"]
OLDEST = matrix_versions()[0]


def test_the_pin_is_the_default_and_an_older_version_is_asked_for_by_name_or_as_the_oldest():
    assert selected_kube_version(PIN, {}) is None
    assert selected_kube_version(PIN, {KUBE_VERSION_ENV: PIN}) is None
    assert selected_kube_version(PIN, {KUBE_VERSION_ENV: "oldest"}) == OLDEST
    assert selected_kube_version(PIN, {KUBE_VERSION_ENV: OLDEST}) == OLDEST
    with pytest.raises(ValueError, match=re.escape("v1.2.3")):
        selected_kube_version(PIN, {KUBE_VERSION_ENV: "v1.2.3"})


def test_an_older_version_changes_the_api_server_alone_and_refuses_tier_b(tmp_path):
    env = {"DISPATCH_K8S_CACHE": str(tmp_path)}
    pinned, older = locate(environ=env), locate(environ={**env, KUBE_VERSION_ENV: "oldest"})
    assert older.binary("kube-apiserver") == matrix_apiserver(OLDEST, env) != pinned.binary("kube-apiserver")
    assert older.binary("etcd") == pinned.binary("etcd")
    assert older.crds_dir == pinned.crds_dir
    assert (older.kube_version, pinned.kube_version) == (OLDEST, PIN)
    with pytest.raises(MissingBinaryError, match="run only on the pinned Kubernetes"):
        older.require(TIER_B_BINARIES)
    with pytest.raises(MissingBinaryError, match=re.escape(f"controlplane/build.sh --kube {OLDEST} kube-apiserver")):
        older.require(("kube-apiserver",))


def test_every_matrix_version_is_older_than_the_pin_and_has_its_wrapper():
    def minor(version: str) -> int:
        return int(version.split(".")[1])

    versions = matrix_versions()
    assert versions == sorted(versions, key=minor)
    assert len({minor(v) for v in versions}) == len(versions)
    assert minor(versions[-1]) < minor(PIN), MATRIX_FILE
    for version in versions:
        go_mod = (matrix_wrapper(version) / "go.mod").read_text()
        assert f"require k8s.io/kubernetes {version}" in go_mod, version
        assert re.findall(r"^tool (\S+)$", go_mod, re.MULTILINE) == ["k8s.io/kubernetes/cmd/kube-apiserver"]
        staging = f"v0.{version.removeprefix('v1.')}"
        replaces = re.findall(r"^replace (k8s\.io/\S+) => \1 (\S+)$", go_mod, re.MULTILINE)
        assert replaces, version
        assert {v for _, v in replaces} == {staging}, version


def test_build_sh_puts_an_older_api_server_where_the_harness_looks(tmp_path):
    env = {"DISPATCH_K8S_CACHE": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([str(REPO_ROOT / "controlplane" / "build.sh"), "--kube", OLDEST, "--print-dir"],
                         capture_output=True, text=True, check=True, env=env).stdout.strip()  # fmt: skip
    assert out == str(matrix_apiserver(OLDEST, env).parent.parent)


def test_the_matrix_tests_are_tier_a_files_that_exist():
    for path in MATRIX_TESTS:
        assert (REPO_ROOT / path).is_file(), path
    assert TIER_A_BINARIES == ("etcd", "kube-apiserver")


@pytest.mark.cluster
def test_the_api_server_is_the_version_asked_for(control_plane):
    served = control_plane.admin.request("GET", "/version")["gitVersion"]
    assert served == control_plane.artifacts.kube_version == locate().kube_version


def test_a_test_that_needs_a_newer_kubernetes_is_deselected_below_it_alone():
    (nodeid,) = MATRIX_NOT_BELOW
    first, why = MATRIX_NOT_BELOW[nodeid]
    assert nodeid.split("::")[0] in MATRIX_TESTS
    assert why
    assert matrix_deselect(f"v1.{first - 1}.0") == [f"--deselect={nodeid}"]
    assert matrix_deselect(f"v1.{first}.0") == []


def test_the_oldest_lane_builds_then_runs_the_matrix_and_is_reported_apart():
    argv = oldest_lane_argv(OLDEST, python="py")
    assert argv[:2] == ["bash", "-c"]
    script = argv[2]
    assert (
        f"controlplane/build.sh --kube {OLDEST} kube-apiserver && exec py -m pytest --lane units -m cluster" in script
    )
    assert all(path in script for path in MATRIX_TESTS)
    phase = Phase("tests/x/test_y.py::test_z", "tier A", "units", 0.0, 2.0)
    (renamed,) = as_oldest([phase], OLDEST)
    assert (renamed.lane, renamed.nodeid) == (OLDEST_LANE, f"tests/x/test_y.py::test_z[k8s {OLDEST}]")
    (row,) = oldest_row([renamed, phase])
    assert row.split()[:2] == [OLDEST_LANE, "1"]
    assert verdict({"units": 0, OLDEST_LANE: 1}) == 1
