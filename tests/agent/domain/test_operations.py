"""The supervisor's operations, planned; each plan applied and then checked against the webhook's rules,
so what the agent sends is what the webhook accepts."""

from __future__ import annotations

import copy

import pytest

from agent.domain.decide import Action, Blocker
from agent.domain.operations import Hold, Plan, Refused, Target, finished, is_opened, plan_hold, plan_open, plan_release
from contract.admission import admission_count, admission_floor, unsuspend_ops
from contract.keys import (
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_JOBSET_UID,
    ANNOTATION_OPENED,
    GATE,
    HOLD_ANNOTATIONS,
)
from contract.multicluster import MULTIKUEUE_MANAGED_BY
from harness.fixtures import trainjob
from tests.agent.domain.test_gate import go, workload
from tests.agent.domain.test_gate import opened as opened_trainjob
from tests.harness.kubelet import apply_json_patch
from tests.webhook.test_webhook_rules import DISPATCH, admit, request
from webhook.rules.unsuspend import unsuspend_problems

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
    assert [w.target for w in hold.writes] == [Target.TRAINJOB]
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
    held_tj, held_wl = apply_plan(plan_hold(tj, wl, HOLD), tj, wl)
    plan = plan_open(held_tj, workload=held_wl)
    assert plan.outcome == "gate removed; held until Release"
    assert [w.target for w in plan.writes] == [Target.TRAINJOB]  # the Workload stays inactive
    after = apply_json_patch(held_tj, plan.patch)
    accepted_by_the_webhook(held_tj, after)
    assert is_opened(after)
    assert hold_keys(after) == HOLD.annotations()  # Open removes the gate, never the hold
    assert go(held_wl, tj=after).action is Action.WAIT  # the Workload inactive: Kueue does not even reserve
    assert go(workload(), tj=after).action is Action.HOLD  # reactivated by anyone else: the TrainJob holds it


BLOCKER = Blocker("dj-x-node-0-0-abcde", "Running: Terminating on a Ready node")


def first_opened(tj, wl, **looked):
    """``tj`` after Open with its Workload there, and what Open wrote."""
    plan = plan_open(tj, workload=wl, **looked)
    return apply_json_patch(tj, plan.patch), plan


def test_open_of_a_kueue_job_that_never_started_carries_the_gates_first_approval():
    """Its pods looked at and none that may still run: the approval the gate's first pass would write, in Open's
    own write, so that the first admission costs the gate the Ready alone, and Kueue's unsuspend is accepted."""
    tj, wl = trainjob(), workload(reserved=False)
    after, plan = first_opened(tj, wl, blockers=())
    assert plan.outcome == "gate removed"
    assert after["metadata"]["annotations"][ANNOTATION_APPROVED_ADMISSION] == "1/wl-uid"
    accepted_by_the_webhook(tj, after)
    d = go(workload(), tj=after)  # the first admission: quota reserved, the check Pending
    assert (d.action, d.trainjob_patch, d.new_a) == (Action.ADMIT, None, 1)  # nothing but the Ready to write
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Ready"
    unsuspended = copy.deepcopy(after)
    unsuspended["spec"]["suspend"] = False
    started = apply_json_patch(unsuspended, unsuspend_ops(unsuspended, None, kueue=True))
    assert not unsuspend_problems(after, started), "Kueue's unsuspend carries the approval of the A it starts with"


@pytest.mark.parametrize(
    "why",
    ["pods not looked at", "a pod may still run", "held", "no Workload", "MultiKueue's", "started before",
     "a JobSet not its own"],
)  # fmt: skip
def test_open_leaves_the_approval_to_the_gate_unless_it_could_give_it(why):
    tj, wl, looked = trainjob(), workload(reserved=False), {"blockers": ()}
    if why == "pods not looked at":
        looked = {}
    elif why == "a pod may still run":
        looked = {"blockers": [BLOCKER]}
    elif why == "held":
        tj, wl = apply_plan(plan_hold(tj, wl, HOLD), tj, wl)
    elif why == "no Workload":
        wl = None
    elif why == "MultiKueue's":
        tj["spec"]["managedBy"] = MULTIKUEUE_MANAGED_BY
    elif why == "started before":
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = "1"
    else:
        tj["metadata"]["annotations"][ANNOTATION_JOBSET_UID] = "js-old"
        looked["jobset"] = {"metadata": {"uid": "js-new", "ownerReferences": [{"uid": "tj-uid", "controller": True}]}}
    after, plan = first_opened(tj, wl, **looked)
    assert is_opened(after), "Open itself goes through"
    assert plan.patch
    assert ANNOTATION_APPROVED_ADMISSION not in after["metadata"]["annotations"]


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


