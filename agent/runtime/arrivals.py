"""What Start's wait for the Workload Kueue makes for a new TrainJob (agent/api/service/start.py) learns from the
gate's Workload watch, so that it LISTs once the Workload is there rather than on every poll.

Fed by that watch on every replica (agent/gate/controller.py): each event of a Workload wakes the Starts waiting on
the TrainJob it names (Kueue's ``job-uid`` label) and hands them the Workload as the event had it. That copy is
only a hint of when to read: Start still decides on a LIST it makes itself (the copy could be one of several
Workloads claiming the TrainJob, or stale). While the watch is live (``live``: listed, and not relisting), Start
LISTs when the copy shows what it waits for, and otherwise only every ``FALLBACK_SECONDS`` in case an event was
missed; while it is not, it LISTs on every poll, as without a watch. So a wake-up can shorten a wait and spare
LISTs, never change what Start decides."""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any, Final

from contract.gates import gates_of
from contract.keys import GATE, LABEL_WORKLOAD_JOB_UID
from contract.objects import dig

FALLBACK_SECONDS: Final = 2.0
"""While the watch is live, Start LISTs at least this often whatever the watch showed."""
GATED_KEPT: Final = 1024
"""Workloads still carrying dispatch's gate kept for a wait that begins after their events (Starts in flight)."""


class Waiter:
    """One Start's wait: ``next`` returns when a Workload of its TrainJob changed since the last call (``latest``:
    that Workload as the event had it), or after ``seconds``."""

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.latest: Mapping[str, Any] | None = None

    async def next(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.event.wait()
        self.event.clear()


class Arrivals:
    def __init__(self) -> None:
        self._waiters: dict[str, set[Waiter]] = {}
        self._gated: OrderedDict[str, Mapping[str, Any]] = OrderedDict()
        """The last Workloads seen carrying dispatch's gate (not yet opened), by TrainJob uid, the newest last: a
        wait that begins after its Workload's events starts from it."""
        self.live = False
        """Whether the watch feeding it has listed and is not relisting: set by its feeder."""

    def saw(self, workload: Mapping[str, Any]) -> None:
        """A Workload event: hand it to every wait on the TrainJob it names, and wake them."""
        uid = dig(workload, "metadata", "labels", LABEL_WORKLOAD_JOB_UID)
        if not uid:
            return
        uid = str(uid)
        if GATE in gates_of(workload):
            self._gated[uid] = workload
            self._gated.move_to_end(uid)
            if len(self._gated) > GATED_KEPT:
                self._gated.popitem(last=False)
        else:
            self._gated.pop(uid, None)
        for waiter in self._waiters.get(uid, ()):
            waiter.latest = workload
            waiter.event.set()

    def gone(self, workload: Mapping[str, Any]) -> None:
        """A Workload deleted: forget it, and tell the waits on its TrainJob so."""
        uid = dig(workload, "metadata", "labels", LABEL_WORKLOAD_JOB_UID)
        if not uid:
            return
        self._gated.pop(str(uid), None)
        for waiter in self._waiters.get(str(uid), ()):
            waiter.latest = None
            waiter.event.set()

    @contextlib.contextmanager
    def waiting(self, trainjob_uid: str) -> Iterator[Waiter]:
        """A wait on the Workloads of ``trainjob_uid``, registered before the caller's first read: an event
        between that read and ``next`` is not lost, and one before the wait began is its ``latest``."""
        waiter = Waiter()
        waiter.latest = self._gated.get(trainjob_uid)
        self._waiters.setdefault(trainjob_uid, set()).add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get(trainjob_uid, set())
            waiters.discard(waiter)
            if not waiters:
                self._waiters.pop(trainjob_uid, None)

    def waited_on(self) -> int:
        """The TrainJobs some Start waits on (not ``__len__``: an Arrivals with none must not be falsy)."""
        return len(self._waiters)
