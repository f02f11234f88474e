"""Wake-ups for Start's wait for the Workload Kueue makes for a new TrainJob (agent/api/service/start.py).

Fed by the gate's Workload watch on every replica (agent/gate/controller.py): each event of a Workload wakes the
Starts waiting on the TrainJob it names (Kueue's ``job-uid`` label). A wake-up is only a hint to read again: Start
still decides on a LIST it makes itself, and without a wake-up (a replica whose watch is not live, an event
missed) it reads again after its poll interval, as before. So a wake-up can shorten a wait, never change what
Start decides."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from contract.keys import LABEL_WORKLOAD_JOB_UID
from contract.objects import dig


class Waiter:
    """One Start's wait: ``next`` returns when a Workload of its TrainJob changed since the last call, or after
    ``seconds``."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    async def next(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self.event.wait()
        self.event.clear()


class Arrivals:
    def __init__(self) -> None:
        self._waiters: dict[str, set[Waiter]] = {}

    def saw(self, workload: Mapping[str, Any]) -> None:
        """A Workload event: wake every wait on the TrainJob it names."""
        uid = dig(workload, "metadata", "labels", LABEL_WORKLOAD_JOB_UID)
        for waiter in self._waiters.get(str(uid), ()) if uid else ():
            waiter.event.set()

    @contextlib.contextmanager
    def waiting(self, trainjob_uid: str) -> Iterator[Waiter]:
        """A wait on the Workloads of ``trainjob_uid``, registered before the caller's first read: an event
        between that read and ``next`` is not lost."""
        waiter = Waiter()
        self._waiters.setdefault(trainjob_uid, set()).add(waiter)
        try:
            yield waiter
        finally:
            waiters = self._waiters.get(trainjob_uid, set())
            waiters.discard(waiter)
            if not waiters:
                self._waiters.pop(trainjob_uid, None)

    def __len__(self) -> int:
        return len(self._waiters)
