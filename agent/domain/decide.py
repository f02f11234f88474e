"""The readmission gate, decided: a pure function of one read of the Workload and a fresh look at what
the decision needs (the owning TrainJob, its JobSet, the pods that may still run).

For a Workload whose dispatch check is Pending with quota reserved (and not evicted, finished or
deactivated):

1. the owner is not a TrainJob, or the TrainJob is not dispatch's -> the check is set Ready at once, so a
   shared ClusterQueue is not held up;
2. a pod of a previous execution may still run -> the check stays Pending, naming each pod and why;
3. the TrainJob's JobSet is not the one whose UID was recorded (J may have started again) -> Pending;
4. otherwise the approval of the execution's A is recorded on the TrainJob (``approved-admission``, preconditioned
   on it as read), then the check is set Ready with a write preconditioned on the Workload as read. In Kueue mode
   the start must carry that approval (the unsuspend policy, the webhook's ``update.approval``), so a start the
   gate did not approve, through a queue without dispatch's check, is refused.

A is not raised here: the write that starts the execution raises it (Kueue's unsuspend, through dispatch's
MutatingAdmissionPolicy or mutating webhook: contract/admission.py ``unsuspend_ops``), so the raise and the
start it numbers are one write, and the unsuspend policy refuses any start whose A is not above the last.
The gate only checks that the next execution can be numbered, and holds, saying why, when it cannot.
Except in MultiKueue mode (contract/multicluster.py): MultiKueue copies the TrainJob to a worker before the
manager's unsuspend, so there the gate raises A itself, by K = maxRestarts + 1, in a preconditioned TrainJob
patch written before its Ready; the unsuspend then only records it. It also stamps that A on the Workload
(``dispatched-admission``), between the raise and the Ready: the worker's agent lets a copy start only when its A
equals the stamp its remote Workload carries (agent/multicluster/copies.py).

MultiKueue mode is the TrainJob's ``spec.managedBy`` (immutable), never a cache of the AdmissionChecks
(``dispatch_mode``; it and the stamp's life are in agent/domain/multikueue_mode.py): a cache misses a MultiKueue
check just made, or deleted and made again, and the one-cluster path would then approve without a look at the
workers, a raise or a new stamp. It fails closed: a check of the Workload that cannot be identified, a managed
TrainJob whose Workload lists no MultiKueue check, or a Workload listing one for a TrainJob MultiKueue does not
manage is a hold. Every hold in MultiKueue mode removes the stamp from the Workload (``clear_stamp_ops``, in the
hold's patch of the Workload), so a stale stamp never outlives its dispatch; ``dispatched-spent``, the highest A
ever stamped on the Workload, is written with each stamp and never removed. A raise whose stamp never landed is
reused by the next pass instead of raising again (``reusable_a``): no Ready followed it, so no copy carries it that
a worker could verify; an A ever stamped is never reused. So a raise is burned only by a stamp that landed without
its Ready, or by a new Workload (docs/multicluster.md, "Numbering each dispatch").

On a MultiKueue worker (role worker) a remote Workload, MultiKueue's copy (its origin label), is approved at its
first admission on this worker only (``worker_copy``): the gate records ``worker-admitted`` on it, in a JSON
Patch preconditioned on the Workload as read, and only then sets the check Ready. Every later admission of the
copy is held: it was evicted here, and a local restart would repeat the dispatch's A with J at 0 in a new JobSet.
The copy goes back through the manager instead, which numbers a new dispatch (docs/multicluster.md, guarantee 3).

A Hold on a manager evicts through this check (``Retry``) rather than deactivating the Workload
(agent/domain/operations.py says why); the gate keeps the check Pending while the hold is in force, and deactivates the
held Workload once the TrainJob's status, as MultiKueue copied it from the worker, shows no active Job.

The Ready write is preconditioned on the read made *before* the pod check: if Kueue evicts and resets the
check in between, the write fails with a conflict, and no admission is ever approved on a look at the pods
that came before its eviction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Final

from agent.domain.multikueue_mode import clear_stamp_ops, reusable_a, stamp_ops
from agent.domain.node_loss import Assessment
from agent.domain.pod_owners import ForeignPod
from agent.domain.workload import PENDING, READY, check_state, check_state_apply, owner_trainjob, waiting_reason
from contract.admission import (
    Raise,
    admission_started,
    approval_ops,
    preconditions,
    start_count,
)
from contract.errors import ContractError
from contract.foreign import foreign_reasons, jobset_uid_ops, jobset_uid_reason
from contract.gates import is_opened_by_dispatch
from contract.keys import (
    ANNOTATION_HOLD_INSTANCE,
    ANNOTATION_HOLD_REASON,
    ANNOTATION_HOLD_WHO,
    ANNOTATION_OPENED,
    ANNOTATION_WORKER_ADMITTED,
    HOLD_ANNOTATIONS,
    LEASE_MANAGER_CONTACT,
)
from contract.multicluster import (
    ROLE_SINGLE,
    ROLE_WORKER,
    Role,
    is_copy,
    multikueue_problems,
    raise_dispatch,
    step,
)
from contract.objects import add_op, dig, pointer
from contract.objects import annotations as annotations_of
from contract.ownership import is_dispatch


class Action(Enum):
    WAIT = "wait"
    """Not the gate's turn: write nothing."""
    APPROVE = "approve"
    """Not dispatch's: set the check Ready."""
    HOLD = "hold"
    """Dispatch's, and it may not start yet: keep the check Pending with the reason."""
    ADMIT = "admit"
    """Dispatch's and clear: set the check Ready (the unsuspend that follows raises A; in MultiKueue mode the
    TrainJob patch before it does, by K)."""


