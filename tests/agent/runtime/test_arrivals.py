"""Start's wake-ups (agent/runtime/arrivals.py): a Workload event wakes exactly the waits on its TrainJob, an event
between a read and the wait is kept, and without one the wait ends at its poll interval."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.api.app import ApiServer
from agent.api.settings import ApiSettings
from agent.runtime.arrivals import GATED_KEPT, Arrivals
from contract.keys import ANNOTATION_ADMISSION_GATED_BY, GATE, LABEL_WORKLOAD_JOB_UID

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
    assert arrivals.waited_on() == 0  # every wait unregistered


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


def gated(uid: str) -> dict:
    wl = workload_of(uid)
    wl["metadata"]["annotations"] = {ANNOTATION_ADMISSION_GATED_BY: GATE}
    return wl


def test_a_wait_that_begins_after_its_workloads_event_starts_from_it_while_it_carries_the_gate():
    arrivals = Arrivals()
    arrivals.saw(gated("tj-1"))
    with arrivals.waiting("tj-1") as waiter:
        assert waiter.latest == gated("tj-1")
    arrivals.saw(workload_of("tj-1"))  # opened: the gate gone from its Workload, nothing kept
    with arrivals.waiting("tj-1") as waiter:
        assert waiter.latest is None


def test_a_deleted_workload_is_forgotten_and_its_waits_woken():
    arrivals = Arrivals()
    arrivals.saw(gated("tj-1"))
    with arrivals.waiting("tj-1") as waiter:
        arrivals.gone(gated("tj-1"))
        assert waiter.latest is None
        assert waiter.event.is_set()
    with arrivals.waiting("tj-1") as waiter:
        assert waiter.latest is None


def test_only_the_newest_gated_workloads_are_kept():
    arrivals = Arrivals()
    for i in range(GATED_KEPT + 1):
        arrivals.saw(gated(f"tj-{i}"))
    with arrivals.waiting("tj-0") as oldest, arrivals.waiting(f"tj-{GATED_KEPT}") as newest:
        assert oldest.latest is None
        assert newest.latest is not None


def test_the_api_server_uses_the_arrivals_it_is_given():
    """The gate's (agent/cli.py): one with no waits yet is used too, not replaced by an unfed one."""
    arrivals = Arrivals()
    server = ApiServer(None, ApiSettings(), arrivals=arrivals)  # type: ignore[arg-type]
    assert server.service.arrivals is arrivals
