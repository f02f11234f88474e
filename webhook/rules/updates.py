"""Updates of a dispatch TrainJob, by anyone: the identity counters only rise.

A in dispatch's runtime patch and the admission floor never fall, the floor is never removed, the
recorded JobSet UID never changes, dispatch's runtime patch entry is never removed or replaced, and in
plain mode the update that unsuspends raises A (that is how Open and Release work). Kueue's and
Trainer's own writes touch none of these, so they pass.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from contract.admission import admission_count, admission_floor
from contract.errors import ContractError, Problem
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_JOBSET_UID,
    RUNTIME_PATCH_MANAGER,
)
from contract.objects import annotations, dig
from contract.ownership import dispatch_patch, is_kueue_mode

_FLOOR = f"metadata.annotations[{ANNOTATION_ADMISSION_FLOOR}]"
_A = f"spec.runtimePatches[{RUNTIME_PATCH_MANAGER}] annotation {ANNOTATION_ADMISSION}"


def _count(read: Any, obj: Mapping[str, Any]) -> int | ContractError | None:
    try:
        return read(obj)
    except ContractError as exc:
        return exc


def _without_a(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The entry as dispatch wrote it, less what may change: A, and the ``time`` Trainer stamps."""
    entry = copy.deepcopy(dict(entry))
    entry.pop("time", None)
    jobs = dig(entry, "trainingRuntimeSpec", "template", "spec", "replicatedJobs")
    for job in jobs if isinstance(jobs, list) else []:
        notes = dig(job, "template", "spec", "template", "metadata", "annotations")
        if isinstance(notes, dict):
            notes.pop(ANNOTATION_ADMISSION, None)
    return entry


def _suspended(obj: Mapping[str, Any]) -> bool:
    return dig(obj, "spec", "suspend") is True


def update_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    problems: list[Problem] = []
    old_entry, new_entry = dispatch_patch(old), dispatch_patch(new)
    if old_entry is None and new_entry is not None:
        problems.append(
            Problem(
                "update.runtime-patch",
                "spec.runtimePatches",
                RUNTIME_PATCH_MANAGER,
                "dispatch's entry is written at creation only",
            )
        )
    elif old_entry is not None and new_entry is None:
        problems.append(
            Problem(
                "update.runtime-patch",
                "spec.runtimePatches",
                "entry removed",
                "dispatch's entry is never removed",
            )
        )
    elif old_entry is not None and new_entry is not None and _without_a(old_entry) != _without_a(new_entry):
        problems.append(
            Problem(
                "update.runtime-patch",
                "spec.runtimePatches",
                "entry rewritten",
                "only A changes in dispatch's entry",
            )
        )

    a_before, a_after = _count(admission_count, old), _count(admission_count, new) if new_entry else None
    floor_before, floor_after = _count(admission_floor, old), _count(admission_floor, new)
    for field, before, after in ((_A, a_before, a_after), (_FLOOR, floor_before, floor_after)):
        if isinstance(after, ContractError):
            problems.append(Problem("update.counter", field, after.message, "a decimal count without leading zeros"))
        elif isinstance(before, int) and (after is None or after < before):
            seen = f"{before} -> {'removed' if after is None else after}"
            problems.append(Problem("update.counter", field, seen, f"never below {before}, never removed"))

    uid_before, uid_after = (
        annotations(old).get(ANNOTATION_JOBSET_UID),
        annotations(new).get(ANNOTATION_JOBSET_UID),
    )
    if uid_before is not None and uid_after != uid_before:
        problems.append(
            Problem(
                "update.jobset-uid",
                f"metadata.annotations[{ANNOTATION_JOBSET_UID}]",
                f"{uid_before} -> {uid_after}",
                "recorded once, never changed",
            )
        )

    plain = not (is_kueue_mode(old) and is_kueue_mode(new))
    if plain and _suspended(old) and not _suspended(new):
        highest = max((c for c in (a_before, floor_before) if isinstance(c, int)), default=0)
        raised = isinstance(a_after, int) and a_after > highest and floor_after == a_after
        if not raised:
            problems.append(
                Problem(
                    "update.unsuspend",
                    "spec.suspend",
                    f"unsuspended with A {a_before} -> {a_after}, floor {floor_before} -> {floor_after}",
                    f"in plain mode the unsuspending update raises A above {highest} (patch and floor)",
                )
            )
    return problems


def kueue_unsuspend_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """In Kueue mode only Kueue (once the readmission gate has raised A and the Workload is admitted) and
    dispatch unsuspend a dispatch TrainJob: anyone else's unsuspend would start an execution Kueue never
    admitted, with the A of the last one, repeating an R."""
    if is_kueue_mode(old) and is_kueue_mode(new) and _suspended(old) and not _suspended(new):
        return [
            Problem(
                "update.unsuspend",
                "spec.suspend",
                "unsuspended by someone other than Kueue",
                "in Kueue mode Kueue unsuspends, after the readmission gate has raised A",
            )
        ]
    return []
