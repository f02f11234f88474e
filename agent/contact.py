"""Contact between the manager's dispatch agent and each MultiKueue worker (docs/multicluster.md, "Contact with
the manager").

A worker the manager cannot reach keeps running the copies it has, and Kueue on the manager may, after
``workerLostTimeout`` and a fence, dispatch the job elsewhere; when the worker comes back, MultiKueue may even
converge onto its stale copy. So the manager's agent renews a Lease on every worker it can reach
(``ManagerContact``), and the worker's agent (``WorkerContact``) deletes every copy it let start once it has seen
no renewal for the Lease's duration, and every copy let start under an earlier contact epoch than the Lease shows
(the manager raises the epoch when it renews after a gap: contact was lost, whether or not the worker's agent
watched it happen). A copy starts only while a renewal was seen within the duration (agent/copies.py), and records
the epoch it started under.

The worker judges the loss by its own monotonic clock from the moment it saw the Lease last change (as client-go's
leader election does), never by comparing the manager's renewTime with its clock; the manager judges the gap by its
own clock against the renewTime it wrote. The two need not agree: each errs towards deleting a copy, never towards
keeping one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from agent.constants import CONTACT_POLL_SECONDS, CONTACT_SWEEP_SECONDS, TRAINJOBS
from agent.kube import Kube
from agent.workerreads import WorkerClients
from contract.keys import LEASE_MANAGER_CONTACT
from contract.multicluster import (
    MULTIKUEUE_ORIGIN_LABEL,
    CopyAction,
    contact_epoch,
    outlived_contact,
    prebuilt_workload,
)
from contract.objects import dig
from contract.ownership import is_dispatch
from serving.kube import describe_error

log = logging.getLogger(__name__)


class ManagerContact:
    """Role manager: renews the contact Lease on every worker it has a credential for, every quarter of its
    duration. A worker it cannot reach is tried again at the next round; its Lease ages there."""

    def __init__(self, workers: WorkerClients, duration: int) -> None:
        self.workers, self.duration = workers, duration
        self.epochs: dict[str, int | None] = {}
        """The epoch each worker's Lease showed after the last renewal (for the tests and the log)."""
        self._failing: set[str] = set()

    async def run(self) -> None:
        while True:
            await asyncio.gather(*(self._renew(w) for w in sorted(self.workers.names)))
            await asyncio.sleep(self.duration / 4)

    async def _renew(self, worker: str) -> None:
        try:
            epoch = await self.workers.renew_contact(worker, self.duration)
        except Exception as exc:  # the next round tries again; the worker judges the gap itself
            if worker not in self._failing:
                log.warning("worker %s: the contact Lease was not renewed: %s", worker, describe_error(exc))
            self._failing.add(worker)
            return
        if worker in self._failing or self.epochs.get(worker) != epoch:
            log.info("worker %s: in contact (epoch %s)", worker, epoch)
        self._failing.discard(worker)
        self.epochs[worker] = epoch


class ContactWatch:
    """The worker's view of the contact Lease, by its own monotonic clock: when it saw the Lease change last."""

    def __init__(self, started: float) -> None:
        self._seen: tuple[Any, ...] | None = None
        self._changed_at: float | None = None
        """When a renewal was seen (a change after the first read); None before one was."""
        self._since = started
        """Since when the current record (or the Lease's absence) has been seen."""
        self._duration: int | None = None
        self.epoch: int | None = None

    def observe(self, lease: Mapping[str, Any] | None, now: float) -> None:
        spec = (lease or {}).get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("leaseTransitions"))
        if lease is None:
            record = ()
        if record != self._seen:
            if self._seen is not None and lease is not None:
                self._changed_at = now
            self._seen, self._since = record, now
        duration = spec.get("leaseDurationSeconds")
        self._duration = duration if isinstance(duration, int) and duration > 0 else None
        self.epoch = contact_epoch(lease)

    def verifiable(self, now: float) -> int | None:
        """The epoch a copy may start under now: a renewal was seen within the Lease's duration; else None."""
        if self.epoch is None or self._duration is None or self._changed_at is None:
            return None
        return self.epoch if now < self._changed_at + self._duration else None

    def lost(self, now: float) -> bool:
        """No change of the Lease seen for its duration (or no Lease of the manager's): copies let start stop."""
        if self.epoch is None or self._duration is None:
            return now >= self._since + (self._duration or 0)
        return now >= self._since + self._duration


class WorkerContact:
    """Role worker: reads the contact Lease every ``CONTACT_POLL_SECONDS`` and deletes the copies that outlived a
    loss of contact (contract/multicluster.py ``outlived_contact`` decides each). Only the leader runs it."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.watch = ContactWatch(time.monotonic())
        self.deleted = 0
        self._swept: tuple[int | None, bool] | None = None
        self._swept_at = 0.0

    def verifiable(self) -> int | None:
        return self.watch.verifiable(time.monotonic())

    async def run(self) -> None:
        while True:
            try:
                await self.look()
            except Exception as exc:  # the next look tries again
                log.warning("the contact Lease was not looked at: %s", describe_error(exc))
            await asyncio.sleep(CONTACT_POLL_SECONDS)

    async def look(self) -> None:
        self.watch.observe(await self.kube.get_lease(self.namespace, LEASE_MANAGER_CONTACT), time.monotonic())
        now = time.monotonic()
        state = (self.watch.epoch, lost := self.watch.lost(now))
        if state == self._swept and not (lost and now >= self._swept_at + CONTACT_SWEEP_SECONDS):
            return
        if state != self._swept:
            log.info("contact with the manager: epoch %s, %s", state[0], "lost" if lost else "live")
        await self.sweep(epoch=self.watch.epoch, lost=lost)
        self._swept, self._swept_at = state, now

    async def sweep(self, *, epoch: int | None, lost: bool) -> int:
        """Delete every copy that outlived a loss of contact; how many."""
        listed = await self.kube.list_page(
            self.kube.list_functions()[TRAINJOBS], label_selector=MULTIKUEUE_ORIGIN_LABEL
        )
        deleted = 0
        for copy in listed.get("items", []):
            if not is_dispatch(copy):
                continue
            namespace, name = dig(copy, "metadata", "namespace"), dig(copy, "metadata", "name")
            try:
                workload_name = prebuilt_workload(copy)
                workload = await self.kube.get_workload(namespace, workload_name) if workload_name else None
                verdict = outlived_contact(copy, workload, epoch=epoch, lost=lost)
                if verdict.action is not CopyAction.DELETE:
                    continue
                meta = copy["metadata"]
                await self.kube.delete_trainjob(namespace, name, meta["uid"], meta["resourceVersion"])
            except Exception as exc:  # one copy's failure never stops the others'; the next sweep tries again
                log.warning("copy %s/%s: not deleted: %s", namespace, name, describe_error(exc))
                continue
            deleted += 1
            log.warning("copy %s/%s deleted: %s", namespace, name, verdict.reason)
            await self.kube.events.out_of_contact(copy, verdict.reason)
        self.deleted += deleted
        return deleted
