"""The release of a lost worker's quota on a manager (agent/multicluster/worker_pass.py ``release_kept_quota``) against the real
API server, the test playing Kueue's part: the MultiKueue checks whose workers the release looks at are identified
by fresh reads of the checks the Workload lists, never by the agent's AdmissionCheck watch cache
(docs/multicluster.md, "A lost worker's quota").

The release is handed no AdmissionCheck cache at all (the agent's may miss the job's MultiKueue check, as a watch
that has not yet seen a check just made, or made again, leaves it): it must look at that check's worker, which the
agent cannot read, and keep the quota. Once the check is gone from the API the release cannot know the workers at all, and keeps it too."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from agent.multicluster.worker_pass import release_kept_quota
from agent.runtime.caches import Reads
from agent.runtime.kube import Kube
from contract.keys import KUEUE_RUNTIME_PATCH_MANAGER
from contract.multicluster import MULTIKUEUE_CONFIG_KIND, MULTIKUEUE_CONTROLLER, MULTIKUEUE_MANAGED_BY
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.cluster import ControlPlane
from harness.fixtures import runtime, submission
from tests.agent import kueue_double as kueue
from tests.agent.gate.kit import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]


@pytest.fixture
def multikueue_check(control_plane: ControlPlane) -> Iterator[tuple[str, str]]:
    """A MultiKueue AdmissionCheck whose MultiKueueConfig lists one worker the agent has no credential for:
    (the check's name, the worker's)."""
    # A fresh API server answers 429 ("storage is (re)initializing") until its cache of a kind is ready.
    eventually(lambda: control_plane.admin.list(kueue.KUEUE_V, "MultiKueueCluster"), 120, "MultiKueueClusters listed")
    tag = secrets.token_hex(3)
    check, config, worker = f"mk-{tag}", f"mkc-{tag}", f"w-lost-{tag}"
    control_plane.admin.create(
        {"apiVersion": kueue.KUEUE_V, "kind": "MultiKueueConfig", "metadata": {"name": config},
         "spec": {"clusters": [worker]}}
    )  # fmt: skip
    kueue.created_checks.append(check)  # tests/agent/conftest.py deletes it
    params = {"apiGroup": "kueue.x-k8s.io", "kind": MULTIKUEUE_CONFIG_KIND, "name": config}
    control_plane.admin.create(
        {"apiVersion": kueue.KUEUE_V, "kind": "AdmissionCheck", "metadata": {"name": check},
         "spec": {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": params}}
    )  # fmt: skip
    try:
        yield check, worker
    finally:
        control_plane.admin.delete(kueue.KUEUE_V, "MultiKueueConfig", config)


def stuck_trainjob(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    """A dispatch TrainJob MultiKueue manages, suspended by Kueue's eviction, whose status MultiKueue copied from
    the lost worker shows one active Job."""
    sub = submission(namespace=namespace)
    cp.admin.create(build_runtime_copy(sub, runtime()))
    tj = kueue.opened(build_trainjob(sub, runtime()["spec"]))
    tj["spec"]["runtimePatches"].append(
        {"manager": KUEUE_RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}
    )
    tj["spec"]["managedBy"] = MULTIKUEUE_MANAGED_BY
    tj["spec"]["suspend"] = True
    tj = cp.admin.create(tj)
    status = {"jobsStatus": [{"name": "node", "active": 1, "ready": 0, "succeeded": 0, "failed": 0, "suspended": 0}]}
    return cp.admin.request(
        "PATCH", cp.admin.object_path(tj) + "/status", {"status": status},
        content_type="application/merge-patch+json",
    )  # fmt: skip


def active(cp: ControlPlane, tj: dict[str, Any]) -> list[object]:
    return [e.get("active") for e in kueue.get_trainjob(cp, tj).get("status", {}).get("jobsStatus", [])]


def kept_messages(cp: ControlPlane, tj: dict[str, Any]) -> list[str]:
    return [e.get("message", "") for e in kueue.events_about(cp, tj) if e.get("reason") == "QuotaKept"]


async def test_the_kept_quota_stays_while_the_cache_misses_the_multikueue_check_and_while_it_cannot_be_read(
    control_plane, namespace, api_client, multikueue_check
):
    check, worker = multikueue_check
    cp = control_plane
    tj = stuck_trainjob(cp, namespace)
    wl = kueue.evict(cp, kueue.reserve(cp, kueue.create_workload(cp, tj, [check])))
    kube = Kube(api_client, instance="test")
    reads = Reads(kube)

    assert not await release_kept_quota(kube, reads, None, namespace, wl["metadata"]["name"], [])
    assert active(cp, tj) == [1]
    [message] = kept_messages(cp, tj)
    assert f"worker {worker}" in message
    assert "no credential" in message

    # The check deleted (as while it is made again): its workers cannot be known, so the quota stays.
    cp.admin.delete(kueue.KUEUE_V, "AdmissionCheck", check)
    kueue.created_checks.remove(check)
    assert not await release_kept_quota(kube, reads, None, namespace, wl["metadata"]["name"], [])
    assert active(cp, tj) == [1]
    assert any(f"AdmissionCheck {check}: not found" in m for m in kept_messages(cp, tj))
