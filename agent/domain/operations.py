"""The supervisor's operations on one dispatch job, planned as pure functions of what was read.

Each returns the exact writes, in the order to send them (JSON Patches, each preconditioned on the uid and
resourceVersion of its object as read), or says why there is nothing to write, or refuses. The API
handlers only read, call these, and send.

Kueue mode's Hold and Release write two objects, ordered so that the job is held at every instant until both
of Release's are done: the TrainJob's hold annotations are the record (no unsuspend while they are on it, and
the readmission gate keeps the check Pending), the Workload's ``spec.active: false`` is the means. Hold writes
the TrainJob first, then the Workload; Release the TrainJob first too (the inactive Workload still holds the
job: Kueue admits nothing of it), then the Workload, whose reactivation Kueue answers with an admission the
gate approves at once (it watches Workloads, not TrainJobs: a record lifted last would leave the check Pending
until its next requeue). Each plans only what is not done yet, so the same call again finishes a half-done Hold
or Release.

On a MultiKueue manager (the TrainJob's ``spec.managedBy`` is MultiKueue's) Hold never deactivates a Workload
that a worker may be running: MultiKueue would delete the worker's copy before copying back its final status,
and Kueue's eviction of the manager's TrainJob would wait for ever on the last status it copied, with an active
Job (docs/multicluster.md, "Hold and Release on a manager"). Hold writes the hold annotations on both objects,
then sets dispatch's own check ``Retry`` when it is Ready: Kueue evicts without any change to the Workload's
spec, so MultiKueue stops the worker's copy and copies its status back before it deletes it; the readmission
gate keeps the check Pending while the hold is in force and deactivates the Workload itself once the manager's
TrainJob shows no active Job (agent/domain/decide.py). Release is the same in both cases.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from agent.domain.decide import Blocker, describe_hold, hold_message
from agent.domain.workload import READY, RETRY
from contract.admission import admission_started, approval_ops, preconditions, raise_admission, start_count
from contract.errors import ContractError
from contract.foreign import jobset_uid_ops, jobset_uid_reason
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
from contract.multicluster import managed_by_multikueue
from contract.objects import add_op, dig, pointer
from contract.objects import annotations as annotations_of
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
    WORKLOAD_STATUS = "Workload status"
    """``workloads/status``: dispatch's own check entry (Hold on a MultiKueue manager)."""


@dataclass(frozen=True)
class Write:
    """One JSON Patch of one object, preconditioned on that object as read."""

    target: Target
    patch: list[dict[str, Any]]


@dataclass(frozen=True)
class Plan:
    """The writes to send, in order; none when the job is already where the operation leads.

    The shell sends them one after the other; when one fails on its precondition (the object changed), it
    reads again and plans again: what was written is then seen done and not planned again."""

    writes: tuple[Write, ...]
    outcome: str
    held_by: tuple[str, ...] = field(default_factory=tuple)
    """Other parties' gates still on the TrainJob: it stays gated by them ("held by an administrator")."""
    new_a: int | None = None

    @property
    def patch(self) -> list[dict[str, Any]]:
        """The one write's patch ([] for none): for the plans that write one object (Open, plain mode)."""
        if len(self.writes) > 1:
            raise ValueError(f"the plan writes {len(self.writes)} objects: send each of its writes, in order")
        return self.writes[0].patch if self.writes else []

    def patch_of(self, target: Target) -> list[dict[str, Any]]:
        """The patch of ``target`` ([] when the plan does not write it)."""
        return next((w.patch for w in self.writes if w.target is target), [])


def _plan(target: Target, patch: list[dict[str, Any]], outcome: str, **kw: Any) -> Plan:
    """A plan of one write, or of none when ``patch`` is empty."""
    return Plan((Write(target, patch),) if patch else (), outcome, **kw)


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
    return annotations_of(trainjob).get(ANNOTATION_OPENED) == OPENED_TRUE


def _raise_ops(trainjob: Mapping[str, Any]) -> tuple[list[dict[str, Any]], int]:
    try:
        raised = raise_admission(trainjob)
    except ContractError as exc:
        raise Refused("rejected", f"cannot raise A: {exc}") from None
    return raised.patch, raised.a


