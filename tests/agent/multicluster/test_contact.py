"""Contact between the manager's agent and a MultiKueue worker (agent/multicluster/contact_lease.py ``contact_lease``,
``contact_epoch``, ``outlived_contact``; agent/multicluster/contact.py ``ContactWatch``): the manager renews a Lease on each
worker and starts a new epoch after a gap; the worker's agent deletes the copies it let start once it sees no
renewal for the Lease's duration, or an epoch above the one a copy started under (docs/multicluster.md, "Contact
with the manager")."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from agent.multicluster.contact import ContactWatch
from agent.multicluster.contact_lease import contact_epoch, contact_lease
from agent.multicluster.copy_verdicts import CopyAction, outlived_contact
from agent.multicluster.worker_proof import contact_problem
from contract.keys import (
    ANNOTATION_UNVERIFIED,
    ANNOTATION_VERIFIED_CONTACT,
    ANNOTATION_VERIFIED_COPY,
    CONTACT_HOLDER,
    LABEL_CLAIM,
    LEASE_MANAGER_CONTACT,
    UNVERIFIED_TRUE,
)
from tests.agent.multicluster.test_stale_copy import a_copy, remote_workload

T0 = dt.datetime(2026, 12, 5, 9, 0, 0, tzinfo=dt.UTC)


def renewed(lease: dict[str, Any] | None, seconds: float, duration: int = 60) -> dict[str, Any]:
    """The Lease as the API keeps it after the manager's renewal ``seconds`` after T0."""
    create, body = contact_lease(lease, namespace="dispatch-system", now=T0 + dt.timedelta(seconds=seconds),
                                 duration=duration)  # fmt: skip
    assert create is (lease is None)
    return {**body, "metadata": {**body["metadata"], "resourceVersion": str(int(seconds) + 1)}}


def test_the_first_renewal_creates_the_lease_at_epoch_zero():
    lease = renewed(None, 0)
    assert lease["metadata"] == {"name": LEASE_MANAGER_CONTACT, "namespace": "dispatch-system", "resourceVersion": "1",
                                 "labels": {LABEL_CLAIM: "multikueue"}}  # the manager's origin  # fmt: skip
    assert lease["spec"] == {
        "holderIdentity": CONTACT_HOLDER,
        "leaseDurationSeconds": 60,
        "renewTime": "2026-12-05T09:00:00.000000Z",
        "acquireTime": "2026-12-05T09:00:00.000000Z",
        "leaseTransitions": 0,
    }
    assert contact_epoch(lease) == 0


def test_a_renewal_within_the_duration_keeps_the_epoch_and_carries_the_version_read():
    first = renewed(None, 0)
    create, body = contact_lease(first, namespace="dispatch-system", now=T0 + dt.timedelta(seconds=60), duration=60)
    assert not create
    assert body["metadata"]["resourceVersion"] == "1"  # a PUT of the Lease as read: a 409 if anyone wrote since
    assert (body["spec"]["leaseTransitions"], body["spec"]["renewTime"]) == (0, "2026-12-05T09:01:00.000000Z")
    assert body["spec"]["acquireTime"] == first["spec"]["acquireTime"]


def test_a_renewal_after_a_gap_longer_than_the_duration_starts_a_new_epoch():
    lease = renewed(renewed(None, 0), 15)
    after = renewed(lease, 15 + 61)
    assert contact_epoch(after) == 1
    assert after["spec"]["acquireTime"] == after["spec"]["renewTime"] == "2026-12-05T09:01:16.000000Z"
    assert contact_epoch(renewed(after, 15 + 61 + 10)) == 1


def test_the_gap_is_judged_by_the_longer_of_the_old_and_new_durations():
    # A manager that shortened the duration does not start a new epoch for a gap the old duration covered.
    lease = renewed(None, 0, duration=120)
    assert contact_epoch(renewed(lease, 90, duration=60)) == 0
    assert contact_epoch(renewed(lease, 121, duration=60)) == 1