@dataclass(frozen=True)
class Blocker:
    """A pod of a previous execution that may still run, and why (the node-loss verdict's reason); or, on a
    MultiKueue manager, a place where one may run that the gate cannot see (``pod`` empty)."""

    pod: str
    why: str
    worker: str | None = None
    """On a MultiKueue manager: the worker (its MultiKueueCluster) the pod runs on, or that cannot be read; ""
    when the workers themselves cannot be known (agent/multicluster/workers.py). None: this cluster."""
    unprepared: bool = False
    """On a MultiKueue manager: the worker cannot run the job yet (its replica of the runtime copy, or the
    prologue's ConfigMap, is not there as needed: agent/multicluster/replicas.py), rather than one that may still run
    it."""


@dataclass(frozen=True)
class Decision:
    action: Action
    message: str
    trainjob_patch: list[dict[str, Any]] | None = None
    """JSON Patch for the TrainJob: the JobSet UID, the first time it is seen; in MultiKueue mode the raise of
    A by K too, when one is due."""
    check_write: dict[str, Any] | None = None
    """Server-side apply body for workloads/status; None when nothing needs writing."""
    workload_patch: list[dict[str, Any]] | None = None
    """JSON Patch for the Workload, preconditioned on it as read, written before ``check_write``: on a worker, the
    record of the first admission of MultiKueue's copy (``worker_copy``); on a manager, the deactivation of a
    Workload dispatch's Hold holds, once the copy stopped; and the stamp of the A it raised for a dispatch."""
    new_a: int | None = None
    """The A the approved execution will start with."""
    foreign: tuple[str, ...] = field(default_factory=tuple)


def blockers_of(assessment: Assessment, unproven: Collection[str] = (), *, suffix: str = "") -> list[Blocker]:
    """The pods of a previous execution that may still run, each with why: the evidence the gate waits on,
    Open and Release refuse on, and Status's Ceased is false on. ``assessment`` judges the pods the ownership
    chain does not prove someone else's (agent/domain/pod_owners.py ``sort_pods``: ``ours``); those in ``unproven``
    (their Job gone) get ``suffix`` added to their reason.

    A pod that is no longer listed is not waited on: every trainer pod carries dispatch's finalizer, which only
    the agent removes, once the pod's processes are proven gone (agent/domain/pod_finalizer.py), so a trainer pod that
    has left the API has ended."""
    return [
        Blocker(pod, f"{c.verdict.value}: {c.reason}" + (suffix if pod in unproven else ""))
        for pod, c in assessment.may_still_run
    ]


