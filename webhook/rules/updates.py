"""Updates of a dispatch TrainJob, by anyone: the identity counters only rise.

A in dispatch's runtime patch and the admission floor never fall, the floor is never removed, only
dispatch raises them and only to max(A, floor) + 1, the recorded JobSet UID never changes, dispatch's
runtime patch entry is never removed or replaced, the queue never changes, and in plain mode the update
that unsuspends raises A (that is how Open and Release work). Kueue's and Trainer's own writes touch none
of these, so they pass.

The unsuspend is the choke point (``unsuspend_problems``): every execution starts with one, Kueue's or
dispatch's, so it is checked for every client against what must hold before any execution.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Final

from contract.admission import admission_count, admission_floor, approved_admission, parse_count
from contract.errors import ContractError, Problem
from contract.gates import has_dispatch_gate, is_opened_by_dispatch
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_JOBSET_UID,
    ANNOTATION_OPENED,
    ANNOTATION_UNVERIFIED,
    HOLD_ANNOTATIONS,
    LABEL_QUEUE_NAME,
    OPENED_TRUE,
    RUNTIME_PATCH_MANAGER,
)
from contract.multicluster import MULTIKUEUE_MANAGED_BY, MULTIKUEUE_ORIGIN_LABEL, unverified
from contract.objects import annotations, dig, labels
from contract.ownership import dispatch_patch, is_kueue_mode
from contract.patches import merged_admission

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


def suspended(obj: Mapping[str, Any] | None) -> bool:
    return obj is not None and _suspended(obj)


def unsuspends(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """The write starts an execution: the TrainJob was suspended and is not any more."""
    return old is not None and new is not None and _suspended(old) and not _suspended(new)


def started_admission(obj: Mapping[str, Any]) -> int | ContractError | None:
    """A recorded at the last unsuspend, or None before the first."""
    value = annotations(obj).get(ANNOTATION_ADMISSION_STARTED)
    if value is None:
        return None
    try:
        return parse_count(f"annotation {ANNOTATION_ADMISSION_STARTED}", value)
    except ContractError as exc:
        return exc


def update_problems(old: Mapping[str, Any], new: Mapping[str, Any], *, dispatch: bool = True) -> list[Problem]:
    """``dispatch``: the writer is dispatch, the one principal that raises A outside an unsuspend (in one, the
    raise is admission's own: see contract/admission.py ``unsuspend_ops``)."""
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
    # In a MultiKueue queue dispatch's gate raises by K = maxRestarts + 1 (contract/multicluster.py).
    by_k = dispatch and dig(new, "spec", "managedBy") == MULTIKUEUE_MANAGED_BY
    problems += _raise_problems(
        a_before, a_after, floor_before, floor_after, dispatch=dispatch or unsuspends(old, new), by_k=by_k
    )
    problems += _started_problems(old, new, a_after)

    queue_before, queue_after = labels(old).get(LABEL_QUEUE_NAME), labels(new).get(LABEL_QUEUE_NAME)
    if queue_before != queue_after:
        problems.append(
            Problem(
                "update.queue",
                f"metadata.labels[{LABEL_QUEUE_NAME}]",
                f"{queue_before} -> {queue_after}",
                "the queue (and Kueue or plain mode) is chosen at Start and never changes: another queue may "
                "admit without dispatch's check",
            )
        )

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


def _raise_problems(
    a_before: object,
    a_after: object,
    floor_before: object,
    floor_after: object,
    *,
    dispatch: bool,
    by_k: bool = False,
) -> list[Problem]:
    """A and the floor rise only by dispatch or in an unsuspend (``dispatch`` true for both), together, and only
    to max(A, floor) + 1: a stranger pushing A to the bound would make every later raise fail. ``by_k``:
    dispatch's own write in a MultiKueue queue, where its gate raises by K, so any value above max(A, floor)."""
    counts = (a_before, a_after, floor_before, floor_after)
    if any(isinstance(c, ContractError) for c in counts) or (a_before, floor_before) == (a_after, floor_after):
        return []
    if isinstance(a_after, int) and isinstance(a_before, int) and a_after < a_before:
        return []  # reported as a fall
    if not dispatch:
        return [
            Problem(
                "update.counter",
                _A,
                f"A {a_before} -> {a_after}, floor {floor_before} -> {floor_after}",
                "only dispatch raises A and the admission floor, or admission in the write that unsuspends",
            )
        ]
    expected = max(c for c in (a_before, floor_before, 0) if isinstance(c, int)) + 1
    if by_k and isinstance(a_after, int) and a_after >= expected and floor_after == a_after:
        return []
    if a_after != expected or floor_after != expected:
        return [
            Problem(
                "update.counter",
                _A,
                f"A {a_before} -> {a_after}, floor {floor_before} -> {floor_after}",
                f"a raise writes max(A, floor) + 1 = {expected} into both",
            )
        ]
    return []


def _started_problems(old: Mapping[str, Any], new: Mapping[str, Any], a_after: object) -> list[Problem]:
    before, after = started_admission(old), started_admission(new)
    if before == after:
        return []
    if unsuspends(old, new) and isinstance(a_after, int) and after == a_after:
        return []
    return [
        Problem(
            "update.admission-started",
            f"metadata.annotations[{ANNOTATION_ADMISSION_STARTED}]",
            f"{before} -> {after}",
            "recorded by the webhook as A in the write that unsuspends, and nowhere else",
        )
    ]


def unsuspend_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """The choke point, for every client (Kueue's admission, dispatch's Open and Release, anyone else's):
    an unsuspend starts an execution, so dispatch must have opened the job, no hold of dispatch's may be in
    force, A in the merged pod template must be dispatch's A, and A must be above the A recorded at the
    previous unsuspend (the mutating webhook records it in this same write)."""
    if not unsuspends(old, new):
        return []
    problems = []

    def refuse(field: str, seen: object, accepted: str) -> None:
        problems.append(Problem("update.unsuspend", field, seen, accepted))

    # The readmission gate's own answer (contract/gates.py), so it never approves what is refused here.
    if not is_opened_by_dispatch(new):
        if annotations(new).get(ANNOTATION_OPENED) != OPENED_TRUE:
            refuse(
                f"metadata.annotations[{ANNOTATION_OPENED}]",
                annotations(new).get(ANNOTATION_OPENED),
                "dispatch opens the job before any execution (Open writes the opened mark, in both modes)",
            )
        if has_dispatch_gate(new):
            refuse(
                "metadata.annotations[kueue.x-k8s.io/admission-gated-by]", "dispatch's gate", "Open removes it first"
            )
    held = sorted(k for k in HOLD_ANNOTATIONS if k in annotations(new))
    if held:
        refuse("metadata.annotations", held, "a hold of dispatch's is in force: Release lifts it")
    a = _count(admission_count, new)
    if not isinstance(a, int) or a < 1:
        refuse(_A, a.message if isinstance(a, ContractError) else a, "at least 1: an execution starts after a raise")
        return problems
    merged = merged_admission(new)
    if merged != str(a):
        refuse(
            "spec.runtimePatches",
            f"A {merged} in the merged pod template",
            f"A {a} of dispatch's entry: no later entry may set {ANNOTATION_ADMISSION}",
        )
    previous = started_admission(old)
    if isinstance(previous, ContractError) or (isinstance(previous, int) and a <= previous):
        refuse(
            _A,
            f"A {a}, the previous execution started with A {previous}",
            "A is raised before every execution: in the write that unsuspends (dispatch's admission policy or "
            "mutating webhook), or by Open and Release",
        )
    if started_admission(new) != a:
        refuse(
            f"metadata.annotations[{ANNOTATION_ADMISSION_STARTED}]",
            annotations(new).get(ANNOTATION_ADMISSION_STARTED),
            f"{a}, recorded by dispatch's admission policy or mutating webhook in the write that unsuspends",
        )
    return problems


APPROVAL_ACCEPTED: Final = (
    "the readmission gate's approval of exactly this A (<A>/<Workload uid>), which dispatch writes before it sets its "
    "AdmissionCheck Ready: in Kueue mode an execution starts only through an admission dispatch's check approved. "
    "Does the job's LocalQueue point at a ClusterQueue that lists dispatch's AdmissionCheck?"
)


def approval_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """In Kueue mode every start carries the readmission gate's approval of the A it starts with (``approved-
    admission``, dispatch's key): a queue that admits without dispatch's check (a LocalQueue re-pointed, a
    ClusterQueue's checks edited, a drain) cannot start the job without the gate's wait. The approval names one
    A, and A is above the last start's at every start, so one approval starts at most one execution. MultiKueue's
    copy on a worker is not judged here: the manager's gate approved its dispatch, and the worker's agent lets it
    start (its mark ``unverified``)."""
    if not (unsuspends(old, new) and is_kueue_mode(old) and is_kueue_mode(new)):
        return []
    a = _count(admission_count, new)
    if not isinstance(a, int):
        return []  # unsuspend_problems refuses it, naming why
    approved = _count(approved_admission, new)
    if approved == a:
        return []
    seen = annotations(new).get(ANNOTATION_APPROVED_ADMISSION)
    return [
        Problem("update.approval", f"metadata.annotations[{ANNOTATION_APPROVED_ADMISSION}]", seen, APPROVAL_ACCEPTED)
    ]


def kueue_unsuspend_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """In Kueue mode only Kueue (once the readmission gate has approved and the Workload is admitted) and
    dispatch unsuspend a dispatch TrainJob: anyone else's unsuspend would start an execution Kueue never
    admitted, with the A of the last one, repeating an R."""
    if is_kueue_mode(old) and is_kueue_mode(new) and _suspended(old) and not _suspended(new):
        return [
            Problem(
                "update.unsuspend",
                "spec.suspend",
                "unsuspended by someone other than Kueue",
                "in Kueue mode Kueue unsuspends, after the readmission gate has approved",
            )
        ]
    return []


def copy_unsuspend_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """On a MultiKueue worker, the start of MultiKueue's copy (contract/multicluster.py ``records_only``): the
    manager numbered this dispatch, so the write that starts the copy records A and raises neither A nor the
    floor. A second start of the same copy (A already recorded as started) is refused by ``unsuspend_problems``,
    as A is not above the record: the copy was evicted here and goes back through the manager, which sends it
    again with a new A (docs/multicluster.md, guarantee 3). And it does not start while dispatch's mark
    ``unverified`` is on it (docs/multicluster.md, "The stale copy")."""
    if not unsuspends(old, new):
        return []
    problems = []
    if unverified(new):
        problems.append(
            Problem(
                "update.unverified",
                f"metadata.annotations[{ANNOTATION_UNVERIFIED}]",
                annotations(new).get(ANNOTATION_UNVERIFIED),
                "MultiKueue's copy starts once dispatch's agent on this worker has matched its A to the stamp of its "
                "dispatch on the remote Workload and removed the mark (a copy made from a stale view of the "
                "manager's TrainJob would repeat an earlier dispatch's A)",
            )
        )
    before = (_count(admission_count, old), _count(admission_floor, old))
    after = (_count(admission_count, new), _count(admission_floor, new))
    if before == after:
        return problems
    return [
        *problems,
        Problem(
            "update.unsuspend",
            _A,
            f"A {before[0]} -> {after[0]}, floor {before[1]} -> {after[1]}",
            "on a MultiKueue worker the start of MultiKueue's copy records A and never raises it: the manager "
            "numbers each dispatch, and a copy started here before goes back through the manager",
        ),
    ]


def origin_problems(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[Problem]:
    """On a MultiKueue worker, MultiKueue's origin label on a dispatch TrainJob or Workload never changes: it is
    what makes the start of a copy record A without raising it, and the worker's gate approve a copy's first
    admission only (docs/multicluster.md, guarantee 3). Removed, a restart would be numbered here."""
    before = dig(old, "metadata", "labels", MULTIKUEUE_ORIGIN_LABEL)
    after = dig(new, "metadata", "labels", MULTIKUEUE_ORIGIN_LABEL)
    if old is None or new is None or before == after:
        return []
    return [
        Problem(
            "update.origin",
            f"metadata.labels[{MULTIKUEUE_ORIGIN_LABEL}]",
            f"{before} -> {after}",
            "on a MultiKueue worker MultiKueue's origin label is set at create and never changes: it says the "
            "manager numbered this copy",
        )
    ]