@pytest.mark.parametrize(
    ("spec", "epoch"),
    [
        ({"holderIdentity": "someone-else", "leaseTransitions": 4, "renewTime": "2026-12-05T09:00:00.000000Z"}, 5),
        ({"holderIdentity": CONTACT_HOLDER, "leaseTransitions": 4}, 5),  # no renewTime: no proof of contact
        ({"holderIdentity": CONTACT_HOLDER, "leaseTransitions": 4, "renewTime": "yesterday"}, 5),
    ],
)
def test_a_lease_that_shows_no_renewal_of_the_manager_is_taken_at_a_new_epoch(spec, epoch):
    lease = {"metadata": {"name": LEASE_MANAGER_CONTACT, "resourceVersion": "9"}, "spec": spec}
    _, body = contact_lease(lease, namespace="dispatch-system", now=T0, duration=60)
    assert (body["spec"]["holderIdentity"], body["spec"]["leaseTransitions"]) == (CONTACT_HOLDER, epoch)


def test_only_the_manager_s_lease_shows_an_epoch():
    assert contact_epoch(None) is None
    assert contact_epoch({"spec": {"holderIdentity": "someone-else", "leaseTransitions": 2}}) is None
    assert contact_epoch({"spec": {"holderIdentity": CONTACT_HOLDER}}) == 0


# -- the worker's view, by its own clock --------------------------------------------------------------------------


def lease_at(renew: str, transitions: int = 0, duration: int = 10) -> dict[str, Any]:
    return {"spec": {"holderIdentity": CONTACT_HOLDER, "renewTime": renew, "leaseTransitions": transitions,
                     "leaseDurationSeconds": duration}}  # fmt: skip


def test_a_copy_may_start_only_once_a_renewal_was_seen_within_the_duration():
    watch = ContactWatch(started=100.0)
    watch.observe(lease_at("r1"), 100.0)
    assert watch.verifiable(100.0) is None  # an old Lease proves no contact: a renewal must be seen
    assert not watch.lost(109.9)
    watch.observe(lease_at("r2"), 103.0)
    assert watch.verifiable(103.0) == 0
    assert watch.verifiable(112.9) == 0
    assert watch.verifiable(113.0) is None
    assert watch.lost(113.0)


def test_the_gate_admits_a_copy_only_while_a_renewal_is_recent_before_the_loss_is():
    # Duration 10: admitted while a renewal was seen within 7.5 s, so a worker the manager stopped renewing admits
    # nothing by the time its copy is deleted and the job dispatched again (10 s after the last renewal).
    watch = ContactWatch(started=100.0)
    watch.observe(lease_at("r1"), 100.0)
    assert not watch.admits(100.0)  # an old Lease proves no contact
    watch.observe(lease_at("r2"), 103.0)
    assert watch.admits(103.0)
    assert watch.admits(110.4)
    assert not watch.admits(110.5)
    assert watch.verifiable(110.5) == 0
    assert not watch.lost(110.5)
    watch.observe(lease_at("r3"), 111.0)
    assert watch.admits(111.0)
    watch.observe(None, 112.0)
    assert not watch.admits(112.0)


def test_the_loss_is_judged_from_when_the_lease_was_seen_to_change():
    watch = ContactWatch(started=0.0)
    watch.observe(lease_at("r1"), 0.0)
    watch.observe(lease_at("r1"), 8.0)  # the same record: no renewal seen
    assert not watch.lost(9.9)
    assert watch.lost(10.0)
    watch.observe(lease_at("r2", transitions=1), 11.0)  # a new epoch: a renewal, not lost any more
    assert (watch.lost(11.0), watch.verifiable(11.0), watch.epoch) == (False, 1, 1)


def test_no_lease_of_the_manager_s_is_no_contact():
    watch = ContactWatch(started=0.0)
    watch.observe(None, 0.0)
    assert (watch.verifiable(0.0), watch.lost(0.0), watch.epoch) == (None, True, None)
    watch.observe({"spec": {"holderIdentity": "someone-else", "renewTime": "r"}}, 1.0)
    assert (watch.verifiable(1.0), watch.lost(1.0)) == (None, True)


def test_a_lease_seen_to_appear_proves_contact_as_a_renewal_does():
    watch = ContactWatch(started=0.0)
    watch.observe(None, 0.0)
    watch.observe(lease_at("r1"), 2.0)  # the manager created it since the last look
    assert (watch.verifiable(2.0), watch.lost(2.0)) == (0, False)
    watch.observe(None, 4.0)  # deleted: no contact
    assert (watch.verifiable(4.0), watch.lost(4.0)) == (None, True)


