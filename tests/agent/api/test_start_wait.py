"""When Start's wait for Kueue's Workload LISTs (agent/api/service/start.py ``_list_due``): on every poll without a
live watch, as before; with one, once the watch's copy shows the Workload Start waits for, and otherwise only every
FALLBACK_SECONDS. What Start decides is the LIST's, never the copy's (the end-to-end tests of Start)."""

from __future__ import annotations

import pytest

from agent.api.service import Service
from agent.api.settings import ApiSettings
from agent.runtime.arrivals import FALLBACK_SECONDS, Arrivals, Waiter
from contract.keys import ANNOTATION_ADMISSION_GATED_BY, GATE, LABEL_WORKLOAD_JOB_UID

CHECK = "dispatch-admission"


def workload(listed: bool) -> dict:
    status = {"admissionChecks": [{"name": CHECK, "state": "Pending"}]} if listed else {}
    return {"metadata": {"labels": {LABEL_WORKLOAD_JOB_UID: "tj-1"}, "annotations": {ANNOTATION_ADMISSION_GATED_BY: GATE}},
            "status": status}  # fmt: skip


def due(live: bool, latest: dict | None, since_listed: float) -> bool:
    arrivals = Arrivals()
    arrivals.live = live
    service = Service(kube=None, settings=ApiSettings(), arrivals=arrivals)  # type: ignore[arg-type]
    waiter = Waiter()
    waiter.latest = latest
    return service._list_due(waiter, [CHECK], since_listed)


@pytest.mark.parametrize("latest", [None, workload(listed=False), workload(listed=True)])
def test_without_a_live_watch_every_poll_lists(latest):
    assert due(False, latest, 0.5)


def test_with_a_live_watch_it_lists_once_the_copy_shows_what_start_waits_for():
    assert not due(True, None, 0.5)  # nothing seen yet
    assert not due(True, workload(listed=False), 0.5)  # there, but not listing the check yet
    assert due(True, workload(listed=True), 0.5)


def test_with_a_live_watch_it_still_lists_every_fallback_interval():
    assert due(True, None, FALLBACK_SECONDS)
