"""The supervisor's operations on one object, planned as pure functions of what was read.

Each returns the exact write (a JSON Patch preconditioned on the uid and resourceVersion that were read),
or says why there is nothing to write, or refuses. The API handlers only read, call these, and send.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from agent.gate import Blocker, hold_message
from contract.admission import preconditions, raise_admission
from contract.errors import ContractError
from contract.gates import gates_of, without_dispatch_gate
from contract.keys import (
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_HOLD_INSTANCE,
    ANNOTATION_HOLD_REASON,
    ANNOTATION_HOLD_SINCE,
    ANNOTATION_HOLD_UNTIL,
    ANNOTATION_HOLD_WHO,
    ANNOTATION_JOBSET_UID,
    ANNOTATION_OPENED,
    GATE,
    HOLD_ANNOTATIONS,
    OPENED_TRUE,
)
from contract.objects import add_op, annotations, dig, pointer
from contract.ownership import is_kueue_mode


class Refused(Exception):
    """The operation must not happen; ``kind`` maps to a stable API error (``rejected``, ``conflict``)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


class Target(Enum):
    TRAINJOB = "TrainJob"
    WORKLOAD = "Workload"


@dataclass(frozen=True)
class Plan:
    """One write, or none (``patch`` empty) when the object is already where the operation leads."""

    target: Target
    patch: list[dict[str, Any]]
    outcome: str
    held_by: tuple[str, ...] = field(default_factory=tuple)
    """Other parties' gates still on the TrainJob: it stays gated by them ("held by an administrator")."""
    new_a: int | None = None


def finished(trainjob: object) -> str | None:
    """The TrainJob's end (Complete or Failed), or None while it has not ended."""
    conditions = dig(trainjob, "status", "conditions")
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None


def is_opened(trainjob: object) -> bool:
    """Past its start gate: Kueue mode has no dispatch gate on the TrainJob (read from the TrainJob alone,
    since the Workload keeps the gate while a hold deactivates it); plain mode carries the opened mark."""
    if is_kueue_mode(trainjob):
        return GATE not in gates_of(trainjob)
    return annotations(trainjob).get(ANNOTATION_OPENED) == OPENED_TRUE


def _raise_ops(trainjob: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int]:
    try:
        raised = raise_admission(trainjob)
    except ContractError as exc:
        raise Refused("rejected", f"cannot raise A: {exc}") from None
    return raised.patch, raised.a


def is_held(obj: object) -> bool:
    """dispatch's hold annotations are on the object (the TrainJob in plain mode, the Workload in Kueue mode)."""
    return any(key in annotations(obj) for key in HOLD_ANNOTATIONS)


def _owned_by(obj: object, uid: object) -> bool:
    refs = dig(obj, "metadata", "ownerReferences")
    return isinstance(uid, str) and any(isinstance(r, Mapping) and r.get("uid") == uid for r in refs or [])


