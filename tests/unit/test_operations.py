"""The supervisor's operations, planned; each plan applied and then checked against the webhook's rules,
so what the agent sends is what the webhook accepts."""

from __future__ import annotations

import copy

import pytest

from agent.gate import Blocker
from agent.operations import Hold, Refused, Target, finished, is_opened, plan_hold, plan_open, plan_release
from contract.admission import admission_count, admission_floor
from contract.keys import (
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_JOBSET_UID,
    ANNOTATION_OPENED,
    GATE,
    HOLD_ANNOTATIONS,
)
from tests.unit.fixtures import trainjob
from tests.unit.kubelet import apply_json_patch
from tests.unit.test_gate import workload
from tests.unit.test_webhook_rules import DISPATCH, admit, request

HOLD = Hold(
    instance="h-1", since="2026-11-29T10:00:00Z", who="alice", reason="maintenance", until="2026-11-30T00:00:00Z"
)


def accepted_by_the_webhook(before, after, resource="trainjobs", kind="TrainJob", group="trainer.kubeflow.org"):
    verdict = admit(request("UPDATE", after, before, user=DISPATCH, resource=resource, kind=kind, group=group))
    assert verdict.allowed, verdict.message


def ended(tj, how="Complete"):
    tj = copy.deepcopy(tj)
    tj["status"] = {"conditions": [{"type": how, "status": "True"}]}
    return tj


# -- Open ----------------------------------------------------------------------------------------


def test_open_in_kueue_mode_deletes_the_gate_when_it_was_the_last():
    tj = trainjob()
    plan = plan_open(tj)
    after = apply_json_patch(tj, plan.patch)
    assert ANNOTATION_ADMISSION_GATED_BY not in after["metadata"]["annotations"]
    assert plan.patch[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "tj-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "100"},
    ]
    assert plan.held_by == ()
    assert is_opened(after)
    accepted_by_the_webhook(tj, after)


def test_open_in_kueue_mode_writes_the_opened_mark_with_the_gate_removal():
    """The readmission gate approves only a job dispatch opened (issue 10): the mark in the same update."""
    tj = trainjob()
    after = apply_json_patch(tj, plan_open(tj).patch)
    assert after["metadata"]["annotations"][ANNOTATION_OPENED] == "true"


