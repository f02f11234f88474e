"""Guarantee 4 on a MultiKueue manager, decided: which workers the readmission gate must look at before a
dispatch, and what it waits for there (docs/multicluster.md, "Waiting for the previous execution across
clusters"). Pure functions of the objects as read; agent/multicluster/worker_reads.py reads them.

The manager runs no pod of a dispatch job, so its own pods prove nothing: an earlier execution may still run on
any worker the job's MultiKueueConfig lists, the one MultiKueue chose last or one it chose before. So the gate
looks at every one of them, fail-closed:

- a worker is read with the agent's own read-only credential for it (never Kueue's); one it has no credential
  for, or that cannot be read, holds the dispatch, named;
- a worker an administrator fenced (``ANNOTATION_FENCED`` on its MultiKueueCluster: it is shut down) is not
  read: nothing of it still runs, as a node with the ``out-of-service`` taint;
- a MultiKueue check whose MultiKueueConfig cannot be read holds too: the workers cannot be known.

On a worker that is read, what may still run there is decided by one rule, shared with Stop and Status
(agent/multicluster/worker_remains.py): contract/workerlook.py ``on_worker``, given the pods that count (``look_at``:
sorted by the ownership chain as on one cluster and judged by the node-loss classification on that worker's nodes).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from agent.domain import pod_owners
from agent.domain.decide import Blocker
from agent.domain.node_loss import assess
from contract.keys import ANNOTATION_DISPATCHED_TO, ANNOTATION_FENCED, FENCED_POWERED_OFF, FENCED_TRUE
from contract.multicluster import config_clusters, is_fenced, is_powered_off, multikueue_config_of
from contract.objects import dig
from contract.workerlook import OnWorker, WorkerLook, on_worker


@dataclass(frozen=True)
class WorkerPlan:
    read: tuple[str, ...]
    """The workers to read, with the agent's credential for each."""
    fenced: tuple[str, ...]
    """The workers declared powered off (``FENCED_POWERED_OFF``): not read, nothing of them waited on."""
    blockers: tuple[Blocker, ...]
    """What holds before any worker is read: a MultiKueueConfig that cannot be read, a worker with no
    credential."""
    untrusted: frozenset[str] = frozenset()
    """Fenced workers (``FENCED_TRUE``) the record lists: read, and held on as any other."""
    trusted: frozenset[str] = frozenset()
    """Fenced workers (``FENCED_TRUE``) read, whose failure to be read does not hold: the job was never dispatched
    there, or the last look there found nothing of it (the record on the TrainJob does not list them)."""


def plan_workers(
    checks: Mapping[str, Mapping[str, Any] | None],
    configs: Mapping[str, Mapping[str, Any] | None],
    clusters: Sequence[Mapping[str, Any]],
    credentials: Collection[str],
    record: Collection[str] = (),
) -> WorkerPlan:
    """Which workers to read for a Workload in MultiKueue mode. ``checks``: the MultiKueue checks it lists, each
    as read (None: gone); ``configs``: the MultiKueueConfigs they name, as read (None: gone); ``clusters``: every
    MultiKueueCluster (their fences); ``credentials``: the workers the agent has a credential for; ``record``:
    the workers the TrainJob's record lists (``ANNOTATION_DISPATCHED_TO``), read whatever the configs say now.

    A fence is trusted only as far as it is evidence: a worker declared powered off is not read; a worker fenced
    otherwise is still read (what it shows holds as anywhere), and only where the record does not list it may it
    fail to be read, or lack a credential, without holding."""
    blockers: list[Blocker] = []
    workers: set[str] = set(record)
    for name, check in sorted(checks.items()):
        config_name = multikueue_config_of(check)
        config = configs.get(config_name) if config_name is not None else None
        if config is None:
            what = f"MultiKueueConfig {config_name}, which cannot be read" if config_name else "no MultiKueueConfig"
            blockers.append(Blocker("", f"the MultiKueue check {name} names {what}: its workers are unknown", ""))
            continue
        workers.update(config_clusters(config))
    off = {dig(c, "metadata", "name") for c in clusters if is_powered_off(c)}
    fenced = {dig(c, "metadata", "name") for c in clusters if is_fenced(c)} - off
    trusted = frozenset(w for w in fenced if w not in set(record))
    read = []
    for worker in sorted(workers - off):
        if worker in credentials:
            read.append(worker)
        elif worker not in trusted:
            why = "the agent has no credential to read it (workerKubeconfigs)"
            if worker in fenced:
                why += f"; {FENCE_NOT_TRUSTED}"
            blockers.append(Blocker("", why, worker))
    return WorkerPlan(tuple(read), tuple(sorted(workers & off)), tuple(blockers), frozenset(fenced - trusted), trusted)


FENCE_NOT_TRUSTED: Final = (
    f"it is fenced ({ANNOTATION_FENCED}: {FENCED_TRUE}), but the job was dispatched there and no look has found it "
    f"gone since ({ANNOTATION_DISPATCHED_TO}): only a worker declared shut down ({ANNOTATION_FENCED}: "
    f"{FENCED_POWERED_OFF}) is trusted unread"
)


def unreadable(worker: str, why: str) -> Blocker:
    """A worker the agent could not read: it holds, as a pod that may still run there would."""
    return Blocker("", f"cannot be read: {why}", worker)


def look_at(jobset_name: str, look: WorkerLook, taints: Sequence[str], now: dt.datetime) -> OnWorker:
    """What of the job on a worker may still run or start (contract/workerlook.py ``on_worker``), its pods
    sorted by the ownership chain as on one cluster (agent/pod_owners.py), with no JobSet UID known: every JobSet of
    the job's name there is one of its copies' (MultiKueue reuses the name), so a pod of any of them counts, and so
    does a pod whose Job is gone; a pod the chain proves someone else's does not. Judged on that worker's nodes
    (agent/domain/node_loss.py)."""
    owned = pod_owners.sort_pods({"metadata": {"name": jobset_name}}, None, look.pods, look.jobs)
    judged = assess(owned.ours, look.nodes, taints)
    running = [(pod, f"{c.verdict.value}: {c.reason}") for pod, c in judged.may_still_run]
    return on_worker(jobset_name, look, running, now)


def worker_blockers(
    worker: str, jobset_name: str, look: WorkerLook, taints: Sequence[str], now: dt.datetime | None = None
) -> list[Blocker]:
    """What on ``worker`` holds the gate, each named with the worker (``look_at`` decides): a pod that may still
    run; and beyond the pods, what may still make one (a look between a restart's old pods going and new ones
    coming, or while pods cannot be created, finds no pod): the copy, the JobSet or a Job not finished, and a
    claim still fresh by this manager's clock (a copy may start under it)."""
    found = look_at(jobset_name, look, taints, now or dt.datetime.now(dt.UTC))
    held = [Blocker(pod, why, worker) for pod, why in found.pods]
    if found.copy_runs:
        held.append(Blocker("", f"MultiKueue's copy TrainJob {jobset_name} there is not finished", worker))
    if found.jobset_runs:
        held.append(Blocker("", f"JobSet {jobset_name} there is not finished", worker))
    if found.jobs_running:
        jobs = ", ".join(found.jobs_running)
        held.append(Blocker("", f"Job(s) {jobs} there are not finished: they may still make pods", worker))
    if found.claim is not None:
        held.append(Blocker("", f"the claim {found.claim} there is still fresh", worker))
    return held


def is_remote(blocker: Blocker) -> bool:
    """The blocker is on a worker (or is the workers' being unknown): no watch of this cluster shows its change,
    so the gate looks again after a backoff."""
    return blocker.worker is not None
