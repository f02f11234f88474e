"""What of a job may still run on a MultiKueue worker: one rule for the manager's gate before a dispatch
(agent/multicluster/workers.py, guarantee 4) and for Stop, Status and Start after the TrainJob is gone
(agent/multicluster/worker_remains.py), both judging the same look (docs/multicluster.md, "Waiting for the previous
execution across clusters" and "Stop across clusters").

Something of the job may still run, or start, on the worker while any of these is there:

- a pod labelled with the job's JobSet name that may still run (sorted by the ownership chain and judged by the
  node-loss classification: agent/multicluster/workers.py ``running_pods``, given here as judged);
- MultiKueue's copy of the TrainJob (the TrainJob of the name carrying the origin label) not finished;
- the JobSet of the name not finished;
- a Job whose controller is a JobSet of the name, not finished;
- the job's claim there, still fresh by the manager's clock (a copy may start under it).

Only an end (Complete, Failed, the JobSet's terminal state) or the object's absence counts as nothing more to
come: a suspension is undone when the parent resumes, and a deletion takes effect only once the object is gone.
A TrainJob of the name without the origin label is not MultiKueue's copy, and a Job controlled by anything but
a JobSet of the name is not the job's (its pods are proven someone else's by the same chain); whatever they make
under the job's name (a JobSet, its Jobs, their pods) is judged as above.

Pure functions of the objects as read.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from contract.claims import fresh_by_manager
from contract.multicluster import is_copy
from contract.objects import dig
from contract.upstream import JOBSET_GROUP


@dataclass(frozen=True)
class WorkerLook:
    """What one worker showed under a job's name in its namespace: the pods labelled with the job's JobSet name,
    the Jobs they name and the Nodes they are bound to, by name (one absent: not found, gone); and beyond the
    pods, the TrainJob and the JobSet of the job's name, every Job labelled with it, and the job's claim there
    (None: not found, or not read)."""

    pods: Sequence[Mapping[str, Any]]
    jobs: Mapping[str, Mapping[str, Any]]
    nodes: Mapping[str, Mapping[str, Any]]
    copy: Mapping[str, Any] | None = None
    jobset: Mapping[str, Any] | None = None
    all_jobs: Sequence[Mapping[str, Any]] = ()
    claim: Mapping[str, Any] | None = None

    @property
    def empty(self) -> bool:
        """Nothing of the name is there at all: no pod, Job, JobSet, TrainJob or claim."""
        return not (self.pods or self.all_jobs or self.jobset or self.copy or self.claim)


@dataclass(frozen=True)
class OnWorker:
    """What of the job is on one worker, and what of it may still run or start there (``may_run``)."""

    copy: Mapping[str, Any] | None
    """MultiKueue's copy of the TrainJob (None: none there, or the TrainJob of the name is not MultiKueue's)."""
    jobset: Mapping[str, Any] | None
    jobs: tuple[str, ...]
    """The job's Jobs there (controlled by a JobSet of the name), by name, sorted."""
    pods: tuple[tuple[str, str], ...]
    """The pods that may still run, each with why (as judged by the caller)."""
    copy_runs: bool
    """The copy has not finished: it may start, or still run."""
    jobset_runs: bool
    """The JobSet has not finished: a Job of it may still create pods."""
    jobs_running: tuple[str, ...]
    """The job's Jobs not finished: they may still create pods."""
    claim: str | None
    """The name of the job's claim there while it is still fresh by the manager's clock."""

    @property
    def may_run(self) -> bool:
        return bool(self.pods or self.copy_runs or self.jobset_runs or self.jobs_running or self.claim)


def on_worker(name: str, look: WorkerLook, running_pods: Sequence[tuple[str, str]], now: dt.datetime) -> OnWorker:
    """What of the job ``name`` the worker showed in ``look`` may still run or start; ``running_pods``: its pods
    that may still run, with why (the ownership chain and the node-loss classification decide those)."""
    copy = look.copy if is_copy(look.copy) else None
    jobs = sorted((j for j in look.all_jobs if job_of_jobset(j, name)), key=lambda j: str(dig(j, "metadata", "name")))
    fresh = fresh_by_manager(look.claim, now)
    return OnWorker(
        copy=copy,
        jobset=look.jobset,
        jobs=tuple(str(dig(j, "metadata", "name")) for j in jobs),
        pods=tuple(running_pods),
        copy_runs=copy is not None and not ended(copy, ("Complete", "Failed")),
        jobset_runs=look.jobset is not None and not jobset_ended(look.jobset),
        jobs_running=tuple(str(dig(j, "metadata", "name")) for j in jobs if not ended(j, ("Complete", "Failed"))),
        claim=str(dig(look.claim, "metadata", "name")) if fresh else None,
    )


def ended(obj: Mapping[str, Any], types: Sequence[str]) -> bool:
    """One of the condition ``types`` is True: an end that is never undone."""
    conditions = dig(obj, "status", "conditions")
    return any(
        isinstance(c, Mapping) and c.get("type") in types and c.get("status") == "True"
        for c in (conditions if isinstance(conditions, list) else [])
    )


def jobset_ended(jobset: Mapping[str, Any]) -> bool:
    """The JobSet reached its terminal state (``status.terminalState``, or Completed or Failed True)."""
    return bool(dig(jobset, "status", "terminalState")) or ended(jobset, ("Completed", "Failed"))


def job_of_jobset(job: Mapping[str, Any], name: str) -> bool:
    """The Job's controller is a JobSet named ``name`` (the link the pods' ownership chain follows)."""
    refs = dig(job, "metadata", "ownerReferences")
    refs = refs if isinstance(refs, list) else []
    controllers = [r for r in refs if isinstance(r, Mapping) and r.get("controller") is True]
    ref = controllers[0] if controllers else None
    api_version = ref.get("apiVersion") if ref is not None else None
    return (
        ref is not None
        and ref.get("kind") == "JobSet"
        and ref.get("name") == name
        and isinstance(api_version, str)
        and api_version.split("/")[0] == JOBSET_GROUP
    )