def is_held(obj: object) -> bool:
    """dispatch's hold annotations are on the object: the TrainJob (in both modes: the record), or a Kueue-mode
    Workload (written there too; a Workload-only hold was left by an older agent)."""
    return any(key in annotations_of(obj) for key in HOLD_ANNOTATIONS)


def _waiting(blockers: Sequence[Blocker]) -> Refused:
    """Plain mode has no AdmissionCheck, so the agent keeps its rule itself: never unsuspend while a pod of
    the previous execution may still run (answered with the pods, as the gate's message names them)."""
    return Refused("conflict", hold_message(blockers) + "; nothing was written: retry once they are gone")


def plan_open(
    trainjob: Mapping[str, Any],
    *,
    jobset: Mapping[str, Any] | None = None,
    blockers: Sequence[Blocker] | None = None,
    workload: Mapping[str, Any] | None = None,
) -> Plan:
    """Open: Kueue mode removes dispatch's gate (deleting the annotation when it was the last); plain mode
    unsuspends, marks it opened and raises A in one update. Already open succeeds; ended unopened is a fence.

    A hold placed before Open survives it in both modes: Kueue mode's hold annotations stay on the TrainJob
    (Open removes only the gate) and its Workload stays inactive; plain mode marks the TrainJob opened and
    leaves it suspended, so Release raises A and unsuspends it. Plain mode does not unsuspend while a pod of
    a previous execution may still run (``blockers``: the pods looked at, None when not looked at). In Kueue
    mode, Open of a job that never started carries the gate's approval of its first execution when the pods
    were looked at (``first_approval``). ``jobset``: recorded the first time it is seen. ``workload``: its other
    parties' gates are reported in ``held_by`` too."""
    others = held_by(trainjob, workload)
    marked = annotations_of(trainjob).get(ANNOTATION_OPENED) == OPENED_TRUE
    mark = add_op(trainjob, ("metadata", "annotations", ANNOTATION_OPENED), OPENED_TRUE)
    if is_opened(trainjob):
        if is_kueue_mode(trainjob) and not marked and finished(trainjob) is None:
            # Past Kueue's gate without dispatch's mark (opened before the mark existed, or switched from plain
            # mode): the readmission gate approves only a marked job, so Open writes the mark now.
            return _plan(Target.TRAINJOB, [*preconditions(trainjob), mark], "opened mark written", held_by=others)
        return _plan(Target.TRAINJOB, [], "already past its gate", held_by=others)
    end = finished(trainjob)
    if end is not None:
        raise Refused("rejected", f"the TrainJob ended ({end}) without ever being opened")
    record = jobset_uid_ops(trainjob, jobset)
    if is_kueue_mode(trainjob):
        rest = without_dispatch_gate(annotations_of(trainjob).get(ANNOTATION_ADMISSION_GATED_BY))
        path = pointer("metadata", "annotations", ANNOTATION_ADMISSION_GATED_BY)
        change = {"op": "remove", "path": path} if rest is None else {"op": "replace", "path": path, "value": rest}
        # The opened mark in the same update: the readmission gate approves only a job dispatch opened.
        ops = [*preconditions(trainjob), change, *([] if marked else [mark]), *record]
        held = is_held(trainjob) or is_held(workload) or dig(workload, "spec", "active") is False
        outcome = "gate removed; held until Release" if held else "gate removed"
        if not held:
            ops += first_approval(trainjob, jobset, workload, blockers)
        return _plan(Target.TRAINJOB, ops, outcome, held_by=others)
    if dig(trainjob, "spec", "suspend") is not True:
        raise Refused("conflict", "the TrainJob is not suspended but was never opened: someone else started it")
    if is_held(trainjob):
        # Opened, still held: Release raises A and unsuspends it.
        return _plan(Target.TRAINJOB, [*preconditions(trainjob), mark, *record], "opened; held until Release")
    if blockers:
        raise _waiting(blockers)
    ops, a = _raise_ops(trainjob)
    ops += [{"op": "replace", "path": pointer("spec", "suspend"), "value": False}, mark, *record]
    return _plan(Target.TRAINJOB, ops, "opened", new_a=a)


