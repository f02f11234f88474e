"""The agent's work queue and backoffs (client-go workqueue semantics on asyncio)."""

from __future__ import annotations

import asyncio

import pytest

from agent.runtime.queue import QueueShutDown, RateLimiter, WorkQueue, serve_keys
from serving.backoff import Backoff, backoff_delay
from serving.client import KubeError

aio = pytest.mark.asyncio(loop_scope="function")


@aio
async def test_a_key_queued_twice_runs_once():
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    q.add("a")
    assert len(q) == 2
    assert [await q.get(), await q.get()] == ["a", "b"]
    assert len(q) == 0


@aio
async def test_a_key_being_processed_is_not_handed_out_again_until_done():
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    key = await q.get()
    q.add("a")  # an event arrives mid-reconcile
    q.add("a")
    assert len(q) == 0  # a second worker must not get it now
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await q.get()
    q.done(key)
    assert len(q) == 1  # it runs again, once
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


@aio
async def test_done_without_a_new_add_does_not_requeue():
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.done(await q.get())
    assert len(q) == 0
    assert q.processing == frozenset()


@aio
async def test_a_waiting_worker_wakes_on_add():
    q: WorkQueue[str] = WorkQueue()
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("a")
    assert await asyncio.wait_for(waiter, 1) == "a"


@aio
async def test_two_waiting_workers_get_different_keys():
    q: WorkQueue[str] = WorkQueue()
    waiters = [asyncio.create_task(q.get()) for _ in range(2)]
    await asyncio.sleep(0)
    q.add("a")
    q.add("b")
    assert sorted(await asyncio.gather(*waiters)) == ["a", "b"]


@aio
async def test_add_after_delays_and_the_earlier_timer_wins():
    q: WorkQueue[str] = WorkQueue()
    q.add_after("a", 0.05)
    q.add_after("a", 10)  # later: ignored
    assert len(q) == 0
    assert await asyncio.wait_for(q.get(), 1) == "a"
    q.done("a")
    q.add_after("b", 10)
    q.add_after("b", 0.01)  # earlier: replaces
    assert await asyncio.wait_for(q.get(), 1) == "b"


@aio
async def test_shutdown_wakes_waiters_and_drops_timers():
    q: WorkQueue[str] = WorkQueue()
    waiter = asyncio.create_task(q.get())
    q.add_after("a", 0.01)
    await asyncio.sleep(0)
    q.shutdown()
    with pytest.raises(QueueShutDown):
        await asyncio.wait_for(waiter, 1)
    await asyncio.sleep(0.05)
    q.add("b")
    assert len(q) == 0


def test_backoff_delay_doubles_and_is_capped():
    assert [backoff_delay(n, 0.2, 30) for n in range(10)] == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 12.8, 25.6, 30, 30]
    assert backoff_delay(10_000, 0.2, 30) == 30  # no overflow after a long outage
    with pytest.raises(ValueError, match="negative"):
        backoff_delay(-1)


def test_rate_limiter_is_per_key_and_forgets():
    limiter: RateLimiter[str] = RateLimiter(base=1, cap=8)
    assert [limiter.when("a") for _ in range(5)] == [1, 2, 4, 8, 8]
    assert limiter.when("b") == 1
    limiter.forget("a")
    assert limiter.failures("a") == 0
    assert limiter.when("a") == 1


def test_stream_backoff_has_bounded_jitter_and_resets():
    b = Backoff(base=1, cap=10)
    assert b.next(rand=0) == 1
    assert b.next(rand=1) == 3  # 2 * 1.5
    assert b.next(rand=1) == 6
    assert b.next(rand=1) == 10  # capped after jitter too
    b.reset()
    assert b.next(rand=0.5) == 1.25


@aio
async def test_serve_keys_looks_again_when_asked_retries_failures_and_drops_the_gone():
    queue: WorkQueue[str] = WorkQueue()
    looks: list[str] = []
    failures: list[str] = []
    fail = {
        "conflict": KubeError(409, "Conflict", ""),
        "gone": KubeError(404, "NotFound", ""),
        "broken": RuntimeError("x"),
    }

    async def look(key: str) -> float | None:
        looks.append(key)
        if key in fail and looks.count(key) == 1:
            raise fail[key]
        return 0.01 if key == "again" and looks.count(key) == 1 else None

    for key in ("again", "conflict", "gone", "broken", "plain"):
        queue.add(key)
    task = asyncio.create_task(serve_keys(queue, RateLimiter(base=0.01), look, lambda k, _: failures.append(k)))
    await asyncio.sleep(0.3)
    queue.shutdown()
    await task
    # Asked to look again: twice. A 409 and any other failure: tried again, only the latter reported. A 404: once.
    assert sorted(looks) == ["again", "again", "broken", "broken", "conflict", "conflict", "gone", "plain"]
    assert failures == ["broken"]
