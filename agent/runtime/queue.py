"""The work queue and its per-key backoff: client-go's workqueue semantics, on asyncio.

* A key queued twice before a worker takes it runs once (``dirty``).
* A key queued while a worker processes it is not handed to a second worker; it runs again after the
  first finishes (``processing``). So one Workload is never reconciled by two workers at once, and an event
  that arrives mid-reconcile is never lost.
* ``add_after`` delays a key (a failed reconcile's backoff); an ``add`` in the meantime runs it at once.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

from serving.backoff import BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS, backoff_delay
from serving.client import KubeError

K = TypeVar("K", bound=Hashable)


class RateLimiter(Generic[K]):
    """Per-key exponential backoff: each ``when`` doubles the key's next delay until ``forget``."""

    def __init__(self, base: float = BACKOFF_BASE_SECONDS, cap: float = BACKOFF_CAP_SECONDS) -> None:
        self.base, self.cap = base, cap
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        return backoff_delay(n, self.base, self.cap)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)


class QueueShutDown(Exception):
    pass


class WorkQueue(Generic[K]):
    def __init__(self) -> None:
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._timers: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._nonempty = asyncio.Event()
        self._shutdown = False

    def __len__(self) -> int:
        """Keys waiting to be handed out (not those being processed or delayed)."""
        return len(self._queue)

    @property
    def processing(self) -> frozenset[K]:
        return frozenset(self._processing)

    def add(self, key: K) -> None:
        if self._shutdown or key in self._dirty:
            return
        self._dirty.add(key)
        if key in self._processing:
            return  # handed out again by done()
        self._queue.append(key)
        self._wake()

    def add_after(self, key: K, delay: float) -> None:
        """Queue ``key`` after ``delay`` seconds; an earlier timer for it wins, a later one is replaced."""
        if self._shutdown:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        due = loop.time() + delay
        current = self._timers.get(key)
        if current is not None:
            if current[0] <= due:
                return
            current[1].cancel()
        self._timers[key] = (due, loop.call_at(due, self._fire, key))

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    async def get(self) -> K:
        """The next key; the caller must call ``done(key)`` when finished with it."""
        while not self._queue:
            if self._shutdown:
                raise QueueShutDown("the work queue is shut down")
            self._nonempty.clear()
            await self._nonempty.wait()  # every waiter wakes; those that find the queue empty wait again
        key = self._queue.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._wake()

    def shutdown(self) -> None:
        self._shutdown = True
        for _, handle in self._timers.values():
            handle.cancel()
        self._timers.clear()
        self._wake()

    def _wake(self) -> None:
        self._nonempty.set()


async def serve_keys(
    queue: WorkQueue[K],
    limiter: RateLimiter[K],
    look: Callable[[K], Awaitable[float | None]],
    failed: Callable[[K, Exception], None],
) -> None:
    """One worker over ``queue`` while leading: ``look`` at each key in turn; it returns seconds after which to look
    again, or None. Cancelled mid-look (leadership lost), the key goes back for whoever leads next. A failed look is
    tried again after the key's backoff, except a 404 or 422 (the object gone, or another of that name: nothing to
    do); ``failed`` reports it, but for a 409 (changed since read: the retry reads afresh)."""
    while True:
        try:
            key = await queue.get()
        except QueueShutDown:
            return
        try:
            again = await look(key)
        except asyncio.CancelledError:
            queue.done(key)
            queue.add(key)
            raise
        except Exception as exc:
            queue.done(key)
            status = exc.status if isinstance(exc, KubeError) else None
            if status not in (404, 422):
                if status != 409:
                    failed(key, exc)
                queue.add_after(key, limiter.when(key))
            continue
        queue.done(key)
        limiter.forget(key)
        if again is not None:
            queue.add_after(key, again)
