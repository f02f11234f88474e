"""On a MultiKueue worker, what dispatch's agent does with MultiKueue's copies of a dispatch TrainJob, decided:
let one start (``verify_copy``), or delete one that outlived the contact with the manager (``outlived_contact``) or
its claim (``unclaimed``, ``unclaimed_marked``). Pure functions of the objects as read; agent/multicluster/copies.py
and agent/multicluster/contact.py act on the verdicts (docs/multicluster.md, "The stale copy" and "Contact with
the manager").
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from agent.multicluster.contact_lease import NO_CONTACT
from contract.admission import admission_count, parse_count, preconditions
from contract.claims import copy_claim
from contract.errors import ContractError
from contract.keys import (
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_DISPATCHED,
    ANNOTATION_UNVERIFIED,
    ANNOTATION_VERIFIED_CONTACT,
    ANNOTATION_VERIFIED_COPY,
    LEASE_MANAGER_CONTACT,
)
from contract.multicluster import PREBUILT_WORKLOAD, is_copy, prebuilt_workload, unverified
from contract.objects import add_op, dig, pointer
from contract.objects import annotations as annotations_of


class CopyAction(Enum):
    NOTHING = "nothing"
    """Not an unverified dispatch copy: nothing to do."""
    WAIT = "wait"
    """Cannot be verified yet, or never: the copy stays marked and does not start (``reason`` says why)."""
    VERIFY = "verify"
    """Its A is its dispatch's: record it on the remote Workload (if not yet) and remove the mark."""
    DELETE = "delete"
    """Stale: it carries an A other than its dispatch's. Deleted: the remote Workload it adopted (Kueue's controller
    reference) goes with it and the manager dispatches again; not adopted yet, MultiKueue makes the copy again."""


@dataclass(frozen=True)
class CopyVerdict:
    action: CopyAction
    reason: str
    workload_patch: list[dict[str, Any]] | None = None
    """Preconditioned on the remote Workload as read: the record ``ANNOTATION_VERIFIED_COPY`` of this copy."""
    copy_patch: list[dict[str, Any]] | None = None
    """Preconditioned on the copy as read: the removal of its mark. Written after ``workload_patch`` landed."""
    final: bool = False
    """A wait that no later read of the same Workload ends (no stamp, an unreadable one, another copy verified
    there): not looked at again but on a change of the copy."""


