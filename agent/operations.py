"""The supervisor's operations on one object, planned as pure functions of what was read.

Each returns the exact write (a JSON Patch preconditioned on the uid and resourceVersion that were read),
or says why there is nothing to write, or refuses. The API handlers only read, call these, and send.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

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


def plan_open(trainjob: Mapping[str, Any]) -> Plan:
    """Open: Kueue mode removes dispatch's gate (deleting the annotation when it was the last); plain mode
    unsuspends, marks it opened and raises A in one update. Already open succeeds; ended unopened is a fence."""
    others = tuple(g for g in gates_of(trainjob) if g != GATE)
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
    if is_kueue_mode(trainjob):
        rest = without_dispatch_gate(annotations(trainjob).get(ANNOTATION_ADMISSION_GATED_BY))
        path = pointer("metadata", "annotations", ANNOTATION_ADMISSION_GATED_BY)
        change = {"op": "remove", "path": path} if rest is None else {"op": "replace", "path": path, "value": rest}
        # The opened mark in the same update: the readmission gate approves only a job dispatch opened.
        ops = [*preconditions(trainjob), change, *([] if marked else [mark])]
        return Plan(Target.TRAINJOB, ops, "gate removed", held_by=others)
    if dig(trainjob, "spec", "suspend") is not True:
        raise Refused("conflict", "the TrainJob is not suspended but was never opened: someone else started it")
    ops, a = _raise_ops(trainjob)
    ops += [
        {"op": "replace", "path": pointer("spec", "suspend"), "value": False},
        add_op(trainjob, ("metadata", "annotations", ANNOTATION_OPENED), OPENED_TRUE),
    ]
    return Plan(Target.TRAINJOB, ops, "opened", new_a=a)


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


def plan_release(trainjob: Mapping[str, Any], workload: Mapping[str, Any] | None) -> Plan:
    """Release: Kueue mode reactivates the Workload (the readmission gate raises A before it is admitted);
    plain mode raises A in the update that unsuspends — or, for a hold placed before Open, only lifts the
    hold and leaves the TrainJob closed."""
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
    if finished(trainjob) or not is_opened(trainjob):
        return Plan(Target.TRAINJOB, [*preconditions(trainjob), *unhold], "hold lifted; the TrainJob stays closed")
    ops, a = _raise_ops(trainjob)
    ops += [*unhold, {"op": "replace", "path": pointer("spec", "suspend"), "value": False}]
    return Plan(Target.TRAINJOB, ops, "released: TrainJob unsuspended", new_a=a)
