"""Kueue's MultiKueue across three control planes, upstream behaviour only (no dispatch): a TrainJob queued on the
manager runs on exactly one worker, and a worker whose connection breaks turns inactive and comes back.

Each wait is bounded; none is a measure of speed."""

from __future__ import annotations

from typing import Any

import pytest

from contract.keys import LABEL_JOBSET_NAME
from harness.multicluster import ADMISSION_CHECK, KUEUE_V, MULTIKUEUE_CONTROLLER, MultiCluster, Worker
from harness.tier_b import TRAINING_RUNTIME
from tests.agent.gate.kit import eventually

pytestmark = [pytest.mark.e2e, pytest.mark.multicluster]

TRAINER_V = "trainer.kubeflow.org/v1alpha1"
JOBSET_V = "jobset.x-k8s.io/v1alpha2"
ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
NODES = 2


def plain_trainjob(namespace: str, name: str, queue: str) -> dict[str, Any]:
    return {
        "apiVersion": TRAINER_V,
        "kind": "TrainJob",
        "metadata": {"namespace": namespace, "name": name, "labels": {"kueue.x-k8s.io/queue-name": queue}},
        "spec": {
            "runtimeRef": {"name": TRAINING_RUNTIME},
            "trainer": {"numNodes": NODES, "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        },
    }


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    found = [c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_]
    assert found, f"no {type_} condition: {obj.get('status')}"
    return found[0]


def test_a_plain_trainjob_queued_on_the_manager_runs_on_exactly_one_worker(
    multicluster: MultiCluster, multicluster_namespace: str
) -> None:
    mc, ns, name = multicluster, multicluster_namespace, "plain"
    manager = mc.manager.admin
    created = manager.create(plain_trainjob(ns, name, mc.local_queue))
    # Kueue's defaulting on the manager: the queue's ClusterQueue lists the MultiKueue check.
    assert created["spec"].get("managedBy") == MULTIKUEUE_CONTROLLER, created["spec"]
    uid = created["metadata"]["uid"]

    def sent_to_a_worker() -> dict[str, Any]:
        workloads = manager.list(KUEUE_V, "Workload", ns, label_selector=f"kueue.x-k8s.io/job-uid={uid}")
        assert len(workloads) == 1, [w["metadata"]["name"] for w in workloads]
        workload = workloads[0]
        status = workload.get("status", {})
        assert status.get("clusterName") in mc.cluster_names, status
        checks = {c["name"]: c["state"] for c in status.get("admissionChecks", [])}
        assert checks == {ADMISSION_CHECK: "Ready"}, checks
        assert condition(workload, "Admitted")["status"] == "True"
        return workload

    workload = eventually(sent_to_a_worker, 120, "the manager's Workload admitted and sent to a worker")
    chosen = mc.worker(workload["status"]["clusterName"])
    others = [w for w in mc.workers if w is not chosen]

    def running_on(worker: Worker) -> list[dict[str, Any]]:
        remote = worker.admin.get(TRAINER_V, "TrainJob", name, ns)
        assert remote["metadata"]["uid"] != uid  # a copy on the worker's own API server
        assert ORIGIN_LABEL in remote["metadata"]["labels"], remote["metadata"]["labels"]
        # MultiKueue clears managedBy, so the worker's Trainer runs it.
        assert remote["spec"].get("managedBy") != MULTIKUEUE_CONTROLLER, remote["spec"]
        assert remote["spec"].get("suspend") is False, remote["spec"]
        remote_workload = worker.admin.get(KUEUE_V, "Workload", workload["metadata"]["name"], ns)
        assert condition(remote_workload, "Admitted")["status"] == "True"
        assert [j["metadata"]["name"] for j in worker.admin.list(JOBSET_V, "JobSet", ns)] == [name]
        pods = worker.admin.list("v1", "Pod", ns, label_selector=f"{LABEL_JOBSET_NAME}={name}")
        assert len(pods) == NODES, [p["metadata"]["name"] for p in pods]
        assert {p["status"].get("phase") for p in pods} == {"Running"}, [p["status"].get("phase") for p in pods]
        return pods

    pods = eventually(lambda: running_on(chosen), 120, f"the TrainJob's copy running on {chosen.name}")
    assert all(p["spec"]["nodeName"] in chosen.tier_b.node_names for p in pods)

    def nowhere_else() -> None:
        for other in others:
            assert other.admin.get_or_none(TRAINER_V, "TrainJob", name, ns) is None, other.name
            # MultiKueue deletes its copies of the Workload on the workers it did not choose.
            assert other.admin.list(KUEUE_V, "Workload", ns) == [], other.name
            assert other.admin.list("v1", "Pod", ns) == [], other.name

    eventually(nowhere_else, 60, "no copy of the job on the other workers")

    # On the manager Kueue unsuspends the TrainJob once a worker admitted its copy, as upstream's own e2e test
    # expects; nothing of it runs there (no Trainer on the manager: harness.multicluster says why).
    manager_job = manager.get(TRAINER_V, "TrainJob", name, ns)
    assert manager_job["spec"]["managedBy"] == MULTIKUEUE_CONTROLLER
    assert manager_job["spec"].get("suspend") is False, manager_job["spec"]
    assert manager.list(JOBSET_V, "JobSet", ns) == []
    assert manager.list("v1", "Pod", ns) == []
    # Still where it runs, once MultiKueue has had time to change its mind.
    running_on(chosen)


def test_breaking_a_workers_connection_makes_its_cluster_inactive_and_restoring_it_active(
    multicluster: MultiCluster,
) -> None:
    mc = multicluster
    broken, healthy = mc.workers[-1], mc.workers[0]

    def active(worker: Worker, status: str, reason: str) -> None:
        found = mc.cluster_active(worker)
        assert found is not None, f"{worker.name}: no Active condition"
        assert (found["status"], found["reason"]) == (status, reason), found

    active(broken, "True", "Active")
    try:
        mc.break_connection(broken)
        eventually(lambda: active(broken, "False", "ClientConnectionFailed"), 60, f"{broken.name} inactive")
        active(healthy, "True", "Active")
        # The check stays usable through the other worker.
        eventually(lambda: _check_reason(mc, "SomeActiveClusters"), 30, "the MultiKueue check partly active")
    finally:
        mc.restore_connection(broken)
    eventually(lambda: active(broken, "True", "Active"), 60, f"{broken.name} active again")
    eventually(lambda: _check_reason(mc, "Active"), 30, "the MultiKueue check fully active")


def _check_reason(mc: MultiCluster, reason: str) -> None:
    check = mc.manager.admin.get(KUEUE_V, "AdmissionCheck", mc.admission_check)
    found = condition(check, "Active")
    assert (found["status"], found["reason"]) == ("True", reason), found
