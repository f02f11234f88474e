"""The manager's claims round (agent/multicluster/claims.py ``ClaimRenewer.round``) against the real API server, the test playing
Kueue's part on the manager and the worker being the same API server (its claims in the test's namespace): a round
reads dispatch's TrainJobs (by their job-id label) and their Workloads (by Kueue's job-uid label), fresh; it records
the worker on the TrainJob, claims the copy the manager wants there, claims nothing for a job that is not dispatch's
or not dispatched, and deletes its own claims no longer wanted (docs/multicluster.md, "The claim")."""

from __future__ import annotations

import datetime as dt
import secrets
from typing import Any

import pytest
from ulid import ULID

from agent.multicluster.claims import ClaimRenewer
from agent.multicluster.worker_reads import WorkerClients
from agent.runtime.kube import Kube
from contract.claims import Want, claim_lease, claim_name
from contract.keys import (
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_DISPATCHED,
    ANNOTATION_DISPATCHED_TO,
    KUEUE_RUNTIME_PATCH_MANAGER,
)
from contract.multicluster import MULTIKUEUE_MANAGED_BY
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.cluster import ControlPlane
from harness.fixtures import runtime, submission
from tests.agent import kueue_double as kueue
from tests.agent.gate.kit import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]
LEASE = "coordination.k8s.io/v1"
MERGE = "application/merge-patch+json"


def active_cluster(cp: ControlPlane, name: str) -> None:
    """A MultiKueueCluster Kueue is connected to (``Active`` True)."""
    made = cp.admin.create(
        {"apiVersion": kueue.KUEUE_V, "kind": "MultiKueueCluster", "metadata": {"name": name},
         "spec": {"clusterSource": {"kubeConfig": {"locationType": "Secret", "location": name}}}}
    )  # fmt: skip
    condition = {"type": "Active", "status": "True", "reason": "Active", "message": "Connected",
                 "lastTransitionTime": kueue.now()}  # fmt: skip
    cp.admin.request("PATCH", cp.admin.object_path(made) + "/status", {"status": {"conditions": [condition]}},
                     content_type=MERGE)  # fmt: skip


def dispatched(cp: ControlPlane, namespace: str, worker: str | None, *, ours: bool = True) -> tuple[dict, dict]:
    """A TrainJob MultiKueue manages (dispatch's, or not: ``ours``) and its Workload, quota reserved and, with
    ``worker``, dispatched there under the gate's approval with A = 4."""
    if ours:
        sub = submission(namespace=namespace, job_id=str(ULID()))
        cp.admin.create(build_runtime_copy(sub, runtime()))
        tj = kueue.opened(build_trainjob(sub, runtime()["spec"]))
        tj["spec"]["runtimePatches"].append(
            {"manager": KUEUE_RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}
        )
    else:
        tj = {"apiVersion": kueue.TRAINER_V, "kind": "TrainJob",
              "metadata": {"name": f"someone-{secrets.token_hex(3)}", "namespace": namespace, "annotations": {}},
              "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime",
                                      "name": "torch"}}}  # fmt: skip
    tj["spec"]["managedBy"] = MULTIKUEUE_MANAGED_BY
    tj["spec"]["suspend"] = True
    tj = cp.admin.create(tj)
    wl = kueue.reserve(cp, kueue.create_workload(cp, tj, []))
    uid = wl["metadata"]["uid"]
    wl = cp.admin.request("PATCH", cp.admin.object_path(wl), {"metadata": {"annotations": {ANNOTATION_DISPATCHED: "4"}}},
                          content_type=MERGE)  # fmt: skip
    approval = {"metadata": {"annotations": {ANNOTATION_APPROVED_ADMISSION: f"4/{uid}"}}}
    tj = cp.admin.request("PATCH", cp.admin.object_path(tj), approval, content_type=MERGE)
    if worker is not None:
        wl = cp.admin.request("PATCH", cp.admin.object_path(wl) + "/status", {"status": {"clusterName": worker}},
                              content_type=MERGE)  # fmt: skip
    return tj, wl


def claims(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    return {c["metadata"]["name"]: c for c in cp.admin.list(LEASE, "Lease", namespace)}


async def test_a_round_claims_exactly_the_copies_the_manager_wants_and_deletes_the_rest(
    control_plane, namespace, api_client
):
    cp = control_plane
    eventually(lambda: cp.admin.list(kueue.KUEUE_V, "MultiKueueCluster"), 120, "MultiKueueClusters listed")
    worker, origin = f"w-{secrets.token_hex(3)}", f"o-{secrets.token_hex(3)}"
    active_cluster(cp, worker)
    try:
        wanted_tj, wanted_wl = dispatched(cp, namespace, worker)
        _, queued_wl = dispatched(cp, namespace, None)  # approved once, dispatched nowhere now
        _, foreign_wl = dispatched(cp, namespace, worker, ours=False)  # not dispatch's
        stale = Want(worker, claim_name("an-earlier-workload"), "2/an-earlier-workload", f"{namespace}/gone")
        cp.admin.create(
            claim_lease(None, stale, namespace=namespace, origin=origin, now=dt.datetime.now(dt.UTC), duration=60)[1]
        )
        other = Want(worker, claim_name("another-managers"), "3/another-managers", f"{namespace}/theirs")
        cp.admin.create(
            claim_lease(None, other, namespace=namespace, origin="other", now=dt.datetime.now(dt.UTC), duration=60)[1]
        )

        workers = WorkerClients({worker: cp.admin_kubeconfig}, lease_namespace=namespace, origin=origin)
        renewer = ClaimRenewer(Kube(api_client, instance="test"), workers, 60)
        try:
            await renewer.round()
        finally:
            await workers.close()

        held = claims(cp, namespace)
        name = claim_name(wanted_wl["metadata"]["uid"])
        assert held[name]["spec"]["holderIdentity"] == f"4/{wanted_wl['metadata']['uid']}"
        assert claim_name(queued_wl["metadata"]["uid"]) not in held
        assert claim_name(foreign_wl["metadata"]["uid"]) not in held
        assert stale.name not in held  # its own, not wanted: deleted
        assert other.name in held  # another manager's: not its to delete
        assert (renewer.renewed, renewer.deleted) == (1, 1)
        record = kueue.get_trainjob(cp, wanted_tj)["metadata"]["annotations"][ANNOTATION_DISPATCHED_TO]
        assert record == worker
    finally:
        cp.admin.delete(kueue.KUEUE_V, "MultiKueueCluster", worker)


async def test_the_record_is_written_in_the_round_that_reads_a_stale_trainjob(control_plane, namespace, api_client):
    """MultiKueue and Kueue write the manager's TrainJob often: a record written on the TrainJob as the round read
    it conflicts (its resourceVersion moved on); the round reads it again and records the worker at once, keeping
    what changed meanwhile, rather than leaving the copy unclaimed for a round."""
    cp = control_plane
    worker = f"w-{secrets.token_hex(3)}"
    tj, _ = dispatched(cp, namespace, worker)
    cp.admin.request("PATCH", cp.admin.object_path(tj), {"metadata": {"labels": {"moved-on": "yes"}}},
                     content_type=MERGE)  # fmt: skip
    renewer = ClaimRenewer(Kube(api_client, instance="test"), WorkerClients({}, lease_namespace=namespace), 60)
    assert await renewer._recorded(tj, worker)  # tj as read before the change
    now = kueue.get_trainjob(cp, tj)
    assert now["metadata"]["annotations"][ANNOTATION_DISPATCHED_TO] == worker
    assert now["metadata"]["labels"]["moved-on"] == "yes"