def hold_message(blockers: Sequence[Blocker]) -> str:
    """The pods waited for, each with where (a worker's name, on a manager) and why; then the places that cannot
    be seen, then the workers not ready for the job, so Status and the check's message name the worker the gate
    waits for."""
    pods = [b for b in blockers if b.pod]
    blind = [b for b in blockers if not b.pod and not b.unprepared]
    unready = [b for b in blockers if b.unprepared]
    parts = []
    if pods:
        listed = "; ".join(f"{b.pod}{f' on worker {b.worker}' if b.worker else ''}: {b.why}" for b in pods)
        parts.append(f"waiting for {len(pods)} pod(s) of the previous execution that may still run: {listed}")
    if blind:
        listed = "; ".join(f"{f'worker {b.worker}: ' if b.worker else ''}{b.why}" for b in blind)
        parts.append(f"waiting to see every worker where the previous execution may still run: {listed}")
    if unready:
        listed = "; ".join(f"worker {b.worker}: {b.why}" for b in unready)
        parts.append(f"waiting for the workers to be ready to run the job: {listed}")
    return "; and ".join(parts)


def decide(
    *,
    workload: Mapping[str, Any],
    check: str,
    trainjob: Mapping[str, Any] | None,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    blockers: Sequence[Blocker],
    now: str,
    foreign_pods: Sequence[ForeignPod] = (),
    multikueue: bool = False,
    runtime_spec: Mapping[str, Any] | None = None,
    role: Role = ROLE_SINGLE,
    multikueue_problem: str | None = None,
    scope_problem: str | None = None,
    in_contact: bool = True,
) -> Decision:
    """What the gate does for ``workload``; ``check`` is the name of dispatch's AdmissionCheck in it.

    ``multikueue``: MultiKueue mode, decided by ``dispatch_mode``: MultiKueue manages the TrainJob (its
    ``spec.managedBy``). The gate then numbers each dispatch itself, before each Ready it writes: A and the
    floor := max(A, floor) + K, K = maxRestarts + 1 of ``runtime_spec`` (the frozen runtime copy's spec; None
    when it could not be read: a hold), or the raise an earlier pass made whose stamp never landed
    (``reusable_a``); and every hold removes the Workload's stamp (``ANNOTATION_DISPATCHED``).
    ``multikueue_problem``: ``dispatch_mode``'s reason to hold a dispatch TrainJob (its MultiKueue check cannot
    be identified, or the TrainJob and its queue disagree about MultiKueue); never approved while it is set.

    ``scope_problem``: why dispatch's webhook and policies do not police the TrainJob's namespace (contract/scope.py):
    an execution there would start with nothing refusing a write of its identity, so it is never approved.

    ``trainjob`` is the owning TrainJob as read (None when it is gone or not found); ``pods`` its pods
    (agent/domain/pod_owners.py: those the ownership chain does not prove someone else's), ``blockers`` those of
    them that may still run, as the node-loss classification says, and ``foreign_pods`` the labelled pods
    that are provably not its own: reported, never waited on.

    ``role``: this cluster's part under MultiKueue. On a worker, MultiKueue's copy is decided by ``worker_copy``
    (``in_contact``: whether this worker's agent saw the manager's contact Lease renewed recently enough to admit a
    copy: agent/multicluster/contact.py ``ContactWatch.admits``);
    everything else as in one cluster alone.
    """
    waiting = waiting_reason(workload, check)
    if waiting is not None:
        return Decision(Action.WAIT, waiting)
    if role == ROLE_WORKER and is_copy(workload):
        decided = worker_copy(workload, check, trainjob, now, in_contact=in_contact)
        if decided is not None:
            return decided
    owner = owner_trainjob(workload)
    if owner is None:
        return _set(Action.APPROVE, workload, check, READY, "not a TrainJob: the readmission gate does not apply", now)
    if trainjob is None or dig(trainjob, "metadata", "uid") != owner[1]:
        return _set(
            Action.HOLD, workload, check, PENDING, f"waiting for TrainJob {owner[0]} (uid {owner[1]}) to be read", now
        )
    if not is_dispatch(trainjob):
        return _set(
            Action.APPROVE, workload, check, READY, "not a dispatch TrainJob: the readmission gate does not apply", now
        )
    foreign = (*foreign_reasons(trainjob, jobset=jobset, pods=pods), *(p.report() for p in foreign_pods))

    def hold(message: str, patch: list[dict[str, Any]] | None = None) -> Decision:
        # In MultiKueue mode every hold also removes the Workload's stamp: the dispatch it numbered is over, and a
        # stale stamp must not outlive it (the record of the highest A stamped stays: ``reusable_a``).
        held = _set(Action.HOLD, workload, check, PENDING, message, now, foreign)
        clear = clear_stamp_ops(workload) if multikueue else []
        if patch is None and not clear:
            return held
        return replace(held, workload_patch=[*preconditions(workload), *clear, *(patch or [])])

    refusal = not_startable(trainjob, workload)
    if refusal is not None and multikueue and hold_in_force(workload) and not jobs_active(trainjob):
        # A Hold on a manager evicted it through this check (agent/domain/operations.py): the worker's copy has stopped
        # and its status is copied back, so deactivating the Workload now frees its quota and stalls nothing.
        return hold(refusal, [{"op": "add", "path": pointer("spec", "active"), "value": False}])
    if refusal is not None:
        return hold(refusal)
    if scope_problem is not None:
        return hold(
            f"{scope_problem}: an execution there would start unpoliced, so the gate holds it (docs/install.md, "
            '"Scope"); move the job to a namespace in scope, or bring this one back into it'
        )
    if multikueue_problem is not None:
        return hold(multikueue_problem)
    reset = jobset_uid_reason(trainjob, jobset)
    if reset is not None:
        return hold(jobset_reset_message(reset))
    if blockers:
        return hold(hold_message(blockers))
    try:
        a, raises = start_count(trainjob, admission_started(trainjob))
        # MultiKueue: every Ready may send a copy that a worker starts before the manager's unsuspend records
        # its A (admission-started), so the start_count condition is not enough there: raise before each Ready,
        # unless the last raise was never stamped (``reusable_a``).
        dispatch_raise = _dispatch_raise(trainjob, runtime_spec, workload) if multikueue else None
    except ContractError as exc:
        return hold(f"cannot number the next execution: {exc}")
    return _admit(workload, check, trainjob, jobset, now, foreign, a=a, raises=raises, dispatch_raise=dispatch_raise)


