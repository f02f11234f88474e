"""The admission count A, its floor, and the raise of A before every admission.

Each raise writes ``max(A in the patch, the floor) + 1`` into both dispatch's runtime patch and the
admission-floor annotation. Two writers make it:

* dispatch's Open and Release (plain mode), in their own unsuspending update: one JSON Patch
  preconditioned on the uid and resourceVersion that were read (``raise_admission``);
* the admission of every other unsuspend (Kueue's), in the write itself: dispatch's
  MutatingAdmissionPolicy in the API server, or its mutating webhook where the API server has no such
  policy (``raise_in_unsuspend``). The raise and the start it numbers are then one write, so no
  execution can start between them, and Kueue's re-admission costs dispatch no write of its own.

The patch touches nothing else: other managers' runtime patch entries (Kueue's among them) are never
rewritten, which a merge patch or a PUT of the list would do (see docs/contract.md).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from contract.errors import ContractError
from contract.identity import R_BOUND
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_APPROVED_ADMISSION,
)
from contract.objects import add_op, dig, pointer
from contract.objects import annotations as annotations_of
from contract.ownership import dispatch_patch_index, runtime_patches

_CANONICAL = re.compile(r"0|[1-9][0-9]{0,17}")
POD_TEMPLATE_IN_ENTRY: Final = ("trainingRuntimeSpec", "template", "spec", "replicatedJobs")


def parse_count(field: str, value: object) -> int:
    """A count as the contract writes it: a decimal string without leading zeros."""
    if not isinstance(value, str) or not _CANONICAL.fullmatch(value):
        raise ContractError(field, f"{value!r} is not a decimal count without leading zeros")
    return int(value)


def admission_path(trainjob: object) -> tuple[str | int, ...]:
    """Where A lives: the pod template annotation in dispatch's entry, on its one replicated job."""
    i = dispatch_patch_index(trainjob)
    if i is None:
        raise ContractError("spec.runtimePatches", "has no entry of dispatch's manager; it was removed")
    jobs = dig(runtime_patches(trainjob)[i], *POD_TEMPLATE_IN_ENTRY)
    if not isinstance(jobs, list) or len(jobs) != 1 or not isinstance(jobs[0], Mapping):
        raise ContractError(
            f"spec.runtimePatches[{i}]",
            "dispatch's entry must patch exactly one replicated job, the trainer's",
        )
    return (
        "spec", "runtimePatches", i, *POD_TEMPLATE_IN_ENTRY, 0,
        "template", "spec", "template", "metadata", "annotations", ANNOTATION_ADMISSION,
    )  # fmt: skip


def admission_count(trainjob: object) -> int | None:
    """A in dispatch's runtime patch, or None when the annotation is gone."""
    path = admission_path(trainjob)
    value = dig(trainjob, *path)
    return None if value is None else parse_count(f"runtime patch annotation {ANNOTATION_ADMISSION}", value)


def admission_floor(trainjob: object) -> int | None:
    """The highest A raised so far, or None before the first raise."""
    value = annotations_of(trainjob).get(ANNOTATION_ADMISSION_FLOOR)
    return None if value is None else parse_count(f"annotation {ANNOTATION_ADMISSION_FLOOR}", value)


def admission_started(trainjob: object) -> int | None:
    """The A the last execution started with (recorded in the write that unsuspended it), or None before the
    first."""
    value = annotations_of(trainjob).get(ANNOTATION_ADMISSION_STARTED)
    return None if value is None else parse_count(f"annotation {ANNOTATION_ADMISSION_STARTED}", value)


@dataclass(frozen=True)
class Raise:
    """A raise of A: the new value and the JSON Patch (``application/json-patch+json``) that writes it."""

    a: int
    patch: list[dict[str, Any]]


