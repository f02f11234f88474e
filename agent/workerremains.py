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
  classification on that worker's nodes exactly as the manager's gate does before a dispatch
  (agent/workers.py ``worker_blockers``).

Nothing of the job may run on a worker when none of those pods may run and nothing there may create one: no copy
that has not finished (a copy not finished may be started there again; one being deleted creates no pods once its
JobSet is gone or at rest), no JobSet not at rest, no Job that has not finished and is not suspended. A worker
that cannot be read, or that the agent has no credential for, is never taken as empty, unless an administrator
declared it shut down (its MultiKueueCluster carries ``dispatch.phpboyscout.uk/fenced: powered-off``): such a worker
is still read where the agent has a credential for it, and what it shows counts; only one that cannot be read is
taken at the fence's word. A fence ``true`` is not enough here: with the TrainJob gone, no record says whether the
job ever ran there.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.operations import finished
from agent.podowners import JOBSET_API_GROUP, controller
from agent.status import JOBSET_AT_REST, Status, pods_may_appear
from agent.workers import WorkerLook, worker_blockers
from contract.multicluster import is_copy, is_powered_off
from contract.objects import dig


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


@dataclass(frozen=True)
class WorkerFind:
    """What one worker showed under the job's name, in the job's namespace: the TrainJob of the name (None: not
    found), the JobSet of the name, the Jobs labelled with it, and the gate's look (the pods labelled with it, the
    Jobs they name, the Nodes they are bound to)."""

    trainjob: Mapping[str, Any] | None
    jobset: Mapping[str, Any] | None
    jobs: Sequence[Mapping[str, Any]]
    look: WorkerLook


@dataclass(frozen=True)
class Remains:
    """What of the job is left on one worker."""

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


def _job_of_name(job: Mapping[str, Any], name: str) -> bool:
    ref = controller(job)
    api_version = ref.get("apiVersion") if ref is not None else None
    return (
        ref is not None
        and ref.get("kind") == "JobSet"
        and ref.get("name") == name
        and isinstance(api_version, str)
        and api_version.split("/")[0] == JOBSET_API_GROUP
    )


def _jobset_at_rest(jobset: Mapping[str, Any]) -> bool:
    if dig(jobset, "metadata", "deletionTimestamp"):
        return True
    conditions = dig(jobset, "status", "conditions")
    return any(
        isinstance(c, Mapping) and c.get("type") in JOBSET_AT_REST and c.get("status") == "True"
        for c in (conditions if isinstance(conditions, list) else [])
    )


def _job_creates_pods(job: Mapping[str, Any]) -> bool:
    """A Job may create pods while it has not finished and is not suspended (a Job being deleted included: nothing
    here proves its controller stopped)."""
    return finished(job) is None and dig(job, "spec", "suspend") is not True


def remains(cluster: str, namespace: str, name: str, find: WorkerFind, taints: Sequence[str] = ()) -> Remains:
    """What of the job ``namespace/name`` is on the worker ``cluster``, as it showed ``find``; judged on its nodes
    with the node-loss ``taints``."""
    found: list[str] = []
    why: list[str] = []
    copy = find.trainjob if is_copy(find.trainjob) else None
    if copy is not None:
        found.append(f"{namespace}/trainjob/{name}")
        end = finished(copy)
        if end is None:
            appearing = pods_may_appear(copy, find.jobset) if dig(copy, "metadata", "deletionTimestamp") else None
            if not dig(copy, "metadata", "deletionTimestamp"):
                why.append("MultiKueue's copy of the TrainJob is there and has not finished: it may start there")
            elif appearing is not None:
                why.append(f"MultiKueue's copy of the TrainJob is being deleted, and {appearing}")
    if find.jobset is not None:
        found.append(f"{namespace}/jobset/{dig(find.jobset, 'metadata', 'name')}")
        if copy is None and not _jobset_at_rest(find.jobset):
            why.append("its JobSet is not at rest: a Job of it may still create pods")
    jobs = sorted((j for j in find.jobs if _job_of_name(j, name)), key=lambda j: str(dig(j, "metadata", "name") or ""))
    found += [f"{namespace}/job/{dig(j, 'metadata', 'name')}" for j in jobs]
    creating = [str(dig(j, "metadata", "name")) for j in jobs if _job_creates_pods(j)]
    if creating:
        why.append(f"{len(creating)} Job(s) not finished nor suspended may still create pods: {', '.join(creating)}")
    running = [b for b in worker_blockers(cluster, name, find.look, taints) if b.pod]
    found += [f"{namespace}/pod/{b.pod}" for b in running]
    if running:
        pods = ", ".join(f"{b.pod} ({b.why})" for b in running)
        why.insert(0, f"{len(running)} pod(s) may still run: {pods}")
    if why:
        return Remains(cluster, True, tuple(found), True, "; ".join(why))
    what = "nothing of the job is there" if not found else "nothing of the job there may run or start"
    return Remains(cluster, True, tuple(found), False, what)


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


def stopping_on_workers(s: Status, workers: Sequence[Remains]) -> Status:
    """Status ``s`` of a TrainJob MultiKueue runs that is being deleted (Stop), computed from the manager's objects
    (before ``on_worker``: its pods are the manager's), with what is left on the workers: being deleted, it starts
    nothing more by itself, so it is Ceased once no pod of the manager may still run and ``ceased_on_workers``
    holds; the rule that never takes a dispatched job for Ceased on a manager is this, read over every worker."""
    waiting = [p.name for p in s.pods if p.may_still_run]
    if waiting:
        why = f"{len(waiting)} pod(s) may still run on this cluster: {', '.join(waiting)}"
        return replace(s, workers=tuple(workers), ceased=False, ceased_reason=why)
    ok, found = ceased_on_workers(workers)
    why = f"it is being deleted, and {found}"
    if not ok:
        why = f"it is being deleted, but something of it may still run on a worker: {found}"
    return replace(s, workers=tuple(workers), ceased=ok, ceased_reason=why)
