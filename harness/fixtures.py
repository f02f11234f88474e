"""Plain objects shaped as the API returns them, for the contract's and the webhook's unit tests and the benchmarks."""

from __future__ import annotations

import copy
from typing import Any

from contract.admission import admission_started, approval, start_count
from contract.errors import ContractError
from contract.keys import ANNOTATION_APPROVED_ADMISSION
from contract.runtime_patch import Credential, Publish
from contract.trainjob import Submission, build_runtime_copy, build_trainjob

JOB_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"


def runtime(kind: str = "ClusterTrainingRuntime", trainer_job: str = "node") -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": kind,
        "metadata": {"name": "torch-distributed", "resourceVersion": "4711", "uid": "rt-uid"},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {"numProcPerNode": "auto"}},
            "template": {
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": "dataset-initializer",
                            "template": {
                                "metadata": {
                                    "labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "dataset-initializer"}
                                },
                                "spec": {"template": {"spec": {"containers": [{"name": "dataset-initializer"}]}}},
                            },
                        },
                        {
                            "name": trainer_job,
                            "template": {
                                "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                                "spec": {
                                    "backoffLimit": 0,
                                    "template": {
                                        "spec": {
                                            "restartPolicy": "Never",
                                            "initContainers": [{"name": "fetch-publish", "image": "busybox"}],
                                            "containers": [{"name": "node", "image": "pytorch/pytorch"}],
                                        }
                                    },
                                },
                            },
                        },
                    ]
                }
            },
        },
    }


def submission(**overrides: Any) -> Submission:
    values: dict[str, Any] = {
        "job_id": JOB_ID,
        "n": 3,
        "g": 1,
        "attempt": 2,
        "namespace": "team-a",
        "image": "registry.example/train:1",
        "command": ["python", "train.py"],
        "args": ["--epochs", "3"],
        "env": {"LR": "0.1", "BATCH": "32"},
        "workdir": "/workspace",
        "credentials": [Credential("s3-creds", "/var/run/creds")],
        "publish": Publish(image="registry.example/publish:1"),
        "queue": "team-a-queue",
        "priority_class": None,
    }
    values.update(overrides)
    return Submission(**values)


def as_read(obj: dict[str, Any], *, uid: str = "tj-uid", rv: str = "100") -> dict[str, Any]:
    """``obj`` as the API would return it after create: with uid and resourceVersion, and Kueue's entry."""
    obj = copy.deepcopy(obj)
    obj["metadata"].update({"uid": uid, "resourceVersion": rv, "generation": 1})
    if obj["kind"] == "TrainJob":
        obj["spec"]["runtimePatches"][0]["time"] = "2026-11-29T09:00:00Z"
        obj["spec"]["runtimePatches"].append(
            {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
        )
    return obj


def trainjob(**overrides: Any) -> dict[str, Any]:
    """A dispatch TrainJob as read back from the API."""
    return as_read(build_trainjob(submission(**overrides), runtime()["spec"]))


def runtime_copy(**overrides: Any) -> dict[str, Any]:
    return as_read(build_runtime_copy(submission(**overrides), runtime()))


def gate_approved(tj: dict[str, Any], workload_uid: str = "wl-uid") -> dict[str, Any]:
    """``tj`` after the readmission gate's approval of its next execution (agent/domain/decide.py): what Kueue's
    unsuspend starts from. Unchanged when no execution can be numbered (the gate holds then)."""
    try:
        a, _ = start_count(tj, admission_started(tj))
    except ContractError:
        return tj
    approved = copy.deepcopy(tj)
    approved["metadata"].setdefault("annotations", {})[ANNOTATION_APPROVED_ADMISSION] = approval(a, workload_uid)
    return approved
