"""Contact between the manager's dispatch agent and each MultiKueue worker (docs/multicluster.md, "Contact with
the manager").

A worker the manager cannot reach keeps running the copies it has, and Kueue on the manager may, after
``workerLostTimeout`` and a fence, dispatch the job elsewhere; when the worker comes back, MultiKueue may even
converge onto its stale copy. So the manager's agent renews a Lease on every worker it can reach
(``ManagerContact``), and the worker's agent (``WorkerContact``) deletes every copy it let start once it has seen
no renewal for the Lease's duration, and every copy let start under an earlier contact epoch than the Lease shows
(the manager raises the epoch when it renews after a gap: contact was lost, whether or not the worker's agent
watched it happen). A copy starts only while a renewal was seen within the duration (agent/multicluster/copies.py), and
records the epoch it started under.

The worker judges the loss by its own monotonic clock from the moment it saw the Lease last change (as client-go's
leader election does), never by comparing the manager's renewTime with its clock; the manager judges the gap by its
own clock against the renewTime it wrote. The two need not agree: each errs towards deleting a copy, never towards
keeping one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from agent.constants import CONTACT_ADMIT_FRACTION, CONTACT_POLL_SECONDS, CONTACT_SWEEP_SECONDS, TRAINJOBS
from agent.multicluster.claims import ClaimWatch
from agent.multicluster.contact_lease import contact_epoch
from agent.multicluster.copy_verdicts import CopyAction, CopyVerdict, outlived_contact, unclaimed, unclaimed_marked
from agent.multicluster.worker_reads import WorkerClients
from agent.runtime.kube import Kube
from contract.claims import copy_claim
from contract.keys import CLAIM_PREFIX, LABEL_CLAIM, LEASE_MANAGER_CONTACT
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL, prebuilt_workload, unverified
from contract.objects import dig
from contract.ownership import is_dispatch
from serving.kube import describe_error

log = logging.getLogger(__name__)


class ManagerContact:
    """Role manager: renews the contact Lease on every worker it has a credential for, every quarter of its
    duration. A worker it cannot reach is tried again at the next round; its Lease ages there."""

    def __init__(
        self,
        workers: WorkerClients,
        duration: int,
        fenced: Callable[[], Awaitable[frozenset[str]]] | None = None,
    ) -> None:
        self.workers, self.duration = workers, duration
        self._fenced = fenced
        """The workers fenced now (a fresh read): renewed no more, so their agents stop the copies there."""
        self.epochs: dict[str, int | None] = {}
        """The epoch each worker's Lease showed after the last renewal (for the tests and the log)."""
        self._failing: set[str] = set()

    async def run(self) -> None:
        while True:
            try:
                fenced = await self._fenced() if self._fenced is not None else frozenset()
            except Exception as exc:  # fences unknown: renew none this round (the safe side)
                log.warning("the fences could not be read; no contact renewed: %s", describe_error(exc))
                fenced = self.workers.names
            await asyncio.gather(*(self._renew(w) for w in sorted(self.workers.names - fenced)))
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
        self.reset(started)

    def reset(self, now: float) -> None:
        """Start afresh, as at a restart: on leading again, since the replica did not watch while it did not lead,
        and a change since its last look is no renewal seen now."""
        self._seen: tuple[Any, ...] | None = None
        self._changed_at: float | None = None
        """When a renewal was seen (a change after the first read); None before one was."""
        self._since = now
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

    def _renewed_within(self, now: float, fraction: float) -> bool:
        """A renewal of the manager's Lease was seen within ``fraction`` of its duration."""
        if self.epoch is None or self._duration is None or self._changed_at is None:
            return False
        return now < self._changed_at + self._duration * fraction

    def verifiable(self, now: float) -> int | None:
        """The epoch a copy may start under now: a renewal was seen within the Lease's duration; else None."""
        return self.epoch if self._renewed_within(now, 1.0) else None

    def admits(self, now: float) -> bool:
        """The worker's gate may admit a copy now: a renewal seen within ``CONTACT_ADMIT_FRACTION`` of the duration."""
        return self._renewed_within(now, CONTACT_ADMIT_FRACTION)

    def lost(self, now: float) -> bool:
        """No change of the Lease seen for its duration (or no Lease of the manager's): copies let start stop."""
        if self.epoch is None or self._duration is None:
            return now >= self._since + (self._duration or 0)
        return now >= self._since + self._duration


