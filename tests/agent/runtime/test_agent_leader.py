"""Leader election's decisions, pure: what to write, when a Lease has expired, when a leader steps down."""

from __future__ import annotations

from typing import Any

import pytest

from agent.runtime.leader import Kind, Observer, leading_after, plan, record_of, release

NOW = "2026-11-29T10:00:00.000000Z"
EARLIER = "2026-11-29T09:59:00.000000Z"


def lease(holder: str | None, *, transitions: int = 3, duration: int = 15, rv: str = "42") -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": duration, "acquireTime": EARLIER, "renewTime": EARLIER,
                            "leaseTransitions": transitions}  # fmt: skip
    if holder is not None:
        spec["holderIdentity"] = holder
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "dispatch-admission", "namespace": "dispatch-system", "resourceVersion": rv},
        "spec": spec,
    }


def step(current, *, expired=False, identity="me"):
    return plan(current, namespace="dispatch-system", name="dispatch-admission", identity=identity, now=NOW,
                expired=expired)  # fmt: skip


def test_an_absent_lease_is_created():
    p = step(None)
    assert p.kind is Kind.CREATE
    assert p.body is not None
    assert p.body["metadata"] == {"name": "dispatch-admission", "namespace": "dispatch-system"}
    assert p.body["spec"] == {"holderIdentity": "me", "leaseDurationSeconds": 15, "acquireTime": NOW,
                              "renewTime": NOW, "leaseTransitions": 0}  # fmt: skip


def test_our_lease_is_renewed_with_the_resource_version_read():
    p = step(lease("me"))
    assert p.kind is Kind.UPDATE
    assert p.body is not None
    assert p.body["metadata"]["resourceVersion"] == "42"  # the PUT's precondition
    assert p.body["spec"]["renewTime"] == NOW
    assert p.body["spec"]["acquireTime"] == EARLIER  # still the same term
    assert p.body["spec"]["leaseTransitions"] == 3


def test_someone_elses_live_lease_is_left_alone():
    p = step(lease("them"), expired=False)
    assert p.kind is Kind.STANDBY
    assert p.holder == "them"
    assert p.body is None


@pytest.mark.parametrize("current", [lease("them"), lease(""), lease(None)])
def test_an_expired_or_released_lease_is_taken_with_a_new_term(current):
    p = step(current, expired=True)
    assert p.kind is Kind.UPDATE
    assert p.body is not None
    assert p.body["metadata"]["resourceVersion"] == "42"
    assert p.body["spec"]["holderIdentity"] == "me"
    assert p.body["spec"]["acquireTime"] == p.body["spec"]["renewTime"] == NOW
    assert p.body["spec"]["leaseTransitions"] == 4


def test_expiry_is_judged_by_our_own_clock_from_the_last_change_we_saw():
    o = Observer()
    assert o.expired(0.0)  # nothing seen yet
    them = record_of(lease("them", duration=15))
    o.observe(them, 100.0)
    assert not o.expired(114.9)
    assert o.expired(115.0)
    o.observe(them, 110.0)  # the same record again: no renewal happened
    assert o.expired(115.0)
    renewed = record_of({**lease("them"), "spec": {**lease("them")["spec"], "renewTime": NOW}})
    o.observe(renewed, 112.0)
    assert not o.expired(126.9)
    assert o.expired(127.0)


def test_a_released_lease_is_expired_at_once():
    o = Observer()
    o.observe(record_of(lease("")), 100.0)
    assert o.expired(100.0)


def test_a_bad_duration_falls_back_to_the_default():
    assert record_of(lease("x", duration=0)).duration == 15
    assert record_of({"spec": None}).holder == ""


@pytest.mark.parametrize(
    ("attempt", "leading", "last_renew", "now", "expected"),
    [
        (Kind.UPDATE, False, None, 0.0, True),
        (Kind.CREATE, False, None, 0.0, True),
        (Kind.STANDBY, True, 99.0, 100.0, False),  # someone else holds it: step down at once
        (None, True, 95.0, 100.0, True),  # a failed renewal within the deadline
        (None, True, 90.0, 100.0, False),  # past the deadline: step down before the Lease expires for others
        (None, False, None, 100.0, False),
    ],
)
def test_leading_after(attempt, leading, last_renew, now, expected):
    assert leading_after(attempt, leading=leading, last_renew=last_renew, now=now, deadline=10.0) is expected


def test_release_clears_the_holder_only_when_it_is_ours():
    body = release(lease("me"), identity="me", now=NOW)
    assert body is not None
    assert body["spec"]["holderIdentity"] == ""
    assert body["spec"]["leaseDurationSeconds"] == 1
    assert body["metadata"]["resourceVersion"] == "42"
    assert release(lease("them"), identity="me", now=NOW) is None
