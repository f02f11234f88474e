"""The Event correlator as a function of the Events it is given and the time: client-go's aggregation,
counting and spam filter (agent/runtime/events.py), and the recorder's fall-back to a create."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

from agent.runtime.events import (
    AGGREGATE_INTERVAL,
    AGGREGATE_MAX_EVENTS,
    COMBINED,
    SPAM_BURST,
    EventCorrelator,
    EventRecorder,
    event_body,
)
from serving.client import KubeError

T0 = dt.datetime(2026, 12, 2, 12, 0, tzinfo=dt.UTC)


def trainjob(name: str = "tj", uid: str = "tj-uid") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team-a", "uid": uid, "resourceVersion": "7"}}


def held(message: str, at: dt.datetime = T0, tj: dict[str, Any] | None = None) -> dict[str, Any]:
    return event_body(tj or trainjob(), reason="ReadmissionHeld", message=message, warning=True, instance="a", now=at)


def served(event: dict[str, Any], n: int) -> dict[str, Any]:
    """What the API server answers to a write of ``event``: a uid and a resourceVersion."""
    return {**event, "metadata": {**event["metadata"], "uid": f"uid-{event['metadata']['name']}",
                                  "resourceVersion": str(n)}}  # fmt: skip


def test_an_identical_event_is_a_patch_of_count_and_last_timestamp_with_preconditions():
    c = EventCorrelator()
    first = c.correlate(held("waiting for 1 pod"), T0)
    assert first.action == "create"
    assert first.event["count"] == 1
    c.written(first.key, served(first.event, 10))
    later = T0 + dt.timedelta(seconds=30)
    second = c.correlate(held("waiting for 1 pod", later), later)
    assert second.action == "patch"
    assert second.event["metadata"]["name"] == first.event["metadata"]["name"]
    assert second.ops == [
        {"op": "test", "path": "/metadata/uid", "value": f"uid-{first.event['metadata']['name']}"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "10"},
        {"op": "replace", "path": "/count", "value": 2},
        {"op": "replace", "path": "/lastTimestamp", "value": "2026-12-02T12:00:30Z"},
    ]
    assert second.event["firstTimestamp"] == "2026-12-02T12:00:00Z"


def test_the_tenth_different_message_within_ten_minutes_is_combined_and_then_counted():
    c = EventCorrelator()
    actions = []
    for i in range(AGGREGATE_MAX_EVENTS + 3):
        at = T0 + dt.timedelta(seconds=i)
        r = c.correlate(held(f"waiting for {20 - i} pods", at), at)
        actions.append((r.action, r.event["message"], r.event["count"]))
        if r.action != "skip":
            c.written(r.key, served(r.event, i))
    assert [a for a, _, _ in actions[:9]] == ["create"] * 9
    assert actions[9] == ("create", COMBINED + "waiting for 11 pods", 1)
    assert actions[10] == ("patch", COMBINED + "waiting for 10 pods", 2)
    assert actions[12] == ("patch", COMBINED + "waiting for 8 pods", 4)


def test_similar_events_further_apart_than_the_interval_are_not_combined():
    c = EventCorrelator()
    for i in range(AGGREGATE_MAX_EVENTS + 2):
        at = T0 + dt.timedelta(seconds=i * (AGGREGATE_INTERVAL + 1))
        r = c.correlate(held(f"message {i}", at), at)
        assert r.action == "create"
        assert not r.event["message"].startswith(COMBINED)


def test_an_object_gets_a_burst_of_25_then_one_per_five_minutes_and_the_count_stays_true():
    c = EventCorrelator()
    results = [c.correlate(held("same"), T0) for _ in range(SPAM_BURST + 5)]
    c.written(results[0].key, served(results[0].event, 1))
    assert [r.action for r in results].count("skip") == 5
    assert results[SPAM_BURST - 1].action != "skip"
    assert results[SPAM_BURST].action == "skip"
    at = T0 + dt.timedelta(seconds=301)
    after = c.correlate(held("same", at), at)
    assert after.action == "patch"
    assert after.event["count"] == SPAM_BURST + 6
    assert c.correlate(held("same", at), at).action == "skip"
    # Another object has a bucket of its own.
    assert c.correlate(held("same", tj=trainjob("other", "other-uid")), T0).action == "create"


def test_an_event_that_is_gone_is_created_again_with_its_count():
    c = EventCorrelator()
    r = c.correlate(held("m"), T0)
    c.written(r.key, served(r.event, 1))
    c.gone(r.key)
    again = c.correlate(held("m"), T0)
    assert again.action == "create"
    assert again.event["count"] == 2
    assert not again.ops


def test_memory_is_bounded_by_the_lru():
    c = EventCorrelator(entries=50)
    for i in range(500):
        r = c.correlate(held(f"m{i % 7}", tj=trainjob(f"tj-{i}", f"uid-{i}")), T0)
        c.written(r.key, served(r.event, i))
    assert max(len(c._similar), len(c._written), len(c._spam)) == 50


def test_the_recorder_patches_and_creates_afresh_when_the_patch_is_refused():
    created: list[dict[str, Any]] = []
    patched: list[tuple[str, list[dict[str, Any]]]] = []
    refuse = {"status": 0}

    async def create(namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        created.append(body)
        return served(body, len(created))

    async def patch(namespace: str, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        if refuse["status"]:
            raise KubeError(refuse["status"], "", "")
        patched.append((name, ops))
        return {"metadata": {"name": name, "uid": ops[0]["value"], "resourceVersion": "99"}, "count": ops[2]["value"]}

    async def scenario() -> None:
        r = EventRecorder(create, "a", patch, clock=lambda: T0)
        assert await r.held(trainjob(), "waiting")
        assert await r.held(trainjob(), "waiting")
        refuse["status"] = 409
        assert await r.held(trainjob(), "waiting")
        assert r.writes == {"create": 2, "patch": 1, "skip": 0}

    asyncio.run(scenario())
    assert len(patched) == 1
    assert patched[0][1][2] == {"op": "replace", "path": "/count", "value": 2}
    assert created[1]["count"] == 3
    assert created[1]["metadata"]["name"] != created[0]["metadata"]["name"]