class WorkerContact:
    """Role worker: reads the contact Lease every ``CONTACT_POLL_SECONDS`` and deletes the copies that outlived a
    loss of contact (agent/multicluster/copy_verdicts.py ``outlived_contact`` decides each). Only the leader runs it."""

    def __init__(self, kube: Kube, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace
        self.watch = ContactWatch(time.monotonic())
        self.deleted = 0
        self._swept: tuple[int | None, bool] | None = None
        self._swept_at = 0.0
        self.claims = ClaimWatch()
        """The manager's claims, as this agent saw them change (agent/multicluster/claims.py)."""
        self._marked: dict[str, float] = {}
        """Marked copies by uid: when this agent first saw each (how long it has waited for its claim)."""

    def reset(self) -> None:
        """On (re)acquiring leadership: the watch starts afresh, so a copy starts only after a renewal seen while
        leading, and the first look sweeps, as after a restart."""
        self.watch.reset(time.monotonic())
        self.claims.reset()
        self._marked.clear()
        self._swept, self._swept_at = None, 0.0

    def verifiable(self) -> int | None:
        return self.watch.verifiable(time.monotonic())

    def admits(self) -> bool:
        return self.watch.admits(time.monotonic())

    async def run(self) -> None:
        while True:
            try:
                await self.look()
            except Exception as exc:  # the next look tries again
                log.warning("the contact Lease was not looked at: %s", describe_error(exc))
            await asyncio.sleep(CONTACT_POLL_SECONDS)

    async def look(self) -> None:
        self.watch.observe(await self.kube.get_lease(self.namespace, LEASE_MANAGER_CONTACT), time.monotonic())
        listed = await self.kube.list_leases(self.namespace, LABEL_CLAIM)
        claims = [c for c in listed if str(dig(c, "metadata", "name")).startswith(CLAIM_PREFIX)]
        self.claims.observe(claims, time.monotonic())
        now = time.monotonic()
        state = (self.watch.epoch, lost := self.watch.lost(now))
        full = state != self._swept or (lost and now >= self._swept_at + CONTACT_SWEEP_SECONDS)
        if state != self._swept:
            log.info("contact with the manager: epoch %s, %s", state[0], "lost" if lost else "live")
        await self.sweep(epoch=self.watch.epoch, lost=lost, full=full)
        if full:
            self._swept, self._swept_at = state, now

    async def sweep(self, *, epoch: int | None, lost: bool, full: bool = True) -> int:
        """Delete every copy that runs without a live claim for it, waited for one too long, or (``full``: a
        change of contact, or contact lost) outlived a loss of contact; how many."""
        listed = await self.kube.list_page(
            self.kube.list_functions()[TRAINJOBS], label_selector=MULTIKUEUE_ORIGIN_LABEL
        )
        now = time.monotonic()
        copies = [c for c in listed.get("items", []) if is_dispatch(c)]
        self._marked = {u: t for u, t in self._marked.items() if u in {dig(c, "metadata", "uid") for c in copies}}
        deleted = 0
        for copy in copies:
            namespace, name = dig(copy, "metadata", "namespace"), dig(copy, "metadata", "name")
            needs = copy_claim(copy)
            claim = self.claims.live(needs[0], now) if needs else None
            try:
                verdict, said = await self._judge(copy, claim, now, epoch=epoch, lost=lost, full=full)
                if verdict.action is not CopyAction.DELETE:
                    continue
                meta = copy["metadata"]
                await self.kube.delete_trainjob(namespace, name, meta["uid"], meta["resourceVersion"])
            except Exception as exc:  # one copy's failure never stops the others'; the next sweep tries again
                log.warning("copy %s/%s: not deleted: %s", namespace, name, describe_error(exc))
                continue
            deleted += 1
            log.warning("copy %s/%s deleted: %s", namespace, name, verdict.reason)
            await said(copy, verdict.reason)
        self.deleted += deleted
        return deleted

    async def _judge(
        self, copy: Mapping[str, Any], claim: str | None, now: float, *, epoch: int | None, lost: bool, full: bool
    ) -> tuple[CopyVerdict, Callable[[Mapping[str, Any], str], Awaitable[bool]]]:
        """The verdict on one copy, and the Event that says it."""
        events = self.kube.events
        if unverified(copy):
            waited = now - self._marked.setdefault(str(dig(copy, "metadata", "uid")), now)
            return unclaimed_marked(copy, claim=claim, waited=waited, duration=self.claims.duration), events.unclaimed
        needs = copy_claim(copy)
        if not full and needs is not None and claim == needs[1]:
            return CopyVerdict(CopyAction.NOTHING, "claimed"), events.unclaimed  # nothing changed: no Workload read
        namespace = dig(copy, "metadata", "namespace")
        workload_name = prebuilt_workload(copy)
        workload = await self.kube.get_workload(namespace, workload_name) if workload_name else None
        if full:
            verdict = outlived_contact(copy, workload, epoch=epoch, lost=lost)
            if verdict.action is CopyAction.DELETE:
                return verdict, events.out_of_contact
        return unclaimed(copy, workload, claim=claim), events.unclaimed
