"""The test plays Kueue's part on tier A: real AdmissionCheck, Workload and TrainJob objects on the real API
server, with Workload status written as Kueue writes it (server-side apply on workloads/status by the field
manager ``kueue-admission``, all check entries re-applied) — but no Kueue running."""

from __future__ import annotations

import copy
import secrets
from collections.abc import Mapping
from typing import Any

from contract.admission import admission_count, admission_floor, admission_started, preconditions, unsuspend_ops
from contract.keys import (
    ADMISSION_CHECK_CONTROLLER,
    ANNOTATION_ADMISSION_STARTED,
    KUEUE_RUNTIME_PATCH_MANAGER,
    LABEL_JOBSET_NAME,
    POD_FINALIZER,
)
from contract.objects import pointer
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.cluster import ControlPlane
from harness.doubles import KUEUE_V, now, opened, status_body
from harness.fixtures import runtime, submission
from harness.kube_http import KubeHttp
from tests.harness.kubelet import apply_json_patch
from tests.webhook.test_webhook_rules import KUEUE, request
from webhook.admission import validate
from webhook.config import Config
from webhook.review import Lookups, Verdict
from webhook.rules.unsuspend import approval_problems

TRAINER_V = "trainer.kubeflow.org/v1alpha1"
KUEUE_MANAGER = "kueue-admission"

created_checks: list[str] = []
"""AdmissionChecks made by the current test (tests/agent/conftest.py deletes them)."""


def create_admission_check(cp: ControlPlane) -> str:
    """An AdmissionCheck served by dispatch; cluster-scoped, so each test makes its own name."""
    name = f"dispatch-{secrets.token_hex(4)}"
    created_checks.append(name)
    cp.admin.create(
        {
            "apiVersion": KUEUE_V,
            "kind": "AdmissionCheck",
            "metadata": {"name": name},
            "spec": {"controllerName": ADMISSION_CHECK_CONTROLLER},
        }
    )
    return name


def create_dispatch_trainjob(
    cp: ControlPlane, namespace: str, *, closed: bool = False, **overrides: Any
) -> dict[str, Any]:
    """A dispatch TrainJob as Start creates it and Open opens it (dispatch's gate replaced by the opened mark:
    the readmission gate approves nothing else), with Kueue's runtime patch entry (its webhook's part);
    ``closed``: as Start leaves it, before Open."""
    sub = submission(namespace=namespace, **overrides)
    cp.admin.create(build_runtime_copy(sub, runtime()))
    tj = build_trainjob(sub, runtime()["spec"])
    tj = tj if closed else opened(tj)
    tj["spec"]["runtimePatches"].append(
        {"manager": KUEUE_RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}
    )
    return cp.admin.create(tj)


def create_plain_trainjob(cp: ControlPlane, namespace: str, name: str = "someone-elses-job") -> dict[str, Any]:
    """A TrainJob that is not dispatch's: another name, no runtime patch of dispatch's manager."""
    return cp.admin.create(
        {
            "apiVersion": TRAINER_V,
            "kind": "TrainJob",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch"},
                "suspend": True,
                "runtimePatches": [
                    {"manager": KUEUE_RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}
                ],
            },
        }
    )


def create_batch_job(cp: ControlPlane, namespace: str, name: str = "a-batch-job") -> dict[str, Any]:
    return cp.admin.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "suspend": True,
                "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
            },
        }
    )


def workload_spec() -> dict[str, Any]:
    """A Workload's spec with one pod set of one pod, in the LocalQueue ``lq``."""
    container = {"name": "node", "image": "x", "resources": {"requests": {"cpu": "1"}}}
    return {
        "queueName": "lq",
        "podSets": [{"name": "node", "count": 1, "template": {"spec": {"containers": [container]}}}],
    }


