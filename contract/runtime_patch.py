"""Dispatch's runtime patch entry, on the trainer replicated job's pod template.

Trainer addresses a patch to a replicated job by its name, so the name is read from the runtime: the
replicated job labelled ``trainer.kubeflow.org/trainjob-ancestor-step: trainer``. Volumes, container
mounts and init containers in a patch entry are immutable once written (Trainer's CEL) and JobSet
refuses pod-spec changes on an existing JobSet, so all of them are written at creation, never later.
A ``ContainerPatch`` has no image, so the init-container route of ``publish`` patches an init container
the runtime already has.

Every entry mounts the prologue's ConfigMap (contract.prologue) read-only at PROLOGUE_MOUNT_DIR in the trainer
container. The volume is not optional: a pod whose namespace lacks the ConfigMap does not start (the kubelet
reports it), which fails closed where an empty directory would run ``sh`` on a missing file.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from contract.errors import ContractError
from contract.keys import (
    ADMISSION_AT_CREATION,
    ANCESTOR_TRAINER,
    ANNOTATION_ADMISSION,
    CREDENTIAL_DEFAULT_MODE,
    CREDENTIAL_VOLUME_PREFIX,
    ENV_PUBLISH_DEST,
    LABEL_ANCESTOR_STEP,
    LABEL_JOB_ID,
    LABEL_SUBMISSION,
    POD_FINALIZER,
    PROLOGUE_DEFAULT_MODE,
    PROLOGUE_KEY,
    PROLOGUE_MOUNT_DIR,
    PROLOGUE_VOLUME,
    PUBLISH_IMAGE_PULL_POLICY,
    PUBLISH_MOUNT_PATH,
    PUBLISH_VOLUME,
    RUNTIME_PATCH_MANAGER,
    TRAINER_CONTAINER,
)
from contract.objects import dig
from contract.prologue import PROLOGUE_CONFIGMAP

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class Credential:
    """A Secret mounted read-only into the trainer container."""

    secret: str
    mount_path: str


@dataclass(frozen=True)
class Publish:
    """Where ``cmd/publish`` comes from: an image volume, or an init container of the runtime."""

    image: str | None = None
    init_container: str | None = None


def trainer_replicated_job(runtime_spec: object) -> Mapping[str, Any]:
    """The runtime's replicated job labelled as the trainer's ancestor step; exactly one must exist."""
    jobs = dig(runtime_spec, "template", "spec", "replicatedJobs")
    found = [
        job
        for job in (jobs if isinstance(jobs, list) else [])
        if dig(job, "template", "metadata", "labels", LABEL_ANCESTOR_STEP) == ANCESTOR_TRAINER
    ]
    if len(found) != 1:
        raise ContractError(
            "runtime.spec.template.spec.replicatedJobs",
            f"{len(found)} replicated jobs carry {LABEL_ANCESTOR_STEP}: {ANCESTOR_TRAINER}; exactly one must",
        )
    if not isinstance(found[0].get("name"), str) or not found[0]["name"]:
        raise ContractError("runtime.spec.template.spec.replicatedJobs", "the trainer replicated job has no name")
    trainer: Mapping[str, Any] = found[0]
    return trainer


def canonical_path(path: str) -> bool:
    """Absolute and written as the container runtime resolves it: no empty, ``.`` or ``..`` segment and no trailing
    slash. A rule that compares mount paths as text (a CEL policy cannot normalise) reads only such paths."""
    return path.startswith("/") and not path.startswith("//") and posixpath.normpath(path) == path


def paths_overlap(a: str, b: str) -> bool:
    """One mount path at, above or below the other, as the container runtime resolves them (``/x//y/./z/`` is
    ``/x/y/z``): the later mount hides or replaces what the first shows."""
    a, b = ("/" + posixpath.normpath("/" + p).lstrip("/") for p in (a, b))  # normpath keeps a leading //
    return a == b or a.startswith(b.rstrip("/") + "/") or b.startswith(a.rstrip("/") + "/")


def prologue_volume() -> dict[str, Any]:
    """The prologue's ConfigMap as a pod volume: its one key, read-only for everyone, never optional."""
    return {
        "name": PROLOGUE_VOLUME,
        "configMap": {
            "name": PROLOGUE_CONFIGMAP,
            "items": [{"key": PROLOGUE_KEY, "path": PROLOGUE_KEY}],
            "defaultMode": PROLOGUE_DEFAULT_MODE,
        },
    }


def prologue_mount() -> dict[str, Any]:
    return {"name": PROLOGUE_VOLUME, "mountPath": PROLOGUE_MOUNT_DIR, "readOnly": True}


_OURS: Final = ((PUBLISH_MOUNT_PATH, "where publish is"), (PROLOGUE_MOUNT_DIR, "where the prologue is"))


