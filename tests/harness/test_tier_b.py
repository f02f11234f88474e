"""Tier B: a TrainJob goes through Kueue, Trainer, JobSet, the Job controller, the scheduler and kwok,
and a node that stops heartbeating is tainted unreachable by the node lifecycle controller."""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from harness.tier_b import TierB, training_runtime
from tests.harness.waiting import eventually

pytestmark = pytest.mark.e2e

TRAINER = ("trainer.kubeflow.org", "v1alpha1")
KUEUE = ("kueue.x-k8s.io", "v1beta2")
JOBSET = ("jobset.x-k8s.io", "v1alpha2")
GATE_ANNOTATION = "kueue.x-k8s.io/admission-gated-by"
OUR_GATE = "dispatch.phpboyscout.uk/admission"
UNREACHABLE = "node.kubernetes.io/unreachable"


def trainjob(tier_b: TierB, name: str, *, nodes: int = 2, annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "labels": {"kueue.x-k8s.io/queue-name": tier_b.local_queue},
            "annotations": annotations or {},
        },
        "spec": {
            "runtimeRef": {"name": tier_b.training_runtime},
            "trainer": {"numNodes": nodes, "resourcesPerNode": {"requests": {"cpu": "1", "memory": "1Gi"}}},
        },
    }


def conditions(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in obj.get("status", {}).get("conditions", [])}


async def workload_of(custom: client.CustomObjectsApi, namespace: str, owner_uid: str) -> dict[str, Any]:
    workloads = await custom.list_namespaced_custom_object(
        *KUEUE, namespace, "workloads", label_selector=f"kueue.x-k8s.io/job-uid={owner_uid}"
    )
    assert len(workloads["items"]) == 1, workloads["items"]
    workload = workloads["items"][0]
    assert [(o["kind"], o["uid"]) for o in workload["metadata"]["ownerReferences"]] == [("TrainJob", owner_uid)]
    return workload


@pytest.mark.asyncio
async def test_trainjob_is_admitted_by_kueue_and_runs_on_kwok_nodes(
    tier_b: TierB, queue_namespace: str, api_client: client.ApiClient
) -> None:
    ns = queue_namespace
    custom = client.CustomObjectsApi(api_client)
    created = await custom.create_namespaced_custom_object(*TRAINER, ns, "trainjobs", trainjob(tier_b, "train"))

    # Kueue's mutating webhook ran on create: it suspended the job and added its runtime patch.
    assert created["spec"]["suspend"] is True
    assert "kueue.x-k8s.io/manager" in [p["manager"] for p in created["spec"]["runtimePatches"]]
    uid = created["metadata"]["uid"]

    async def admitted() -> dict[str, Any]:
        workload = await workload_of(custom, ns, uid)
        conds = conditions(workload)
        assert conds.get("QuotaReserved", {}).get("status") == "True", conds
        assert conds.get("Admitted", {}).get("status") == "True", conds
        return workload

    workload = await eventually(admitted, within=60, what="Workload admitted")
    assert workload["spec"]["queueName"] == tier_b.local_queue
    assert workload["status"]["admission"]["clusterQueue"] == tier_b.cluster_queue
    (podset,) = workload["status"]["admission"]["podSetAssignments"]
    assert podset["count"] == 2
    assert podset["flavors"] == {"cpu": tier_b.resource_flavor, "memory": tier_b.resource_flavor}

    async def unsuspended() -> None:
        job = await custom.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", "train")
        assert job["spec"]["suspend"] is False

    await eventually(unsuspended, within=60, what="TrainJob unsuspended by Kueue")

    async def jobset_running() -> dict[str, Any]:
        jobset = await custom.get_namespaced_custom_object(*JOBSET, ns, "jobsets", "train")
        assert [(o["kind"], o["uid"]) for o in jobset["metadata"]["ownerReferences"]] == [("TrainJob", uid)]
        assert jobset["spec"].get("suspend") is not True
        return jobset

    await eventually(jobset_running, within=60, what="Trainer created and resumed the JobSet")

    batch = client.BatchV1Api(api_client)
    core = client.CoreV1Api(api_client)
    selector = "jobset.sigs.k8s.io/jobset-name=train"

    async def pods_running() -> list[client.V1Pod]:
        jobs = (await batch.list_namespaced_job(ns, label_selector=selector)).items
        assert [j.metadata.name for j in jobs] == ["train-node-0"]
        pods = (await core.list_namespaced_pod(ns, label_selector=selector)).items
        assert len(pods) == 2, [p.metadata.name for p in pods]
        for pod in pods:
            assert pod.spec.node_name in tier_b.node_names, pod.spec.node_name
            assert pod.status.phase == "Running", (pod.metadata.name, pod.status.phase)
        return pods

    pods = await eventually(pods_running, within=90, what="pods bound to kwok nodes and Running")
    # Kueue's admission reached the pods: the podset label it injects through its runtime patch.
    assert all(p.metadata.labels.get("kueue.x-k8s.io/podset") == "node" for p in pods)

    # Pods stay Running (no kubelet finishes them), as a long training job would.
    await asyncio.sleep(3)
    phases = {p.status.phase for p in (await core.list_namespaced_pod(ns, label_selector=selector)).items}
    assert phases == {"Running"}