def _admit(
    workload: Mapping[str, Any],
    check: str,
    trainjob: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    now: str,
    foreign: tuple[str, ...],
    *,
    a: int,
    raises: bool,
    dispatch_raise: tuple[int, Raise] | None,
) -> Decision:
    """The admission of the next execution, numbered ``a`` (``raises``: the write that starts it raises A) or, in
    MultiKueue mode, by the gate's own raise (``dispatch_raise``: K and the raise): the TrainJob's patch (the
    JobSet's UID, the approval, the raise), the Workload's stamp, and the Ready."""
    # The JobSet's UID, the first time it is seen, and only the TrainJob's own (an orphan of an earlier
    # TrainJob of this name is not the JobSet J counts for; recorded, it would never be corrected).
    record = jobset_uid_ops(trainjob, jobset)
    message = f"the next execution starts with A {a}" + (", raised in the write that admits it" if raises else "")
    workload_uid = str(dig(workload, "metadata", "uid") or "")
    # The approval of exactly this execution, before the Ready: in Kueue mode its start must carry it.
    approve = approval_ops(trainjob, a, workload_uid)
    ops = [*preconditions(trainjob), *record, *approve] if record or approve else []
    stamp = None
    if dispatch_raise is not None:
        # MultiKueue copies the TrainJob to a worker once every other check is Ready, before the manager's
        # unsuspend: the raise in the unsuspend would come too late, so it is made here, before the Ready.
        k, raised = dispatch_raise
        a, approve = raised.a, approval_ops(trainjob, raised.a, workload_uid)
        # A raise reused (its patch empty) writes to the TrainJob only what else is due.
        ops = (
            [*(raised.patch or preconditions(trainjob)), *record, *approve] if raised.patch or record or approve else []
        )
        message = (
            f"the next dispatch starts with A {a}, raised by K = maxRestarts + 1 = {k} by the gate before this "
            "check turns Ready (MultiKueue copies the TrainJob to a worker then)"
        )
        # The stamp: MultiKueue clones this Workload into the remote one from the cache entry that shows the
        # Ready, so the stamp it carries is this dispatch's A even when its copy of the TrainJob is older.
        # With it, the record of the highest A ever stamped on this Workload, which no hold removes.
        stamp = [*preconditions(workload), *stamp_ops(workload, a)]
    return Decision(
        Action.ADMIT,
        message,
        trainjob_patch=ops or None,
        check_write=check_state_apply(workload, check, READY, message, now),
        workload_patch=stamp,
        new_a=a,
        foreign=foreign,
    )


