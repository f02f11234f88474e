"""What a site sets up around dispatch on a Kueue cluster, as plain objects: a ClusterQueue whose admissions go
through dispatch's AdmissionCheck, WorkloadPriorityClasses, a ClusterTrainingRuntime that meets dispatch's
runtime requirements, and someone else's TrainJob that preempts a dispatch job.

The sandbox creates these; the tier-B tests of the readmission gate build the same objects (one place, so the
two never disagree about what a gated queue is).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from contract.keys import (
    ADMISSION_CHECK_CONTROLLER,
    ANCESTOR_TRAINER,
    LABEL_ANCESTOR_STEP,
    LABEL_PRIORITY_CLASS,
    LABEL_QUEUE_NAME,
)

KUEUE_V = "kueue.x-k8s.io/v1beta2"
TRAINER_V = "trainer.kubeflow.org/v1alpha1"
JOBSET_V = "jobset.x-k8s.io/v1alpha2"
KWOK_DELETE_DELAY = "pod-delete.stage.kwok.x-k8s.io/delay"
"""A pod annotation read by kwok's pod-delete stage: at least this long (a duration such as 20s) between a
pod's deletion and kwok confirming it, as a kubelet waits for the container to stop. Without it kwok picks
at random between 1s and the end of the grace period."""


def admission_check(name: str) -> dict[str, Any]:
    """An AdmissionCheck served by dispatch's agent (the chart installs one, `dispatch-admission`)."""
    return {
        "apiVersion": KUEUE_V,
        "kind": "AdmissionCheck",
        "metadata": {"name": name},
        "spec": {"controllerName": ADMISSION_CHECK_CONTROLLER},
    }


def resource_flavor(name: str) -> dict[str, Any]:
    return {"apiVersion": KUEUE_V, "kind": "ResourceFlavor", "metadata": {"name": name}}


def gated_cluster_queue(
    name: str, *, check: str, flavor: str, quota: Mapping[str, str], also: Sequence[str] = ()
) -> dict[str, Any]:
    """A ClusterQueue for every namespace whose every admission waits for the AdmissionCheck ``check`` (and the
    checks ``also``: MultiKueue's on a manager), with ``quota`` of ``flavor`` and preemption of lower priorities
    within the queue. Kueue keeps it inactive until the check is Active, i.e. until dispatch's agent serves it."""
    return {
        "apiVersion": KUEUE_V,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},  # every namespace; a missing selector matches none
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "admissionChecksStrategy": {"admissionChecks": [{"name": c} for c in (check, *also)]},
            "resourceGroups": [
                {
                    "coveredResources": list(quota),
                    "flavors": [
                        {"name": flavor, "resources": [{"name": k, "nominalQuota": v} for k, v in quota.items()]}
                    ],
                }
            ],
        },
    }


def local_queue(namespace: str, name: str, cluster_queue: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_V,
        "kind": "LocalQueue",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"clusterQueue": cluster_queue},
    }


def priority_class(name: str, value: int, description: str = "") -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": KUEUE_V,
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }
    if description:
        obj["description"] = description
    return obj


def training_runtime(
    name: str,
    *,
    cpu: str,
    memory: str = "1Gi",
    image: str = "registry.invalid/dispatch-sandbox/train:1",
    failure_policy: Mapping[str, Any] | None = None,
    node_selector: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A ClusterTrainingRuntime that meets dispatch's runtime requirements (backoffLimit 0, restartPolicy
    Never), which upstream's torch-distributed does not state. The trainer requests ``cpu`` and ``memory``:
    Kueue applies an AdmissionCheck only to the flavors an admission assigns, and a pod set that requests
    nothing is assigned none, so it would be admitted past the readmission gate. ``pod_annotations`` go on
    the trainer's pod template (e.g. KWOK_DELETE_DELAY)."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "node", "image": image, "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
    }
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    pod_template: dict[str, Any] = {"spec": pod_spec}
    if pod_annotations:
        pod_template = {"metadata": {"annotations": dict(pod_annotations)}, **pod_template}
    jobset_spec: dict[str, Any] = {
        "replicatedJobs": [
            {
                "name": "node",
                "template": {
                    "metadata": {"labels": {LABEL_ANCESTOR_STEP: ANCESTOR_TRAINER}},
                    "spec": {"backoffLimit": 0, "template": pod_template},
                },
            }
        ]
    }
    if failure_policy:
        jobset_spec["failurePolicy"] = dict(failure_policy)
    return {
        "apiVersion": TRAINER_V,
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name},
        "spec": {"mlPolicy": {"numNodes": 1, "torch": {}}, "template": {"spec": jobset_spec}},
    }


def preemptor(
    name: str, namespace: str, *, queue: str, priority_class: str, runtime: str, cpu: str, memory: str = "1Gi"
) -> dict[str, Any]:
    """Someone else's TrainJob (not dispatch's: the gate approves it at once) at ``priority_class``, needing
    ``cpu`` of the queue's quota."""
    return {
        "apiVersion": TRAINER_V,
        "kind": "TrainJob",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {LABEL_QUEUE_NAME: queue, LABEL_PRIORITY_CLASS: priority_class},
        },
        "spec": {
            "runtimeRef": {"name": runtime},
            "trainer": {"numNodes": 1, "resourcesPerNode": {"requests": {"cpu": cpu, "memory": memory}}},
        },
    }


def binding(kind: str, name: str, role_kind: str, role: str, subject: Mapping[str, str],
            namespace: str | None = None) -> dict[str, Any]:  # fmt: skip
    """A RoleBinding or ClusterRoleBinding (``kind``) of one subject to a Role or ClusterRole (``role_kind``)."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    return {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta, "subjects": [dict(subject)],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role}}  # fmt: skip
