"""The Active condition: set True on each AdmissionCheck of ours while we lead, never set False
(agent/domain/admission_check.py says why and builds the patch).

A runnable of the leader's (agent/gate/runnable.py), woken by the AdmissionCheck watch when the checks change.
"""

from __future__ import annotations

import asyncio
import logging

from agent.domain.admission_check import AdmissionCheckCache, active_patch
from agent.gate.reconcile import utc_now
from agent.runtime.kube import Kube
from contract.objects import dig
from serving.backoff import Backoff
from serving.kube import describe_error

log = logging.getLogger(__name__)


class ActiveCondition:
    name = "active-condition"

    def __init__(self, kube: Kube, checks: AdmissionCheckCache) -> None:
        self.kube, self.checks = kube, checks
        self._dirty = asyncio.Event()

    def changed(self) -> None:
        """The AdmissionCheck watch saw our checks change: look at them again (when leading)."""
        self._dirty.set()

    async def run(self) -> None:
        backoff = Backoff()
        while True:
            self._dirty.clear()
            failed = False
            for ac in self.checks.objects():
                # From the watch's cache: a failed test op (the cache was behind) is retried after a backoff,
                # by when the watch has brought the AdmissionCheck as it is.
                ops, name = active_patch(ac, utc_now()), str(dig(ac, "metadata", "name"))
                if ops is None:
                    continue
                try:
                    await self.kube.patch_admission_check_status(name, ops)
                    log.info("AdmissionCheck %s: Active=True", name)
                except Exception as exc:
                    failed = True
                    log.warning("AdmissionCheck %s: cannot set Active: %s", name, describe_error(exc))
            if failed:
                await asyncio.sleep(backoff.next())
                continue
            backoff.reset()
            await self._dirty.wait()