def jobset_reset_message(reason: str) -> str:
    """The hold while the TrainJob's JobSet is not the one whose UID was recorded: its J started again at 0, so
    A + J may repeat an R of the executions before. Nothing dispatch can see explains it; a person decides."""
    return (
        f"{reason} The gate holds this job: a new JobSet's J starts again at 0, and A + J could repeat the R of an "
        "execution of the recorded JobSet. Stop it; its next submission starts with an identity of its own"
    )


def worker_held_message(recorded: str) -> str:
    return (
        f"MultiKueue's copy was admitted on this worker before ({ANNOTATION_WORKER_ADMITTED} {recorded}) and evicted "
        "here: it does not run again under the A the manager gave it. It goes back through the manager, which "
        "dispatches it again with a new A"
    )


WORKER_FIRST_MESSAGE: Final = (
    f"the first admission of MultiKueue's copy on this worker, recorded as {ANNOTATION_WORKER_ADMITTED} before this "
    "check turns Ready: a later admission of this copy here is held and goes back through the manager"
)


WORKER_OUT_OF_CONTACT_MESSAGE: Final = (
    f"no recent renewal of the manager's contact Lease {LEASE_MANAGER_CONTACT} seen on this worker: the "
    "manager's dispatch agent does not reach this worker, or the worker is fenced, so a copy admitted here could never "
    "start. It is admitted here once contact is back; meanwhile MultiKueue may admit the job on another worker"
)


def worker_copy(
    workload: Mapping[str, Any],
    check: str,
    trainjob: Mapping[str, Any] | None,
    now: str,
    *,
    in_contact: bool = True,
) -> Decision | None:
    """On a worker, the gate's decision for MultiKueue's copy of a Workload (``workload``, due and carrying the
    origin label), or None when the copy is someone else's: decided as in one cluster alone.

    Its first admission here is approved, the record ``worker-admitted`` written first (``workload_patch``,
    preconditioned on the Workload as read, so it lands only in this admission cycle); any admission of a copy
    that carries the record is held. The first admission comes before MultiKueue creates the TrainJob on this
    worker, so the copy has no owner yet, and its job's kind is not known: it is recorded whatever it is, and
    once its owner is known to be another kind or a TrainJob not of dispatch's, it is decided as today.

    ``in_contact``: a renewal of the manager's contact Lease was seen here recently (``ContactWatch.admits``).
    Without contact no copy may start here (agent/multicluster/copies.py), so its admission is held: MultiKueue
    converges on the worker that admits first, and a worker out of contact (a fenced one among them) that admitted
    would take every dispatch of the job and run none of them."""
    if _someone_elses(workload, trainjob):
        return None
    recorded = annotations_of(workload).get(ANNOTATION_WORKER_ADMITTED)
    if recorded is not None:
        return _set(Action.HOLD, workload, check, PENDING, worker_held_message(recorded), now)
    if not in_contact:
        return _set(Action.HOLD, workload, check, PENDING, WORKER_OUT_OF_CONTACT_MESSAGE, now)
    return Decision(
        Action.ADMIT,
        WORKER_FIRST_MESSAGE,
        workload_patch=[
            *preconditions(workload),
            add_op(workload, ("metadata", "annotations", ANNOTATION_WORKER_ADMITTED), now),
        ],
        check_write=check_state_apply(workload, check, READY, WORKER_FIRST_MESSAGE, now),
    )


