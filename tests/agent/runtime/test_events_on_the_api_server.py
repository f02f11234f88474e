"""The agent's Events against the real API server: many message changes on one TrainJob leave a bounded
number of Event objects whose counts add up, each PATCH by dispatch's field manager, and a PATCH refused by
its resourceVersion precondition ends in a new Event rather than a lost count."""

from __future__ import annotations

from typing import Any

import pytest

from agent.constants import EVENT_COMPONENT
from agent.runtime.events import AGGREGATE_MAX_EVENTS, COMBINED, SPAM_BURST
from agent.runtime.kube import Kube
from contract.keys import FIELD_MANAGER
from tests.contract.test_raise_on_the_api_server import create_trainjob

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]


def our_events(cp: Any, namespace: str, uid: str) -> list[dict[str, Any]]:
    items = cp.admin.request("GET", cp.admin.collection_path("v1", "Event", namespace))["items"]
    return [e for e in items if e["source"].get("component") == EVENT_COMPONENT and e["involvedObject"]["uid"] == uid]


async def test_many_held_messages_on_one_trainjob_leave_a_bounded_number_of_events(
    control_plane, namespace, api_client
):
    tj = create_trainjob(control_plane, namespace)
    kube = Kube(api_client, instance="test-agent")
    changes = 40  # pods going one by one: each pass's held message differs from the last
    for n in range(changes, 0, -1):
        assert await kube.events.held(tj, f"waiting for {n} pod(s) of the previous execution that may still run")

    events = our_events(control_plane, namespace, tj["metadata"]["uid"])
    singles = [e for e in events if not e["message"].startswith(COMBINED)]
    combined = [e for e in events if e["message"].startswith(COMBINED)]
    # client-go's rules: 9 different messages as they are, then one Event combining the similar ones, and
    # no more than the spam filter's burst of 25 writes for the object.
    assert len(singles) == AGGREGATE_MAX_EVENTS - 1
    assert len(combined) == 1
    assert sum(e["count"] for e in events) == SPAM_BURST
    assert combined[0]["count"] == SPAM_BURST - (AGGREGATE_MAX_EVENTS - 1)
    assert combined[0]["message"] == COMBINED + "waiting for 16 pod(s) of the previous execution that may still run"
    assert kube.events.writes == {"create": AGGREGATE_MAX_EVENTS, "patch": 15, "skip": changes - SPAM_BURST}
    managers = {(m["manager"], m["operation"]) for m in combined[0]["metadata"]["managedFields"]}
    assert managers == {(FIELD_MANAGER, "Update")}


async def test_an_identical_event_is_counted_and_a_refused_patch_starts_a_new_event(
    control_plane, namespace, api_client
):
    tj = create_trainjob(control_plane, namespace)
    kube = Kube(api_client, instance="test-agent")
    for _ in range(3):
        assert await kube.events.held(tj, "waiting for 1 pod")
    [event] = our_events(control_plane, namespace, tj["metadata"]["uid"])
    assert event["count"] == 3
    assert event["firstTimestamp"] <= event["lastTimestamp"]

    # Someone else writes our Event: the next PATCH's resourceVersion precondition fails (409) and the
    # occurrence goes to a new Event that carries the count.
    path = f"/api/v1/namespaces/{namespace}/events/{event['metadata']['name']}"
    control_plane.admin.request("PATCH", path, {"metadata": {"labels": {"someone": "else"}}},
                                content_type="application/merge-patch+json")  # fmt: skip
    assert await kube.events.held(tj, "waiting for 1 pod")
    events = sorted(our_events(control_plane, namespace, tj["metadata"]["uid"]), key=lambda e: e["count"])
    assert [e["count"] for e in events] == [3, 4]
    assert events[0]["metadata"]["labels"] == {"someone": "else"}
    assert kube.events.writes == {"create": 2, "patch": 2, "skip": 0}
