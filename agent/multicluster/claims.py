"""The claims (contract/claims.py decides): the manager's agent renews, on each worker, a claim for the copy it
wants running there now (``ClaimRenewer``); the worker's agent judges them by its own clock (``ClaimWatch``), lets
a copy start only under a live claim for it (agent/multicluster/copies.py) and deletes the copies that run, or wait to
start, without one (agent/multicluster/contact.py).

As with the contact Lease, the worker never compares the manager's renewTime with its own clock: a claim is live
while the worker saw it change (created or renewed) within its duration, by its monotonic clock. The first LIST
after the agent starts (or leads again) only sets the baseline, so no claim is live before a renewal is seen.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from typing import Any, Final

from agent.constants import CONTACT_SECONDS, TRAINJOBS, WORKLOADS
from agent.domain.workload import owner_trainjob
from agent.multicluster.worker_reads import WorkerClients
from agent.runtime.kube import Kube
from contract.claims import Want, claimed, dispatched_to, dispatched_worker, record_ops, wanted_claim
from contract.keys import ANNOTATION_APPROVED_ADMISSION, LABEL_JOB_ID, LABEL_WORKLOAD_JOB_UID
from contract.multicluster import is_fenced, managed_by_multikueue
from contract.objects import annotations, dig
from contract.ownership import is_dispatch
from serving.kube import describe_error

log = logging.getLogger(__name__)


SELECTOR_UIDS: Final = 100
"""TrainJob uids in one LIST's label selector (≈ 3.7 kB of query: well inside any request line's limit)."""
RECORD_TRIES: Final = 3
"""Writes of the record a round tries for one copy before it leaves it to the next round."""


def _owner(workload: Mapping[str, Any], trainjobs: Mapping[str, Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The TrainJob, among ``trainjobs``, that controls ``workload`` (its name, uid and namespace); None for none."""
    owner = owner_trainjob(workload)
    trainjob = trainjobs.get(owner[1]) if owner is not None else None
    if trainjob is None or owner is None or dig(trainjob, "metadata", "name") != owner[0]:
        return None
    return trainjob if dig(trainjob, "metadata", "namespace") == dig(workload, "metadata", "namespace") else None


class ClaimWatch:
    """The worker's view of the claims, by its own monotonic clock: when it saw each change last."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget every claim seen (a new leadership): no claim is live before a change is seen again."""
        self._seen: dict[str, tuple[Any, ...]] = {}
        self._changed: dict[str, float] = {}
        self._listed = False
        self.duration: int = CONTACT_SECONDS
        """The duration of the claims seen last (how long a marked copy may wait for its claim)."""

    def observe(self, leases: Iterable[Mapping[str, Any]], now: float) -> None:
        seen: dict[str, tuple[Any, ...]] = {}
        for lease in leases:
            spec = lease.get("spec") or {}
            name = str(dig(lease, "metadata", "name"))
            seen[name] = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseDurationSeconds"))
            if isinstance(duration := spec.get("leaseDurationSeconds"), int) and duration > 0:
                self.duration = duration
            if self._listed and self._seen.get(name) != seen[name]:
                self._changed[name] = now  # created or renewed since the last LIST
        self._changed = {n: t for n, t in self._changed.items() if n in seen}
        self._seen, self._listed = seen, True

    def live(self, name: str, now: float) -> str | None:
        """The approval claim ``name`` names, while a change of it was seen within its duration; else None."""
        record, changed = self._seen.get(name), self._changed.get(name)
        if record is None or changed is None:
            return None
        holder, _, duration = record
        if not isinstance(holder, str) or not isinstance(duration, int) or now >= changed + duration:
            return None
        return holder


