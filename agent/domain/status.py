"""Status: what the cluster shows of one dispatch TrainJob, computed from the objects as read.

Executions are read off the pods: each trainer pod carries the A it started with (its admission
annotation) and the J it belongs to (the restart-attempt label), so the identity DISPATCH_EPOCH /
DISPATCH_ATTEMPT of every execution the cluster still shows can be recomputed exactly as the prologue did.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from agent.domain.decide import blockers_of
from agent.domain.node_loss import Assessment, assess
from agent.domain.operations import finished, held_by, is_held, is_opened
from agent.domain.workload import QUOTA_RESERVED, check_state, condition_true
from contract.admission import POD_TEMPLATE_IN_ENTRY, admission_count, admission_floor, parse_count
from contract.errors import ContractError
from contract.foreign import foreign_reasons, trainer_pods
from contract.identity import Execution
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_HOLD_INSTANCE,
    ANNOTATION_HOLD_REASON,
    ANNOTATION_HOLD_SINCE,
    ANNOTATION_HOLD_UNTIL,
    ANNOTATION_HOLD_WHO,
    LABEL_RESTART_ATTEMPT,
    POD_FINALIZER,
)
from contract.multicluster import PREBUILT_WORKLOAD, is_copy, managed_by_multikueue
from contract.objects import annotations as annotations_of
from contract.objects import dig, labels, parse_rfc3339
from contract.ownership import dispatch_patch, is_kueue_mode
from contract.trainer import prefixes_from_env


@dataclass(frozen=True)
class Remains:
    """What of the job is left on one worker (agent/multicluster/worker_remains.py finds it; a Status carries it)."""

    cluster: str
    read: bool
    """The worker was read; False: it has no credential, or cannot be read (``reason`` says which), or is fenced."""
    orphans: tuple[str, ...] = field(default_factory=tuple)
    """What of the job is there, named as orphans are (``<namespace>/<kind>/<name>``): MultiKueue's copy
    (``…/trainjob/…``), its JobSet, its Jobs, and its pods that may still run."""
    may_still_run: bool = False
    """Something of the job may still run there, or start: a pod that may still run, or what may create one.
    True for a worker that could not be read (never taken as empty); False for a fenced one."""
    reason: str = ""
    """Why ``may_still_run`` is what it is, or why the worker was not read."""
    fenced: bool = False


@dataclass(frozen=True)
class PodStatus:
    name: str
    node: str | None
    phase: str | None
    verdict: str
    may_still_run: bool
    reason: str
    a: int | None
    j: int | None


@dataclass(frozen=True)
class ExecutionStatus:
    a: int
    j: int
    r: int | None
    epoch: int | None
    attempt: str | None
    pods: tuple[str, ...]


@dataclass(frozen=True)
class HoldStatus:
    """dispatch's hold as recorded on the TrainJob (both modes; a Kueue-mode hold of an older agent: on the
    Workload only).

    ``until`` is reported, never acted on: the agent does not release a hold by itself (a release lets
    something run, which is the supervisor's or a person's call); ``expired`` says the time has passed."""

    instance: str | None
    since: str | None
    who: str | None
    reason: str | None
    until: str | None
    expired: bool


@dataclass(frozen=True)
class Status:
    phase: str
    mode: str
    gate: str
    held_by: tuple[str, ...]
    check_state: str | None
    check_message: str | None
    a: int | None
    floor: int | None
    j: int | None
    r: int | None
    executions: tuple[ExecutionStatus, ...]
    pods: tuple[PodStatus, ...]
    ceased: bool
    foreign: tuple[str, ...]
    orphans: tuple[str, ...] = field(default_factory=tuple)
    ceased_reason: str = ""
    hold: HoldStatus | None = None
    cluster: str | None = None
    """On a MultiKueue manager: the worker MultiKueue runs the job on (its Workload's ``status.clusterName``),
    whose pods and JobSet this Status reports."""
    cluster_reason: str = ""
    """Why that worker's pods are not reported ("" when they are): no credential for it, unreadable, or the
    TrainJob of the job's name there is not MultiKueue's copy of this job."""
    workers: tuple[Remains, ...] = ()
    """On a MultiKueue manager, while the TrainJob is being deleted (Stop): what of the job is left on each worker
    (agent/multicluster/worker_remains.py), which then decides Ceased (``idle_on_workers``)."""


def _count(read: Callable[[object], int | None], obj: object) -> int | None:
    try:
        return read(obj)
    except ContractError:
        return None


def _pod_count(value: object) -> int | None:
    try:
        return parse_count("", value)
    except ContractError:
        return None


def phase(trainjob: Mapping[str, Any], workload: Mapping[str, Any] | None, checks: Iterable[str]) -> str:
    end = finished(trainjob)
    if end:
        return end
    if not is_opened(trainjob):
        return "Gated"
    if is_kueue_mode(trainjob):
        if dig(workload, "spec", "active") is False or _held_suspended(trainjob, workload):
            return "Held"
        if dig(trainjob, "spec", "suspend") is True:
            pending = any((check_state(workload, c) or {}).get("state") == "Pending" for c in checks)
            return "Admitting" if condition_true(workload, QUOTA_RESERVED) and pending else "Queued"
        return "Running"
    if dig(trainjob, "spec", "suspend") is True:
        return "Held" if is_held(trainjob) else "Suspended"
    return "Running"


def _held_suspended(trainjob: Mapping[str, Any], workload: Mapping[str, Any] | None) -> bool:
    """Kueue mode: suspended, with dispatch's hold on the TrainJob (or, left by an older agent, the Workload):
    nothing unsuspends it and the readmission gate approves nothing until Release, even while the Workload is
    active (a Hold or a Release interrupted between its two writes)."""
    return dig(trainjob, "spec", "suspend") is True and (is_held(trainjob) or is_held(workload))


def idle_because(trainjob: Mapping[str, Any], workload: Mapping[str, Any] | None) -> str | None:
    """Why no new execution of the TrainJob can start without a dispatch call, or None when one can.

    Never opened: the start gate. Ended: Trainer starts nothing more. Being deleted: nothing is recreated.
    Held by dispatch: plain mode's suspended TrainJob, Kueue mode's inactive Workload or suspended TrainJob
    carrying the hold annotations, lifted only by Release. Anything else (Queued, Admitting, Running, or
    suspended by someone else) may start one at any time: Kueue admits, Trainer and JobSet create pods,
    someone unsuspends."""
    end = finished(trainjob)
    if not is_opened(trainjob):
        return "it was never opened"
    if end:
        return f"it ended ({end})"
    if dig(trainjob, "metadata", "deletionTimestamp"):
        return "it is being deleted"
    if is_kueue_mode(trainjob):
        if dig(workload, "spec", "active") is False:
            return "its Workload is held (inactive)"
        if _held_suspended(trainjob, workload):
            return "it is held (suspended, with dispatch's hold annotations)"
        return None
    if dig(trainjob, "spec", "suspend") is True and is_held(trainjob):
        return "it is held (suspended)"
    return None


JOBSET_AT_REST: Final = ("Completed", "Failed", "Suspended")
"""JobSet's conditions under which it creates no Job, and so no pod: JobSet's own test of an inactive JobSet.
``Suspended`` is set once every child Job was written ``suspend: true``, and a suspended Job creates no pod."""


def pods_may_appear(trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> str | None:
    """Why a pod of the current execution may still be created though none is listed yet, or None when none
    can: the TrainJob ended, or it is suspended or being deleted and its JobSet is gone, being deleted, or at
    rest (``JOBSET_AT_REST``). A Kueue-mode hold deactivates the Workload first, and only then does Kueue
    suspend the TrainJob and Trainer the JobSet: until the JobSet says it is suspended, a Job may still start
    pods. The runtime requirements (``backoffLimit: 0``, ``restartPolicy: Never``) mean a Job never replaces
    a pod, so a JobSet at rest creates none."""
    if finished(trainjob):
        return None
    if dig(trainjob, "spec", "suspend") is not True and not dig(trainjob, "metadata", "deletionTimestamp"):
        return "the TrainJob is not suspended yet: its JobSet may still create pods"
    if jobset is None or dig(jobset, "metadata", "deletionTimestamp"):
        return None
    conditions = dig(jobset, "status", "conditions")
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") in JOBSET_AT_REST and c.get("status") == "True":
            return None
    return f"its JobSet is not at rest yet (none of {', '.join(JOBSET_AT_REST)}): a Job of it may still create pods"


def _pods_keep_evidence(trainjob: Mapping[str, Any]) -> bool:
    """dispatch's runtime patch puts dispatch's pod finalizer on the trainer's pods (every TrainJob Start
    creates does; one created before the finalizer existed does not)."""
    jobs = dig(dispatch_patch(trainjob), *POD_TEMPLATE_IN_ENTRY)
    found = dig(jobs, 0, "template", "spec", "template", "metadata", "finalizers")
    return isinstance(found, list) and POD_FINALIZER in found


def ceased(
    trainjob: Mapping[str, Any],
    workload: Mapping[str, Any] | None,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    assessment: Assessment,
) -> tuple[bool, str]:
    """Ceased: every process of the TrainJob is certainly gone, and none can start without a dispatch call.

    Read from the evidence the readmission gate admits the next execution on, so the two never disagree:

    1. no pod the API lists may still run (``blockers_of``, the gate's own: the node-loss classification says
       Ended, NotScheduled or Ceased of each). A trainer pod no longer listed has ended: it carries dispatch's
       finalizer, which only the agent removes, once its processes are proven gone (agent/domain/pod_finalizer.py);
    2. no new execution can start by itself (``idle_because``): never opened, ended, being deleted, or held;
    3. the current execution creates no more pods (``pods_may_appear``): a pod not created yet is not listed
       either. The gate has this from Kueue, which reserves quota again only once the job is inactive.

    A TrainJob MultiKueue runs (on a manager) is not Ceased here once an execution was admitted: its pods are on
    a worker, which only the API's Status reads (agent/multicluster/worker_remains.py ``idle_on_workers``).

    A TrainJob whose trainer pods do not carry the finalizer (created before it existed) keeps the older
    rule: a pod gone from the API is no evidence, so a trainer pod of the current A must be listed.
    """
    waiting = blockers_of(assessment)
    if waiting:
        return False, f"{len(waiting)} pod(s) may still run: " + ", ".join(b.pod for b in waiting)
    why_not = idle_because(trainjob, workload)
    if why_not is None:
        return False, "a new execution may start without a dispatch call (it is queued, admitted or running)"
    floor, a = _count(admission_floor, trainjob), _count(admission_count, trainjob)
    current = max(floor or 0, a or 0)
    if current == 0:
        return True, f"no execution was ever admitted and none can start: {why_not}"
    if managed_by_multikueue(trainjob):
        # Its pods are on a worker, which the manager's agent does not read: this cluster's empty pod list is no
        # evidence, and MultiKueue deletes a worker's copy without waiting for its pods (docs/multicluster.md).
        return False, (
            f"it runs through MultiKueue: the pods of its executions (A={current}) are on a worker, which this "
            "agent does not read, so that their processes are gone is not proven here"
        )
    appearing = pods_may_appear(trainjob, jobset)
    if appearing is not None:
        return False, f"the current execution (A={current}) may still create pods: {appearing}"
    if not _pods_keep_evidence(trainjob):
        ran = [
            p
            for p in trainer_pods(trainjob, pods)
            if _pod_count(annotations_of(p).get(ANNOTATION_ADMISSION)) == current
        ]
        if not ran:
            return False, (
                f"no pod of the current execution (A={current}) is listed, and its pods carry no {POD_FINALIZER} "
                "finalizer: a pod gone from the API is no evidence that its processes ended"
            )
    return True, (
        f"none of its pods can run any more (a trainer pod gone from the API has ended), the current execution "
        f"(A={current}) creates no more, and none can start: {why_not}"
    )


def hold_status(holder: object, now: dt.datetime | None) -> HoldStatus | None:
    """dispatch's hold annotations as recorded on ``holder``, or None when there is no hold."""
    if not is_held(holder):
        return None
    values = annotations_of(holder)

    def get(key: str) -> str | None:
        value = values.get(key)
        return value if isinstance(value, str) else None

    until = get(ANNOTATION_HOLD_UNTIL)
    moment = parse_rfc3339(until)
    return HoldStatus(
        instance=get(ANNOTATION_HOLD_INSTANCE),
        since=get(ANNOTATION_HOLD_SINCE),
        who=get(ANNOTATION_HOLD_WHO),
        reason=get(ANNOTATION_HOLD_REASON),
        until=until,
        expired=moment is not None and now is not None and moment <= now,
    )


