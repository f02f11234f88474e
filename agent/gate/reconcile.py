"""One pass of the readmission gate over one Workload: the order of operations, which is the safety argument.

a. ONE read of the Workload: from the agent's watch cache when it is live and holds it, else a GET
   (agent/runtime/caches.py). Every write below that approves an admission is preconditioned on this read's
   resourceVersion, and the Workload is never read again in this pass.
b. What the decision needs: the owning TrainJob and its JobSet (watch caches, else GETs); its pods, by a
   consistent LIST issued after the pass began (agent/runtime/pod_lists.py); the Jobs those pods name and the Nodes
   they run on, by fresh GETs. For a dispatch TrainJob, a fresh GET of every check the Workload lists but
   dispatch's own: MultiKueue mode is the TrainJob's ``spec.managedBy``, and these reads name its MultiKueue checks
   (a check not there or not readable is a hold: agent/domain/decide.py ``dispatch_mode``, never the AdmissionCheck
   cache, which misses a check just made). In MultiKueue mode, for a dispatch TrainJob, also every worker it may have
   run on (agent/multicluster/worker_pass.py: fresh reads of its MultiKueue checks, their MultiKueueConfigs and the
   fences, then each worker's pods, Jobs and Nodes with the agent's own credential there:
   agent/multicluster/worker_reads.py), likewise after the pass began.
c. The decision (agent/domain/decide.py, pure).
d. The writes, in this order: on a worker, the record of a copy's first admission in the Workload
(agent/domain/decide.py
   ``worker_copy``; the Ready then carries the resourceVersion that record's response gives); the JobSet UID
   record in the TrainJob, the first time and only if no one made
   it yet (preconditioned on the TrainJob as read); only then the check's state in the Workload
   (preconditioned on the Workload as read in a). A itself is raised by the write that starts the execution,
   not here, except in MultiKueue mode (contract/multicluster.py): there the TrainJob write raises A by K,
   with the record if due, before the Ready, because MultiKueue copies the TrainJob before the unsuspend; then
   the Workload's patch stamps that A (and on a hold removes the stamp), before the check's state.
   Each landed write's response goes into the cache when newer, so a next pass does not read our own
   pre-write copy.
e. Reports: an Event when a held check's message changed, and each foreign reason once per TrainJob.

Why this is safe with a slow, stalled or duplicated controller (the spec's "a slow or stalled controller is
safe"): Kueue resets the check to Pending on every eviction, in a write that changes the Workload's
resourceVersion. A Ready write preconditioned on a read from before the look at the pods can therefore land
only if nothing evicted the Workload between that read and the write, i.e. only in the admission cycle in
which the pods were looked at. A stale Ready fails with 409 and the next pass decides afresh. Writing Ready
against a *later* read would break this: it would prove nothing about when the pods were looked at.

Why a cached read is as safe as a GET: a copy the watch showed is a read taken earlier still. A stale
Workload fails the Ready write (409). A stale TrainJob can only be one from before a Hold (a copy from before
Open or a Release is held, the safe way): it fails the JobSet UID record (409) when one is made, and otherwise
may approve, which starts nothing: the unsuspend that would follow is refused while the hold is in force (the
unsuspend policy and the webhook: the choke point), Hold's next write deactivates the Workload (Kueue's
eviction resets the check), and the A the execution starts with is the API server's, from the object as
stored, never the copy's. The pods, which no precondition protects, are LISTed after the pass began, so
after the cached Workload's version was written: the LIST sees every pod that existed then. The JobSet only
decides whether a counted pod is proven ours or unproven (agent/domain/pod_owners.py: both are counted). Jobs and
Nodes are fresh GETs: a stale Node could still show an out-of-service taint since removed, which would
release a pod wrongly.

Nothing here keeps state between passes; the controller's caches decide what to enqueue and spare GETs. What a
pass reads from and writes through comes whole in its ``Pass`` (agent/gate/context.py).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.domain import pod_owners
from agent.domain.decide import Action, Blocker, Decision, blockers_of, decide
from agent.domain.multikueue_mode import Mode, dispatch_mode, other_checks
from agent.domain.node_loss import assess
from agent.domain.workload import QUOTA_RESERVED, keep_our_entries, owner_trainjob, waiting_reason
from agent.gate.context import Pass, WorkloadKey
from agent.multicluster.replicas import replica
from agent.multicluster.worker_pass import look_at_workers, read_checks
from agent.multicluster.workers import is_remote
from agent.runtime.kube import Kube
from contract.admission import admission_count
from contract.objects import dig
from contract.ownership import is_dispatch
from contract.upstream import NAMESPACES
from serving.client import KubeError
from serving.logs import fields

log = logging.getLogger(__name__)

UNPROVEN = " (its Job is gone, so it cannot be proven not to be this TrainJob's)"


@dataclass(frozen=True)
class Outcome:
    action: Action | None
    """What was decided; None when nothing was (the Workload is gone, or no check of ours is due)."""
    message: str
    check: str | None = None
    requeue: bool = False
    """Try again after a backoff: a write failed, or the answer may change without an event we watch."""
    conflict: str | None = None
    """"trainjob" or "workload": which preconditioned write was refused because the object changed."""
    new_a: int | None = None
    """The A the approved execution starts with (also when the Ready write then failed)."""
    ready: bool = False
    """The check was set Ready by this pass."""
    held_nodes: frozenset[str] | None = None
    """On a hold because pods may still run: the Nodes they name (a change to one re-evaluates it)."""
    more: bool = False
    """Another check of ours on this Workload is due too: run another pass at once."""
    quota_reserved_at: str | None = None
    """QuotaReserved's lastTransitionTime as read (for the reserved-to-Ready latency)."""
    foreign_reported: int = 0


