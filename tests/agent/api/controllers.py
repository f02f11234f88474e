"""Stand-ins for the controllers around a dispatch TrainJob, as hooks of the fake API server."""

from __future__ import annotations

import datetime as dt
from typing import Any

from contract.keys import (
    ADMISSION_CHECK_CONTROLLER,
    ANNOTATION_ADMISSION_GATED_BY,
    LABEL_QUEUE_NAME,
    LEASE_NAME,
    LEASE_NAMESPACE,
)
from contract.upstream import ADMISSION_CHECKS, JOBS, JOBSETS, LEASES, NODES, PODS, TRAINJOBS, WORKLOADS
from tests.agent.api.fake_kube import FakeKube

CHECK = "dispatch-admission"


def readmission_controller(
    fake: FakeKube, *, seconds_ago: float = 0, duration: int = 3600, holder: str = "agent-0"
) -> None:
    """The readmission controller's Lease (the agent's leader election), as just renewed ``seconds_ago``; the
    verdict annotations already on it are kept. The long default duration keeps it alive through a test
    without a renewing task: Kueue-mode Start, Open and Release are observe-only while it is stale."""
    renewed = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds_ago)
    old = fake.get(LEASES.path(LEASE_NAMESPACE), LEASE_NAME) or {}
    fake.put(
        LEASES.path(LEASE_NAMESPACE),
        {
            "metadata": {
                "name": LEASE_NAME,
                "namespace": LEASE_NAMESPACE,
                "annotations": (old.get("metadata") or {}).get("annotations") or {},
            },
            "spec": {
                "holderIdentity": holder,
                "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "leaseDurationSeconds": duration,
            },
        },
    )


def admission_check(fake: FakeKube, *, active: bool = True, name: str = CHECK) -> None:
    status = {"conditions": [{"type": "Active", "status": "True" if active else "False"}]}
    fake.put(
        ADMISSION_CHECKS.path(),
        {"metadata": {"name": name}, "spec": {"controllerName": ADMISSION_CHECK_CONTROLLER}, "status": status},
    )


def kueue(*, checks: tuple[str, ...] = (CHECK,), requests: dict[str, str] | None = None) -> Any:
    """Kueue's job reconciler, as far as Start sees it: a Workload for each TrainJob with a queue name,
    carrying the TrainJob's gate and listing the ClusterQueue's checks; its pod set requests ``requests``."""
    resources = {"requests": {"cpu": "1"} if requests is None else requests}

    def hook(fake: FakeKube, collection: str, obj: dict[str, Any]) -> None:
        meta = obj["metadata"]
        if not collection.endswith("/trainjobs") or not (meta.get("labels") or {}).get(LABEL_QUEUE_NAME):
            return
        ns = meta["namespace"]
        if any(
            w["metadata"]["labels"].get("kueue.x-k8s.io/job-uid") == meta["uid"] for w in fake.items(WORKLOADS.path(ns))
        ):
            return
        gate = (meta.get("annotations") or {}).get(ANNOTATION_ADMISSION_GATED_BY)
        fake.put(
            WORKLOADS.path(ns),
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "Workload",
                "metadata": {
                    "name": f"trainjob-{meta['name']}-1a2b3",
                    "namespace": ns,
                    "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                    "annotations": {ANNOTATION_ADMISSION_GATED_BY: gate} if gate else {},
                    "ownerReferences": [
                        {
                            "apiVersion": "trainer.kubeflow.org/v1alpha1",
                            "kind": "TrainJob",
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": {
                    "active": True,
                    "queueName": meta["labels"][LABEL_QUEUE_NAME],
                    "podSets": [
                        {
                            "name": "node",
                            "count": 1,
                            "template": {"spec": {"containers": [{"name": "node", "resources": resources}]}},
                        }
                    ],
                },
                "status": {"admissionChecks": [{"name": c, "state": "Pending"} for c in checks]},
            },
        )

    return hook


def tamper(change: Any) -> Any:
    """Someone who rewrites each TrainJob right after it is created."""

    done: set[str] = set()

    def hook(fake: FakeKube, collection: str, obj: dict[str, Any]) -> None:
        if collection.endswith("/trainjobs") and obj["metadata"]["uid"] not in done:
            done.add(obj["metadata"]["uid"])
            change(obj)

    return hook


def unsuspend_everything(fake: FakeKube, collection: str, obj: dict[str, Any]) -> None:
    """A leaking gate: something starts every TrainJob at once, and its pod appears."""
    if not collection.endswith("/trainjobs"):
        return
    obj["spec"]["suspend"] = False
    ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
    fake.put(PODS.path(ns), pod(name, f"{name}-node-0-0-abcde", node=None))


def pod(jobset: str, name: str, *, node: str | None = "node-1", index: str = "0", a: str = "1", j: str = "0",
        phase: str = "Running", job: str = "node") -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "labels": {
                "jobset.sigs.k8s.io/jobset-name": jobset,
                "jobset.sigs.k8s.io/replicatedjob-name": job,
                "jobset.sigs.k8s.io/restart-attempt": j,
                "batch.kubernetes.io/job-completion-index": index,
            },
            "annotations": {"dispatch.phpboyscout.uk/admission": a},
            "creationTimestamp": "2026-11-29T10:00:00Z",
        },
        "spec": {"containers": [{"name": "node"}], **({"nodeName": node} if node else {})},
        "status": {
            "phase": phase,
            "conditions": [],
            "containerStatuses": [{"name": "node", "state": {"running": {}}}],
            "initContainerStatuses": [],
            "ephemeralContainerStatuses": [],
        },
    }


