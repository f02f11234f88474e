"""Hold on a MultiKueue manager: never a deactivation of a Workload a worker may be running (MultiKueue would
delete the worker's copy before copying its final status back, and Kueue's eviction of the manager's TrainJob
would wait for ever), but dispatch's own check set Retry, so Kueue evicts through MultiKueue; the gate keeps the
check Pending while the hold is in force and deactivates the Workload once the copied status shows no active
Job; Release is unchanged."""

from __future__ import annotations

import copy
from typing import Any

from agent.api.service.lifecycle_decisions import after_own_write
from agent.domain.decide import Action, decide
from agent.domain.operations import Target, plan_hold, plan_release
from tests.agent.domain.test_gate import CHECK, NOW, opened
from tests.agent.domain.test_operations import HOLD, accepted_by_the_webhook, apply_plan, held_from_any_start, hold_keys
from tests.contract.test_multicluster import MK_CHECK, decide_mk, managed, mk_workload
from tests.harness.kubelet import apply_json_patch
from tests.webhook.test_webhook_rules import DISPATCH, admit, request

WORKLOAD = {"resource": "workloads", "kind": "Workload", "group": "kueue.x-k8s.io"}


def manager_job(active: int | None = 1) -> dict[str, Any]:
    """A dispatched job on the manager: MultiKueue's, opened, with the status MultiKueue copied back."""
    tj = managed(opened(queue="q"))
    if active is not None:
        tj["status"] = {"jobsStatus": [{"name": "node", "active": active, "ready": active}]}
    return tj


def gate(wl: dict[str, Any], tj: dict[str, Any]):
    return decide_mk(tj, None, wl=wl)


def state(wl: dict[str, Any], name: str = CHECK) -> str:
    return next(e["state"] for e in wl["status"]["admissionChecks"] if e["name"] == name)


def test_a_hold_on_a_manager_evicts_through_dispatch_s_check_and_never_deactivates():
    tj, wl = manager_job(), mk_workload(state="Ready")
    plan = plan_hold(tj, wl, HOLD, checks=[CHECK])
    assert [w.target for w in plan.writes] == [Target.TRAINJOB, Target.WORKLOAD, Target.WORKLOAD_STATUS]
    assert plan.outcome.startswith("held: evicted through MultiKueue")
    held_tj, held_wl = apply_plan(plan, tj, wl)
    assert hold_keys(held_tj) == hold_keys(held_wl) == HOLD.annotations()
    assert held_wl["spec"] == wl["spec"]  # MultiKueue would delete the worker's copy of a changed spec
    assert (state(held_wl), state(held_wl, MK_CHECK)) == ("Retry", "Ready")  # only dispatch's own check
    entry = next(e for e in held_wl["status"]["admissionChecks"] if e["name"] == CHECK)
    assert entry["lastTransitionTime"] == HOLD.since
    assert "evicted until Release" in entry["message"]
    assert "alice" in entry["message"]
    accepted_by_the_webhook(tj, held_tj)
    metadata = apply_plan(plan, tj, wl, upto=2)[1]
    accepted_by_the_webhook(wl, metadata, **WORKLOAD)
    verdict = admit(request("UPDATE", held_wl, metadata, user=DISPATCH, sub_resource="status", **WORKLOAD))
    assert verdict.allowed, verdict.message
    # Held from the TrainJob's write on; the same Hold again writes nothing (Kueue resets the check to Pending).
    held_from_any_start(*apply_plan(plan, tj, wl, upto=1))
    assert plan_hold(held_tj, held_wl, HOLD, checks=[CHECK]).writes == ()


def test_a_hold_on_a_manager_sets_retry_only_on_a_ready_check_of_dispatch_s():
    tj = manager_job()
    pending = plan_hold(tj, mk_workload(state="Pending"), HOLD, checks=[CHECK])
    assert [w.target for w in pending.writes] == [Target.TRAINJOB, Target.WORKLOAD]  # the gate holds a Pending one
    not_ours = plan_hold(tj, mk_workload(state="Ready"), HOLD, checks=["another"])
    assert Target.WORKLOAD_STATUS not in [w.target for w in not_ours.writes]


def test_a_hold_of_a_job_multikueue_does_not_manage_still_deactivates():
    tj, wl = opened(queue="q"), mk_workload(state="Ready")
    plan = plan_hold(tj, wl, HOLD, checks=[CHECK])
    assert plan.outcome == "held: Workload deactivated"
    assert apply_plan(plan, tj, wl)[1]["spec"]["active"] is False


def test_the_gate_deactivates_a_held_manager_workload_only_once_no_job_is_active():
    tj, wl = apply_plan(
        plan_hold(manager_job(), mk_workload(state="Ready"), HOLD, checks=[CHECK]),
        manager_job(),
        mk_workload(state="Ready"),
    )
    # Kueue evicted it and reset the check; the quota is reserved again, the check Pending.
    readmitted = copy.deepcopy(wl)
    next(e for e in readmitted["status"]["admissionChecks"] if e["name"] == CHECK)["state"] = "Pending"

    still_running = gate(readmitted, tj)  # the worker's copy still shows an active Job on the manager
    assert still_running.action is Action.HOLD
    assert still_running.workload_patch is None
    assert "held by dispatch" in still_running.message

    tj["status"]["jobsStatus"][0]["active"] = 0  # MultiKueue copied back the stopped copy's status
    stopped = gate(readmitted, tj)
    assert stopped.action is Action.HOLD
    assert stopped.workload_patch is not None
    assert stopped.workload_patch[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "wl-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "500"},
    ]
    deactivated = apply_json_patch(readmitted, stopped.workload_patch)
    assert deactivated["spec"]["active"] is False
    accepted_by_the_webhook(readmitted, deactivated, **WORKLOAD)

    # Release reactivates it and lifts both holds; the gate then admits the next dispatch.
    release = plan_release(tj, deactivated)
    assert [w.target for w in release.writes] == [Target.TRAINJOB, Target.WORKLOAD]
    free_tj, free_wl = apply_plan(release, tj, deactivated)
    assert free_wl["spec"]["active"] is True
    assert hold_keys(free_wl) == hold_keys(free_tj) == {}


def test_the_gate_never_deactivates_for_a_hold_on_the_trainjob_alone_or_outside_multikueue():
    tj = manager_job(active=0)
    tj_only = apply_plan(plan_hold(tj, mk_workload(), HOLD), tj, mk_workload(), upto=1)[0]
    assert gate(mk_workload(), tj_only).workload_patch is None  # its Release would not know to reactivate it
    held_tj, held_wl = apply_plan(plan_hold(tj, mk_workload(), HOLD, checks=[CHECK]), tj, mk_workload())
    alone = decide(workload=held_wl, check=CHECK, trainjob=held_tj, jobset=None, pods=[], blockers=[], now=NOW)
    assert alone.action is Action.HOLD
    assert alone.workload_patch is None
    assert gate(held_wl, held_tj).workload_patch is not None


def test_a_second_write_to_the_same_object_is_preconditioned_on_what_the_first_left():
    patch = [
        {"op": "test", "path": "/metadata/uid", "value": "wl-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "500"},
        {"op": "replace", "path": "/status/admissionChecks/1/state", "value": "Retry"},
    ]
    assert after_own_write(patch, None) == patch
    assert after_own_write(patch, "501")[1] == {"op": "replace", "path": "/metadata/resourceVersion", "value": "501"}
    assert after_own_write(patch, "501")[::2] == patch[::2]
