"""The suite's lanes: which tests share a pytest session, and in which order they run.

`scripts/test` runs the lanes side by side, one pytest each (harness.run_lanes, `pytest --lane NAME`): a lane's
tests run in order in one session, and its clusters (session fixtures) start with its first test that needs one
and stop when the lane ends. Lanes wait on clusters most of the time, so two cores run them side by side.

- ``units``: unit tests, the prologue's shells, then tier A (its control plane starts last and alone).
- ``tier-b``: tier B (Kueue, JobSet, Trainer on one API server of its own).
- ``tier-c``: the real node. The sandbox first (its own cluster; it takes the machine's kube-proxy lock, which
  this lane's session fixture holds once it starts the node), then the tier C tests, the campaign last.
- ``multicluster``: the multicluster sandbox (its own clusters), then the three control planes of MultiKueue.

Plain `pytest` (no --lane) runs the lanes one after another in one session, in this order; tier A's tests still run
before tier B starts on the same API server, and tier B's before tier C extends it.

Beside them, a whole run (harness.run_lanes with no arguments, as CI runs it) has one more lane, ``kube-oldest``:
`MATRIX_TESTS` on tier A with the oldest Kubernetes the chart admits (controlplane/matrix.env), its kube-apiserver
built first in that lane (docs/compatibility.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import PurePath

LANES = ("units", "tier-b", "multicluster", "tier-c")
KUBE_PROXY_TESTS = ("tests/harness/test_sandbox.py",)
"""Tests that take the kube-proxy lock themselves (through a command they run): in the tier C lane, before it."""
OWN_CLUSTER_TESTS = (*KUBE_PROXY_TESTS, "tests/harness/test_multicluster_sandbox.py")
"""Tests whose command starts clusters of its own: first in their lane, before the lane's session fixtures start."""


def lane_of(markers: Iterable[str], path: PurePath) -> str:
    names = set(markers)
    if "multicluster" in names:
        return "multicluster"
    if "node" in names or path.as_posix().endswith(KUBE_PROXY_TESTS):
        return "tier-c"
    if "e2e" in names:
        return "tier-b"
    return "units"


def order_in_lane(markers: Iterable[str], path: PurePath) -> int:
    """Within a lane: the commands with clusters of their own, units, shells, tier A, then the lane's clusters."""
    names = set(markers)
    if path.as_posix().endswith(OWN_CLUSTER_TESTS):
        return -1
    if "node" in names:
        return 3
    if "cluster" in names:
        return 2
    if "shells" in names:
        return 1
    return 0


def sort_key(markers: Iterable[str], path: PurePath) -> tuple[int, int]:
    names = set(markers)
    return LANES.index(lane_of(names, path)), order_in_lane(names, path)


OLDEST_LANE = "kube-oldest"
MATRIX_TESTS = (
    "tests/harness/test_kube_version.py",
    "tests/charts/test_record_start_path.py",
    "tests/charts/test_lifecycle.py",
    "tests/charts/test_on_the_api_server.py",
    "tests/charts/test_helm_test.py",
    "tests/webhook/test_policies.py",
    "tests/webhook/test_owners_on_the_api_server.py",
    "tests/webhook/test_dependents_on_the_api_server.py",
    "tests/webhook/test_webhook_on_the_api_server.py",
)
"""The reduced set each older Kubernetes of the matrix runs (tier A alone; docs/compatibility.md): the API server is
the version asked for; `helm install` of the chart with its defaults takes the webhook path of the record of A where
the API server serves no MutatingAdmissionPolicy, and its upgrade and uninstall; every rendered object passes the
server's dry run (the admission policies' CEL compiled by that server); the chart's RBAC and its processes; `helm
test`; the validating policies, the owner and dependents policies; and the webhook, its record-start route included,
called by that API server."""

_OWNERS = "tests/webhook/test_owners_on_the_api_server.py::test_each_write_passes_exactly_for_its_owners"
MATRIX_NOT_BELOW = {
    f"{_OWNERS}[pods-UPDATE resize]": (33, "pods/resize is served from Kubernetes 1.33 (404 before)"),
}
"""Tests of `MATRIX_TESTS` that need a newer Kubernetes than the oldest admitted: node id -> (the first minor that
serves what they write, why). Deselected on older versions (`matrix_deselect`)."""


def matrix_deselect(version: str) -> list[str]:
    """pytest's `--deselect` arguments for `MATRIX_TESTS` on ``version`` (v1.<minor>.<patch>)."""
    minor = int(version.removeprefix("v1.").split(".")[0])
    return [f"--deselect={nodeid}" for nodeid, (first, _) in MATRIX_NOT_BELOW.items() if minor < first]
