"""Observe-only: the Preflight verdict, one per mode, as cluster state on the readmission controller's Lease (so
every replica behind the Service answers alike and a restart forgets nothing), read for Capabilities and for
every call that may let something run, and recorded by Preflight; in Kueue mode it holds only while that Lease
is renewed (the controller runs in the agent's leader). verdict.py and heartbeat.py decide.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import KubeError
from agent.api.models import Capabilities, ObjectRef, StartRequest
from agent.api.service.base import CONFLICT_ATTEMPTS, POLL_SECONDS, ServiceBase
from agent.api.service.capabilities import no_verdict
from agent.api.service.heartbeat import Heartbeat, LeaseState, heartbeat, lease_state, sighted
from agent.api.service.lifecycle_decisions import rfc3339
from agent.api.service.verdict import in_force, latest_mode, lease_with_verdict, refusal, verdict_of, verdict_text
from contract.objects import dig
from contract.ownership import is_dispatch, is_kueue_mode
from contract.upstream import LEASES, TRAINJOBS


class ObserveOnlyOps(ServiceBase):
    """Capabilities, the observe-only refusal, and the verdict's record on the Lease."""

    @property
    def _lease_path(self) -> str:
        return LEASES.path(self.settings.lease_namespace, self.settings.lease_name)

    @property
    def _lease_where(self) -> str:
        return f"{self.settings.lease_namespace}/{self.settings.lease_name}"

    def _beat(self, lease: Mapping[str, Any] | None) -> Heartbeat:
        """The readmission controller's heartbeat from this read of its Lease (this replica's sighting kept)."""
        self._sighting = sighted(self._sighting, lease, self.clock())
        return heartbeat(lease, self._sighting, now=self.now(), clock=self.clock(), where=self._lease_where)

    async def capabilities(self) -> Capabilities:
        """The report in force for the mode whose Preflight ran last, whichever replica ran it (in Kueue mode
        only while the controller's Lease is renewed); before any, what ``requirePreflight`` says."""
        lease = await self._read(self._lease_path, f"Lease {self._lease_where}")
        kueue = latest_mode(lease)
        if kueue is None:
            return no_verdict(self.settings.require_preflight)
        verdict = verdict_of(lease, kueue)
        return in_force(verdict, self._beat(lease), kueue=kueue, require_preflight=self.settings.require_preflight)

    async def _mode_of(self, req: Any) -> bool | None:
        """The mode a call that may let something run acts in (True: Kueue): Start's request says; Open and
        Release act on the TrainJob's. None when there is no dispatch TrainJob of that uid: the operation
        itself then answers (not found, not dispatch's, another object), and nothing about it is revealed."""
        if isinstance(req, StartRequest):
            return req.kueue is not None
        if not isinstance(req, ObjectRef):
            return None
        trainjob = await self._read(TRAINJOBS.path(req.namespace, req.name), f"TrainJob {req.namespace}/{req.name}")
        if not is_dispatch(trainjob) or dig(trainjob, "metadata", "uid") != req.uid:
            return None
        return is_kueue_mode(trainjob)

    async def refuse_if_observe_only(self, req: Any) -> None:
        """Refuse a call that may let something run while its mode is observe-only: the mode's last verdict
        failed (or none passed, with ``requirePreflight``), or, in Kueue mode, the readmission controller's
        Lease is not being renewed."""
        lease = await self._read(self._lease_path, f"Lease {self._lease_where}")
        beat, strict = self._beat(lease), self.settings.require_preflight
        why = {k: refusal(verdict_of(lease, k), beat, kueue=k, require_preflight=strict) for k in (True, False)}
        if not any(why.values()):
            return  # the usual case: no mode is observe-only, so the call's mode need not be read
        kueue = await self._mode_of(req)
        if kueue is not None and why[kueue] is not None:
            raise ApiError(ErrorKind.OBSERVE_ONLY, why[kueue])

    async def _record(self, report: Capabilities, kueue: bool) -> None:
        """Write the verdict onto the Lease: a PUT carrying the resourceVersion read (so neither this write nor
        the leader's renewal, which writes the Lease as it read it, loses the other's), or a create when there
        is no Lease yet (the leader then takes it over). Re-read and retried on a conflict."""
        text = verdict_text(report, rfc3339(self.now()))
        ns, name, where = self.settings.lease_namespace, self.settings.lease_name, self._lease_where
        for _ in range(CONFLICT_ATTEMPTS):
            lease = await self._read(self._lease_path, f"Lease {where}")
            try:
                if lease is None:
                    await self.kube.create(LEASES.path(ns), lease_with_verdict(None, text, ns, name, kueue))
                else:
                    await self.kube.replace(self._lease_path, lease_with_verdict(lease, text, ns, name, kueue))
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise ApiError(
                        ErrorKind.UNAVAILABLE,
                        f"the Preflight's verdict could not be recorded on the Lease {where}, so the replicas "
                        f"would not share it: {exc.describe()}",
                    ) from None
        raise ApiError(ErrorKind.UNAVAILABLE, f"the Lease {where} changed under each write of the verdict; retry")

    async def _heartbeat(self, first: Mapping[str, Any] | None, since: float) -> LeaseState:
        """Is the readmission controller alive? Judged by watching its Lease change, by this agent's own
        monotonic clock, never by comparing the renewTime another machine wrote with this one's wall clock:
        alive once the record changes while watched; dead when it is released (no holder), absent, or has not
        changed for its leaseDurationSeconds of watching."""
        while True:
            last = await self._read(self._lease_path, f"Lease {self._lease_where}")
            if first is None and last is not None:
                first, since = last, time.monotonic()
            state = lease_state(first, last, time.monotonic() - since, self._lease_where)
            if state.settled:
                return state
            await asyncio.sleep(POLL_SECONDS)