def create_workload(cp: ControlPlane, owner: dict[str, Any], checks: list[str]) -> dict[str, Any]:
    """The owner's Workload as Kueue makes it (controller ownerReference), with its checks Pending and no
    quota reserved yet: Kueue lists the checks that apply to all flavors before any reservation."""
    meta = owner["metadata"]
    wl = cp.admin.create(
        {
            "apiVersion": KUEUE_V,
            "kind": "Workload",
            "metadata": {
                "name": f"{owner['kind'].lower()}-{meta['name']}-{secrets.token_hex(3)[:5]}",
                "namespace": meta["namespace"],
                "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
                "ownerReferences": [
                    {
                        "apiVersion": owner["apiVersion"],
                        "kind": owner["kind"],
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": workload_spec(),
        }
    )
    return write_status(cp, wl, checks={c: ("Pending", "") for c in checks}, reserved=False)


def write_status(
    cp: ControlPlane,
    wl: dict[str, Any],
    *,
    checks: dict[str, tuple[str, str]],
    reserved: bool,
    evicted: bool = False,
    http: KubeHttp | None = None,
) -> dict[str, Any]:
    body = status_body(wl, checks, reserved=reserved, evicted=evicted)
    return (http or cp.admin).request(
        "PATCH",
        cp.admin.object_path(wl) + "/status",
        body,
        query={"fieldManager": KUEUE_MANAGER, "force": "true"},
        content_type="application/apply-patch+yaml",
    )


def get_workload(cp: ControlPlane, wl: dict[str, Any]) -> dict[str, Any]:
    return cp.admin.get(KUEUE_V, "Workload", wl["metadata"]["name"], wl["metadata"]["namespace"])


def get_trainjob(cp: ControlPlane, tj: dict[str, Any]) -> dict[str, Any]:
    return cp.admin.get(TRAINER_V, "TrainJob", tj["metadata"]["name"], tj["metadata"]["namespace"])


def entry(wl: dict[str, Any], check: str) -> dict[str, Any]:
    return next(c for c in wl["status"]["admissionChecks"] if c["name"] == check)


def states(wl: dict[str, Any]) -> dict[str, str]:
    return {c["name"]: c["state"] for c in wl["status"]["admissionChecks"]}


def reserve(cp: ControlPlane, wl: dict[str, Any]) -> dict[str, Any]:
    """The scheduler reserves quota; the checks keep their states."""
    wl = get_workload(cp, wl)
    return write_status(cp, wl, checks=_current(wl), reserved=True)


def evict(cp: ControlPlane, wl: dict[str, Any]) -> dict[str, Any]:
    """Kueue's eviction (prepareForEviction): Evicted=True and every check not Pending reset to Pending,
    in one strict write."""
    wl = get_workload(cp, wl)
    checks = {
        n: (s, m) if s == "Pending" else ("Pending", f"Reset to Pending after eviction. Previously: {s}")
        for n, (s, m) in _current(wl).items()
    }
    return write_status(cp, wl, checks=checks, reserved=True, evicted=True)


def readmit_cycle(cp: ControlPlane, wl: dict[str, Any]) -> dict[str, Any]:
    """A whole preemption as Kueue does it: evict (reset), release the quota, reserve it again."""
    wl = evict(cp, wl)
    wl = write_status(cp, wl, checks=_current(wl), reserved=False, evicted=True)
    return write_status(cp, wl, checks=_current(wl), reserved=True)


def _current(wl: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {c["name"]: (c["state"], c["message"]) for c in wl["status"]["admissionChecks"]}


def a_and_floor(tj: dict[str, Any]) -> tuple[int | None, int | None]:
    return admission_count(tj), admission_floor(tj)


def started(tj: dict[str, Any]) -> int | None:
    """The A the last execution started with (``admission-started``), None before the first."""
    return admission_started(tj)


def run_execution(cp: ControlPlane, tj: dict[str, Any]) -> dict[str, Any]:
    """One execution of an admitted TrainJob: Kueue's unsuspend, then its suspend at the next eviction.

    The unsuspend carries what dispatch's admission adds to every unsuspend (contract/admission.py
    ``unsuspend_ops``: the raise of A when one is due and the record of the start), as the
    MutatingAdmissionPolicy ``record-start`` or the mutating webhook writes it on a full cluster; tier A
    installs neither, so the test applies it in the same write, and checks that the start carries the gate's
    approval of its A (the unsuspend policy's rule). Returns the TrainJob as the unsuspend left it.
    """
    tj = get_trainjob(cp, tj)
    unsuspended = copy.deepcopy(tj)
    unsuspended["spec"]["suspend"] = False
    ops = unsuspend_ops(unsuspended, admission_started(tj), kueue=True)
    assert ops, "the execution can be numbered"
    started_tj = cp.admin.request(
        "PATCH",
        cp.admin.object_path(tj),
        [*preconditions(tj), {"op": "replace", "path": pointer("spec", "suspend"), "value": False}, *ops],
        content_type="application/json-patch+json",
    )
    assert started_tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] == str(admission_count(started_tj))
    # The unsuspend policy's rule, which tier A does not install: the start carries the gate's approval of its A.
    assert not approval_problems(tj, started_tj), "the readmission gate approved this start"
    cp.admin.request(
        "PATCH",
        cp.admin.object_path(tj),
        [*preconditions(started_tj), {"op": "replace", "path": pointer("spec", "suspend"), "value": True}],
        content_type="application/json-patch+json",
    )
    return started_tj


def kueue_entry(tj: dict[str, Any]) -> dict[str, Any]:
    return copy.deepcopy(next(p for p in tj["spec"]["runtimePatches"] if p["manager"] == KUEUE_RUNTIME_PATCH_MANAGER))


# -- pods and nodes (no kubelet on tier A: the objects are written directly) ------------------------


def create_node(cp: ControlPlane, name: str, *, ready: str = "Unknown", taints: list[dict[str, Any]] | None = None):
    node = cp.admin.create(
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {"taints": taints or []}}
    )
    stamp = now()
    status = {
        "conditions": [
            {
                "type": "Ready",
                "status": ready,
                "reason": "NodeStatusUnknown" if ready == "Unknown" else "KubeletReady",
                "message": "Kubelet stopped posting node status."
                if ready == "Unknown"
                else "kubelet is posting ready status",
                "lastHeartbeatTime": stamp,
                "lastTransitionTime": stamp,
            }
        ]
    }
    return (
        cp.admin.request(
            "PATCH", f"/api/v1/nodes/{name}/status", {"status": status}, content_type="application/merge-patch+json"
        )
        or node
    )


def taint_node(cp: ControlPlane, name: str, taints: list[dict[str, Any]]) -> dict[str, Any]:
    return cp.admin.merge_patch("v1", "Node", name, {"spec": {"taints": taints}})


def controller_ref(owner: Mapping[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def owning_job(cp: ControlPlane, tj: dict[str, Any]) -> dict[str, Any]:
    """The Job ``<name>-node-0`` of the TrainJob's JobSet (each made if missing), as JobSet and Trainer make
    them; tier A runs no controller, so nothing acts on them."""
    namespace, name = tj["metadata"]["namespace"], tj["metadata"]["name"]
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "node", "image": "pytorch/pytorch"}]}}
    jobset = cp.admin.get_or_none("jobset.x-k8s.io/v1alpha2", "JobSet", name, namespace) or cp.admin.create(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {"name": name, "namespace": namespace, "ownerReferences": [controller_ref(tj)]},
            "spec": {"suspend": True, "replicatedJobs": [
                {"name": "node", "replicas": 1, "template": {"spec": {"template": template}}}]},
        }
    )  # fmt: skip
    job_name = f"{name}-node-0"
    return cp.admin.get_or_none("batch/v1", "Job", job_name, namespace) or cp.admin.create(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": job_name, "namespace": namespace, "ownerReferences": [controller_ref(jobset)]},
            "spec": {"suspend": True, "template": template},
        }
    )