def _someone_elses(workload: Mapping[str, Any], trainjob: Mapping[str, Any] | None) -> bool:
    """The Workload's controller is known and not a dispatch TrainJob: another kind, or a TrainJob read and not
    dispatch's."""
    refs = dig(workload, "metadata", "ownerReferences")
    controlled = any(isinstance(r, Mapping) and r.get("controller") is True for r in refs or [])
    owner = owner_trainjob(workload)
    if owner is None:
        return controlled
    return trainjob is not None and dig(trainjob, "metadata", "uid") == owner[1] and not is_dispatch(trainjob)


def _dispatch_raise(
    trainjob: Mapping[str, Any], runtime_spec: Mapping[str, Any] | None, workload: Mapping[str, Any]
) -> tuple[int, Raise]:
    """MultiKueue mode's raise by K, and K; ContractError (a hold, saying why) when the runtime copy was not
    read or fails the MultiKueue requirements. A raise an earlier pass made for this Workload whose stamp never
    landed (``reusable_a``) is reused: a Raise with no patch."""
    if runtime_spec is None:
        raise ContractError("spec.runtimeRef", "the runtime copy, whose maxRestarts gives K, could not be read")
    problems = multikueue_problems(runtime_spec)
    if problems:
        raise ContractError("runtime copy", "; ".join(map(str, problems)))
    k = step(runtime_spec)
    reused = reusable_a(trainjob, workload)
    if reused is not None:
        return k, Raise(a=reused, patch=[])
    return k, raise_dispatch(trainjob, k)


def jobs_active(trainjob: Mapping[str, Any]) -> bool:
    """A Job of the TrainJob is active by its status (Kueue's ``IsActive``): on a MultiKueue manager, the status
    MultiKueue copied from the worker's TrainJob, which Kueue waits to show none before it releases the quota."""
    jobs = dig(trainjob, "status", "jobsStatus")
    return any(
        isinstance(j, Mapping) and isinstance(j.get("active"), int) and j["active"] > 0
        for j in (jobs if isinstance(jobs, list) else [])
    )


def hold_in_force(obj: Mapping[str, Any] | None) -> str | None:
    """A hold of dispatch's on the object (its hold annotations), described; None when there is none."""
    found = annotations_of(obj)
    if not any(k in found for k in HOLD_ANNOTATIONS):
        return None
    return describe_hold(found)


def describe_hold(found: Mapping[str, str]) -> str:
    """A hold, from its annotations: who placed it and why."""
    who, reason = found.get(ANNOTATION_HOLD_WHO, "?"), found.get(ANNOTATION_HOLD_REASON, "?")
    return f"hold {found.get(ANNOTATION_HOLD_INSTANCE, '?')} by {who} ({reason})"


def not_startable(trainjob: Mapping[str, Any], workload: Mapping[str, Any] | None) -> str | None:
    """Why the gate must not approve an execution of this dispatch job whatever its pods: dispatch never
    opened it, or a hold of dispatch's is in force (its annotations on the TrainJob or the Workload; a
    deactivated Workload is waited on before this). None when it may start."""
    if not is_opened_by_dispatch(trainjob):
        return (
            f"dispatch has not opened this TrainJob (no {ANNOTATION_OPENED} mark, or dispatch's gate is still on "
            "it): nothing runs before dispatch's Open"
        )
    for where, obj in (("TrainJob", trainjob), ("Workload", workload)):
        hold = hold_in_force(obj)
        if hold is not None:
            return f"held by dispatch: {hold} is on the {where}; only dispatch's Release lifts it"
    return None


def _set(
    action: Action,
    workload: Mapping[str, Any],
    check: str,
    state: str,
    message: str,
    now: str,
    foreign: tuple[str, ...] = (),
) -> Decision:
    """A decision that writes only the check, and only when its state or message would change."""
    entry = check_state(workload, check) or {}
    unchanged = entry.get("state") == state and entry.get("message") == message
    write = None if unchanged else check_state_apply(workload, check, state, message, now)
    return Decision(action, message, check_write=write, foreign=foreign)
