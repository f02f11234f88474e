"""The merged pod template: what Trainer renders from the runtime and every runtime-patch entry.

Trainer applies ``spec.runtimePatches`` in list order with a strategic merge patch, so a later entry wins:
another manager's entry (Kueue's, which Kueue fills from every admission check's ``podSetUpdates``, or a
stranger's) that sets the pod annotation ``dispatch.phpboyscout.uk/admission`` overrides A in dispatch's
entry, and one that sets a ``DISPATCH_*`` variable or a strategic-merge directive (``$patch: replace`` in
the annotations map) changes what the prologue reads. Only dispatch's entry may touch those.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from contract.errors import Problem
from contract.keys import (
    ANNOTATION_ADMISSION,
    ENV_RESERVED_PREFIX,
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


def entry_intrusions(entry: Mapping[str, Any], where: str) -> list[str]:
    """What an entry that is not dispatch's sets of what only dispatch's may: pod keys under
    ``dispatch.phpboyscout.uk/`` or J's label, ``DISPATCH_*`` variables, the command, or a directive."""
    found = list(_directives(entry, where))
    jobs = dig(entry, *JOBS_IN_ENTRY)
    for j, job in enumerate(jobs if isinstance(jobs, list) else []):
        pod = dig(job, "template", "spec", "template")
        base = f"{where}.replicatedJobs[{j}].template.spec.template"
        for part in ("labels", "annotations"):
            keys = dig(pod, "metadata", part)
            for key in keys if isinstance(keys, Mapping) else {}:
                if reserved_pod_key(key) and not str(key).startswith("$"):
                    found.append(f"{base}.metadata.{part}[{key}]")
        for kind in ("containers", "initContainers"):
            containers = dig(pod, "spec", kind)
            for c, container in enumerate(containers if isinstance(containers, list) else []):
                if not isinstance(container, Mapping):
                    continue
                cbase = f"{base}.spec.{kind}[{container.get('name', c)}]"
                found += [f"{cbase}.{field}" for field in ("command", "args") if field in container]
                env = container.get("env")
                for e in env if isinstance(env, list) else []:
                    name = e.get("name") if isinstance(e, Mapping) else None
                    if isinstance(name, str) and name.startswith(ENV_RESERVED_PREFIX):
                        found.append(f"{cbase}.env[{name}]")
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
                    "only dispatch's entry sets pod keys under "
                    f"{PREFIX}, {LABEL_RESTART_ATTEMPT}, {ENV_RESERVED_PREFIX}* variables or the trainer's "
                    "command; entries apply in order and a later one would override A",
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
