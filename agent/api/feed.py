"""The change feed behind Watch: three list-and-watch streams (TrainJobs, Workloads, AdmissionChecks, all
namespaces) feeding the pure state of agent/domain/changes.py, and the callers waiting on it.

Started by the first Watch call a replica answers (an agent whose supervisors never watch pays nothing), then
kept running until the API stops. A waiting caller costs the API server only its authorization: its answer is
read from memory; the streams cost the same whoever watches (docs/performance.md, "The change feed: Watch against
polling").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any, Final

from agent.domain.changes import CHECK, TRAINJOB, WORKLOAD, Feed, Job, decode, encode
from agent.domain.kueue_objects import our_checks
from contract.objects import dig
from contract.upstream import ADMISSION_CHECKS, TRAINJOBS, WORKLOADS
from serving import watch
from serving.client import Kube

SYNC_TIMEOUT: Final = 30.0
"""Seconds a first Watch waits for the feed's first LISTs before answering ``unavailable``."""

log = logging.getLogger(__name__)


class Expired(Exception):
    """The version is older than the feed remembers, or not one of ours: start again from a snapshot."""


class NotReady(Exception):
    """The feed has not listed everything yet."""


class _Stream:
    """A ``watch.Handler`` for one collection: events into the feed, and what a LIST did not list is gone."""

    def __init__(self, owner: ChangeFeed, which: int) -> None:
        self.owner, self.which = owner, which
        self.listed: set[str] | None = None

    def begin(self) -> None:
        self.listed = set()

    def page(self, items: list[Mapping[str, Any]]) -> None:
        key = ("metadata", "name") if self.which == CHECK else ("metadata", "uid")
        for obj in items:
            if self.listed is not None:
                self.listed.add(str(dig(obj, *key) or ""))
            self.event("ADDED", obj)

    def end(self) -> None:
        owner, listed = self.owner, self.listed or set()
        self.listed = None
        if self.which != CHECK:
            owner.changed(owner.feed.relisted(self.which, listed, owner.clock()))
            return
        for name in [n for n in owner.checks if n not in listed]:
            # Gone while the watch was down; rare, and it moves a phase only between Queued and Admitting.
            owner.apply(CHECK, "DELETED", {"metadata": {"name": name}})

    def event(self, kind: str, obj: Mapping[str, Any]) -> None:
        self.owner.apply(self.which, kind, obj)

    def listed(self, resource_version: str) -> None:
        """The LIST's own version: the feed has read the collection up to it, and knows no deletion before it."""
        self.owner.feed.listed(self.which, resource_version)


class ChangeFeed:
    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube, self.clock = kube, clock
        self.feed = Feed()
        self.checks: dict[str, Mapping[str, Any]] = {}
        """Every AdmissionCheck, by name (few; their names decide which are ours)."""
        self.synced = {which: asyncio.Event() for which in (TRAINJOB, WORKLOAD, CHECK)}
        self._tasks: list[asyncio.Task[None]] = []
        self._tick: asyncio.Future[None] | None = None

    # -- the streams ---------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._tasks:
            return
        streams = (
            (TRAINJOB, TRAINJOBS.everywhere()),
            (WORKLOAD, WORKLOADS.everywhere()),
            (CHECK, ADMISSION_CHECKS.path()),
        )
        for which, path in streams:
            name = ("trainjobs", "workloads", "admissionchecks")[which]
            run = watch.run(
                f"feed-{name}", self.kube, self.kube.collection(path), _Stream(self, which), self.synced[which]
            )
            self._tasks.append(asyncio.create_task(run, name=f"feed-{name}"))
        log.info("change feed: watching TrainJobs, Workloads and AdmissionChecks")

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def apply(self, which: int, kind: str, obj: Mapping[str, Any]) -> None:
        feed, gone = self.feed, kind == "DELETED"
        if which == TRAINJOB:
            self.changed(feed.trainjob_gone(obj, self.clock()) if gone else feed.trainjob(obj))
        elif which == WORKLOAD:
            self.changed(feed.workload_gone(obj) if gone else feed.workload(obj))
        else:
            name = str(dig(obj, "metadata", "name") or "")
            if gone:
                self.checks.pop(name, None)
            else:
                self.checks[name] = obj
            self.changed(feed.admission_checks(our_checks(self.checks.values()), obj))

    def changed(self, any_: bool) -> None:
        """Wake every waiting caller (each looks at its own namespace again)."""
        if any_ and self._tick is not None:
            self._tick.set_result(None)
            self._tick = None

    # -- answering -------------------------------------------------------------------------------------------

    async def changes(self, namespace: str, version: str | None, wait: float) -> tuple[list[Job], str]:
        """The jobs of ``namespace`` changed after ``version`` (a snapshot when None), and the version to ask
        from next; waits up to ``wait`` seconds for a change when there is none yet."""
        self.start()
        await self._synced()
        deadline = self.clock() + wait
        v = None
        if version is not None:
            v = decode(version)
            if v is None:
                raise Expired(f"{version!r} is not a version this API answered")
        while True:
            self.feed.forget(self.clock())
            if v is not None and self.feed.expired(v):
                raise Expired(f"version {version} is older than this agent remembers")
            found = self.feed.since(namespace, v)
            left = deadline - self.clock()
            if found or v is None or left <= 0:
                return found, encode(self.feed.position)
            if self._tick is None:
                self._tick = asyncio.get_running_loop().create_future()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._tick), left)

    async def _synced(self) -> None:
        try:
            async with asyncio.timeout(SYNC_TIMEOUT):
                for event in self.synced.values():
                    await event.wait()
        except TimeoutError:
            raise NotReady("the change feed has not listed the TrainJobs and Workloads yet") from None
