"""What the manager's agent does through its workers: the look at a job's workers in a pass (agent/gate/reconcile.py),
the sweep of stale replicas and the release of a kept quota in the round over the workers (agent/gate/worker_round.py).
agent/multicluster/worker_reads.py reads and writes on the workers; agent/multicluster/workers.py,
agent/multicluster/replicas.py and agent/multicluster/lost_quota.py decide.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any

from agent.domain.decide import Blocker, hold_message
from agent.domain.multikueue_mode import other_checks
from agent.domain.workload import owner_trainjob
from agent.multicluster.lost_quota import checks_to_look_at, kept_active, kept_message, release_patch, released_message
from agent.multicluster.replicas import stale_replicas, unprepared
from agent.multicluster.worker_reads import WorkerClients
from agent.multicluster.workers import FENCE_NOT_TRUSTED, plan_workers, unreadable, worker_blockers
from agent.runtime.caches import Reads
from agent.runtime.kube import Kube
from contract.claims import claim_name, dispatched_to, dispatched_worker, record_ops
from contract.keys import LABEL_REPLICA_OF
from contract.multicluster import listed_multikueue_checks, multikueue_config_of
from contract.objects import dig, labels
from serving.client import KubeError
from serving.kube import describe_error

log = logging.getLogger(__name__)


async def sweep_replicas(reads: Reads, workers: WorkerClients) -> int:
    """Delete, on every worker, the replicas whose TrainJob on the manager is gone (agent/multicluster/replicas.py
    ``stale_replicas``); how many. The TrainJob is read from the agent's watch when it holds the one the replica
    names, else fetched (a GET after the LIST of the replicas): so no GET while every job is there. A worker that
    cannot be read, or a delete refused (the replica made again meanwhile), is left for the next sweep."""
    deleted = 0
    for worker in sorted(workers.names):
        try:
            found = await workers.replicas(worker)
        except Exception as exc:  # one worker's failure never stops the others' sweep
            log.warning("worker %s: the replicas cannot be listed: %s", worker, describe_error(exc))
            continue
        trainjobs = {}
        for r in found:
            key = (dig(r, "metadata", "namespace"), dig(r, "metadata", "name"))
            trainjobs[key] = await reads.trainjob(*key, uid=labels(r).get(LABEL_REPLICA_OF, ""))
        for stale in stale_replicas(found, trainjobs):
            where = f"{dig(stale, 'metadata', 'namespace')}/{dig(stale, 'metadata', 'name')}"
            try:
                await workers.delete_replica(worker, stale)
            except Exception as exc:
                log.warning("worker %s: the replica %s was not deleted: %s", worker, where, describe_error(exc))
                continue
            deleted += 1
            log.info("worker %s: deleted the replica %s: its TrainJob is gone", worker, where)
    return deleted


async def release_kept_quota(
    kube: Kube, reads: Reads, workers: WorkerClients | None, namespace: str, name: str, taints: Sequence[str]
) -> bool:
    """Release the quota Kueue keeps for the evicted Workload ``namespace/name`` of a dispatch TrainJob on the
    manager (agent/multicluster/lost_quota.py): once the look at every worker the gate makes before a dispatch finds
    nothing of the job that may still run, clear the active Jobs MultiKueue copied into the TrainJob's status. True:
    released. Otherwise an Event on the TrainJob says what it waits for; a failed write is left to the next round."""
    workload = await kube.get_workload(namespace, name)
    owner = owner_trainjob(workload)
    trainjob = await kube.get_trainjob(namespace, owner[0]) if owner is not None else None
    active = kept_active(workload, trainjob)
    if not active:
        return False
    assert workload is not None  # kept_active counts only for both
    assert trainjob is not None
    job = str(dig(trainjob, "metadata", "name"))
    # Every check the Workload lists, read fresh (never the AdmissionCheck cache, which may miss a MultiKueue check
    # and so its workers): dispatch's own too, so that no cached name can hide one.
    checks, unidentified = checks_to_look_at(trainjob, await read_checks(kube, other_checks(workload, ())))
    if unidentified is not None:
        await kube.events.quota_kept(trainjob, kept_message(active, unidentified))
        return False
    blockers = await look_at_workers(kube, reads, workers, workload, checks, job, taints, trainjob=trainjob)
    if blockers:
        await kube.events.quota_kept(trainjob, kept_message(active, hold_message(blockers)))
        return False
    try:
        await kube.patch_trainjob(namespace, job, release_patch(trainjob), status=True)
    except KubeError as exc:  # 409: MultiKueue or Kueue wrote it since; the next round reads it again
        log.info("TrainJob %s/%s: its quota was not released: %s", namespace, job, exc.describe())
        return False
    log.info("TrainJob %s/%s: released its quota (%d active Job(s) cleared)", namespace, job, active)
    await kube.events.quota_released(trainjob, released_message(active))
    return True


async def read_checks(kube: Kube, names: Sequence[str]) -> dict[str, Mapping[str, Any] | str | None]:
    """Each AdmissionCheck named, read fresh: the object, None when it is not there, or why it could not be read
    (agent/domain/decide.py ``dispatch_mode`` takes them so)."""
    read = await asyncio.gather(*(kube.get_admission_check(n) for n in names), return_exceptions=True)
    found: dict[str, Mapping[str, Any] | str | None] = {}
    for name, got in zip(names, read, strict=True):
        if isinstance(got, BaseException):
            if not isinstance(got, Exception):
                raise got  # a cancellation is not a read that failed
            found[name] = describe_error(got)
        else:
            found[name] = got
    return found


async def look_at_workers(
    kube: Kube,
    reads: Reads,
    workers: WorkerClients | None,
    workload: Mapping[str, Any],
    multikueue: Collection[str],
    jobset_name: str,
    taints: Sequence[str],
    want: Mapping[str, Any] | None = None,
    trainjob: Mapping[str, Any] | None = None,
) -> list[Blocker]:
    """What on the workers holds a dispatch of ``workload`` (in MultiKueue mode; ``multikueue``: the MultiKueue
    checks' names): what of the job may still run there (agent/multicluster/workers.py ``worker_blockers``), the workers
    that cannot be read or have no credential, MultiKueue checks whose workers cannot be known, and workers not ready
    for the job (``want``: the replica of its runtime copy each worker read must hold, made there where missing;
    None: the copy could not be read, and the gate holds for that). Empty: nothing of an earlier execution may
    run on any worker, and each can run the job.

    ``trainjob``: the job's TrainJob on the manager, whose record (``ANNOTATION_DISPATCHED_TO``) names workers to
    read whatever the configs say now; a worker whose look found nothing of the job at all is taken off it (a
    preconditioned patch). A claim of the job's found on a worker while its Workload is dispatched nowhere is
    deleted there first: the manager no longer wants that copy, and its worker then stops it."""
    listed = listed_multikueue_checks(workload, multikueue)
    checks = dict(zip(listed, await asyncio.gather(*(kube.get_admission_check(n) for n in listed)), strict=True))
    config_names = sorted({c for ac in checks.values() if (c := multikueue_config_of(ac)) is not None})
    found = await asyncio.gather(*(kube.get_multikueue_config(n) for n in config_names))
    configs = dict(zip(config_names, found, strict=True))
    record = dispatched_to(trainjob)
    clusters = await kube.list_multikueue_clusters()
    plan = plan_workers(checks, configs, clusters, workers.names if workers else (), record)
    namespace = dig(workload, "metadata", "namespace")
    claim = claim_name(str(dig(workload, "metadata", "uid")))
    unwanted = dispatched_worker(workload) is None
    empty: list[str] = []

    async def read(worker: str) -> list[Blocker]:
        assert workers is not None  # plan_workers reads only workers with a credential
        try:
            seen = await workers.look(worker, namespace, jobset_name, claim)
            if seen.claim is not None and unwanted:
                await workers.delete_claim(worker, seen.claim)
                seen = replace(seen, claim=None)
        except Exception as exc:  # any failure to read a worker is a hold, never an approval
            if worker in plan.trusted:
                log.info("fenced worker %s not read (%s): trusted", worker, describe_error(exc))
                return []
            why = describe_error(exc)
            return [unreadable(worker, f"{why}; {FENCE_NOT_TRUSTED}" if worker in plan.untrusted else why)]
        if seen.empty:
            empty.append(worker)
        blockers = worker_blockers(worker, jobset_name, seen, taints)
        if want is None or worker in plan.trusted:
            return blockers  # a fenced worker is not prepared: the job is not to run there
        try:
            return [*blockers, *await workers.prepare(worker, want)]
        except Exception as exc:
            return [*blockers, unprepared(worker, f"cannot be prepared: {describe_error(exc)}")]

    held = await asyncio.gather(*(read(w) for w in plan.read))
    if plan.fenced:
        log.debug("worker(s) declared powered off, not read: %s", ", ".join(plan.fenced))
    if trainjob is not None and set(empty) & set(record):
        await _forget(kube, reads, trainjob, [w for w in record if w not in empty])
    return [*plan.blockers, *(b for found in held for b in found)]


async def _forget(kube: Kube, reads: Reads, trainjob: Mapping[str, Any], keep: list[str]) -> None:
    """Take the workers a look found empty off the TrainJob's record; a conflict leaves them for the next look."""
    namespace, name = dig(trainjob, "metadata", "namespace"), dig(trainjob, "metadata", "name")
    try:
        reads.wrote_trainjob(await kube.patch_trainjob(namespace, name, record_ops(trainjob, keep)))
    except Exception as exc:
        log.info("TrainJob %s/%s: its record of workers not updated: %s", namespace, name, describe_error(exc))
