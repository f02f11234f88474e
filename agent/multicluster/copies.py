"""On a MultiKueue worker, the verification of MultiKueue's copies: a copy starts only with its dispatch's A.

MultiKueue makes the copy of a dispatch TrainJob from its cache of the manager's TrainJob, which may show an
earlier dispatch's A (the gate's raise and its Ready are two writes to two objects, and nothing orders their
arrival in that cache); it makes the remote Workload from the cache entry that shows the Ready, so the stamp the
manager's gate wrote before it (``dispatched-admission``) is this dispatch's A. dispatch's mutating webhook marks
every copy ``unverified`` at its creation, and the unsuspend rules refuse its start while the mark is on it. This
verifier, fed by the TrainJob watch, decides each marked copy (agent/multicluster/copy_verdicts.py ``verify_copy``,
pure): its A equals the stamp, no other copy was let start under that Workload, and the manager's agent is in contact
(agent/multicluster/contact.py), so it records the copy's uid and the contact epoch on the remote Workload, then removes
the mark (each a JSON Patch preconditioned on the object as read); or its A differs, so it deletes the copy
(preconditioned on its uid and resourceVersion): the remote Workload it adopted goes with it and the manager
dispatches again, or, not adopted yet, MultiKueue makes the copy again from a fresher view of the manager's
TrainJob (docs/multicluster.md, "The stale copy").

Only the leader writes; the watch runs on every replica, so a new leader finds the marked copies in its store.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from agent.multicluster.contact import WorkerContact
from agent.multicluster.copy_verdicts import CopyAction, verify_copy
from agent.runtime.caches import Reads
from agent.runtime.kube import Kube
from agent.runtime.queue import RateLimiter, WorkQueue, serve_keys
from contract.claims import claimed, copy_claim
from contract.multicluster import is_copy, prebuilt_workload, unverified
from contract.objects import dig
from contract.ownership import is_dispatch
from serving.kube import describe_error

log = logging.getLogger(__name__)

CopyKey = tuple[str, str, str]
"""(namespace, name, uid) of a copy."""

RETRY_SECONDS = 5.0
"""A copy that cannot be verified yet (its remote Workload not there yet) is looked at again after this: nothing it
waits for is watched here. One that never will (``CopyVerdict.final``) is looked at again only when it changes."""


class CopyVerifier:
    def __init__(self, kube: Kube, reads: Reads, contact: WorkerContact) -> None:
        self.kube, self.reads, self.contact = kube, reads, contact
        self.queue: WorkQueue[CopyKey] = WorkQueue()
        self.limiter: RateLimiter[CopyKey] = RateLimiter()
        self.verified = 0
        self.deleted = 0
        """Copies let start and stale copies deleted (for the tests and the log)."""

    def trainjob_changed(self, trainjob: Mapping[str, Any]) -> None:
        """A TrainJob event that was news: a marked copy of a dispatch TrainJob is looked at."""
        if dig(trainjob, "metadata", "deletionTimestamp") or not (is_copy(trainjob) and unverified(trainjob)):
            return
        if is_dispatch(trainjob):
            meta = trainjob["metadata"]
            self.queue.add((str(meta.get("namespace")), str(meta.get("name")), str(meta.get("uid"))))

    def shutdown(self) -> None:
        self.queue.shutdown()

    async def run(self) -> None:
        """While leading: one copy at a time (a copy is made once per dispatch)."""
        await serve_keys(self.queue, self.limiter, self._look, self._failed)

    @staticmethod
    def _failed(key: CopyKey, exc: Exception) -> None:
        log.warning("copy %s/%s: not verified: %s", key[0], key[1], describe_error(exc))

    async def _claim(self, copy: Mapping[str, Any]) -> str | None:
        """The approval the copy's claim names, live: seen renewed within its duration by this agent's clock, and
        still there as a fresh GET shows it (a claim the manager deleted a moment ago lets nothing start)."""
        needs = copy_claim(copy)
        if needs is None:
            return None
        live = self.contact.claims.live(needs[0], time.monotonic())
        if live is None:
            return None
        return live if claimed(await self.kube.get_lease(self.contact.namespace, needs[0])) == live else None

    async def _look(self, key: CopyKey) -> float | None:
        """Decides one copy and writes what it decided; when to look at it again, if it must be."""
        namespace, name, uid = key
        copy = await self.kube.get_trainjob(namespace, name)  # fresh: the mark's removal is preconditioned on it
        if copy is None or dig(copy, "metadata", "uid") != uid or not is_dispatch(copy):
            return None
        workload_name = prebuilt_workload(copy)
        workload = await self.kube.get_workload(namespace, workload_name) if workload_name else None
        verdict = verify_copy(copy, workload, contact=self.contact.verifiable(), claim=await self._claim(copy))
        if verdict.action is CopyAction.WAIT:
            log.info("copy %s/%s: not verified: %s", namespace, name, verdict.reason)
            if not verdict.final:
                return RETRY_SECONDS
            await self.kube.events.copy_unverified(copy, f"does not start: {verdict.reason}")
            return None
        if verdict.action is CopyAction.DELETE:
            await self.kube.delete_trainjob(namespace, name, uid, str(dig(copy, "metadata", "resourceVersion")))
            self.deleted += 1
            log.warning("copy %s/%s deleted: %s", namespace, name, verdict.reason)
            await self.kube.events.stale_copy(copy, verdict.reason)
            return None
        if verdict.action is CopyAction.VERIFY:
            if verdict.workload_patch is not None:
                assert workload_name is not None  # verify_copy records only on a Workload it was given
                await self.kube.patch_workload(namespace, workload_name, verdict.workload_patch)
            written = await self.kube.patch_trainjob(namespace, name, verdict.copy_patch or [])
            self.reads.wrote_trainjob(written)
            self.verified += 1
            log.info("copy %s/%s verified: %s", namespace, name, verdict.reason)
        return None