def test_open_marks_a_kueue_job_past_the_gate_without_the_mark():
    """Opened before the mark existed (or switched from plain mode unopened): Open writes the mark, and only it."""
    tj = trainjob()
    del tj["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY]
    plan = plan_open(tj)
    assert plan.outcome == "opened mark written"
    after = apply_json_patch(tj, plan.patch)
    assert after["metadata"]["annotations"][ANNOTATION_OPENED] == "true"
    assert {k: v for k, v in after.items() if k != "metadata"} == {k: v for k, v in tj.items() if k != "metadata"}
    accepted_by_the_webhook(tj, after)
    assert plan_open(after).patch == []


def test_open_keeps_another_partys_gate_and_reports_it():
    tj = trainjob()
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] = f"admin.example/hold,{GATE}"
    plan = plan_open(tj)
    assert (
        apply_json_patch(tj, plan.patch)["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY]
        == "admin.example/hold"
    )
    assert plan.held_by == ("admin.example/hold",)


def test_open_in_plain_mode_raises_a_unsuspends_and_marks_opened():
    tj = trainjob(queue=None)
    plan = plan_open(tj)
    after = apply_json_patch(tj, plan.patch)
    assert plan.new_a == admission_count(after) == admission_floor(after) == 1
    assert after["spec"]["suspend"] is False
    assert after["metadata"]["annotations"][ANNOTATION_OPENED] == "true"
    accepted_by_the_webhook(tj, after)


@pytest.mark.parametrize("queue", ["team-a-queue", None])
def test_open_past_the_gate_succeeds_without_a_write(queue):
    tj = trainjob(queue=queue)
    opened = apply_json_patch(tj, plan_open(tj).patch)
    plan = plan_open(opened)
    assert plan.patch == []
    assert plan.outcome == "already past its gate"
    assert plan_open(ended(opened)).patch == []


@pytest.mark.parametrize("queue", ["team-a-queue", None])
@pytest.mark.parametrize("how", ["Complete", "Failed"])
def test_open_after_an_unopened_end_is_a_fence(queue, how):
    with pytest.raises(Refused) as err:
        plan_open(ended(trainjob(queue=queue), how))
    assert err.value.kind == "rejected"
    assert f"ended ({how}) without ever being opened" in err.value.message


def test_open_refuses_a_plain_job_someone_else_started():
    tj = trainjob(queue=None)
    tj["spec"]["suspend"] = False
    with pytest.raises(Refused) as err:
        plan_open(tj)
    assert err.value.kind == "conflict"


# -- Hold and Release ------------------------------------------------------------------------------


def test_plain_hold_and_release_raise_a():
    tj = apply_json_patch(trainjob(queue=None), plan_open(trainjob(queue=None)).patch)
    hold = plan_hold(tj, None, HOLD)
    assert hold.target is Target.TRAINJOB
    held = apply_json_patch(tj, hold.patch)
    assert held["spec"]["suspend"] is True
    assert {k: held["metadata"]["annotations"][k] for k in HOLD_ANNOTATIONS} == {
        "dispatch.phpboyscout.uk/hold-instance": "h-1",
        "dispatch.phpboyscout.uk/hold-since": "2026-11-29T10:00:00Z",
        "dispatch.phpboyscout.uk/hold-who": "alice",
        "dispatch.phpboyscout.uk/hold-until": "2026-11-30T00:00:00Z",
        "dispatch.phpboyscout.uk/hold-reason": "maintenance",
    }
    accepted_by_the_webhook(tj, held)
    release = plan_release(held, None)
    released = apply_json_patch(held, release.patch)
    assert release.new_a == admission_count(released) == 2
    assert released["spec"]["suspend"] is False
    assert not set(HOLD_ANNOTATIONS) & set(released["metadata"]["annotations"])
    accepted_by_the_webhook(held, released)
    assert plan_release(released, None).patch == []


def test_a_hold_before_open_is_lifted_without_opening():
    tj = trainjob(queue=None)
    held = apply_json_patch(tj, plan_hold(tj, None, HOLD).patch)
    plan = plan_release(held, None)
    after = apply_json_patch(held, plan.patch)
    assert after["spec"]["suspend"] is True
    assert plan.new_a is None
    assert plan.outcome == "hold lifted; the TrainJob stays closed"


def test_a_hold_before_open_survives_open_in_plain_mode_and_release_runs_it():
    tj = trainjob(queue=None)
    held = apply_json_patch(tj, plan_hold(tj, None, HOLD).patch)
    plan = plan_open(held)
    opened = apply_json_patch(held, plan.patch)
    assert (plan.outcome, plan.new_a) == ("opened; held until Release", None)
    assert opened["spec"]["suspend"] is True
    assert is_opened(opened)
    assert admission_floor(opened) is None  # A is raised by the Release that runs it
    accepted_by_the_webhook(held, opened)
    release = plan_release(opened, None)
    released = apply_json_patch(opened, release.patch)
    assert (release.outcome, release.new_a, released["spec"]["suspend"]) == ("released: TrainJob unsuspended", 1, False)
    accepted_by_the_webhook(opened, released)


def test_a_kueue_hold_before_open_survives_open():
    tj, wl = trainjob(), workload()
    held = apply_json_patch(wl, plan_hold(tj, wl, HOLD).patch)
    plan = plan_open(tj, workload=held)
    assert plan.outcome == "gate removed; held until Release"
    assert plan.target is Target.TRAINJOB  # the Workload stays inactive


BLOCKER = Blocker("dj-x-node-0-0-abcde", "Running: Terminating on a Ready node")


def test_plain_open_and_release_wait_for_the_previous_executions_pods():
    tj = trainjob(queue=None)
    with pytest.raises(Refused) as err:
        plan_open(tj, blockers=[BLOCKER])
    assert err.value.kind == "conflict"
    assert "waiting for 1 pod(s) of the previous execution that may still run: dj-x-node-0-0-abcde" in err.value.message
    opened = apply_json_patch(tj, plan_open(tj).patch)
    held = apply_json_patch(opened, plan_hold(opened, None, HOLD).patch)
    with pytest.raises(Refused, match="dj-x-node-0-0-abcde: Running: Terminating"):
        plan_release(held, None, blockers=[BLOCKER])
    assert plan_release(held, None).new_a == 2
    # Lifting a hold placed before Open unsuspends nothing, so nothing waits.
    early = apply_json_patch(tj, plan_hold(tj, None, HOLD).patch)
    assert plan_release(early, None, blockers=[BLOCKER]).outcome == "hold lifted; the TrainJob stays closed"
    # Kueue mode: the readmission gate waits, not Open.
    assert plan_open(trainjob(), blockers=[BLOCKER]).outcome == "gate removed"


def test_open_and_release_record_the_jobset_uid_the_first_time():
    tj = trainjob(queue=None)
    mine = {"metadata": {"uid": "js-1", "ownerReferences": [{"uid": "tj-uid", "controller": True}]}}
    orphan = {"metadata": {"uid": "js-0", "ownerReferences": [{"uid": "gone"}]}}
    assert (
        ANNOTATION_JOBSET_UID not in apply_json_patch(tj, plan_open(tj, jobset=orphan).patch)["metadata"]["annotations"]
    )
    opened = apply_json_patch(tj, plan_open(tj, jobset=mine).patch)
    assert opened["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == "js-1"
    accepted_by_the_webhook(tj, opened)
    held = apply_json_patch(opened, plan_hold(opened, None, HOLD).patch)
    again = {"metadata": {"uid": "js-2", "ownerReferences": [{"uid": "tj-uid"}]}}
    released = apply_json_patch(held, plan_release(held, None, jobset=again).patch)
    assert released["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == "js-1"  # recorded once, never changed
    fresh = apply_json_patch(tj, plan_hold(tj, None, HOLD).patch)
    fresh = apply_json_patch(fresh, plan_open(fresh).patch)
    released = apply_json_patch(fresh, plan_release(fresh, None, jobset=mine).patch)
    assert released["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == "js-1"
    kueue = trainjob()
    assert (
        apply_json_patch(kueue, plan_open(kueue, jobset=mine).patch)["metadata"]["annotations"][ANNOTATION_JOBSET_UID]
        == "js-1"
    )


def test_kueue_hold_and_release_act_on_the_workload():
    tj = trainjob()
    wl = workload()
    hold = plan_hold(tj, wl, Hold(instance="h", since="s", who="w", reason="r"))
    assert hold.target is Target.WORKLOAD
    held = apply_json_patch(wl, hold.patch)
    assert held["spec"]["active"] is False
    assert held["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-who"] == "w"
    assert "dispatch.phpboyscout.uk/hold-until" not in held["metadata"]["annotations"]
    accepted_by_the_webhook(wl, held, resource="workloads", kind="Workload", group="kueue.x-k8s.io")
    release = plan_release(tj, held)
    released = apply_json_patch(held, release.patch)
    assert released["spec"]["active"] is True
    assert released["metadata"]["annotations"] == {}
    assert release.new_a is None  # the readmission gate raises A before Kueue admits it again
    assert plan_release(tj, released).patch == []


def test_a_second_hold_replaces_the_first_and_clears_an_until():
    tj = trainjob(queue=None)
    held = apply_json_patch(tj, plan_hold(tj, None, HOLD).patch)
    again = apply_json_patch(held, plan_hold(held, None, Hold(instance="h-2", since="s", who="bob", reason="r")).patch)
    assert again["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-instance"] == "h-2"
    assert "dispatch.phpboyscout.uk/hold-until" not in again["metadata"]["annotations"]


def test_hold_refusals():
    with pytest.raises(Refused) as err:
        plan_hold(ended(trainjob(queue=None)), None, HOLD)
    assert err.value.kind == "rejected"
    with pytest.raises(Refused) as err:
        plan_hold(trainjob(), None, HOLD)
    assert err.value.kind == "conflict"
    with pytest.raises(Refused):
        plan_release(trainjob(), None)


def test_release_that_cannot_raise_is_refused():
    tj = apply_json_patch(trainjob(queue=None), plan_open(trainjob(queue=None)).patch)
    held = apply_json_patch(tj, plan_hold(tj, None, HOLD).patch)
    held["spec"]["runtimePatches"].pop(0)
    with pytest.raises(Refused, match="cannot raise A"):
        plan_release(held, None)


def test_finished():
    assert finished(trainjob()) is None
    assert finished(ended(trainjob(), "Failed")) == "Failed"
    assert finished({"status": {"conditions": [{"type": "Complete", "status": "False"}]}}) is None
