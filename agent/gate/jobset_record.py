"""The JobSet UID record, written when the JobSet is first seen, not at the next readmission.

The record (``dispatch.phpboyscout.uk/jobset-uid`` on the TrainJob) is what lets a reset of J be noticed: a JobSet
deleted and built again by Trainer restarts J at 0, under a UID that is not the recorded one (contract/foreign.py).
It is written once in a TrainJob's life, by the first of the adapter's calls, the readmission gate and this
recorder to see the TrainJob's own JobSet. Before Open the recorder leaves it to the write that is due anyway
(Open's, or the gate's approval at the first admission), so that it neither adds a TrainJob write (and the Trainer
reconcile it sets off) to a first start nor races Open's preconditioned write; made here, it lands while the first
execution runs, so a readmission writes nothing to the TrainJob for it.

Fed by the JobSet watch (agent/runtime/caches.py) on every replica; only the leader writes. One JSON Patch per
record, preconditioned on the TrainJob's uid and resourceVersion as read; a 409 (the TrainJob changed since:
Trainer's status, Kueue's admission) is tried again after a backoff on a fresh read, a 404 or 422 (the
TrainJob gone, or another object of that name) is dropped.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from agent.domain.workload import owner_trainjob
from agent.runtime.caches import Reads
from agent.runtime.kube import Kube
from agent.runtime.queue import RateLimiter, WorkQueue, serve_keys
from contract.admission import preconditions
from contract.foreign import jobset_uid_ops
from contract.gates import has_dispatch_gate
from contract.objects import dig
from contract.ownership import is_dispatch
from serving.kube import describe_error

log = logging.getLogger(__name__)

TrainJobKey = tuple[str, str, str]
"""(namespace, name, uid) of the TrainJob that controls a JobSet."""


def owner_key(jobset: Mapping[str, Any]) -> TrainJobKey | None:
    owner = owner_trainjob(jobset)
    return None if owner is None else (str(dig(jobset, "metadata", "namespace")), *owner)


class JobSetRecorder:
    name = "jobset-uid-records"
    """As a runnable of the leader's (agent/gate/runnable.py)."""

    def __init__(self, kube: Kube, reads: Reads) -> None:
        self.kube, self.reads = kube, reads
        self.queue: WorkQueue[TrainJobKey] = WorkQueue()
        self.limiter: RateLimiter[TrainJobKey] = RateLimiter()
        self.recorded = 0
        """Records written (for the tests and the log)."""

    def jobset_changed(self, jobset: Mapping[str, Any]) -> None:
        """A JobSet event that was news: look at its TrainJob, unless the JobSet is being deleted or gone."""
        if dig(jobset, "metadata", "deletionTimestamp"):
            return
        key = owner_key(jobset)
        if key is not None:
            self.queue.add(key)

    def shutdown(self) -> None:
        self.queue.shutdown()

    async def run(self) -> None:
        """While leading: one look at a time (records are rare, and each is one small write)."""
        await serve_keys(self.queue, self.limiter, self._look, self._failed)

    @staticmethod
    def _failed(key: TrainJobKey, exc: Exception) -> None:
        log.warning("JobSet UID record of %s/%s: %s", key[0], key[1], describe_error(exc))

    async def _look(self, key: TrainJobKey) -> None:
        namespace, name, uid = key
        trainjob = await self.reads.trainjob(namespace, name, uid)
        if trainjob is None or dig(trainjob, "metadata", "uid") != uid or not is_dispatch(trainjob):
            return None
        if has_dispatch_gate(trainjob):
            return None  # not opened yet: Open's write (or the gate's approval at the first admission) carries it
        ops = jobset_uid_ops(trainjob, await self.reads.jobset(namespace, name))
        if not ops:
            return None  # recorded already, or the JobSet is not this TrainJob's own
        written = await self.kube.patch_trainjob(namespace, name, [*preconditions(trainjob), *ops])
        self.reads.wrote_trainjob(written)
        self.recorded += 1
        log.info("TrainJob %s/%s: JobSet UID recorded", namespace, name)