def utc_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def due_checks(workload: Mapping[str, Any], ours: frozenset[str]) -> list[str]:
    """Our checks in this Workload that the gate must act on now, in the Workload's (Kueue's sorted) order."""
    entries = dig(workload, "status", "admissionChecks")
    names = [e.get("name") for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []
    return [n for n in names if n in ours and waiting_reason(workload, n) is None]


async def reconcile(ctx: Pass, key: WorkloadKey) -> Outcome:
    """One pass over ``key``, with what ``ctx`` holds (agent/gate/context.py): its reads, our check names, the
    workers' clients on a MultiKueue manager (guarantee 4), the settings and the test hooks."""
    # a. The one read of the Workload.
    workload = await ctx.reads.workload(key.namespace, key.name)
    if workload is None:
        return Outcome(None, "the Workload is gone")
    ours = await ctx.checks.names()
    due = due_checks(workload, ours)
    if not due:
        return Outcome(None, "no check of ours is due")
    check = due[0]
    reserved_at = _quota_reserved_at(workload)
    if ctx.hooks.after_read is not None:
        await ctx.hooks.after_read(workload)

    # b. What the decision needs: the TrainJob and JobSet (caches), the pods (a LIST after the pass began), and in
    # MultiKueue mode the workers.
    seen = await _see(ctx, workload, ours)
    trainjob, blockers = seen.trainjob, seen.blockers

    # c. The decision.
    d = decide(
        workload=workload,
        check=check,
        trainjob=trainjob,
        jobset=seen.jobset,
        pods=seen.pods,
        blockers=blockers,
        now=utc_now(),
        foreign_pods=seen.foreign_pods,
        multikueue=seen.mode.multikueue,
        runtime_spec=seen.runtime_spec,
        role=ctx.settings.multicluster_role,
        multikueue_problem=seen.mode.problem,
        scope_problem=seen.scope_problem,
        in_contact=ctx.in_contact(),
    )
    base: dict[str, Any] = {"check": check, "quota_reserved_at": reserved_at}

    # d. The writes: the TrainJob's patch (the JobSet UID record when first seen, the approval of the execution),
    # and only if it landed, the Workload's and the check.
    refused = await _write_trainjob(ctx, key, trainjob, check, d, base)
    if refused is not None:
        return refused
    written = await _write_workload(ctx, key, workload, ours, trainjob, check, d, base)
    if isinstance(written, Outcome):
        return written
    wrote = written
    ready = wrote and d.action in (Action.APPROVE, Action.ADMIT)
    _log_decision(key, trainjob, check, d, "written" if wrote else "unchanged", d.message)

    # e. Reports, about the TrainJob that owns the Workload (not another object that took its name).
    if wrote and d.action is Action.HOLD and _owned(workload, trainjob) and is_dispatch(trainjob):
        await ctx.kube.events.held(trainjob, d.message)
    reported = await _report_foreign(ctx.kube, trainjob, d)
    return Outcome(
        d.action,
        d.message,
        # A hold that no pod or node change will lift (the TrainJob not readable yet, A not raisable) has no
        # event of ours to wake it: look again after a backoff.
        # Nor will one on a worker: nothing here watches the workers.
        requeue=d.action is Action.HOLD and (not blockers or any(is_remote(b) for b in blockers)),
        new_a=d.new_a,
        ready=ready,
        held_nodes=seen.nodes if d.action is Action.HOLD and blockers else None,
        # Another check of ours is due as well: it gets its own pass (its own look and its own Ready, each
        # preconditioned on that pass's read). Not after a hold: the same pods hold every check.
        more=ready and len(due) > 1,
        foreign_reported=reported,
        **base,
    )


@dataclass(frozen=True)
class _Seen:
    """What step b read for the decision."""

    trainjob: dict[str, Any] | None
    jobset: dict[str, Any] | None
    pods: list[Mapping[str, Any]]
    foreign_pods: tuple[pod_owners.ForeignPod, ...]
    blockers: list[Blocker]
    nodes: frozenset[str]
    mode: Mode
    runtime_spec: Mapping[str, Any] | None
    scope_problem: str | None = None


async def _see(ctx: Pass, workload: Mapping[str, Any], ours: frozenset[str]) -> _Seen:
    """Step b: the TrainJob, its JobSet and pods, its mode, and in MultiKueue mode what its workers hold."""
    trainjob, jobset, pods, foreign_pods, blockers, nodes = await _look(ctx, workload)

    # MultiKueue mode: the TrainJob's spec.managedBy decides it, and its MultiKueue checks are identified by fresh
    # GETs of the checks the Workload lists (never the AdmissionCheck cache: it misses a check deleted and made
    # again). The gate numbers the dispatch before its Ready, by K from the runtime copy (one GET).
    mode = await _mode(ctx.kube, workload, trainjob, ours)
    multikueue, multikueue_checks = mode.multikueue, mode.checks
    runtime_copy = await _runtime_copy(ctx.kube, trainjob) if multikueue else None
    runtime_spec = _spec_of(runtime_copy)
    if multikueue and mode.problem is None and trainjob is not None and _owned(workload, trainjob):
        # Guarantee 4: no pod of the job runs here; an earlier execution may still run on any of its workers.
        # And each worker read holds the replica of the runtime copy that MultiKueue's copy of the TrainJob names.
        name = dig(trainjob, "metadata", "name")
        want = replica(runtime_copy, dig(trainjob, "metadata", "uid")) if runtime_spec is not None else None
        remote = await look_at_workers(
            ctx.kube,
            ctx.reads,
            ctx.workers,
            workload,
            multikueue_checks,
            name,
            ctx.settings.node_loss_taints,
            want,
            trainjob,
        )
        blockers = [*blockers, *remote]
    scope = await _scope(ctx, workload, trainjob)
    return _Seen(trainjob, jobset, pods, foreign_pods, blockers, nodes, mode, runtime_spec, scope)


async def _scope(ctx: Pass, workload: Mapping[str, Any], trainjob: Mapping[str, Any] | None) -> str | None:
    """Why the dispatch TrainJob's namespace is out of dispatch's scope (agent/config.py ``scope_problem``), its
    labels read now when the scope has a selector; a namespace that cannot be read is a reason too (fail closed)."""
    if trainjob is None or not _owned(workload, trainjob) or not is_dispatch(trainjob):
        return None
    namespace, labels = str(dig(trainjob, "metadata", "namespace")), None
    if ctx.settings.scope_reads_labels:
        try:
            read = await ctx.kube.rest.get(NAMESPACES.path(name=namespace))
        except KubeError as exc:
            return f"its namespace {namespace} cannot be read to judge dispatch's scope: {exc.describe()}"
        labels = dig(read, "metadata", "labels") or {}
    return ctx.settings.scope_problem(namespace, labels)


async def _write_trainjob(
    ctx: Pass,
    key: WorkloadKey,
    trainjob: Mapping[str, Any] | None,
    check: str,
    d: Decision,
    base: dict[str, Any],
) -> Outcome | None:
    """The TrainJob's patch, if the decision makes one; the pass's Outcome when it was refused."""
    if d.trainjob_patch is None:
        return None
    assert trainjob is not None  # decide() patches only a TrainJob it was given
    kube = ctx.kube
    try:
        recorded = await kube.patch_trainjob(key.namespace, dig(trainjob, "metadata", "name"), d.trainjob_patch)
    except KubeError as exc:
        # 409: the TrainJob changed since it was read; 422: a different object of that name. Decide again
        # on a fresh read.
        reported = await _report_foreign(kube, trainjob, d)
        _log_decision(key, trainjob, check, d, "record refused", exc.describe())
        return Outcome(
            d.action,
            f"the TrainJob's patch (JobSet UID record, approval) was refused: {exc.describe()}",
            requeue=True,
            conflict="trainjob" if exc.status in (409, 422) else None,
            foreign_reported=reported,
            **base,
        )
    ctx.reads.wrote_trainjob(recorded)
    if ctx.hooks.after_record is not None:
        await ctx.hooks.after_record(trainjob)
    return None


async def _write_workload(
    ctx: Pass,
    key: WorkloadKey,
    workload: Mapping[str, Any],
    ours: frozenset[str],
    trainjob: Mapping[str, Any] | None,
    check: str,
    d: Decision,
    base: dict[str, Any],
) -> Outcome | bool:
    """The Workload's patch, then the check write, as the decision makes them: whether the check was written, or
    the pass's Outcome when a write was refused."""
    kube = ctx.kube
    check_write = d.check_write
    if d.workload_patch is not None:
        try:
            recorded_wl = await kube.patch_workload(key.namespace, key.name, d.workload_patch)
        except KubeError as exc:
            _log_decision(key, trainjob, check, d, "record refused", exc.describe())
            return Outcome(
                d.action,
                f"the Workload's patch was refused: {exc.describe()}",
                requeue=True,
                conflict="workload" if exc.status in (409, 422) else None,
                **base,
            )
        ctx.reads.wrote_workload(recorded_wl)
        if check_write is not None:
            # The record was preconditioned on the read of step a, so its resourceVersion follows that read
            # with no other write between: the Ready, preconditioned on it, still lands only in this cycle.
            meta = {**check_write["metadata"], "resourceVersion": dig(recorded_wl, "metadata", "resourceVersion")}
            check_write = {**check_write, "metadata": meta}

    wrote = False
    if check_write is not None:
        try:
            written = await kube.apply_workload_status(keep_our_entries(check_write, workload, ours))
            ctx.reads.wrote_workload(written)
            wrote = True
        except KubeError as exc:
            # 409: the Workload changed since step a (Kueue's eviction above all). The approval of this read
            # must not land; the next pass reads afresh and looks at the pods again.
            reported = await _report_foreign(kube, trainjob, d)
            _log_decision(key, trainjob, check, d, "check write refused", exc.describe())
            return Outcome(
                d.action,
                f"the check write was refused: {exc.describe()}",
                requeue=True,
                conflict="workload" if exc.status == 409 else None,
                new_a=d.new_a,
                foreign_reported=reported,
                **base,
            )
    return wrote


def _log_decision(
    key: WorkloadKey, trainjob: Mapping[str, Any] | None, check: str, d: Decision, result: str, why: str
) -> None:
    """The one line per decision, its keys as fields (serving/logs.py): a wait is routine, so debug."""
    a = d.new_a if d.new_a is not None else _admission_count(trainjob)
    name = dig(trainjob, "metadata", "name") if trainjob is not None else None
    log.log(
        logging.DEBUG if d.action is Action.WAIT else logging.INFO,
        "Workload %s: %s (A %s), check %s %s: %s",
        key,
        d.action.value,
        "-" if a is None else a,
        check,
        result,
        why,
        extra=fields(workload=str(key), trainjob=name, check=check, a=a, outcome=d.action.value, result=result),
    )


async def _mode(
    kube: Kube, workload: Mapping[str, Any], trainjob: Mapping[str, Any] | None, ours: frozenset[str]
) -> Mode:
    """MultiKueue mode for the Workload's own dispatch TrainJob (agent/domain/decide.py ``dispatch_mode``), from fresh
    GETs of every check the Workload lists but dispatch's own; one cluster's mode for anything else (the gate approves
    it at once, or holds until its TrainJob is read)."""
    if trainjob is None or not _owned(workload, trainjob) or not is_dispatch(trainjob):
        return Mode(False)
    return dispatch_mode(trainjob, await read_checks(kube, other_checks(workload, ours)))


async def _runtime_copy(kube: Kube, trainjob: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A dispatch TrainJob's runtime copy (its runtimeRef, in its namespace), or None: not a dispatch TrainJob,
    or the copy is not there (the gate then holds, saying so)."""
    if trainjob is None or not is_dispatch(trainjob):
        return None
    name = dig(trainjob, "spec", "runtimeRef", "name")
    if not isinstance(name, str):
        return None
    return await kube.get_training_runtime(dig(trainjob, "metadata", "namespace"), name)


def _spec_of(runtime_copy: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    spec = dig(runtime_copy, "spec")
    return spec if isinstance(spec, Mapping) else None


def _admission_count(trainjob: Mapping[str, Any] | None) -> int | None:
    try:
        return admission_count(trainjob) if trainjob is not None else None
    except ValueError:  # a malformed A is the gate's to report; the log line just lacks it
        return None


async def _look(
    ctx: Pass, workload: Mapping[str, Any]
) -> tuple[
    dict[str, Any] | None,
    dict[str, Any] | None,
    list[Mapping[str, Any]],
    tuple[pod_owners.ForeignPod, ...],
    list[Blocker],
    frozenset[str],
]:
    """The owning TrainJob, and for a dispatch TrainJob its JobSet, its pods (and the labelled pods that are
    provably not its own), and those of its pods that may still run. The Jobs and Nodes are fresh GETs: a
    stale Node could show an out-of-service taint that was removed, which would release a pod wrongly.

    A TrainJob that is not dispatch's is approved whatever its pods do, so nothing more is read for it."""
    namespace = dig(workload, "metadata", "namespace")
    owner = owner_trainjob(workload)
    if owner is None:
        return None, None, [], (), [], frozenset()
    name, uid = owner
    kube = ctx.kube
    trainjob = await ctx.reads.trainjob(namespace, name, uid)
    if trainjob is None or dig(trainjob, "metadata", "uid") != uid or not is_dispatch(trainjob):
        return trainjob, None, [], (), [], frozenset()
    # The TrainJob is suspended while its check is Pending, so every pod of its JobSet belongs to a
    # previous execution.
    labelled = await kube.list_pods(namespace, name)
    jobset = await ctx.reads.jobset(namespace, name)
    # Only the pods the ownership chain does not prove someone else's are waited on (agent/pod_owners.py).
    job_names = pod_owners.job_names(labelled)
    jobs = await asyncio.gather(*(kube.get_job(namespace, j) for j in job_names))
    owned = pod_owners.sort_pods(
        trainjob, jobset, labelled, {j: job for j, job in zip(job_names, jobs, strict=True) if job is not None}
    )
    pods = list(owned.ours)
    names = sorted({n for p in pods if isinstance(n := dig(p, "spec", "nodeName"), str) and n})
    found = await asyncio.gather(*(kube.get_node(n) for n in names))
    nodes = {n: node for n, node in zip(names, found, strict=True) if node is not None}  # absent: not in the map
    assessment = assess(pods, nodes, ctx.settings.node_loss_taints)
    blockers = blockers_of(assessment, frozenset(owned.unproven), suffix=UNPROVEN)
    return trainjob, jobset, pods, owned.foreign, blockers, frozenset(names)


async def _report_foreign(kube: Kube, trainjob: Mapping[str, Any] | None, d: Decision) -> int:
    if trainjob is None or not d.foreign:
        return 0
    return await kube.events.foreign(trainjob, d.foreign)


def _owned(workload: Mapping[str, Any], trainjob: Mapping[str, Any] | None) -> bool:
    owner = owner_trainjob(workload)
    return trainjob is not None and owner is not None and dig(trainjob, "metadata", "uid") == owner[1]


def _quota_reserved_at(workload: Mapping[str, Any]) -> str | None:
    conditions = dig(workload, "status", "conditions")
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") == QUOTA_RESERVED:
            value = c.get("lastTransitionTime")
            return value if isinstance(value, str) else None
    return None