def first_approval(
    trainjob: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    workload: Mapping[str, Any] | None,
    blockers: Sequence[Blocker] | None,
) -> list[dict[str, Any]]:
    """Kueue mode, Open of a job that never started: the gate's approval of its first execution
    (docs/security.md, "The start carries the gate's approval"), in Open's own write, so that its first
    admission costs the gate the Ready alone. Written only on what the gate's pass would approve on: the job
    opened by this very write and not held (the caller's), never started (no ``admission-started``), its
    pods looked at after the TrainJob was read and none that may still run (``blockers``, not None: looked at),
    the JobSet its own or none yet, its Workload there, and not MultiKueue's (there the gate's raise by K comes
    with its approval). Otherwise nothing: the gate approves at the admission, as for every later one."""
    if blockers is None or blockers or workload is None or managed_by_multikueue(trainjob):
        return []
    if admission_started(trainjob) is not None or jobset_uid_reason(trainjob, jobset) is not None:
        return []
    uid = dig(workload, "metadata", "uid")
    try:
        a, _ = start_count(trainjob, None)
    except ContractError:
        return []  # the gate holds it, naming why
    return approval_ops(trainjob, a, str(uid)) if uid else []


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
    if ANNOTATION_HOLD_UNTIL in annotations_of(obj) and not hold.until:
        ops.append({"op": "remove", "path": pointer("metadata", "annotations", ANNOTATION_HOLD_UNTIL)})
    if not annotations_of(obj):  # one add creates the map; the rest add into it
        return [add_op(obj, ("metadata", "annotations"), hold.annotations())]
    return ops


def _unhold_ops(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"op": "remove", "path": pointer("metadata", "annotations", key)}
        for key in HOLD_ANNOTATIONS
        if key in annotations_of(obj)
    ]


def _carries(obj: object, hold: Hold) -> bool:
    """The object carries exactly this hold's annotations (and no other ``until``)."""
    found = annotations_of(obj)
    return {key: found[key] for key in HOLD_ANNOTATIONS if key in found} == hold.annotations()


def plan_hold(
    trainjob: Mapping[str, Any], workload: Mapping[str, Any] | None, hold: Hold, *, checks: Collection[str] = ()
) -> Plan:
    """Hold: plain mode suspends the TrainJob with the hold annotations on it. Kueue mode writes the hold
    annotations on the TrainJob, then deactivates the Workload (``spec.active: false``, with the hold
    annotations on it too, which the webhook and the policy read to refuse anyone else's reactivation).

    The TrainJob first: from that write on, no unsuspend of the TrainJob is accepted and the readmission
    gate keeps the check Pending, so a Hold interrupted before the Workload's write already holds the job
    from any new execution; the same Hold again writes only what is missing.

    On a MultiKueue manager the Workload is not deactivated here (the module's docstring says why): its hold
    annotations, then ``Retry`` on each of dispatch's ``checks`` (the names of its AdmissionChecks) that is
    Ready, so that Kueue evicts it through MultiKueue."""
    if finished(trainjob):
        raise Refused("rejected", f"the TrainJob has ended ({finished(trainjob)}): there is nothing to hold")
    if is_kueue_mode(trainjob):
        if workload is None:
            raise Refused("conflict", "Kueue mode, but the TrainJob's Workload is not there to hold")
        writes: list[Write] = []
        if not _carries(trainjob, hold):
            writes.append(Write(Target.TRAINJOB, [*preconditions(trainjob), *_hold_ops(trainjob, hold)]))
        if managed_by_multikueue(trainjob):
            if not _carries(workload, hold):
                writes.append(Write(Target.WORKLOAD, [*preconditions(workload), *_hold_ops(workload, hold)]))
            message = f"held by dispatch: {describe_hold(hold.annotations())}; evicted until Release"
            retry = _retry_ops(workload, checks, message, hold.since)
            if retry:
                writes.append(Write(Target.WORKLOAD_STATUS, [*preconditions(workload), *retry]))
            return Plan(tuple(writes), "held: evicted through MultiKueue; the Workload is deactivated once it stops")
        if not _carries(workload, hold) or dig(workload, "spec", "active") is not False:
            ops = [*preconditions(workload), *_hold_ops(workload, hold)]
            ops.append({"op": "add", "path": pointer("spec", "active"), "value": False})
            writes.append(Write(Target.WORKLOAD, ops))
        return Plan(tuple(writes), "held: Workload deactivated")
    ops = [*preconditions(trainjob), *_hold_ops(trainjob, hold)]
    ops.append({"op": "replace", "path": pointer("spec", "suspend"), "value": True})
    return _plan(Target.TRAINJOB, ops, "held: TrainJob suspended")