def create_trainer_pod(
    cp: ControlPlane, tj: dict[str, Any], node: str, *, a: str = "0", finalizer: bool = False
) -> dict[str, Any]:
    """A pod of the TrainJob's previous execution, bound to ``node`` and Running (as its kubelet said), owned as
    JobSet's are: by a Job that the TrainJob's JobSet controls (agent/domain/pod_owners.py counts no other)."""
    namespace, name = tj["metadata"]["namespace"], tj["metadata"]["name"]
    cp.ensure_service_account(namespace, "default")  # no controller-manager makes it on tier A
    job = owning_job(cp, tj)
    pod = cp.admin.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-node-0-0-{secrets.token_hex(3)}",
                "namespace": namespace,
                "labels": {LABEL_JOBSET_NAME: name, "jobset.sigs.k8s.io/replicatedjob-name": "node"},
                "annotations": {"dispatch.phpboyscout.uk/admission": a},
                "ownerReferences": [controller_ref(job)],
                # As the Job controller copies it from dispatch's runtime patch (contract/runtime_patch.py).
                **({"finalizers": [POD_FINALIZER]} if finalizer else {}),
            },
            "spec": {
                "nodeName": node,
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "containers": [{"name": "node", "image": "pytorch/pytorch"}],
            },
        }
    )
    stamp = now()
    status = {
        "phase": "Running",
        "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": stamp}],
        "containerStatuses": [
            {
                "name": "node",
                "image": "pytorch/pytorch",
                "imageID": "",
                "ready": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": stamp}},
            }
        ],
    }
    return cp.admin.request(
        "PATCH", cp.admin.object_path(pod) + "/status", {"status": status}, content_type="application/merge-patch+json"
    )


def events_about(cp: ControlPlane, tj: dict[str, Any]) -> list[dict[str, Any]]:
    namespace = tj["metadata"]["namespace"]
    return [
        e for e in cp.admin.list("v1", "Event", namespace) if e["involvedObject"].get("uid") == tj["metadata"]["uid"]
    ]


def judge_unsuspend(tj: dict[str, Any]) -> Verdict:
    """The choke point's answer to Kueue's unsuspend of ``tj`` as stored, with what admission adds to the write:
    the webhook's own rules (webhook/admission.py ``validate``; the unsuspend policy states the same in CEL)."""
    new = copy.deepcopy(tj)
    new["spec"]["suspend"] = False
    new = apply_json_patch(new, unsuspend_ops(new, admission_started(tj), kueue=True))
    return validate(request("UPDATE", new, tj, user=KUEUE), Config(), Lookups())