# -- Kueue mode: the hold lives on the TrainJob; the Workload's spec.active: false is the means ---------------


def apply_plan(plan, tj, wl, upto=None):
    """The plan's writes, the first ``upto`` of them (all by default), applied each to its own object: a write
    applied to the wrong object fails its uid ``test``."""
    for write in plan.writes[:upto]:
        if write.target is Target.TRAINJOB:
            tj = apply_json_patch(tj, write.patch)
        else:
            wl = apply_json_patch(wl, write.patch)
    return tj, wl


def hold_keys(obj):
    found = obj["metadata"].get("annotations") or {}
    return {k: v for k, v in found.items() if k in HOLD_ANNOTATIONS}


def held_from_any_start(tj, wl):
    """No new execution can begin: the readmission gate approves nothing (a reserved, Pending check is kept
    Pending, or not looked at while the Workload is inactive) and no unsuspend of the TrainJob is accepted."""
    assert go(wl, tj=tj).action in (Action.HOLD, Action.WAIT), go(wl, tj=tj).message
    unsuspended = copy.deepcopy(tj)
    unsuspended["spec"]["suspend"] = False
    problems = unsuspend_problems(tj, unsuspended)
    assert any("a hold of dispatch's is in force" in p.accepted for p in problems), problems


def test_kueue_hold_writes_the_trainjob_first_then_deactivates_the_workload():
    tj, wl = opened_trainjob(queue="q"), workload()
    plan = plan_hold(tj, wl, HOLD)
    assert plan.outcome == "held: Workload deactivated"
    assert [w.target for w in plan.writes] == [Target.TRAINJOB, Target.WORKLOAD]
    assert plan.patch_of(Target.TRAINJOB)[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "tj-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "100"},
    ]
    assert plan.patch_of(Target.WORKLOAD)[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "wl-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "500"},
    ]
    with pytest.raises(ValueError, match="writes 2 objects"):
        _ = plan.patch
    held_tj, held_wl = apply_plan(plan, tj, wl)
    assert hold_keys(held_tj) == hold_keys(held_wl) == HOLD.annotations()
    assert held_tj["spec"] == tj["spec"]  # only the record: Kueue suspends it when it evicts the Workload
    assert held_wl["spec"]["active"] is False
    accepted_by_the_webhook(tj, held_tj)
    accepted_by_the_webhook(wl, held_wl, resource="workloads", kind="Workload", group="kueue.x-k8s.io")
    assert plan_hold(held_tj, held_wl, HOLD).writes == ()  # the same Hold again: nothing left to write


def test_a_kueue_hold_holds_after_each_of_its_writes_and_again_finishes_it():
    """A crash between the two writes leaves the job held; the same Hold again writes only the Workload."""
    tj, wl = opened_trainjob(queue="q"), workload()
    plan = plan_hold(tj, wl, HOLD)
    half_tj, half_wl = apply_plan(plan, tj, wl, upto=1)
    assert half_wl == wl
    held_from_any_start(half_tj, half_wl)
    again = plan_hold(half_tj, half_wl, HOLD)
    assert [w.target for w in again.writes] == [Target.WORKLOAD]
    done_tj, done_wl = apply_plan(again, half_tj, half_wl)
    assert (done_tj, done_wl) == apply_plan(plan, tj, wl)
    held_from_any_start(done_tj, done_wl)