def test_leading_again_starts_the_watch_afresh():
    """A replica that leads again did not watch the Lease meanwhile: a change since its last look is no renewal
    seen now, so no copy starts until one is seen while it leads, as after a restart."""
    watch = ContactWatch(started=0.0)
    watch.observe(lease_at("r1"), 0.0)
    watch.observe(lease_at("r2"), 2.0)
    assert watch.verifiable(2.0) == 0
    watch.reset(5.0)  # leadership lost, and won again
    assert (watch.verifiable(5.0), watch.epoch) == (None, None)
    watch.observe(lease_at("r3"), 6.0)  # renewed while another replica led
    assert (watch.verifiable(6.0), watch.epoch, watch.lost(15.9), watch.lost(16.0)) == (None, 0, False, True)
    watch.observe(lease_at("r4"), 8.0)  # a renewal seen while leading
    assert watch.verifiable(8.0) == 0


# -- which copies go ----------------------------------------------------------------------------------------------


def started(epoch: str | None = "2", *, finished: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    """A copy the worker's agent let start, and its remote Workload recording it under ``epoch``."""
    copy = a_copy(marked=False)
    workload = remote_workload(verified=copy["metadata"]["uid"])
    if epoch is not None:
        workload["metadata"]["annotations"][ANNOTATION_VERIFIED_CONTACT] = epoch
    if finished:
        workload["status"] = {"conditions": [{"type": "Finished", "status": "True"}]}
    return copy, workload


def test_a_copy_that_started_in_this_epoch_runs_on_while_in_contact():
    copy, workload = started("2")
    assert outlived_contact(copy, workload, epoch=2, lost=False).action is CopyAction.NOTHING


def test_every_copy_let_start_is_deleted_once_contact_is_lost():
    copy, workload = started("2")
    v = outlived_contact(copy, workload, epoch=2, lost=True)
    assert v.action is CopyAction.DELETE
    assert "has not renewed its contact Lease" in v.reason


@pytest.mark.parametrize("recorded", ["1", None, "01"])
def test_a_copy_that_started_in_an_earlier_epoch_is_deleted(recorded):
    # The manager renewed after a gap: contact was lost since the copy started, whether or not this agent saw it.
    # A record that is missing or unreadable is as old as can be.
    copy, workload = started(recorded)
    v = outlived_contact(copy, workload, epoch=2, lost=False)
    assert v.action is CopyAction.DELETE
    assert "contact with the manager was lost since" in v.reason


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda c, w: w["status"].update(conditions=[{"type": "Finished", "status": "True"}]), "finished"),
        (lambda c, w: w["metadata"].update(deletionTimestamp="now"), "gone"),
        (lambda c, w: c["metadata"].update(deletionTimestamp="now"), "not a running copy"),
        (lambda c, w: c["metadata"]["annotations"].update({ANNOTATION_UNVERIFIED: UNVERIFIED_TRUE}), "not a running"),
        (lambda c, w: w["metadata"]["annotations"].update({ANNOTATION_VERIFIED_COPY: "other"}), "not the copy"),
    ],
)
def test_what_is_not_a_running_copy_let_start_here_is_kept(change, why):
    # A finished copy is kept (the manager copies its final status from it); a marked one never started.
    copy, workload = started("1")
    workload["status"] = {}
    change(copy, workload)
    v = outlived_contact(copy, workload, epoch=2, lost=True)
    assert (v.action, why in v.reason) == (CopyAction.NOTHING, True), v.reason


def test_a_copy_whose_workload_is_gone_is_left_to_go():
    copy, _ = started("1")
    assert outlived_contact(copy, None, epoch=2, lost=True).action is CopyAction.NOTHING


def test_a_contact_lease_another_manager_renews_refuses_the_worker_in_preflight():
    lease = renewed(None, 0)
    assert contact_problem(lease, dt.datetime(2026, 12, 5, 9, 0, 1, tzinfo=dt.UTC), "multikueue") is None
    other = contact_problem(lease, dt.datetime(2026, 12, 5, 9, 0, 1, tzinfo=dt.UTC), "manager-b")
    assert other is not None
    assert "renewed by another manager (MultiKueue origin multikueue, this one's is manager-b)" in other
    assert "a worker shared by two managers is not supported" in other