def preconditions(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON Patch ops that make the write fail unless the object is the one read, as it was read.

    ``test`` of the uid refuses a different object of the same name (422). Writing back the
    resourceVersion that was read turns the API server's optimistic concurrency check on, so a write
    after any other write fails with 409 Conflict.
    """
    uid = dig(obj, "metadata", "uid")
    rv = dig(obj, "metadata", "resourceVersion")
    if not isinstance(uid, str) or not uid or not isinstance(rv, str) or not rv:
        raise ContractError("metadata", "an object as read from the API has a uid and a resourceVersion")
    return [
        {"op": "test", "path": pointer("metadata", "uid"), "value": uid},
        {"op": "replace", "path": pointer("metadata", "resourceVersion"), "value": rv},
    ]


def raise_admission(trainjob: Mapping[str, Any]) -> Raise:
    """new A = max(A in dispatch's runtime patch, the admission floor) + 1, as one preconditioned patch.

    Refuses (ContractError) when the TrainJob is not suspended (Trainer lets A change only then), when
    dispatch's entry is gone, when A or the floor is not a count, and when neither is there: raising
    from nothing could repeat an R, so a person has to look.
    """
    if dig(trainjob, "spec", "suspend") is not True:
        raise ContractError("spec.suspend", "A can change only while the TrainJob is suspended")
    return raise_to(trainjob, _raised(admission_count(trainjob), admission_floor(trainjob)))


def raise_to(trainjob: Mapping[str, Any], new_a: int) -> Raise:
    """A and the floor := ``new_a``, as one JSON Patch preconditioned on the TrainJob as read. The callers
    decide ``new_a`` (by 1 here, by K in contract/multicluster.py) and check that the TrainJob is suspended."""
    value = str(new_a)
    return Raise(
        a=new_a,
        patch=[
            *preconditions(trainjob),
            add_op(trainjob, admission_path(trainjob), value),
            add_op(trainjob, ("metadata", "annotations", ANNOTATION_ADMISSION_FLOOR), value),
        ],
    )


def start_count(trainjob: Mapping[str, Any], started_before: int | None) -> tuple[int, bool]:
    """The A the next execution of ``trainjob`` starts with, and whether the write that starts it raises A:
    A as it is when it is above ``started_before`` (the A the previous execution started with; None before
    the first) and not below the floor (dispatch's Open and Release raise in their own write), else
    max(A, floor) + 1.

    Raises ContractError when no execution can be numbered: dispatch's entry gone, A or the floor not a count,
    both gone (raising from nothing could repeat an R), or the raise reaching the epoch bound."""
    a, floor = admission_count(trainjob), admission_floor(trainjob)
    if a is not None and a > (started_before or 0) and a >= (floor or 0):
        return a, False
    return _raised(a, floor), True


def _raised(a: int | None, floor: int | None) -> int:
    """max(A, floor) + 1, refusing to raise from nothing (it could repeat an R) or to the epoch bound."""
    if a is None and floor is None:
        raise ContractError(
            "spec.runtimePatches",
            f"neither the runtime patch annotation {ANNOTATION_ADMISSION} nor the annotation "
            f"{ANNOTATION_ADMISSION_FLOOR} is there; raising A from nothing could repeat an R",
        )
    new_a = max(a or 0, floor or 0) + 1
    if new_a >= R_BOUND:
        raise ContractError("A", f"raising A to {new_a} reaches the epoch bound {R_BOUND}")
    return new_a


def unsuspend_ops(
    new: Mapping[str, Any], started_before: int | None, *, kueue: bool, records_only: bool = False
) -> list[dict[str, Any]]:
    """What admission writes into every write that unsuspends ``new``, as JSON Patch ops on it (no
    preconditions: they edit the request's own object).

    * **The raise**, in Kueue mode (``kueue``: the queue label on the old object and the new), when A is not
      above ``started_before`` (the A the previous execution started with, from the old object; None before
      the first) or is below the floor: A and the floor become max(A, floor) + 1 (``start_count``). In plain
      mode only dispatch's Open and Release start an execution, and they raise in their own write: an
      unsuspend without that raise stays refused, so no one else can restart a plain-mode job.
    * **The record** of A, raised or not, as ``admission-started``: the next unsuspend is measured against it.

    * ``records_only``: MultiKueue's copy on a worker (contract/multicluster.py ``records_only``). The manager
      numbered the dispatch before it sent the copy, so A is recorded as it is, never raised, as in plain mode:
      when a raise would be due (the copy started before under this A), validation refuses the start.

    Nothing when no execution can be numbered (``start_count`` refuses): validation then refuses the unsuspend
    and names why, so nothing starts unnumbered. The MutatingAdmissionPolicy ``record-start`` states the same
    in CEL (tests/webhook/test_record_start.py holds the two to each other).
    """
    try:
        path = admission_path(new)
        a, raises = start_count(new, started_before)
    except ContractError:
        return []
    if raises and (records_only or not kueue):  # recorded as it is, if it is there: validation refuses the unsuspend
        current = admission_count(new)
        if current is None:
            return []
        a, raises = current, False
    ops = [add_op(new, path, str(a))] if raises else []
    record = {ANNOTATION_ADMISSION_STARTED: str(a)}
    if raises:
        record[ANNOTATION_ADMISSION_FLOOR] = str(a)
    found = dig(new, "metadata", "annotations")
    if not isinstance(found, Mapping):
        return [*ops, add_op(new, ("metadata", "annotations"), record)]
    return [
        *ops,
        *(add_op(new, ("metadata", "annotations", k), v) for k, v in sorted(record.items()) if found.get(k) != v),
    ]


def approval(a: int, workload_uid: str) -> str:
    """The readmission gate's approval of the execution that starts with ``a``, admitted on that Workload."""
    return f"{a}/{workload_uid}"


def approved_admission(trainjob: object) -> int | None:
    """The A the readmission gate last approved (``approved-admission``), or None when it approved none."""
    value = annotations_of(trainjob).get(ANNOTATION_APPROVED_ADMISSION)
    if value is None:
        return None
    a, _, uid = value.partition("/")
    if not uid:
        raise ContractError(f"annotation {ANNOTATION_APPROVED_ADMISSION}", f"{value!r} is not <A>/<Workload uid>")
    return parse_count(f"annotation {ANNOTATION_APPROVED_ADMISSION}", a)


def approval_ops(trainjob: Mapping[str, Any], a: int, workload_uid: str) -> list[dict[str, Any]]:
    """The JSON Patch op that records the gate's approval of ``a`` on ``workload_uid`` (none when recorded)."""
    value = approval(a, workload_uid)
    if annotations_of(trainjob).get(ANNOTATION_APPROVED_ADMISSION) == value:
        return []
    return [add_op(trainjob, ("metadata", "annotations", ANNOTATION_APPROVED_ADMISSION), value)]
