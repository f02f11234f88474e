"""MultiKueue mode on the manager, and the life of the stamp: which mode the gate treats a dispatch TrainJob in
(``dispatch_mode``, from its ``spec.managedBy``, failing closed on a check it cannot identify), and the A it stamps
on the Workload for each dispatch (``stamp_ops``), removes at every hold (``clear_stamp_ops``) and may reuse when
a raise was never stamped (``reusable_a``). Pure: functions of the objects as read. The gate's decision that uses
them is agent/domain/decide.py; docs/multicluster.md, "Numbering each dispatch", says why.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from contract.admission import admission_count, admission_floor, admission_started, approval, parse_count
from contract.errors import ContractError
from contract.keys import ANNOTATION_APPROVED_ADMISSION, ANNOTATION_DISPATCHED, ANNOTATION_DISPATCHED_SPENT
from contract.multicluster import MULTIKUEUE_CONTROLLER, MULTIKUEUE_MANAGED_BY, managed_by_multikueue
from contract.objects import add_op, dig, pointer
from contract.objects import annotations as annotations_of


@dataclass(frozen=True)
class Mode:
    """How the manager's gate treats a dispatch TrainJob (``dispatch_mode``)."""

    multikueue: bool
    """MultiKueue mode: MultiKueue manages the TrainJob (``spec.managedBy``)."""
    checks: tuple[str, ...] = ()
    """The MultiKueue checks the Workload lists, identified by fresh reads: whose workers the gate looks at."""
    problem: str | None = None
    """Why the gate must hold it, whatever else it sees; None: nothing in the mode stops it."""


def other_checks(workload: Mapping[str, Any] | None, ours: Collection[str]) -> list[str]:
    """The checks the Workload lists (``status.admissionChecks``) other than dispatch's own, sorted: those read
    fresh to identify its MultiKueue checks."""
    entries = dig(workload, "status", "admissionChecks")
    names = {e.get("name") for e in entries if isinstance(e, Mapping)} if isinstance(entries, list) else set()
    return sorted(n for n in names if isinstance(n, str) and n not in ours)


def dispatch_mode(trainjob: Mapping[str, Any] | None, found: Mapping[str, Mapping[str, Any] | str | None]) -> Mode:
    """MultiKueue mode for a dispatch TrainJob, decided by its ``spec.managedBy`` (Kueue sets it, and it is
    immutable), never by a cache of the AdmissionChecks. ``found``: each check the Workload lists but dispatch's
    own (``other_checks``), as read fresh: the AdmissionCheck, None when it is not there, or why it could not be
    read.

    Fails closed: a check that cannot be identified (not there, as while it is deleted and made again, or not
    readable) could be a MultiKueue check, so the gate holds; so it does when MultiKueue manages the TrainJob and
    its Workload lists no MultiKueue check, and when the Workload lists one and MultiKueue does not manage the
    TrainJob (the raise by K is permitted only on a TrainJob MultiKueue manages, and one cluster's numbering is
    not enough where MultiKueue may copy it)."""
    managed = managed_by_multikueue(trainjob)
    checks = tuple(
        sorted(n for n, ac in found.items() if isinstance(ac, Mapping) and _controller(ac) == MULTIKUEUE_CONTROLLER)
    )
    unknown = [
        f"AdmissionCheck {n}: {'not found' if ac is None else f'cannot be read: {ac}'}"
        for n, ac in sorted(found.items())
        if not isinstance(ac, Mapping)
    ]
    problem = None
    if unknown:
        problem = f"cannot identify every check of the Workload ({'; '.join(unknown)}), so not whether MultiKueue " + (
            f"will copy this TrainJob (its spec.managedBy is {MULTIKUEUE_MANAGED_BY}): a MultiKueue job waits "
            "until its MultiKueue check can be read, never approved on the one-cluster path"
            if managed
            else "may copy this TrainJob: it waits until every check can be read"
        )
    elif managed and not checks:
        problem = (
            f"MultiKueue manages this TrainJob (spec.managedBy {MULTIKUEUE_MANAGED_BY}), and its Workload lists no "
            "MultiKueue check: its workers cannot be known, so it waits; it is never approved on the one-cluster path"
        )
    elif not managed and checks:
        problem = (
            f"the Workload lists the MultiKueue check {', '.join(checks)}, and the TrainJob's spec.managedBy is not "
            f"{MULTIKUEUE_MANAGED_BY}: MultiKueue does not manage it, so it cannot be numbered for a dispatch to a "
            "worker, nor approved as in one cluster alone; a person decides (Stop, and submit it again to a queue "
            "that matches)"
        )
    return Mode(managed, checks, problem)


