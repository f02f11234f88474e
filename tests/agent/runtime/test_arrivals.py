"""Start's wake-ups (agent/runtime/arrivals.py): a Workload event wakes exactly the waits on its TrainJob, an event
between a read and the wait is kept, and without one the wait ends at its poll interval."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.runtime.arrivals import Arrivals
from contract.keys import LABEL_WORKLOAD_JOB_UID

async_test = pytest.mark.asyncio(loop_scope="function")


def workload_of(uid: str) -> dict:
    return {"metadata": {"name": f"trainjob-{uid}", "labels": {LABEL_WORKLOAD_JOB_UID: uid}}}


@async_test
async def test_an_event_wakes_the_waits_on_its_trainjob_and_no_other():
    arrivals = Arrivals()
    with arrivals.waiting("tj-1") as mine, arrivals.waiting("tj-2") as other:
        arrivals.saw(workload_of("tj-1"))
        started = time.monotonic()
        await mine.next(5)
        assert time.monotonic() - started < 1
        assert not other.event.is_set()
        started = time.monotonic()
        await other.next(0.2)  # nothing of tj-2: the poll interval
        assert time.monotonic() - started >= 0.2
    assert len(arrivals) == 0  # every wait unregistered


@async_test
async def test_an_event_before_the_wait_is_kept_and_used_once():
    arrivals = Arrivals()
    with arrivals.waiting("tj-1") as waiter:
        arrivals.saw(workload_of("tj-1"))  # between the caller's read and its wait
        await asyncio.wait_for(waiter.next(5), 1)
        assert not waiter.event.is_set()  # cleared: the next wait waits again


def test_a_workload_without_kueues_label_wakes_nothing():
    arrivals = Arrivals()
    with arrivals.waiting("tj-1") as waiter:
        arrivals.saw({"metadata": {"name": "blocker"}})
        assert not waiter.event.is_set()