def check_credentials(credentials: Sequence[Credential]) -> None:
    """Absolute, normalised mount paths that overlap neither dispatch's own (publish's, the prologue's) nor each
    other: a mount over the prologue's directory would replace the text the container runs."""
    seen: list[str] = []
    for i, cred in enumerate(credentials):
        field = f"credentials[{i}]"
        if not isinstance(cred.secret, str) or len(cred.secret) > 253 or not _DNS_SUBDOMAIN.fullmatch(cred.secret):
            raise ContractError(f"{field}.secret", f"{cred.secret!r} is not a Secret name (a DNS subdomain)")
        path = cred.mount_path
        if not isinstance(path, str) or not canonical_path(path) or path == "/":
            raise ContractError(f"{field}.mountPath", f"{path!r} must be an absolute, normalised path other than /")
        for ours, what in _OURS:
            if paths_overlap(path, ours):
                raise ContractError(f"{field}.mountPath", f"{path!r} overlaps {ours}, {what}")
        for other in seen:
            if paths_overlap(path, other):
                raise ContractError(f"{field}.mountPath", f"{path!r} overlaps another credential at {other!r}")
        seen.append(path)


def _init_container_names(job: Mapping[str, Any]) -> set[Any]:
    inits = dig(job, "template", "spec", "template", "spec", "initContainers")
    return {c.get("name") for c in inits if isinstance(c, Mapping)} if isinstance(inits, list) else set()


def runtime_patch(
    *,
    job_id: str,
    n: int,
    trainer_job: Mapping[str, Any],
    credentials: Sequence[Credential] = (),
    publish: Publish | None = None,
) -> dict[str, Any]:
    """Dispatch's entry in ``spec.runtimePatches``, with A = "0"."""
    check_credentials(credentials)
    volumes: list[dict[str, Any]] = [prologue_volume()]
    mounts: list[dict[str, Any]] = [prologue_mount()]
    inits: list[dict[str, Any]] = []
    for i, cred in enumerate(credentials):
        name = f"{CREDENTIAL_VOLUME_PREFIX}{i}"
        volumes.append(
            {
                "name": name,
                "secret": {
                    "secretName": cred.secret,
                    "defaultMode": CREDENTIAL_DEFAULT_MODE,
                    "optional": True,
                },
            }
        )
        mounts.append({"name": name, "mountPath": cred.mount_path, "readOnly": True})
    if publish is not None:
        if (publish.image is None) == (publish.init_container is None):
            raise ContractError("publish", "names exactly one of an image or an init container")
        if publish.image is not None:
            if not isinstance(publish.image, str) or not publish.image.strip():
                raise ContractError("publish.image", f"{publish.image!r} is not an image reference")
            volumes.append(
                {
                    "name": PUBLISH_VOLUME,
                    "image": {"reference": publish.image, "pullPolicy": PUBLISH_IMAGE_PULL_POLICY},
                }
            )
        else:
            if publish.init_container not in _init_container_names(trainer_job):
                raise ContractError(
                    "publish.initContainer",
                    f"{publish.init_container!r} is not an init container of the runtime's trainer job "
                    "(a runtime patch can only patch init containers the runtime has)",
                )
            volumes.append({"name": PUBLISH_VOLUME, "emptyDir": {}})
            inits.append(
                {
                    "name": publish.init_container,
                    "env": [{"name": ENV_PUBLISH_DEST, "value": PUBLISH_MOUNT_PATH}],
                    "volumeMounts": [{"name": PUBLISH_VOLUME, "mountPath": PUBLISH_MOUNT_PATH}],
                }
            )
        mounts.append({"name": PUBLISH_VOLUME, "mountPath": PUBLISH_MOUNT_PATH, "readOnly": True})
    pod_spec: dict[str, Any] = {
        "volumes": volumes,
        "containers": [{"name": TRAINER_CONTAINER, "volumeMounts": mounts}],
    }
    if inits:
        pod_spec["initContainers"] = inits
    pod_template: dict[str, Any] = {
        "metadata": {
            "labels": {LABEL_JOB_ID: job_id, LABEL_SUBMISSION: str(n)},
            "annotations": {ANNOTATION_ADMISSION: ADMISSION_AT_CREATION},
            # Trainer merges it into the Job's pod template, and the Job controller copies a template's
            # finalizers onto every pod it creates (k8s.io/kubernetes pkg/controller GetPodFromTemplate).
            "finalizers": [POD_FINALIZER],
        }
    }
    pod_template["spec"] = pod_spec
    return {
        "manager": RUNTIME_PATCH_MANAGER,
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [{"name": trainer_job["name"], "template": {"spec": {"template": pod_template}}}]
                }
            }
        },
    }