def test_kueue_release_lifts_the_trainjobs_hold_first_then_reactivates_the_workload():
    """The record first: the inactive Workload still holds the job (Kueue admits nothing of it, the gate holds
    it), and its reactivation, the last write, is what Kueue answers with the admission the gate approves at once
    (the gate watches Workloads, not TrainJobs)."""
    tj, wl = opened_trainjob(queue="q"), workload()
    held_tj, held_wl = apply_plan(plan_hold(tj, wl, HOLD), tj, wl)
    release = plan_release(held_tj, held_wl)
    assert release.outcome == "released: Workload reactivated"
    assert [w.target for w in release.writes] == [Target.TRAINJOB, Target.WORKLOAD]
    assert release.new_a is None  # the readmission gate raises A before Kueue admits it again
    # Interrupted after the TrainJob's write: still held by the Workload.
    half_tj, half_wl = apply_plan(release, held_tj, held_wl, upto=1)
    assert hold_keys(half_tj) == {}
    assert half_wl == held_wl
    assert go(half_wl, tj=half_tj).action in (Action.HOLD, Action.WAIT), go(half_wl, tj=half_tj).message
    accepted_by_the_webhook(held_tj, half_tj)
    # An unsuspend then (a Kueue bug: Kueue admits nothing of an inactive Workload) would be refused: the hold
    # is off the TrainJob, but an unsuspend without a raise of A (none added by admission here) is refused.
    unsuspended = copy.deepcopy(half_tj)
    unsuspended["spec"]["suspend"] = False
    assert unsuspend_problems(half_tj, unsuspended), "an unsuspend without a raise of A is refused"
    # The same Release again finishes it: only the Workload is left to write.
    again = plan_release(half_tj, half_wl)
    assert [w.target for w in again.writes] == [Target.WORKLOAD]
    free_tj, free_wl = apply_plan(again, half_tj, half_wl)
    assert free_wl["spec"]["active"] is True
    assert hold_keys(free_wl) == {}
    accepted_by_the_webhook(held_wl, free_wl, resource="workloads", kind="Workload", group="kueue.x-k8s.io")
    assert go(free_wl, tj=free_tj).action is Action.ADMIT
    assert (free_tj, free_wl) == apply_plan(release, held_tj, held_wl)
    assert plan_release(free_tj, free_wl) == Plan((), "not held")


def test_a_kueue_release_finishes_a_half_done_hold_and_lifts_an_older_agents_workload_hold():
    tj, wl = opened_trainjob(queue="q"), workload()
    half_tj, half_wl = apply_plan(plan_hold(tj, wl, HOLD), tj, wl, upto=1)
    release = plan_release(half_tj, half_wl)
    assert [w.target for w in release.writes] == [Target.TRAINJOB]
    assert release.outcome.startswith("released: hold lifted from the TrainJob")
    assert hold_keys(apply_plan(release, half_tj, half_wl)[0]) == {}
    # A hold an older agent placed on the Workload alone: Release reactivates the Workload, nothing else.
    old_wl = apply_json_patch(wl, plan_hold(tj, wl, HOLD).patch_of(Target.WORKLOAD))
    release = plan_release(tj, old_wl)
    assert [w.target for w in release.writes] == [Target.WORKLOAD]
    released = apply_plan(release, tj, old_wl)[1]
    assert released["spec"]["active"] is True
    assert released["metadata"]["annotations"] == {}


def test_a_second_kueue_hold_replaces_the_first_on_both():
    tj, wl = opened_trainjob(queue="q"), workload()
    held_tj, held_wl = apply_plan(plan_hold(tj, wl, HOLD), tj, wl)
    second = Hold(instance="h-2", since="s", who="bob", reason="r")
    plan = plan_hold(held_tj, held_wl, second)
    assert [w.target for w in plan.writes] == [Target.TRAINJOB, Target.WORKLOAD]
    again_tj, again_wl = apply_plan(plan, held_tj, held_wl)
    assert hold_keys(again_tj) == hold_keys(again_wl) == second.annotations()  # the old until is gone


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
