"""What of a dispatch job is still on the workers of a MultiKueue manager, decided (docs/multicluster.md, "Stop
across clusters"). Pure functions of the objects as read; agent/api/service.py reads them, with the agent's own
credential for each worker.

On a manager the job runs as MultiKueue's copy on a worker. Stop deletes the manager's TrainJob, which holds no
pods, so it is gone at once, and with it the Workload that said where the job went. MultiKueue deletes the copy
on the worker only while its connection to that worker works, and without waiting for the copy's pods. So Stop,
Status after Stop and Start read every worker the agent has a credential for (or that a MultiKueueCluster names),
not fenced, and report, each with its worker:

- MultiKueue's copy of the TrainJob: the TrainJob of the job's name there carrying Kueue's origin label
  ``kueue.x-k8s.io/multikueue-origin`` (a TrainJob of that name without it is not MultiKueue's, so not the job);
- its JobSet (the same name; MultiKueue reuses the name on every worker) and the Jobs labelled with that name
  whose controller is a JobSet of that name;
- the pods labelled with that name that may still run, sorted by the ownership chain and judged by the node-loss
  classification on that worker's nodes exactly as the manager's gate does before a dispatch.

Whether any of it may still run or start there is the gate's own rule (contract/workerlook.py ``on_worker``,
through agent/multicluster/workers.py ``look_at``): a pod that may still run, or a copy, JobSet or Job of the job not
finished (a suspension is undone when the parent resumes, a deletion counts once the object is gone). A worker
that cannot be read, or that the agent has no credential for, is never taken as empty, unless an administrator
declared it shut down (its MultiKueueCluster carries ``dispatch.phpboyscout.uk/fenced: powered-off``): such a worker
is still read where the agent has a credential for it, and what it shows counts; only one that cannot be read is
taken at the fence's word. A fence ``true`` is not enough here: with the TrainJob gone, no record says whether the
job ever ran there.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from agent.domain.status import Remains, Status
from agent.multicluster.workers import look_at
from contract.multicluster import is_powered_off
from contract.objects import dig
from contract.workerlook import WorkerLook


@dataclass(frozen=True)
class WorkerPlan:
    """Which workers to read for what is left of a job, with no Workload to say where it went."""

    read: tuple[str, ...]
    """The workers the agent has a credential for, fenced or not."""
    fenced: tuple[str, ...]
    """Fenced by an administrator: read where the agent has a credential (what they show counts), but one that
    cannot be read is taken as the fence says."""
    uncredentialed: tuple[str, ...]
    """Named by a MultiKueueCluster, not fenced, and the agent has no credential for them: cannot be read."""


def plan_remains(credentials: Collection[str], clusters: Sequence[Mapping[str, Any]]) -> WorkerPlan:
    """The workers to read: every one the agent has a credential for (``credentials``), and every one a
    MultiKueueCluster names (``clusters``: as listed on the manager); ``fenced``: those whose MultiKueueCluster
    declares them powered off."""
    fenced = {n for c in clusters if is_powered_off(c) and isinstance(n := dig(c, "metadata", "name"), str)}
    named = {n for c in clusters if isinstance(n := dig(c, "metadata", "name"), str) and n}
    return WorkerPlan(
        read=tuple(sorted(credentials)),
        fenced=tuple(sorted(fenced)),
        uncredentialed=tuple(sorted(named - set(credentials) - fenced)),
    )


def remains(
    cluster: str,
    namespace: str,
    name: str,
    look: WorkerLook,
    taints: Sequence[str] = (),
    now: dt.datetime | None = None,
) -> Remains:
    """What of the job ``namespace/name`` is on the worker ``cluster``, as its ``look`` showed, and whether any of it
    may still run or start there: the gate's own rule (agent/multicluster/workers.py ``look_at``), judged on its nodes
    with the node-loss ``taints``."""
    found = look_at(name, look, taints, now or dt.datetime.now(dt.UTC))
    named = [
        *([f"{namespace}/trainjob/{name}"] if found.copy is not None else []),
        *([f"{namespace}/jobset/{dig(found.jobset, 'metadata', 'name')}"] if found.jobset is not None else []),
        *(f"{namespace}/job/{job}" for job in found.jobs),
        *(f"{namespace}/pod/{pod}" for pod, _ in found.pods),
    ]
    why = []
    if found.pods:
        why.append(f"{len(found.pods)} pod(s) may still run: {', '.join(f'{p} ({w})' for p, w in found.pods)}")
    if found.copy_runs:
        deleting = dig(found.copy, "metadata", "deletionTimestamp")
        why.append(
            "MultiKueue's copy of the TrainJob is being deleted and has not finished: it may run until it is gone"
            if deleting
            else "MultiKueue's copy of the TrainJob is there and has not finished: it may start there"
        )
    if found.jobset_runs:
        why.append("its JobSet has not finished: a Job of it may still create pods")
    if found.jobs_running:
        jobs = ", ".join(found.jobs_running)
        why.append(f"{len(found.jobs_running)} Job(s) not finished may still create pods: {jobs}")
    if found.claim is not None:
        why.append(f"its claim {found.claim} there is still fresh: a copy may start under it")
    if why:
        return Remains(cluster, True, tuple(named), True, "; ".join(why))
    what = "nothing of the job is there" if not named else "nothing of the job there may run or start"
    return Remains(cluster, True, tuple(named), False, what)


def unread(cluster: str, why: str, plan: WorkerPlan | None = None) -> Remains:
    """A worker that could not be read: something of the job may still run there, as far as anyone here knows;
    unless an administrator fenced it (in ``plan``), which is taken as its word that nothing of it runs."""
    if plan is not None and cluster in plan.fenced:
        return Remains(cluster, False, (), False, f"{why}; fenced by an administrator: taken as shut down", fenced=True)
    return Remains(cluster, False, (), True, why)


def planned(plan: WorkerPlan) -> list[Remains]:
    """The entries a plan settles before any read: the fenced workers the agent has no credential for, and the
    others it has none for."""
    return [
        *(unread(w, "the agent has no credential to read it (workerKubeconfigs)", plan)
          for w in plan.fenced if w not in plan.read),
        *(unread(w, "the agent has no credential to read it (workerKubeconfigs)") for w in plan.uncredentialed),
    ]  # fmt: skip


def ceased_on_workers(workers: Sequence[Remains]) -> tuple[bool, str]:
    """Ceased across the workers: every worker not fenced was read, and nothing of the job may run or start on any;
    otherwise False, naming each worker that holds it and why."""
    holding = [w for w in workers if w.may_still_run]
    if holding:
        return False, "; ".join(f"worker {w.cluster}: {w.reason}" for w in sorted(holding, key=lambda w: w.cluster))
    read = sorted(w.cluster for w in workers if w.read)
    fenced = sorted(w.cluster for w in workers if w.fenced)
    said = f"nothing of it may run on any worker (read: {', '.join(read) or 'none'}"
    return True, said + (f"; fenced: {', '.join(fenced)})" if fenced else ")")


def left_on_workers(workers: Sequence[Remains]) -> list[Remains]:
    """The workers that still hold something of the job, or cannot be read: what Start refuses on."""
    return [w for w in workers if w.orphans or (w.may_still_run and not w.fenced)]


def start_refusal(namespace: str, name: str, workers: Sequence[Remains]) -> tuple[str, str] | None:
    """Start's refusal on a MultiKueue manager while a worker holds something of an earlier TrainJob of the name:
    (the error kind, the message), or None when no worker does. A worker that holds objects of the name refuses as
    the manager's own leftovers do (``conflict``); one that cannot be read refuses as ``unavailable``: retry, or
    fence it."""
    left = [w for w in left_on_workers(workers) if w.read]
    unreadable = [w for w in workers if not w.read and w.may_still_run]
    if left:
        where = "; ".join(f"worker {w.cluster}: {', '.join(w.orphans)}" for w in left)
        return "conflict", (
            f"TrainJob {namespace}/{name} does not exist here, but an earlier TrainJob of that name left objects on "
            f"a worker ({where}): a new one would start again at A = 0, repeating the earlier one's identity, and "
            "could run beside it; nothing was written. Start a name again only if no TrainJob of it was ever "
            "opened, once they are gone; a new run of a job is a new submission N"
        )
    if unreadable:
        where = "; ".join(f"worker {w.cluster}: {w.reason}" for w in unreadable)
        return "unavailable", (
            f"TrainJob {namespace}/{name}: whether an earlier TrainJob of that name left something on a worker is "
            f"not known ({where}); nothing was written. Retry once the worker can be read, or once an administrator "
            "has fenced it"
        )
    return None


def ceased_when_gone(left_here: Sequence[str], workers: Sequence[Remains]) -> tuple[bool, str]:
    """Ceased of a TrainJob that is gone on the manager (Status after Stop): nothing it left here that makes or
    runs pods (``left_here``: its orphans on the manager: a JobSet or a pod), and nothing of it may run or start on
    any worker (``ceased_on_workers``)."""
    here = [o for o in left_here if "/pod/" in o or "/jobset/" in o]
    if here:
        return False, f"the TrainJob is gone, but it left {', '.join(here)} on this cluster"
    ok, why = ceased_on_workers(workers)
    if ok:
        return True, f"the TrainJob is gone, and {why}"
    return False, f"the TrainJob is gone, but something of it may still run on a worker: {why}"


def idle_on_workers(s: Status, idle: str, workers: Sequence[Remains]) -> Status:
    """Status ``s`` of a TrainJob MultiKueue runs that starts nothing more by itself (``idle``: why; being deleted,
    ended, held), computed from the manager's objects (before ``on_worker``: its pods are the manager's), with what
    is left on the workers: Ceased once no pod of the manager may still run and ``ceased_on_workers`` holds; the
    rule that never takes a dispatched job for Ceased on a manager is this, read over every worker."""
    waiting = [p.name for p in s.pods if p.may_still_run]
    if waiting:
        why = f"{len(waiting)} pod(s) may still run on this cluster: {', '.join(waiting)}"
        return replace(s, workers=tuple(workers), ceased=False, ceased_reason=why)
    ok, found = ceased_on_workers(workers)
    why = f"{idle}, and {found}"
    if not ok:
        why = f"{idle}, but something of it may still run on a worker: {found}"
    return replace(s, workers=tuple(workers), ceased=ok, ceased_reason=why)