def hold_of(
    trainjob: Mapping[str, Any], workload: Mapping[str, Any] | None, now: dt.datetime | None
) -> HoldStatus | None:
    """dispatch's hold: as recorded on the TrainJob (both modes); in Kueue mode, when the TrainJob carries none,
    as recorded on the Workload (a hold placed by an older agent, which wrote it there only)."""
    found = hold_status(trainjob, now)
    if found is None and is_kueue_mode(trainjob):
        return hold_status(workload, now)
    return found


def executions(trainjob: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> tuple[ExecutionStatus, ...]:
    """One entry per (A, J) seen on the trainer pods, with its identity; the highest R last."""
    try:
        job_id, g, n, attempt = prefixes_from_env(dig(trainjob, "spec", "trainer", "env"))
    except ContractError:
        job_id = None
    groups: dict[tuple[int, int], list[str]] = {}
    for pod in trainer_pods(trainjob, pods):
        a = _pod_count(annotations_of(pod).get(ANNOTATION_ADMISSION))
        j = _pod_count(labels(pod).get(LABEL_RESTART_ATTEMPT))
        if a is not None and j is not None:
            groups.setdefault((a, j), []).append(str(dig(pod, "metadata", "name")))
    found = []
    for (a, j), names in groups.items():
        try:
            ex = Execution(job_id=job_id, g=g, n=n, attempt=attempt, a=a, j=j) if job_id else None
            r, epoch, token = (ex.r, ex.epoch, ex.token) if ex else (None, None, None)
        except ContractError:  # A = 0, or R at the bound: the prologue refused to run it
            r, epoch, token = None, None, None
        found.append(ExecutionStatus(a, j, r, epoch, token, tuple(sorted(names))))
    return tuple(sorted(found, key=lambda e: (e.r is not None, e.r or 0, e.a, e.j)))


def status(
    *,
    trainjob: Mapping[str, Any],
    workload: Mapping[str, Any] | None,
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    runtime_copy: Mapping[str, Any] | None,
    checks: Iterable[str],
    node_loss_taints: Iterable[str] = (),
    now: dt.datetime | None = None,
) -> Status:
    """``now``: to tell whether a hold's ``until`` has passed (not reported as expired without it)."""
    checks = list(checks)
    assessment = assess(pods, nodes, node_loss_taints)
    pod_statuses = _pod_statuses(pods, assessment)
    a, floor = _count(admission_count, trainjob), _count(admission_floor, trainjob)
    restarts = dig(jobset, "status", "restarts")
    j = restarts if isinstance(restarts, int) else (0 if jobset is not None else None)
    entry = next((check_state(workload, c) for c in checks if check_state(workload, c)), None)
    is_ceased, ceased_why = ceased(trainjob, workload, jobset, pods, assessment)
    return Status(
        phase=phase(trainjob, workload, checks),
        mode="kueue" if is_kueue_mode(trainjob) else "plain",
        gate="open" if is_opened(trainjob) else "closed",
        held_by=held_by(trainjob, workload),
        check_state=entry.get("state") if entry else None,
        check_message=entry.get("message") if entry else None,
        a=a,
        floor=floor,
        j=j,
        r=a + j if a is not None and j is not None else None,
        executions=executions(trainjob, pods),
        pods=pod_statuses,
        ceased=is_ceased,
        foreign=tuple(foreign_reasons(trainjob, jobset=jobset, pods=pods, runtime_copy=runtime_copy)),
        orphans=orphans(trainjob, jobset=jobset, pods=pods, runtime_copy=runtime_copy),
        ceased_reason=ceased_why,
        hold=hold_of(trainjob, workload, now),
    )


def _pod_statuses(pods: Sequence[Mapping[str, Any]], assessment: Assessment) -> tuple[PodStatus, ...]:
    return tuple(
        PodStatus(
            name=c.pod,
            node=c.node,
            phase=dig(p, "status", "phase"),
            verdict=c.verdict.value,
            may_still_run=c.may_still_run,
            reason=c.reason,
            a=_pod_count(annotations_of(p).get(ANNOTATION_ADMISSION)),
            j=_pod_count(labels(p).get(LABEL_RESTART_ATTEMPT)),
        )
        for p, c in zip(pods, assessment.classifications, strict=True)
    )


def copy_of(workload: Mapping[str, Any] | None, copy: Mapping[str, Any] | None) -> bool:
    """``copy`` (a worker's TrainJob of the job's name) is MultiKueue's copy of the job whose manager Workload is
    ``workload``: it carries MultiKueue's origin label and names that Workload as its prebuilt one, by a label or,
    where Kueue's ``WorkloadIdentifierAnnotations`` is on (or the name is too long for a label), an annotation
    of the same key (Kueue v0.19.2 ``SetMultiKueueMeta``). A TrainJob of the same name made there by anyone
    else is not reported as the job."""
    name = dig(workload, "metadata", "name")
    named = (labels(copy).get(PREBUILT_WORKLOAD), annotations_of(copy).get(PREBUILT_WORKLOAD))
    return is_copy(copy) and name is not None and name in named


def on_worker(
    s: Status,
    cluster: str,
    *,
    copy: Mapping[str, Any],
    jobset: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    foreign: Sequence[str],
    nodes: Mapping[str, Mapping[str, Any]],
    node_loss_taints: Iterable[str] = (),
) -> Status:
    """A manager's Status ``s`` of a job MultiKueue runs on ``cluster``, with that worker's view: the pods of
    MultiKueue's ``copy`` there (``pods``: sorted by the ownership chain from the copy; ``foreign``: the others,
    reported), judged on that worker's ``nodes``, and their executions. A, the floor, the gate, the hold and
    Ceased stay the manager's: the manager numbers every dispatch, and Ceased needs every worker, not this one
    (docs/multicluster.md). J is the copy's JobSet's, and R = A + J, only while the copy carries the manager's A
    (a copy of an earlier dispatch reports its executions, not the current J)."""
    assessment = assess(pods, nodes, node_loss_taints)
    restarts = dig(jobset, "status", "restarts")
    j = restarts if isinstance(restarts, int) else (0 if jobset is not None else None)
    current = j is not None and s.a is not None and _count(admission_count, copy) == s.a
    return replace(
        s,
        cluster=cluster,
        cluster_reason="",
        pods=_pod_statuses(pods, assessment),
        executions=executions(copy, pods),
        j=j if current else None,
        r=s.a + j if current and s.a is not None and j is not None else None,
        foreign=(*s.foreign, *(f"on worker {cluster}: {f}" for f in foreign)),
    )


def _owned_by(obj: object, uid: str | None) -> bool:
    refs = dig(obj, "metadata", "ownerReferences")
    return uid is not None and any(isinstance(r, Mapping) and r.get("uid") == uid for r in (refs or []))


def orphans(
    trainjob: Mapping[str, Any] | None,
    *,
    namespace: str | None = None,
    jobset: Mapping[str, Any] | None = None,
    pods: Sequence[Mapping[str, Any]] = (),
    runtime_copy: Mapping[str, Any] | None = None,
) -> tuple[str, ...]:
    """Objects of a dispatch TrainJob's name that the TrainJob (by uid) does not own: left from a deleted or
    replaced TrainJob, named as the spec writes them: ``<namespace>/jobset/<name>``, ``…/pod/…``,
    ``…/trainingruntime/…``. Pods belong to their JobSet, so they are orphans when it is."""
    uid = dig(trainjob, "metadata", "uid")
    ns = namespace or dig(trainjob, "metadata", "namespace")
    found = []
    jobset_orphaned = jobset is not None and not _owned_by(jobset, uid)
    if jobset_orphaned:
        found.append(f"{ns}/jobset/{dig(jobset, 'metadata', 'name')}")
    if jobset_orphaned or (jobset is None and trainjob is None):
        found += [f"{ns}/pod/{dig(p, 'metadata', 'name')}" for p in pods]
    if runtime_copy is not None and not _owned_by(runtime_copy, uid):
        found.append(f"{ns}/trainingruntime/{dig(runtime_copy, 'metadata', 'name')}")
    return tuple(found)
