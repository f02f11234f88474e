"""Is this dispatch's? The name, or a runtime patch entry with dispatch's manager; never labels.

Labels are not consulted, so stripping them does not wave a job past the readmission gate or the
webhook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.keys import KIND_TRAINJOB, LABEL_QUEUE_NAME, RUNTIME_PATCH_MANAGER
from contract.names import is_dispatch_name
from contract.objects import dig, labels
from contract.upstream import TRAINER_GROUP


def runtime_patches(trainjob: object) -> list[Any]:
    value = dig(trainjob, "spec", "runtimePatches")
    return value if isinstance(value, list) else []


def dispatch_patch_index(trainjob: object) -> int | None:
    """The index of dispatch's runtime patch entry, or None."""
    for i, entry in enumerate(runtime_patches(trainjob)):
        if isinstance(entry, Mapping) and entry.get("manager") == RUNTIME_PATCH_MANAGER:
            return i
    return None


def dispatch_patch(trainjob: object) -> Mapping[str, Any] | None:
    i = dispatch_patch_index(trainjob)
    return None if i is None else runtime_patches(trainjob)[i]


def is_dispatch(trainjob: object) -> bool:
    """The spec's test: the name matches ``dj-<ULID>-s<N>`` or dispatch's runtime patch is there."""
    return is_dispatch_name(dig(trainjob, "metadata", "name")) or dispatch_patch_index(trainjob) is not None


def is_kueue_mode(trainjob: object) -> bool:
    """Kueue mode is the queue-name label being set; plain mode otherwise."""
    return bool(labels(trainjob).get(LABEL_QUEUE_NAME))


def owner_trainjob_name(obj: object) -> str | None:
    """The name of the TrainJob that owns ``obj`` (a Workload, a JobSet), from its ownerReferences."""
    refs = dig(obj, "metadata", "ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if isinstance(ref, Mapping) and ref.get("kind") == KIND_TRAINJOB and isinstance(ref.get("name"), str):
            api_version = ref.get("apiVersion")
            if isinstance(api_version, str) and api_version.startswith(TRAINER_GROUP + "/"):
                name: str = ref["name"]
                return name
    return None


def owned_by_dispatch(obj: object) -> bool:
    """A Workload or a JobSet of a dispatch TrainJob: its owner is a TrainJob with a dispatch name.

    Kueue names the Workload ``trainjob-<name>-<hash>`` and Trainer the JobSet as its TrainJob, both with an
    ownerReference to it; the JobSet's own name is also read, so dropping the reference does not hide it.
    """
    return is_dispatch_name(owner_trainjob_name(obj)) or is_dispatch_name(dig(obj, "metadata", "name"))