def jobset_uid_ops(trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Record the JobSet's UID the first time the adapter sees it (the spec: "the first time the adapter, or
    the controller, sees it"); nothing when it is recorded already, or the JobSet is not this TrainJob's own
    (an orphan of a deleted TrainJob of the same name is not the one J counts for)."""
    uid = dig(jobset, "metadata", "uid")
    if not uid or annotations(trainjob).get(ANNOTATION_JOBSET_UID):
        return []
    if not _owned_by(jobset, dig(trainjob, "metadata", "uid")):
        return []
    return [add_op(trainjob, ("metadata", "annotations", ANNOTATION_JOBSET_UID), uid)]


def _waiting(blockers: Sequence[Blocker]) -> Refused:
    """Plain mode has no AdmissionCheck, so the agent keeps its rule itself: never unsuspend while a pod of
    the previous execution may still run (answered with the pods, as the gate's message names them)."""
    return Refused("conflict", hold_message(blockers) + "; nothing was written: retry once they are gone")


def plan_open(
    trainjob: Mapping[str, Any],
    *,
    jobset: Mapping[str, Any] | None = None,
    blockers: Sequence[Blocker] = (),
    workload: Mapping[str, Any] | None = None,
) -> Plan:
    """Open: Kueue mode removes dispatch's gate (deleting the annotation when it was the last); plain mode
    unsuspends, marks it opened and raises A in one update. Already open succeeds; ended unopened is a fence.

    A hold placed before Open survives it in both modes: Kueue mode's hold is on the Workload, which stays
    inactive; plain mode marks the TrainJob opened and leaves it suspended, so Release raises A and
    unsuspends it. Plain mode does not unsuspend while a pod of a previous execution may still run
    (``blockers``). ``jobset``: recorded the first time it is seen. ``workload``: its other parties' gates
    are reported in ``held_by`` too."""
    others = held_by(trainjob, workload)
    marked = annotations(trainjob).get(ANNOTATION_OPENED) == OPENED_TRUE
    mark = add_op(trainjob, ("metadata", "annotations", ANNOTATION_OPENED), OPENED_TRUE)
    if is_opened(trainjob):
        if is_kueue_mode(trainjob) and not marked and finished(trainjob) is None:
            # Past Kueue's gate without dispatch's mark (opened before the mark existed, or switched from plain
            # mode): the readmission gate approves only a marked job, so Open writes the mark now.
            return Plan(Target.TRAINJOB, [*preconditions(trainjob), mark], "opened mark written", held_by=others)
        return Plan(Target.TRAINJOB, [], "already past its gate", held_by=others)
    end = finished(trainjob)
    if end is not None:
        raise Refused("rejected", f"the TrainJob ended ({end}) without ever being opened")
    record = jobset_uid_ops(trainjob, jobset)
    if is_kueue_mode(trainjob):
        rest = without_dispatch_gate(annotations(trainjob).get(ANNOTATION_ADMISSION_GATED_BY))
        path = pointer("metadata", "annotations", ANNOTATION_ADMISSION_GATED_BY)
        change = {"op": "remove", "path": path} if rest is None else {"op": "replace", "path": path, "value": rest}
        # The opened mark in the same update: the readmission gate approves only a job dispatch opened.
        ops = [*preconditions(trainjob), change, *([] if marked else [mark]), *record]
        outcome = "gate removed; held until Release" if is_held(workload) else "gate removed"
        return Plan(Target.TRAINJOB, ops, outcome, held_by=others)
    if dig(trainjob, "spec", "suspend") is not True:
        raise Refused("conflict", "the TrainJob is not suspended but was never opened: someone else started it")
    if is_held(trainjob):
        # Opened, still held: Release raises A and unsuspends it.
        return Plan(Target.TRAINJOB, [*preconditions(trainjob), mark, *record], "opened; held until Release")
    if blockers:
        raise _waiting(blockers)
    ops, a = _raise_ops(trainjob)
    ops += [{"op": "replace", "path": pointer("spec", "suspend"), "value": False}, mark, *record]
    return Plan(Target.TRAINJOB, ops, "opened", new_a=a)


def held_by(trainjob: object, workload: object = None) -> tuple[str, ...]:
    """Other parties' gates: on the TrainJob, and (the spec's reads from others) on its Workload, where
    Kueue's copy of the annotation stays while the Workload is inactive. dispatch's own gate is read from the
    TrainJob alone, so it is never among them."""
    found: list[str] = []
    for gate in [*gates_of(trainjob), *gates_of(workload)]:
        if gate != GATE and gate not in found:
            found.append(gate)
    return tuple(found)


@dataclass(frozen=True)
class Hold:
    """The hold annotations' values; ``until`` is optional (a hold until released)."""

    instance: str
    since: str
    who: str
    reason: str
    until: str | None = None

    def annotations(self) -> dict[str, str]:
        values = {
            ANNOTATION_HOLD_INSTANCE: self.instance,
            ANNOTATION_HOLD_SINCE: self.since,
            ANNOTATION_HOLD_WHO: self.who,
            ANNOTATION_HOLD_REASON: self.reason,
        }
        if self.until:
            values[ANNOTATION_HOLD_UNTIL] = self.until
        return values


def _hold_ops(obj: Mapping[str, Any], hold: Hold) -> list[dict[str, Any]]:
    ops = [add_op(obj, ("metadata", "annotations", key), value) for key, value in hold.annotations().items()]
    if ANNOTATION_HOLD_UNTIL in annotations(obj) and not hold.until:
        ops.append({"op": "remove", "path": pointer("metadata", "annotations", ANNOTATION_HOLD_UNTIL)})
    if not annotations(obj):  # one add creates the map; the rest add into it
        return [add_op(obj, ("metadata", "annotations"), hold.annotations())]
    return ops


def _unhold_ops(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"op": "remove", "path": pointer("metadata", "annotations", key)}
        for key in HOLD_ANNOTATIONS
        if key in annotations(obj)
    ]


def plan_hold(trainjob: Mapping[str, Any], workload: Mapping[str, Any] | None, hold: Hold) -> Plan:
    """Hold: plain mode suspends the TrainJob with the hold annotations on it; Kueue mode deactivates the
    Workload (``spec.active: false``) with the hold annotations on the Workload."""
    if finished(trainjob):
        raise Refused("rejected", f"the TrainJob has ended ({finished(trainjob)}): there is nothing to hold")
    if is_kueue_mode(trainjob):
        if workload is None:
            raise Refused("conflict", "Kueue mode, but the TrainJob's Workload is not there to hold")
        ops = [*preconditions(workload), *_hold_ops(workload, hold)]
        ops.append({"op": "add", "path": pointer("spec", "active"), "value": False})
        return Plan(Target.WORKLOAD, ops, "held: Workload deactivated")
    ops = [*preconditions(trainjob), *_hold_ops(trainjob, hold)]
    ops.append({"op": "replace", "path": pointer("spec", "suspend"), "value": True})
    return Plan(Target.TRAINJOB, ops, "held: TrainJob suspended")


def plan_release(
    trainjob: Mapping[str, Any],
    workload: Mapping[str, Any] | None,
    *,
    jobset: Mapping[str, Any] | None = None,
    blockers: Sequence[Blocker] = (),
) -> Plan:
    """Release: Kueue mode reactivates the Workload (the readmission gate raises A before it is admitted);
    plain mode raises A in the update that unsuspends — or, for a hold placed before Open, only lifts the
    hold and leaves the TrainJob closed. Plain mode does not unsuspend while a pod of the previous execution
    may still run (``blockers``): it refuses, naming them, and writes nothing."""
    if is_kueue_mode(trainjob):
        if workload is None:
            raise Refused("conflict", "Kueue mode, but the TrainJob's Workload is not there to release")
        if dig(workload, "spec", "active") is not False and not _unhold_ops(workload):
            return Plan(Target.WORKLOAD, [], "not held")
        ops = [*preconditions(workload), *_unhold_ops(workload)]
        ops.append({"op": "add", "path": pointer("spec", "active"), "value": True})
        return Plan(Target.WORKLOAD, ops, "released: Workload reactivated")
    unhold = _unhold_ops(trainjob)
    if not unhold:
        return Plan(Target.TRAINJOB, [], "not held")
    record = jobset_uid_ops(trainjob, jobset)
    if finished(trainjob) or not is_opened(trainjob):
        ops = [*preconditions(trainjob), *unhold, *record]
        return Plan(Target.TRAINJOB, ops, "hold lifted; the TrainJob stays closed")
    if blockers:
        raise _waiting(blockers)
    ops, a = _raise_ops(trainjob)
    ops += [*unhold, {"op": "replace", "path": pointer("spec", "suspend"), "value": False}, *record]
    return Plan(Target.TRAINJOB, ops, "released: TrainJob unsuspended", new_a=a)
