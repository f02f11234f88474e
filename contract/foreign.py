"""Foreign objects: resets of the execution identity that the adapter detects and reports, in the spec's
words. The agent reports them and does not stop the object: recovery is not the adapter's call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from contract.admission import admission_floor, parse_count
from contract.errors import ContractError
from contract.keys import ANNOTATION_ADMISSION, ANNOTATION_JOBSET_UID, LABEL_REPLICATED_JOB_NAME
from contract.objects import add_op, dig, labels
from contract.objects import annotations as annotations_of
from contract.ownership import dispatch_patch


def trainer_job_name(trainjob: object) -> str | None:
    """The replicated job dispatch's runtime patch addresses: the trainer's, whose pods carry A."""
    jobs = dig(dispatch_patch(trainjob), "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
    name = dig(jobs, 0, "name")
    return name if isinstance(name, str) else None


def trainer_pods(trainjob: object, pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods of the trainer replicated job; initializer pods carry no A and are not judged by it."""
    name = trainer_job_name(trainjob)
    return [p for p in pods if labels(p).get(LABEL_REPLICATED_JOB_NAME) == name]


def owns_jobset(trainjob: object, jobset: object) -> bool:
    """The JobSet is the TrainJob's own: its controller ownerReference (Trainer sets one, ``controller: true``)
    names the TrainJob's uid. A JobSet of the same name left by an earlier TrainJob of that name is not."""
    uid = dig(trainjob, "metadata", "uid")
    refs = dig(jobset, "metadata", "ownerReferences")
    return (
        isinstance(uid, str)
        and bool(uid)
        and any(
            isinstance(r, Mapping) and r.get("controller") is True and r.get("uid") == uid
            for r in (refs if isinstance(refs, list) else [])
        )
    )


def jobset_uid_ops(trainjob: Mapping[str, Any], jobset: object) -> list[dict[str, Any]]:
    """The JSON Patch ops that record the JobSet's UID on the TrainJob the first time the adapter, or the
    readmission gate, sees it: nothing when a UID is recorded already (it is never corrected), and nothing
    for a JobSet that is not the TrainJob's own (``owns_jobset``), whose UID would later be reported as a
    reset of J that never happened."""
    uid = dig(jobset, "metadata", "uid")
    if not isinstance(uid, str) or not uid or annotations_of(trainjob).get(ANNOTATION_JOBSET_UID):
        return []
    if not owns_jobset(trainjob, jobset):
        return []
    return [add_op(trainjob, ("metadata", "annotations", ANNOTATION_JOBSET_UID), uid)]


def jobset_uid_reason(trainjob: object, jobset: object) -> str | None:
    recorded, seen = annotations_of(trainjob).get(ANNOTATION_JOBSET_UID), dig(jobset, "metadata", "uid")
    if recorded and seen and recorded != seen:
        return f"JobSet UID {seen} is not the recorded {recorded}: J may have been reset."
    return None


def _live(pod: Mapping[str, Any]) -> bool:
    return dig(pod, "status", "phase") not in ("Succeeded", "Failed") and not dig(pod, "metadata", "deletionTimestamp")


def pod_reasons(trainjob: object, pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """A trainer pod with no admission annotation, or a live one whose A is below the floor.

    A pod of a past execution that has ended (or is going) legitimately carries an older A; only a pod
    started since the last raise, with a lower A, shows that the runtime patch was rewritten.
    """
    try:
        floor = admission_floor(trainjob)
    except ContractError:
        floor = None
    reasons = []
    for pod in trainer_pods(trainjob, pods):
        name = dig(pod, "metadata", "name")
        value = annotations_of(pod).get(ANNOTATION_ADMISSION)
        if value is None:
            reasons.append(
                f"Pod {name} has no admission annotation {ANNOTATION_ADMISSION}: it was not started through a gate."
            )
            continue
        try:
            a = parse_count(ANNOTATION_ADMISSION, value)
        except ContractError:
            reasons.append(f"Pod {name} has admission annotation {value!r}, which is not a count.")
            continue
        if floor is not None and a < floor and _live(pod):
            reasons.append(f"Pod {name} has A {a}, below the admission floor {floor}: A may have been reset.")
    return reasons


def runtime_copy_reason(runtime_copy: object) -> str | None:
    """An edited runtime copy. The API server raises ``generation`` by one when it sets ``deletionTimestamp``
    on an object with finalizers (apiserver's ``rest.BeforeDelete``): a copy being deleted, by Stop or by the
    garbage collector, is at 2 without anyone's edit."""
    generation = dig(runtime_copy, "metadata", "generation")
    unedited = 2 if dig(runtime_copy, "metadata", "deletionTimestamp") else 1
    if isinstance(generation, int) and generation > unedited:
        name = dig(runtime_copy, "metadata", "name")
        return f"Runtime copy {name} has generation {generation}: someone edited it after creation."
    return None


def foreign_reasons(
    trainjob: object,
    *,
    jobset: object = None,
    pods: Iterable[Mapping[str, Any]] = (),
    runtime_copy: object = None,
) -> list[str]:
    """Every reason the cluster gives to think the execution identity was reset, in the spec's words."""
    found = [jobset_uid_reason(trainjob, jobset), *pod_reasons(trainjob, pods), runtime_copy_reason(runtime_copy)]
    return [r for r in found if r]