@pytest.mark.asyncio
async def test_admission_gate_holds_the_trainjob_until_removed(
    tier_b: TierB, queue_namespace: str, api_client: client.ApiClient
) -> None:
    ns = queue_namespace
    custom = client.CustomObjectsApi(api_client)
    created = await custom.create_namespaced_custom_object(
        *TRAINER, ns, "trainjobs", trainjob(tier_b, "gated", nodes=1, annotations={GATE_ANNOTATION: OUR_GATE})
    )
    uid = created["metadata"]["uid"]

    async def gated() -> None:
        workload = await workload_of(custom, ns, uid)
        assert workload["metadata"]["annotations"].get(GATE_ANNOTATION) == OUR_GATE
        reserved = conditions(workload).get("QuotaReserved", {})
        assert (reserved.get("status"), reserved.get("reason")) == ("False", "AdmissionGated"), reserved

    await eventually(gated, within=60, what="Workload held by the admission gate")
    await asyncio.sleep(2)
    await gated()
    job = await custom.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", "gated")
    assert job["spec"]["suspend"] is True

    # Kueue's validating webhook lets gates be removed only, never added.
    with pytest.raises(ApiException) as added:
        await custom.patch_namespaced_custom_object(
            *TRAINER,
            ns,
            "trainjobs",
            "gated",
            {"metadata": {"annotations": {GATE_ANNOTATION: f"{OUR_GATE},example.com/other"}}},
            _content_type="application/merge-patch+json",
        )
    assert added.value.status in (400, 403, 422)
    assert "can only remove gates" in added.value.body

    await custom.patch_namespaced_custom_object(
        *TRAINER,
        ns,
        "trainjobs",
        "gated",
        {"metadata": {"annotations": {GATE_ANNOTATION: None}}},
        _content_type="application/merge-patch+json",
    )

    async def admitted_and_started() -> None:
        workload = await workload_of(custom, ns, uid)
        assert GATE_ANNOTATION not in workload["metadata"].get("annotations", {})
        assert conditions(workload).get("Admitted", {}).get("status") == "True"
        job = await custom.get_namespaced_custom_object(*TRAINER, ns, "trainjobs", "gated")
        assert job["spec"]["suspend"] is False

    await eventually(admitted_and_started, within=60, what="admitted once the gate is removed")


@pytest.mark.asyncio
async def test_node_that_stops_heartbeating_is_tainted_unreachable(tier_b: TierB, api_client: client.ApiClient) -> None:
    core = client.CoreV1Api(api_client)
    # A node of its own, so the shared nodes stay healthy for other tests.
    name = f"kwok-lost-{secrets.token_hex(3)}"
    tier_b.add_node(name)
    try:

        def unreachable_effects(node: client.V1Node) -> set[str]:
            return {t.effect for t in node.spec.taints or [] if t.key == UNREACHABLE}

        def ready_status(node: client.V1Node) -> str:
            return next(c.status for c in node.status.conditions if c.type == "Ready")

        node = await core.read_node(name)
        assert unreachable_effects(node) == set()
        assert ready_status(node) == "True"

        tier_b.stop_node_heartbeat(name)

        async def tainted() -> None:
            node = await core.read_node(name)
            assert ready_status(node) == "Unknown"
            assert unreachable_effects(node) == {"NoSchedule", "NoExecute"}

        await eventually(tainted, within=90, what="node tainted unreachable")

        # The partition heals: kwok takes the Lease back and the taints go.
        tier_b.resume_node_heartbeat(name)

        async def healed() -> None:
            node = await core.read_node(name)
            assert ready_status(node) == "True"
            assert unreachable_effects(node) == set()

        await eventually(healed, within=90, what="node reachable again")
    finally:
        tier_b.delete_node(name)


@pytest.mark.asyncio
async def test_manager_webhooks_are_called(tier_b: TierB, namespace: str, api_client: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api_client)

    # JobSet's defaulting webhook fills what its controller dereferences without checking.
    jobset = await custom.create_namespaced_custom_object(
        *JOBSET,
        namespace,
        "jobsets",
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": "defaults"},
            "spec": {
                "suspend": True,
                "replicatedJobs": [
                    {
                        "name": "rj",
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "template": {"spec": {"containers": [{"name": "c", "image": "registry.invalid/x"}]}}
                            }
                        },
                    }
                ],
            },
        },
    )
    assert jobset["spec"]["successPolicy"]["operator"] == "All"
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    assert jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] == "Indexed"

    # Trainer's validating webhook: an ancestor replicated job must have exactly one replica.
    # (Kueue has no webhook on runtimes; on TrainJobs both validate in parallel, either may answer first.)
    runtime = training_runtime(tier_b.control_plane)
    runtime["metadata"]["name"] = f"two-replicas-{secrets.token_hex(3)}"
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["replicas"] = 2
    with pytest.raises(ApiException) as rejected:
        await custom.create_cluster_custom_object(*TRAINER, "clustertrainingruntimes", runtime)
    assert "validator.clustertrainingruntime.trainer.kubeflow.org" in rejected.value.body
    assert "always must be 1" in rejected.value.body

    # Kueue's conversion webhook serves the deprecated v1beta1 of its stored v1beta2 objects.
    queue = await custom.get_cluster_custom_object("kueue.x-k8s.io", "v1beta1", "clusterqueues", tier_b.cluster_queue)
    assert queue["apiVersion"] == "kueue.x-k8s.io/v1beta1"
