"""The merged pod template: what Trainer renders from the runtime and every runtime-patch entry.

Trainer applies ``spec.runtimePatches`` in list order with a strategic merge patch, so a later entry wins:
another manager's entry (Kueue's, which Kueue fills from every admission check's ``podSetUpdates``, or a
stranger's) that sets the pod annotation ``dispatch.phpboyscout.uk/admission`` overrides A in dispatch's
entry, and one that sets a ``DISPATCH_*`` variable, a container's command or mounts, a volume, or a
strategic-merge directive (``$patch: replace`` in the annotations map) changes what the prologue reads or
runs. So another entry may carry only what Kueue's carries (``FOREIGN_ENTRY_SHAPE``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from contract.errors import Problem
from contract.keys import (
    ANNOTATION_ADMISSION,
    LABEL_RESTART_ATTEMPT,
    PREFIX,
    RUNTIME_PATCH_MANAGER,
)
from contract.objects import dig
from contract.ownership import dispatch_patch, runtime_patches

JOBS_IN_ENTRY: Final = ("trainingRuntimeSpec", "template", "spec", "replicatedJobs")
UNKNOWN: Final = "<unknown: a strategic-merge directive in the annotations>"


def reserved_pod_key(key: object) -> bool:
    """A pod label or annotation that decides identity: dispatch's, J's, or a strategic-merge directive."""
    return isinstance(key, str) and (key.startswith(PREFIX) or key == LABEL_RESTART_ATTEMPT or key.startswith("$"))


def _directives(value: object, path: str) -> Iterator[str]:
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and k.startswith("$"):
                yield f"{path}[{k}]"
            yield from _directives(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _directives(v, f"{path}[{i}]")


FOREIGN_POD_METADATA: Final = ("labels", "annotations")
FOREIGN_POD_SPEC: Final = ("nodeSelector", "tolerations", "schedulingGates")
"""What an entry that is not dispatch's may set, on each replicated job's pod template: exactly what Kueue's
entry carries (the flavors' node selectors and tolerations, every check's podSetUpdates, TAS's scheduling
gates). Nothing else: no containers (the trainer's command, env, mounts), no volumes (one named as dispatch's
would replace its source), no JobSet or Job metadata, no service account."""


def _outside(value: object, shape: object, path: str) -> Iterator[str]:
    """Paths of ``value`` outside ``shape``: a dict of the keys allowed (each with its own shape), ``[shape]``
    for a list's items, or ``...`` for anything."""
    if shape is ...:
        return
    if isinstance(shape, list):
        for i, item in enumerate(value if isinstance(value, list) else []):
            name = item.get("name", i) if isinstance(item, Mapping) else i
            yield from _outside(item, shape[0], f"{path}[{name}]")
        return
    if not isinstance(value, Mapping) or not isinstance(shape, Mapping):
        return
    for key, item in value.items():
        if key not in shape:
            # A null sets nothing.
            if item is not None:
                yield f"{path}.{key}"
        else:
            yield from _outside(item, shape[key], f"{path}.{key}")


FOREIGN_ENTRY_SHAPE: Final = {
    "manager": ...,
    "time": ...,
    "trainingRuntimeSpec": {
        "template": {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": ...,
                        "template": {
                            "spec": {
                                "template": {
                                    "metadata": {k: ... for k in FOREIGN_POD_METADATA},
                                    "spec": {k: ... for k in FOREIGN_POD_SPEC},
                                }
                            }
                        },
                    }
                ]
            }
        }
    },
}


def entry_intrusions(entry: Mapping[str, Any], where: str) -> list[str]:
    """What an entry that is not dispatch's sets beyond what Kueue's may (``FOREIGN_ENTRY_SHAPE``), and, within
    that, what only dispatch's may: pod keys under ``dispatch.phpboyscout.uk/`` or J's label, or a
    strategic-merge directive."""
    found = list(_outside(entry, FOREIGN_ENTRY_SHAPE, where)) + list(_directives(entry, where))
    jobs = dig(entry, *JOBS_IN_ENTRY)
    for j, job in enumerate(jobs if isinstance(jobs, list) else []):
        pod = dig(job, "template", "spec", "template")
        base = f"{where}.replicatedJobs[{j}].template.spec.template"
        for part in FOREIGN_POD_METADATA:
            keys = dig(pod, "metadata", part)
            for key in keys if isinstance(keys, Mapping) else {}:
                if reserved_pod_key(key) and not str(key).startswith("$"):
                    found.append(f"{base}.metadata.{part}[{key}]")
    return found


def foreign_entry_problems(old: object, new: object) -> list[Problem]:
    """Entries of other managers, new or changed in this write, that set what only dispatch's entry may."""
    before = [e for e in runtime_patches(old) if isinstance(e, Mapping)]
    problems = []
    for i, entry in enumerate(runtime_patches(new)):
        if not isinstance(entry, Mapping) or entry.get("manager") == RUNTIME_PATCH_MANAGER:
            continue
        if any(_same_entry(entry, b) for b in before):
            continue
        intrusions = entry_intrusions(entry, f"spec.runtimePatches[{entry.get('manager', i)}]")
        if intrusions:
            problems.append(
                Problem(
                    "runtime-patch.foreign",
                    f"spec.runtimePatches[{entry.get('manager', i)}]",
                    intrusions[:4],
                    "another manager's entry sets only pod labels and annotations (none under "
                    f"{PREFIX} nor {LABEL_RESTART_ATTEMPT}) and the pods' "
                    + ", ".join(FOREIGN_POD_SPEC)
                    + ", as Kueue's does: entries apply in order, and a later one would override A, the "
                    "trainer container or its volumes",
                )
            )
    return problems


def _same_entry(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Equal but for Trainer's ``time`` stamp."""
    return {k: v for k, v in a.items() if k != "time"} == {k: v for k, v in b.items() if k != "time"}


def merged_admission(trainjob: object) -> str | None:
    """A as the merged pod template of the trainer replicated job carries it: each entry in list order,
    the last that sets the annotation wins (null removes it). ``UNKNOWN`` when an entry's annotations
    carry a strategic-merge directive, whose effect this does not model."""
    jobs = dig(dispatch_patch(trainjob), *JOBS_IN_ENTRY)
    trainer = dig(jobs, 0, "name")
    value: str | None = None
    for entry in runtime_patches(trainjob):
        entry_jobs = dig(entry, *JOBS_IN_ENTRY)
        for job in entry_jobs if isinstance(entry_jobs, list) else []:
            if not isinstance(job, Mapping) or job.get("name") != trainer:
                continue
            notes = dig(job, "template", "spec", "template", "metadata", "annotations")
            if not isinstance(notes, Mapping):
                continue
            if any(isinstance(k, str) and k.startswith("$") for k in notes):
                return UNKNOWN
            if ANNOTATION_ADMISSION in notes:
                seen = notes[ANNOTATION_ADMISSION]
                value = seen if isinstance(seen, str) else None
    return value