def verify_copy(
    copy: Mapping[str, Any], workload: Mapping[str, Any] | None, *, contact: int | None, claim: str | None
) -> CopyVerdict:
    """On a worker, what dispatch's agent does with MultiKueue's copy ``copy`` of a dispatch TrainJob, given the
    remote Workload it names (None: not found), the contact epoch with the manager (``contact_epoch``; None:
    no renewal of the contact Lease seen within its duration, so no copy starts) and the approval its claim names
    (contract/claims.py; None: no claim for it seen renewed within the claim's duration, so it does not start).

    The copy was made from MultiKueue's cache of the manager's TrainJob, which may show an earlier dispatch's A;
    the remote Workload was cloned from the cache entry showing the manager gate's Ready, so its stamp
    ``ANNOTATION_DISPATCHED`` is this dispatch's A. A copy starts only with that A, and only one copy per remote
    Workload: a copy MultiKueue creates again under the same Workload would start a second execution with the A
    the first one ran (its J at 0 in a new JobSet), so it is never verified (docs/multicluster.md, "The stale
    copy")."""
    if not (is_copy(copy) and unverified(copy)):
        return CopyVerdict(CopyAction.NOTHING, "not an unverified copy")
    name = prebuilt_workload(copy)
    if name is None:
        return CopyVerdict(CopyAction.WAIT, f"the copy names no remote Workload ({PREBUILT_WORKLOAD})")
    if workload is None:
        return CopyVerdict(CopyAction.WAIT, f"its remote Workload {name} is not there (yet)")
    if not is_copy(workload) or dig(workload, "metadata", "name") != name:
        return CopyVerdict(CopyAction.WAIT, f"Workload {name} is not MultiKueue's copy")
    if contact is None:
        return CopyVerdict(CopyAction.WAIT, NO_CONTACT)
    try:
        a = admission_count(copy)
        stamp = annotations_of(workload).get(ANNOTATION_DISPATCHED)
        if stamp is None:
            return CopyVerdict(
                CopyAction.WAIT,
                f"its remote Workload {name} carries no {ANNOTATION_DISPATCHED}: the manager's dispatch-k8s did not "
                "stamp this dispatch, so its A cannot be verified here",
                final=True,
            )
        stamped = parse_count(f"annotation {ANNOTATION_DISPATCHED}", stamp)
    except ContractError as exc:
        return CopyVerdict(CopyAction.WAIT, f"cannot be verified: {exc}", final=True)
    if a != stamped:
        return CopyVerdict(
            CopyAction.DELETE,
            f"the copy carries A {a}, its dispatch was stamped {stamped} ({ANNOTATION_DISPATCHED} on Workload {name}): "
            "made from a stale view of the manager's TrainJob; deleted, the job goes back through the manager",
        )
    needs = copy_claim(copy)
    if needs is None:
        return CopyVerdict(
            CopyAction.WAIT,
            f"the copy carries no gate's approval ({ANNOTATION_APPROVED_ADMISSION}) to claim",
            final=True,
        )
    if claim != needs[1]:
        return CopyVerdict(CopyAction.WAIT, unclaimed_message(needs, claim))
    uid = dig(copy, "metadata", "uid")
    verified = annotations_of(workload).get(ANNOTATION_VERIFIED_COPY)
    if verified is not None and verified != uid:
        return CopyVerdict(
            CopyAction.WAIT,
            f"another copy (uid {verified}) was let start under Workload {name} before: a second one would repeat "
            f"A {a}; it never starts, and the job goes back through the manager when evicted there",
            final=True,
        )
    remove = [*preconditions(copy), {"op": "remove", "path": pointer("metadata", "annotations", ANNOTATION_UNVERIFIED)}]
    record = (
        None
        if verified == uid
        else [
            *preconditions(workload),
            add_op(workload, ("metadata", "annotations", ANNOTATION_VERIFIED_COPY), uid),
            {
                "op": "add",
                "path": pointer("metadata", "annotations", ANNOTATION_VERIFIED_CONTACT),
                "value": str(contact),
            },
        ]
    )
    return CopyVerdict(
        CopyAction.VERIFY,
        f"A {a} is the stamp of its dispatch on Workload {name}",
        workload_patch=record,
        copy_patch=remove,
    )


def outlived_contact(
    copy: Mapping[str, Any], workload: Mapping[str, Any] | None, *, epoch: int | None, lost: bool
) -> CopyVerdict:
    """On a worker, whether dispatch's agent deletes the copy ``copy`` it let start (not marked), given its remote
    Workload and the contact with the manager: ``lost`` (no renewal seen for the Lease's duration; the manager may
    dispatch the job elsewhere), or an ``epoch`` above the one the copy started under (contact was lost and
    regained since). A finished copy is kept (the manager copies its final status from it); a copy whose Workload
    is gone is going already."""
    if not is_copy(copy) or unverified(copy) or dig(copy, "metadata", "deletionTimestamp"):
        return CopyVerdict(CopyAction.NOTHING, "not a running copy")
    if workload is None or dig(workload, "metadata", "deletionTimestamp"):
        return CopyVerdict(CopyAction.NOTHING, "its remote Workload is gone")
    if annotations_of(workload).get(ANNOTATION_VERIFIED_COPY) != dig(copy, "metadata", "uid"):
        return CopyVerdict(CopyAction.NOTHING, "not the copy let start under its remote Workload")
    if any(
        c.get("type") == "Finished" and c.get("status") == "True" for c in dig(workload, "status", "conditions") or []
    ):
        return CopyVerdict(CopyAction.NOTHING, "finished")
    if lost:
        return CopyVerdict(
            CopyAction.DELETE,
            f"the manager's dispatch agent has not renewed its contact Lease {LEASE_MANAGER_CONTACT} here within its "
            "duration: the manager may dispatch the job to another worker; deleted, so it does not run on",
        )
    started = annotations_of(workload).get(ANNOTATION_VERIFIED_CONTACT)
    try:
        under = parse_count(f"annotation {ANNOTATION_VERIFIED_CONTACT}", started) if started is not None else -1
    except ContractError:
        under = -1  # unreadable: as old as can be
    if epoch is not None and under < epoch:
        return CopyVerdict(
            CopyAction.DELETE,
            f"it started under contact epoch {under if under >= 0 else 'unknown'} and the manager's contact Lease "
            f"{LEASE_MANAGER_CONTACT} shows {epoch}: contact with the manager was lost since, and the job may run "
            "elsewhere; deleted, so it does not run on",
        )
    return CopyVerdict(CopyAction.NOTHING, "in contact since it started")