class ClaimRenewer:
    """Role manager: every quarter of the claims' duration, renews on each worker the claims of the copies it wants
    running there (``wanted_claim``) and deletes its other claims there. Before it first claims a copy on a worker,
    it records the worker on the TrainJob (``ANNOTATION_DISPATCHED_TO``): a copy starts only under a claim, so no
    copy starts on a worker the record does not list."""

    def __init__(self, kube: Kube, workers: WorkerClients, duration: int) -> None:
        self.kube, self.workers, self.duration, self.origin = kube, workers, duration, workers.origin
        self.renewed = 0
        self.deleted = 0
        """Claims renewed and deleted (for the tests and the log)."""
        self._workers: dict[tuple[str, str], str | None] = {}
        self._poked = asyncio.Event()

    def saw(self, key: tuple[str, str], worker: str | None) -> None:
        """The Workload watch saw ``key`` dispatched to ``worker`` (None: to none, or gone): a change starts the next
        round now, so the worker is recorded and the copy claimed (or no longer) as soon as MultiKueue says where
        the job went, not a quarter of the duration later."""
        if self._workers.get(key) != worker:
            self._workers[key] = worker
            if worker is None:
                del self._workers[key]
            self._poked.set()

    async def run(self) -> None:
        while True:
            self._poked.clear()
            try:
                await self.round()
            except Exception as exc:  # the next round tries again; unrenewed claims only lapse (the safe side)
                log.warning("the claims were not renewed: %s", describe_error(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._poked.wait(), self.duration / 4)

    async def round(self) -> None:
        wants = await self.wanted()
        await asyncio.gather(
            *(self._worker(w, [x for x in wants if x.worker == w]) for w in sorted(self.workers.names))
        )

    async def wanted(self) -> list[Want]:
        """The claims wanted now, from fresh reads (consistent LISTs, never a cache: P2): the MultiKueueClusters,
        dispatch's TrainJobs (``candidates``) and the Workloads Kueue made for them (``workloads_of``). The worker
        of each is recorded on its TrainJob first; one whose record cannot be written is not claimed this round."""
        clusters = {str(dig(c, "metadata", "name")): c for c in await self.kube.list_multikueue_clusters()}
        fenced = [n for n, c in clusters.items() if is_fenced(c)]
        trainjobs = await self.candidates()
        wants = []
        for workload in await self.workloads_of(trainjobs):
            trainjob = _owner(workload, trainjobs)
            if trainjob is None or dispatched_worker(workload) is None:
                continue
            want = wanted_claim(workload, trainjob, clusters, fenced=fenced)
            if want is not None and await self._recorded(trainjob, want.worker):
                wants.append(want)
        return wants

    async def candidates(self) -> dict[str, Mapping[str, Any]]:
        """The TrainJobs that may need a claim, by uid: dispatch's (one LIST by ``LABEL_JOB_ID``, which dispatch's
        TrainJobs carry from birth), MultiKueue manages, approved by the gate once at least. One missing here is
        not claimed: the safe side (its copy stops)."""
        listed = await self.kube.list_page(self.kube.list_functions()[TRAINJOBS], label_selector=LABEL_JOB_ID)
        return {
            str(dig(tj, "metadata", "uid")): tj
            for tj in listed.get("items", [])
            if is_dispatch(tj) and managed_by_multikueue(tj) and ANNOTATION_APPROVED_ADMISSION in annotations(tj)
        }

    async def workloads_of(self, trainjobs: Mapping[str, Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        """The Workloads of ``trainjobs``: LISTs by Kueue's ``kueue.x-k8s.io/job-uid`` label (the owner's uid, set
        on every Workload it makes for a job), ``SELECTOR_UIDS`` uids a LIST; none when there is no TrainJob."""
        found: list[Mapping[str, Any]] = []
        uids = sorted(trainjobs)
        for start in range(0, len(uids), SELECTOR_UIDS):
            selector = f"{LABEL_WORKLOAD_JOB_UID} in ({','.join(uids[start : start + SELECTOR_UIDS])})"
            listed = await self.kube.list_page(self.kube.list_functions()[WORKLOADS], label_selector=selector)
            found += listed.get("items", [])
        return found

    async def _recorded(self, trainjob: Mapping[str, Any], worker: str) -> bool:
        """``worker`` in the TrainJob's record, written if missing. A conflict (MultiKueue and Kueue write the
        manager's TrainJob often) is read again and tried at once, a few times: the record only grows, so a fresh
        read loses nothing, and a copy's claim, which waits for it, should not wait a round for a busy object."""
        namespace, name = dig(trainjob, "metadata", "namespace"), dig(trainjob, "metadata", "name")
        current: Mapping[str, Any] | None = trainjob
        for _ in range(RECORD_TRIES):
            if current is None or dig(current, "metadata", "uid") != dig(trainjob, "metadata", "uid"):
                return False  # gone, or another TrainJob of the name: the next round decides afresh
            listed = dispatched_to(current)
            if worker in listed:
                return True
            try:
                await self.kube.patch_trainjob(namespace, name, record_ops(current, [*listed, worker]))
                return True
            except Exception as exc:
                log.info("TrainJob %s/%s: worker %s not recorded yet: %s", namespace, name, worker, describe_error(exc))
                if getattr(exc, "status", None) != 409:
                    return False
            current = await self.kube.get_trainjob(namespace, name)
        return False

    async def _worker(self, worker: str, wants: list[Want]) -> None:
        try:
            have = {str(dig(c, "metadata", "name")): c for c in await self.workers.claims(worker, self.origin)}
            now = dt.datetime.now(dt.UTC)
            for want in wants:
                await self.workers.renew_claim(worker, have.get(want.name), want, self.origin, now, self.duration)
                self.renewed += 1
            for name, stale in sorted(have.items()):
                if name not in {w.name for w in wants}:
                    await self.workers.delete_claim(worker, stale)
                    self.deleted += 1
                    log.info("worker %s: claim %s (%s) deleted: not wanted there now", worker, name, claimed(stale))
        except Exception as exc:  # one worker's failure never stops the others'; its claims lapse there
            log.warning("worker %s: claims not renewed: %s", worker, describe_error(exc))
