"""A dispatch TrainJob and its runtime copy, built exactly as Start creates them.

The webhook's creation rule compares against these builders, so there is one canonical form.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from contract.errors import ContractError
from contract.identity import check_attempt, check_g, check_n
from contract.keys import (
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_COMMENT,
    ANNOTATION_RUNTIME_SOURCE,
    GATE,
    KIND_CLUSTER_TRAINING_RUNTIME,
    KIND_TRAINING_RUNTIME,
    KIND_TRAINJOB,
    LABEL_JOB_ID,
    LABEL_PRIORITY_CLASS,
    LABEL_QUEUE_NAME,
    LABEL_SUBMISSION,
)
from contract.names import build_name, validate_job_id
from contract.objects import dig
from contract.runtime_patch import Credential, Publish, runtime_patch, trainer_replicated_job
from contract.site import check_site_keys
from contract.trainer import trainer_spec
from contract.upstream import TRAINER_API_VERSION, TRAINER_GROUP


@dataclass(frozen=True)
class Submission:
    """What Start needs to build a TrainJob: the StartRequest's values and the site's."""

    job_id: str
    n: int
    g: int
    attempt: int
    namespace: str
    image: str
    command: Sequence[str]
    args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    workdir: str | None = None
    credentials: Sequence[Credential] = ()
    publish: Publish | None = None
    active_deadline_seconds: int | None = None
    queue: str | None = None
    """The Kueue LocalQueue; None is plain mode."""
    priority_class: str | None = None
    site_labels: Mapping[str, str] = field(default_factory=dict)
    site_annotations: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return build_name(self.job_id, self.n)


def comment(n: int, attempt: int) -> str:
    return f"dispatch:s={n};a={attempt}"


def build_trainjob(sub: Submission, runtime_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The TrainJob, closed: Kueue mode carries dispatch's gate, and both modes are created suspended.

    Kueue would suspend a queued TrainJob itself; writing ``suspend: true`` in Kueue mode too keeps the
    job closed even where Kueue's webhook is missing, which Start's Workload check then reports.
    """
    validate_job_id(sub.job_id)
    check_g(sub.g)
    check_n(sub.n)
    check_attempt(sub.attempt)
    check_site_keys("labels", sub.site_labels)
    check_site_keys("annotations", sub.site_annotations)
    if sub.queue is not None and (not isinstance(sub.queue, str) or not sub.queue):
        raise ContractError("kueue.localQueue", f"must be a LocalQueue name, got {sub.queue!r}")
    if sub.priority_class is not None and sub.queue is None:
        raise ContractError("kueue.priorityClass", "is set but kueue.localQueue is not: plain mode has no priority")
    name = sub.name
    labels: dict[str, str] = {**sub.site_labels, LABEL_JOB_ID: sub.job_id, LABEL_SUBMISSION: str(sub.n)}
    annotations: dict[str, str] = {**sub.site_annotations, ANNOTATION_COMMENT: comment(sub.n, sub.attempt)}
    if sub.queue is not None:
        labels[LABEL_QUEUE_NAME] = sub.queue
        if sub.priority_class:
            labels[LABEL_PRIORITY_CLASS] = sub.priority_class
        annotations[ANNOTATION_ADMISSION_GATED_BY] = GATE
    spec: dict[str, Any] = {
        "runtimeRef": {"apiGroup": TRAINER_GROUP, "kind": KIND_TRAINING_RUNTIME, "name": name},
        "trainer": trainer_spec(
            job_id=sub.job_id,
            g=sub.g,
            n=sub.n,
            attempt=sub.attempt,
            image=sub.image,
            command=sub.command,
            args=sub.args,
            env=sub.env,
            workdir=sub.workdir,
        ),
        "runtimePatches": [
            runtime_patch(
                job_id=sub.job_id,
                n=sub.n,
                trainer_job=trainer_replicated_job(runtime_spec),
                credentials=sub.credentials,
                publish=sub.publish,
            )
        ],
        "suspend": True,
    }
    if sub.active_deadline_seconds is not None:
        ads = sub.active_deadline_seconds
        if isinstance(ads, bool) or not isinstance(ads, int) or ads < 1:
            raise ContractError("activeDeadlineSeconds", f"must be a whole number of seconds >= 1, got {ads!r}")
        spec["activeDeadlineSeconds"] = ads
    return {
        "apiVersion": TRAINER_API_VERSION,
        "kind": KIND_TRAINJOB,
        "metadata": {"name": name, "namespace": sub.namespace, "labels": labels, "annotations": annotations},
        "spec": spec,
    }


def runtime_source(source: Mapping[str, Any]) -> str:
    """``<kind>/<name>@<resourceVersion>`` of the runtime a copy was taken from."""
    kind, name, rv = (
        source.get("kind"),
        dig(source, "metadata", "name"),
        dig(source, "metadata", "resourceVersion"),
    )
    if kind not in (KIND_CLUSTER_TRAINING_RUNTIME, KIND_TRAINING_RUNTIME) or not name or not rv:
        raise ContractError(
            "runtime",
            "the runtime to copy must be a TrainingRuntime or ClusterTrainingRuntime as read from the API",
        )
    return f"{kind}/{name}@{rv}"


def build_runtime_copy(sub: Submission, source: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime copy: a TrainingRuntime named as the TrainJob, with the source's spec verbatim."""
    spec = source.get("spec")
    if not isinstance(spec, Mapping):
        raise ContractError("runtime.spec", "the runtime to copy has no spec")
    trainer_replicated_job(spec)
    return {
        "apiVersion": TRAINER_API_VERSION,
        "kind": KIND_TRAINING_RUNTIME,
        "metadata": {
            "name": sub.name,
            "namespace": sub.namespace,
            "labels": {LABEL_JOB_ID: sub.job_id, LABEL_SUBMISSION: str(sub.n)},
            "annotations": {ANNOTATION_RUNTIME_SOURCE: runtime_source(source)},
        },
        "spec": copy.deepcopy(dict(spec)),
    }


def runtime_copy_owner_reference(trainjob: Mapping[str, Any]) -> dict[str, Any]:
    """The runtime copy's ownerReference to its TrainJob: not a controller, never blocking deletion."""
    uid, name = dig(trainjob, "metadata", "uid"), dig(trainjob, "metadata", "name")
    if not uid or not name:
        raise ContractError("metadata", "the TrainJob as read from the API has a name and a uid")
    return {
        "apiVersion": TRAINER_API_VERSION,
        "kind": KIND_TRAINJOB,
        "name": name,
        "uid": uid,
        "controller": False,
        "blockOwnerDeletion": False,
    }