def unclaimed_message(needs: tuple[str, str], claim: str | None) -> str:
    name, approval = needs
    seen = f"it names {claim}" if claim else "none seen renewed within its duration"
    return (
        f"the manager's dispatch agent does not claim this copy here now (claim {name} for {approval}: {seen}): "
        "the manager does not want it to run on this worker (not dispatched here, evicted, stopped, fenced, or "
        "Kueue cannot reach this worker)"
    )


def unclaimed(copy: Mapping[str, Any], workload: Mapping[str, Any] | None, *, claim: str | None) -> CopyVerdict:
    """On a worker, whether dispatch's agent deletes the copy ``copy`` it let start, given its remote Workload and
    the approval its claim names, live (None: no claim for it seen renewed within the claim's duration). A copy
    runs on only under a live claim for exactly it; a finished copy is kept (the manager copies its final
    status from it)."""
    if not is_copy(copy) or unverified(copy) or dig(copy, "metadata", "deletionTimestamp"):
        return CopyVerdict(CopyAction.NOTHING, "not a running copy")
    if workload is not None and annotations_of(workload).get(ANNOTATION_VERIFIED_COPY) != dig(copy, "metadata", "uid"):
        return CopyVerdict(CopyAction.NOTHING, "not the copy let start under its remote Workload")
    if _finished(copy) or _finished(workload):
        return CopyVerdict(CopyAction.NOTHING, "finished")
    needs = copy_claim(copy)
    if needs is not None and claim == needs[1]:
        return CopyVerdict(CopyAction.NOTHING, "claimed")
    return CopyVerdict(
        CopyAction.DELETE, f"{unclaimed_message(needs or ('?', '?'), claim)}; deleted, so it does not run on"
    )


def unclaimed_marked(copy: Mapping[str, Any], *, claim: str | None, waited: float, duration: float) -> CopyVerdict:
    """On a worker, whether a copy still marked, which has waited ``waited`` seconds (by the agent's clock) for a
    claim, is deleted: after ``duration`` without one, the manager does not want it here (a fenced worker, one
    Kueue reached but the manager's agent cannot); deleted, its remote Workload goes with it and the job goes
    back through the manager."""
    if not is_copy(copy) or not unverified(copy) or dig(copy, "metadata", "deletionTimestamp"):
        return CopyVerdict(CopyAction.NOTHING, "not a marked copy")
    needs = copy_claim(copy)
    if (needs is not None and claim == needs[1]) or waited < duration:
        return CopyVerdict(CopyAction.NOTHING, "claimed, or not waited long enough")
    return CopyVerdict(
        CopyAction.DELETE,
        f"{unclaimed_message(needs or ('?', '?'), claim)} for {waited:.0f} s; deleted, the job goes back through the "
        "manager",
    )


def _finished(obj: Mapping[str, Any] | None) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") in ("Finished", "Complete", "Failed") and c.get("status") == "True"
        for c in dig(obj, "status", "conditions") or []
    )
