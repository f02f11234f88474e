"""Whose pod is it? The ownership chain pod -> Job -> JobSet -> TrainJob, as a pure function of what was read.

Pods are found by the label ``jobset.sigs.k8s.io/jobset-name``, which anyone who may create pods can set.
A stranger's pod carrying it would otherwise hold the readmission gate forever (quota reserved, the
ClusterQueue blocked) and, with completion index 0 and a high restart-attempt label, be what Output
streams as rank 0. So every reader of a TrainJob's pods (the gate, Status, Output) sorts them first:

* **ours**: the pod's controller is a Job (``batch/v1``) whose controller is the JobSet whose UID is
  recorded on the TrainJob (``dispatch.phpboyscout.uk/jobset-uid``), or the TrainJob's JobSet as read
  (controlled by the TrainJob's uid). Counted.
* **foreign**: the chain *proves* the pod is not the TrainJob's: it has no controller Job at all (JobSet's
  pods always have one: the Job controller sets it at creation), or its Job exists and is controlled by
  something other than a JobSet of this name. Reported, never waited on, never streamed.
* **unproven**: the chain cannot be followed because the pod's Job is gone (a JobSet deleted in the
  background leaves its pods behind, on a lost node for as long as the node is lost), or belongs to an
  earlier JobSet of the same name. Counted, as ours: the rule of the gate is that a pod may still run unless
  the API proves otherwise, and dropping a real pod of an earlier execution would let two run at once. A
  forged ownerReference to a Job that does not exist does not hold the gate for long: the garbage collector
  deletes a pod whose owners are all absent.

A forged ownerReference to the real Job makes the pod a child of that Job for Kubernetes too (the garbage
collector deletes it with the Job), so counting it is what Kubernetes itself does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from contract.foreign import owns_jobset
from contract.keys import ANNOTATION_JOBSET_UID
from contract.objects import annotations as annotations_of
from contract.objects import dig

JOB_API_VERSION: Final = "batch/v1"
JOBSET_API_GROUP: Final = "jobset.x-k8s.io"


@dataclass(frozen=True)
class ForeignPod:
    pod: str
    why: str

    def report(self) -> str:
        return f"Pod {self.pod} carries the TrainJob's JobSet label but is not its own: {self.why}."


@dataclass(frozen=True)
class Sorted:
    ours: tuple[Mapping[str, Any], ...]
    """Counted: proven the TrainJob's, or not provably someone else's."""
    foreign: tuple[ForeignPod, ...] = field(default_factory=tuple)
    unproven: tuple[str, ...] = field(default_factory=tuple)
    """Names of the counted pods whose chain could not be followed (their Job gone), for the reasons."""


def controller(obj: object) -> Mapping[str, Any] | None:
    """The object's controller ownerReference (at most one exists), or None."""
    refs = dig(obj, "metadata", "ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def job_of(pod: object) -> tuple[str, str] | None:
    """(name, uid) of the Job that controls the pod, or None."""
    ref = controller(pod)
    if ref is None or ref.get("kind") != "Job" or ref.get("apiVersion") != JOB_API_VERSION:
        return None
    name, uid = ref.get("name"), ref.get("uid")
    return (name, uid) if isinstance(name, str) and name and isinstance(uid, str) and uid else None


def _jobset_of(job: object) -> Mapping[str, Any] | None:
    ref = controller(job)
    api_version = ref.get("apiVersion") if ref is not None else None
    if ref is None or ref.get("kind") != "JobSet" or not isinstance(api_version, str):
        return None
    return ref if api_version.split("/")[0] == JOBSET_API_GROUP else None


def known_jobset_uids(trainjob: object, jobset: object) -> frozenset[str]:
    """The recorded JobSet UID, and the JobSet as read when the TrainJob (by uid) controls it."""
    uids = set()
    recorded = annotations_of(trainjob).get(ANNOTATION_JOBSET_UID)
    if isinstance(recorded, str) and recorded:
        uids.add(recorded)
    seen = dig(jobset, "metadata", "uid")
    if isinstance(seen, str) and seen and owns_jobset(trainjob, jobset):
        uids.add(seen)
    return frozenset(uids)


def job_names(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """The Jobs to read: each one a pod names as its controller, once."""
    return sorted({j[0] for p in pods if (j := job_of(p)) is not None})


def sort_pods(
    trainjob: object,
    jobset: object,
    pods: Iterable[Mapping[str, Any]],
    jobs: Mapping[str, Mapping[str, Any]],
) -> Sorted:
    """Sort the pods labelled with the TrainJob's JobSet name. ``jobs`` maps a Job's name to the Job as read
    now (absent when it is gone); ``jobset`` is the JobSet of the TrainJob's name as read (or None)."""
    name = dig(trainjob, "metadata", "name")
    uids = known_jobset_uids(trainjob, jobset)
    ours: list[Mapping[str, Any]] = []
    foreign: list[ForeignPod] = []
    unproven: list[str] = []
    for pod in pods:
        pod_name = str(dig(pod, "metadata", "name"))
        owner = job_of(pod)
        if owner is None:
            foreign.append(ForeignPod(pod_name, "no Job controls it (JobSet's pods are each created by a Job)"))
            continue
        job = jobs.get(owner[0])
        if job is None or dig(job, "metadata", "uid") != owner[1]:
            ours.append(pod)
            unproven.append(pod_name)
            continue
        js = _jobset_of(job)
        if js is None:
            foreign.append(ForeignPod(pod_name, f"its Job {owner[0]} is not controlled by a JobSet"))
        elif js.get("uid") in uids:
            ours.append(pod)
        elif js.get("name") != name:
            foreign.append(ForeignPod(pod_name, f"its Job {owner[0]} belongs to JobSet {js.get('name')}"))
        else:  # an earlier JobSet of this name (deleted, recreated by Trainer): its pods may still run
            ours.append(pod)
            unproven.append(pod_name)
    return Sorted(tuple(ours), tuple(foreign), tuple(unproven))