def _controller(ac: Mapping[str, Any]) -> object:
    return dig(ac, "spec", "controllerName")


def highest_stamped(workload: Mapping[str, Any] | None) -> int | None:
    """The highest A the gate ever stamped on the Workload: its record ``ANNOTATION_DISPATCHED_SPENT`` or its stamp
    ``ANNOTATION_DISPATCHED``, whichever is higher (a stamp written without the record counts); None when it shows
    neither. ContractError when one is not a count."""
    found = annotations_of(workload)
    values = [
        parse_count(f"annotation {key}", found[key])
        for key in (ANNOTATION_DISPATCHED, ANNOTATION_DISPATCHED_SPENT)
        if key in found
    ]
    return max(values) if values else None


def reusable_a(trainjob: Mapping[str, Any], workload: Mapping[str, Any]) -> int | None:
    """The A of the gate's last raise, when the next dispatch of ``workload`` may take it instead of a new raise by
    K; else None.

    Only a raise that no Workload was ever stamped with: its stamp never landed, so no Ready followed it (the stamp
    is written after the raise, the Ready after the stamp, each only once the one before landed), no remote
    Workload carries that A (MultiKueue clones the manager Workload's annotations into it), and no copy with that
    A can be verified on a worker (verify_copy: the copy's A must equal its remote Workload's stamp). Shown by:
    A equals the floor and is above the A last started (``admission-started``), the TrainJob is suspended, the
    gate's approval on it is of exactly A on this Workload (written in the same patch as the raise, and a stamp is
    only ever written on the Workload its pass approved), and this Workload's record of the highest A stamped
    (``highest_stamped``) is below A. A Workload made again (a new uid) never reuses: the old one may carry the
    stamp. Anything unreadable: None, and the gate raises."""
    try:
        a, floor, started = admission_count(trainjob), admission_floor(trainjob), admission_started(trainjob)
        stamped = highest_stamped(workload)
    except ContractError:
        return None
    uid = dig(workload, "metadata", "uid")
    if a is None or floor != a or (started is not None and started >= a) or not isinstance(uid, str) or not uid:
        return None
    if dig(trainjob, "spec", "suspend") is not True:
        return None
    if annotations_of(trainjob).get(ANNOTATION_APPROVED_ADMISSION) != approval(a, uid):
        return None
    if stamped is not None and stamped >= a:
        return None
    return a


def _annotate(obj: Mapping[str, Any], values: Mapping[str, str]) -> list[dict[str, Any]]:
    """JSON Patch ops that set these annotations (all in one op when the object has none yet)."""
    if not isinstance(dig(obj, "metadata", "annotations"), Mapping):
        return [add_op(obj, ("metadata", "annotations"), dict(values))]
    return [add_op(obj, ("metadata", "annotations", k), v) for k, v in values.items()]


def clear_stamp_ops(workload: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch ops (without preconditions) that remove the Workload's stamp, keeping the highest A stamped
    in ``ANNOTATION_DISPATCHED_SPENT`` (raised to the stamp first, when it is lower or absent); none when there is
    no stamp, or when the stamp or the record is not a count (a worker verifies no copy under such a stamp, and
    the gate reuses no raise while it is there)."""
    found = annotations_of(workload)
    if ANNOTATION_DISPATCHED not in found:
        return []
    try:
        stamped = highest_stamped(workload)
    except ContractError:
        return []
    ops: list[dict[str, Any]] = [{"op": "remove", "path": pointer("metadata", "annotations", ANNOTATION_DISPATCHED)}]
    if found.get(ANNOTATION_DISPATCHED_SPENT) != str(stamped):
        ops.append(add_op(workload, ("metadata", "annotations", ANNOTATION_DISPATCHED_SPENT), str(stamped)))
    return ops


def stamp_ops(workload: Mapping[str, Any], a: int) -> list[dict[str, Any]]:
    """The JSON Patch ops (without preconditions) that stamp ``a`` on the Workload for its dispatch, with the
    record of the highest A ever stamped (``ANNOTATION_DISPATCHED_SPENT``), which no hold removes."""
    return _annotate(workload, {ANNOTATION_DISPATCHED: str(a), ANNOTATION_DISPATCHED_SPENT: str(a)})
