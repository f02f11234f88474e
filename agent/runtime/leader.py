"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

Only so replicas do not do the same work twice. The Lease is NOT a fence and nothing relies on it for
safety: two replicas that both believe they lead (a stalled leader waking after its Lease expired, a
partition) can both reconcile, and every write they make is still preconditioned on what each one read
(agent/gate/reconcile.py), so at most one of two competing approvals lands. Its heartbeat also tells an adapter
the gate is being served (a new adapter is observe-only while it is stale).

* Every write carries the resourceVersion read (a PUT of the object read), or is a create when the Lease is
  absent: two candidates cannot both take it in one round.
* Expiry is judged by this replica's own monotonic clock, from the moment it saw the record last change
  (client-go's observedTime), never by comparing another machine's renewTime with our clock: clock skew
  cannot shorten someone else's Lease.
* The leader renews every RENEW_PERIOD; when it has not renewed for RENEW_DEADLINE (shorter than the
  Lease's duration) it steps down, so normally it stops before anyone else may start.
* On a clean shutdown the leader releases the Lease (holder cleared), so a successor need not wait.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

from agent.constants import (
    LEASE_DURATION_SECONDS,
    RENEW_DEADLINE_SECONDS,
    RENEW_PERIOD_SECONDS,
    RETRY_PERIOD_SECONDS,
)
from agent.runtime.kube import Kube
from contract.objects import micro_time
from serving.client import KubeError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Record:
    holder: str
    duration: int
    acquire_time: str | None
    renew_time: str | None
    transitions: int


def record_of(lease: Mapping[str, Any]) -> Record:
    spec = lease.get("spec") if isinstance(lease.get("spec"), Mapping) else {}
    duration = spec.get("leaseDurationSeconds")
    transitions = spec.get("leaseTransitions")
    return Record(
        holder=spec.get("holderIdentity") or "",
        duration=duration if isinstance(duration, int) and duration > 0 else LEASE_DURATION_SECONDS,
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        transitions=transitions if isinstance(transitions, int) and transitions >= 0 else 0,
    )


class Observer:
    """When this replica saw the Lease's record last change, by its monotonic clock."""

    def __init__(self) -> None:
        self._record: Record | None = None
        self._at = 0.0

    def observe(self, record: Record, now: float) -> None:
        if record != self._record:
            self._record, self._at = record, now

    def expired(self, now: float) -> bool:
        """True when the holder has not renewed within its duration as we have watched it (or it released it)."""
        if self._record is None:
            return True
        if not self._record.holder:
            return True
        return now >= self._at + self._record.duration


class Kind(Enum):
    CREATE = "create"
    UPDATE = "update"
    STANDBY = "standby"


@dataclass(frozen=True)
class Plan:
    kind: Kind
    body: dict[str, Any] | None = None
    holder: str = ""
    """Who holds the Lease after the step (another replica, for STANDBY)."""


def plan(
    lease: Mapping[str, Any] | None,
    *,
    namespace: str,
    name: str,
    identity: str,
    now: str,
    expired: bool,
    duration: int = LEASE_DURATION_SECONDS,
) -> Plan:
    """The next step of a candidate: take or renew the Lease, or stand by while another holds it."""
    if lease is None:
        return Plan(
            Kind.CREATE,
            {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": name, "namespace": namespace},
                "spec": _spec(identity, duration, acquire=now, renew=now, transitions=0),
            },
            identity,
        )
    record = record_of(lease)
    if record.holder == identity:
        spec = _spec(identity, duration, acquire=record.acquire_time or now, renew=now, transitions=record.transitions)
    elif record.holder and not expired:
        return Plan(Kind.STANDBY, holder=record.holder)
    else:
        spec = _spec(identity, duration, acquire=now, renew=now, transitions=record.transitions + 1)
    # The object as read, resourceVersion included: the PUT fails with 409 if anyone wrote it since.
    body = {**lease, "spec": {**(lease.get("spec") or {}), **spec}}
    return Plan(Kind.UPDATE, body, identity)


def release(lease: Mapping[str, Any], *, identity: str, now: str) -> dict[str, Any] | None:
    """The body that gives the Lease up (client-go's ReleaseOnCancel), or None when it is not ours."""
    record = record_of(lease)
    if record.holder != identity:
        return None
    spec = {**(lease.get("spec") or {}), "holderIdentity": "", "leaseDurationSeconds": 1, "acquireTime": now,
            "renewTime": now}  # fmt: skip
    return {**lease, "spec": spec}


def leading_after(
    attempt: Kind | None, *, leading: bool, last_renew: float | None, now: float, deadline: float
) -> bool:
    """Whether this replica leads after an attempt: it took or renewed the Lease (UPDATE/CREATE), someone
    else holds it (STANDBY), or the attempt failed (None) and the last renewal is older than ``deadline``."""
    if attempt in (Kind.CREATE, Kind.UPDATE):
        return True
    if attempt is Kind.STANDBY:
        return False
    return leading and last_renew is not None and now - last_renew < deadline


def _spec(identity: str, duration: int, *, acquire: str, renew: str, transitions: int) -> dict[str, Any]:
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration,
        "acquireTime": acquire,
        "renewTime": renew,
        "leaseTransitions": transitions,
    }


class LeaderElector:
    """Runs the candidate loop; ``on_change(True/False)`` is called as leadership is won and lost."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        on_change: Callable[[bool], None],
        clock: Callable[[], float] = time.monotonic,
        duration: int = LEASE_DURATION_SECONDS,
        renew_period: float = RENEW_PERIOD_SECONDS,
        renew_deadline: float = RENEW_DEADLINE_SECONDS,
        retry_period: float = RETRY_PERIOD_SECONDS,
    ) -> None:
        self.kube, self.namespace, self.name, self.identity = kube, namespace, name, identity
        self.on_change, self.clock = on_change, clock
        self.duration, self.renew_period, self.renew_deadline, self.retry_period = (
            duration,
            renew_period,
            renew_deadline,
            retry_period,
        )
        self.leading = False
        self.holder = ""
        self._observer = Observer()
        self._last_renew: float | None = None

    async def run(self) -> None:
        while True:
            attempt = await self._attempt()
            now = self.clock()
            if attempt in (Kind.CREATE, Kind.UPDATE):
                self._last_renew = now
            self._set(
                leading_after(
                    attempt, leading=self.leading, last_renew=self._last_renew, now=now, deadline=self.renew_deadline
                )
            )
            renewed = self.leading and attempt in (Kind.CREATE, Kind.UPDATE)
            await asyncio.sleep(self.renew_period if renewed else self.retry_period)

    async def _attempt(self) -> Kind | None:
        """One round: None when it failed (the API refused or did not answer in time)."""
        try:
            # Bounded so that a hung API server cannot keep a leader believing it leads past its deadline.
            async with asyncio.timeout(self.renew_deadline / 2):
                lease = await self.kube.get_lease(self.namespace, self.name)
                if lease is not None:
                    self._observer.observe(record_of(lease), self.clock())
                step = plan(
                    lease,
                    namespace=self.namespace,
                    name=self.name,
                    identity=self.identity,
                    now=micro_time(dt.datetime.now(dt.UTC)),
                    expired=self._observer.expired(self.clock()),
                    duration=self.duration,
                )
                self.holder = step.holder
                if step.kind is Kind.CREATE:
                    await self.kube.create_lease(self.namespace, step.body or {})
                elif step.kind is Kind.UPDATE:
                    await self.kube.replace_lease(self.namespace, self.name, step.body or {})
                return step.kind
        except KubeError as exc:
            # 409: another candidate wrote first (or we raced our own renewal); try again next round.
            log.log(
                logging.DEBUG if exc.status == 409 else logging.WARNING,
                "lease %s/%s: %s",
                self.namespace,
                self.name,
                exc.describe(),
            )
        except TimeoutError:
            log.warning("lease %s/%s: no answer within %gs", self.namespace, self.name, self.renew_deadline / 2)
        except Exception as exc:  # a network error must not end the candidate loop
            log.warning("lease %s/%s: %s: %s", self.namespace, self.name, type(exc).__name__, exc)
        return None

    def _set(self, leading: bool, *, releasing: bool = False) -> None:
        if leading == self.leading:
            return
        self.leading = leading
        if leading:
            log.info("leading: %s holds Lease %s/%s", self.identity, self.namespace, self.name)
        elif releasing:
            log.info("stepping down: releasing Lease %s/%s", self.namespace, self.name)
        else:
            log.warning("not leading any more (Lease %s/%s; holder %r)", self.namespace, self.name, self.holder)
        self.on_change(leading)

    async def release(self) -> None:
        """Give the Lease up if we hold it (best effort: on failure it simply expires)."""
        if not self.leading:
            return
        self._set(False, releasing=True)
        try:
            async with asyncio.timeout(self.renew_deadline / 2):
                lease = await self.kube.get_lease(self.namespace, self.name)
                body = (
                    None
                    if lease is None
                    else release(lease, identity=self.identity, now=micro_time(dt.datetime.now(dt.UTC)))
                )
                if body is not None:
                    await self.kube.replace_lease(self.namespace, self.name, body)
                    log.info("released Lease %s/%s", self.namespace, self.name)
        except (KubeError, TimeoutError, OSError) as exc:
            log.warning("could not release Lease %s/%s (it will expire): %s", self.namespace, self.name, exc)