def owned_pod(fake: FakeKube, js: dict[str, Any], name: str, *, job: str = "node", **kw: Any) -> dict[str, Any]:
    """A pod as JobSet makes it: controlled by a Job ``<jobset>-<job>-0``, which the JobSet ``js`` controls."""
    ns, js_name = js["metadata"]["namespace"], js["metadata"]["name"]
    job_name = f"{js_name}-{job}-0"
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": js_name,
             "uid": js["metadata"]["uid"], "controller": True}  # fmt: skip
    j = fake.get(JOBS.path(ns), job_name) or fake.put(
        JOBS.path(ns), {"metadata": {"name": job_name, "namespace": ns, "ownerReferences": [owner]}}
    )
    p = pod(js_name, name, job=job, **kw)
    p["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": job_name, "uid": j["metadata"]["uid"], "controller": True}
    ]
    return fake.put(PODS.path(ns), p)


def ready_node(fake: FakeKube, name: str = "node-1") -> None:
    fake.put(
        NODES.path(),
        {
            "metadata": {"name": name},
            "spec": {"taints": []},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]},
        },
    )


def jobset(fake: FakeKube, namespace: str, name: str, owner_uid: str, restarts: int = 0) -> dict[str, Any]:
    return fake.put(
        JOBSETS.path(namespace),
        {
            "metadata": {"name": name, "namespace": namespace,
                         "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                              "name": name, "uid": owner_uid, "controller": True}]},
            "status": {"restarts": restarts},
        },
    )  # fmt: skip


def trainjob_path(namespace: str, name: str) -> str:
    return TRAINJOBS.path(namespace, name)


def trainer_and_jobset(*, jobs: bool = True) -> Any:
    """Trainer and JobSet, as far as Preflight sees them: for each new TrainJob a suspended JobSet of its name, and
    (``jobs``) that JobSet's first Job, suspended: what the probe's owners make while it stays closed."""

    def hook(fake: FakeKube, collection: str, obj: dict[str, Any]) -> None:
        if not collection.endswith("/trainjobs"):
            return
        meta = obj["metadata"]
        ns, name = meta["namespace"], meta["name"]
        owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name, "uid": meta["uid"],
                 "controller": True}  # fmt: skip
        fake.put(JOBSETS.path(ns), {"metadata": {"name": name, "namespace": ns, "ownerReferences": [owner]},
                                    "spec": {"suspend": True, "replicatedJobs": [{"name": "node", "replicas": 1}]}})  # fmt: skip
        if jobs:
            fake.put(
                JOBS.path(ns), {"metadata": {"name": f"{name}-node-0", "namespace": ns}, "spec": {"suspend": True}}
            )

    return hook