def _retry_ops(workload: Mapping[str, Any], checks: Collection[str], message: str, now: str) -> list[dict[str, Any]]:
    """JSON Patch ops (on ``workloads/status``, after the preconditions) setting each of ``checks`` that is Ready
    to Retry: the index of each entry is the one read, which the resourceVersion precondition keeps true."""
    entries = dig(workload, "status", "admissionChecks")
    ops: list[dict[str, Any]] = []
    for i, entry in enumerate(entries if isinstance(entries, list) else []):
        if isinstance(entry, Mapping) and entry.get("name") in checks and entry.get("state") == READY:
            at = ("status", "admissionChecks", str(i))
            ops += [
                {"op": "replace", "path": pointer(*at, "state"), "value": RETRY},
                {"op": "replace", "path": pointer(*at, "message"), "value": message},
                {"op": "replace", "path": pointer(*at, "lastTransitionTime"), "value": now},
            ]
    return ops


def plan_release(
    trainjob: Mapping[str, Any],
    workload: Mapping[str, Any] | None,
    *,
    jobset: Mapping[str, Any] | None = None,
    blockers: Sequence[Blocker] = (),
) -> Plan:
    """Release: Kueue mode removes the TrainJob's hold annotations, then reactivates the Workload and removes its
    own: while the Workload is inactive Kueue admits nothing of the job, so nothing is admitted before both writes
    are done, and an interrupted Release leaves the job held (by the Workload) until the same Release again
    finishes it (the gate raises A before the Workload is admitted). Plain mode raises A in the
    update that unsuspends — or, for a hold placed before Open, only lifts the hold and leaves the TrainJob
    closed. Plain mode does not unsuspend while a pod of the previous execution may still run
    (``blockers``): it refuses, naming them, and writes nothing."""
    if is_kueue_mode(trainjob):
        if workload is None:
            raise Refused("conflict", "Kueue mode, but the TrainJob's Workload is not there to release")
        writes: list[Write] = []
        if _unhold_ops(trainjob):
            writes.append(Write(Target.TRAINJOB, [*preconditions(trainjob), *_unhold_ops(trainjob)]))
        if dig(workload, "spec", "active") is False or _unhold_ops(workload):
            ops = [*preconditions(workload), *_unhold_ops(workload)]
            ops.append({"op": "add", "path": pointer("spec", "active"), "value": True})
            writes.append(Write(Target.WORKLOAD, ops))
        if not writes:
            return Plan((), "not held")
        if writes[-1].target is Target.TRAINJOB:
            return Plan(tuple(writes), "released: hold lifted from the TrainJob (its Workload was active)")
        return Plan(tuple(writes), "released: Workload reactivated")
    unhold = _unhold_ops(trainjob)
    if not unhold:
        return Plan((), "not held")
    record = jobset_uid_ops(trainjob, jobset)
    if finished(trainjob) or not is_opened(trainjob):
        ops = [*preconditions(trainjob), *unhold, *record]
        return _plan(Target.TRAINJOB, ops, "hold lifted; the TrainJob stays closed")
    if blockers:
        raise _waiting(blockers)
    ops, a = _raise_ops(trainjob)
    ops += [*unhold, {"op": "replace", "path": pointer("spec", "suspend"), "value": False}, *record]
    return _plan(Target.TRAINJOB, ops, "released: TrainJob unsuspended", new_a=a)
