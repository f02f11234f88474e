"""MultiKueue's numbering of each dispatch on the manager (contract/multicluster.py) and where it is used: the
gate's raise by K before its Ready, the runtime requirements, Start's read-back and budget, and the update rules
that let only dispatch raise by more than 1, only on a TrainJob MultiKueue manages."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.api.settings import ApiSettings
from agent.domain.decide import Action, decide
from agent.domain.start import multikueue_start_problems, multikueue_unproven, readback_changes
from contract.admission import (
    admission_count,
    admission_floor,
    admission_started,
    approved_admission,
    start_count,
    unsuspend_ops,
)
from contract.errors import ContractError
from contract.identity import R_BOUND
from contract.keys import ANNOTATION_ADMISSION_FLOOR, ANNOTATION_ADMISSION_STARTED, ANNOTATION_DISPATCHED
from contract.multicluster import (
    IGNORE_MAX_RESTARTS,
    MULTIKUEUE_CONTROLLER,
    MULTIKUEUE_MANAGED_BY,
    budget_problem,
    dispatches_afforded,
    listed_multikueue_checks,
    max_restarts,
    multikueue_checks,
    multikueue_problems,
    raise_dispatch,
    step,
)
from contract.runtime_requirements import runtime_problems
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.fixtures import as_read, runtime, submission
from tests.agent.domain.test_gate import APPROVAL_PATH, CHECK, NOW, _unsuspended, _with_counts, go, opened, workload
from tests.harness.kubelet import apply_json_patch
from webhook.rules.creation import creation_problems
from webhook.rules.identity import update_problems
from webhook.runtime_facts import runtime_facts

MK_CHECK = "multikueue"


def spec(max_restarts_: int | None = None, rules: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    s = runtime()["spec"]
    policy: dict[str, Any] = {}
    if max_restarts_ is not None:
        policy["maxRestarts"] = max_restarts_
    if rules is not None:
        policy["rules"] = rules
    if policy:
        s["template"]["spec"]["failurePolicy"] = policy
    return s


def mk_workload(**kw: Any) -> dict[str, Any]:
    wl = workload(**kw)
    wl["status"]["admissionChecks"][0]["name"] = MK_CHECK  # Ready: MultiKueue waits for every other check
    return wl


def managed(tj: dict[str, Any]) -> dict[str, Any]:
    tj["spec"]["managedBy"] = MULTIKUEUE_MANAGED_BY  # Kueue's defaulting, in a queue with the MultiKueue check
    return tj


def decide_mk(tj: dict[str, Any], runtime_spec: dict[str, Any] | None, **kw: Any):
    return decide(
        workload=kw.pop("wl", None) or mk_workload(),
        check=CHECK,
        trainjob=tj,
        jobset=None,
        pods=[],
        blockers=[],
        now=NOW,
        multikueue=True,
        runtime_spec=runtime_spec,
    )


# -- K and the budget ---------------------------------------------------------------------------------


def test_k_is_max_restarts_plus_one_and_zero_restarts_when_absent():
    assert (max_restarts(spec()), step(spec())) == (0, 1)
    assert (max_restarts(spec(9)), step(spec(9))) == (9, 10)


@pytest.mark.parametrize("bad", [-1, "3", 1.5, True])
def test_a_max_restarts_that_is_not_a_count_is_refused(bad):
    with pytest.raises(ContractError):
        max_restarts(spec(bad))
    assert [p.rule for p in multikueue_problems(spec(bad))] == ["runtime.max-restarts"]


def test_the_budget_worked_example():
    # maxRestarts 9, K 10, from A 0: the 99,999th dispatch gets A 999,990 and reaches R 999,999 < 10^6.
    assert dispatches_afforded(0, 9) == 99_999
    assert R_BOUND - 1 == 99_999 * 10 + 9
    assert dispatches_afforded(0, 999) == 999
    assert dispatches_afforded(0, 0) == R_BOUND - 1  # K = 1: one R per dispatch, A 1 .. 999,999
    assert dispatches_afforded(R_BOUND, 3) == 0


@given(a=st.integers(0, R_BOUND), m=st.integers(0, 5000))
def test_the_budget_is_exactly_the_dispatches_whose_range_fits_below_the_bound(a, m):
    n, k = dispatches_afforded(a, m), m + 1
    if n:
        assert a + n * k + m < R_BOUND  # the last affordable dispatch: its highest R is below the bound
    assert a + (n + 1) * k + m >= R_BOUND  # one more would reach it


def test_start_refuses_naming_the_figures_a_runtime_that_affords_too_few_dispatches():
    assert budget_problem(spec(9), 0, 1000) is None
    assert budget_problem(spec(998), 0, 1000) is None  # 1000 exactly
    refusal = budget_problem(spec(999), 0, 1000)
    assert refusal is not None
    assert "maxRestarts 999 (K = 1000) affords 999 dispatch(es) from A 0" in refusal
    assert "minDispatches 1000" in refusal


# -- MultiKueue mode ----------------------------------------------------------------------------------


def ac(name: str, controller: str) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"controllerName": controller}}


def test_the_multikueue_checks_a_workload_lists_are_those_whose_controller_is_multikueue():
    checks = multikueue_checks([ac(MK_CHECK, MULTIKUEUE_CONTROLLER), ac(CHECK, "dispatch.phpboyscout.uk/x")])
    assert checks == frozenset({MK_CHECK})
    assert listed_multikueue_checks(mk_workload(), checks) == [MK_CHECK]
    assert listed_multikueue_checks(workload(), checks) == []
    assert listed_multikueue_checks(mk_workload(), frozenset()) == []
    assert listed_multikueue_checks(None, checks) == []


def test_preflight_reports_a_multikueue_queue_unproven_until_every_worker_is_proven():
    why = multikueue_unproven(
        mk_workload(), frozenset({MK_CHECK}), ["w-1: proven", "w-2: cannot be read"], proven=False
    )
    assert why is not None
    assert f"MultiKueue check {MK_CHECK}: not every worker it may send a job to is proven" in why
    assert "must not be queued to it; its workers: w-1: proven; w-2: cannot be read" in why
    assert "it names no worker" in (multikueue_unproven(mk_workload(), frozenset({MK_CHECK}), proven=False) or "")
    assert multikueue_unproven(mk_workload(), frozenset({MK_CHECK}), ["w-1: proven"], proven=True) is None
    assert multikueue_unproven(workload(), frozenset({MK_CHECK}), proven=False) is None
    assert multikueue_unproven(mk_workload(), frozenset(), proven=False) is None
    assert multikueue_unproven(None, frozenset({MK_CHECK}), proven=False) is None


# -- the runtime requirements -------------------------------------------------------------------------


def test_restart_ignoring_max_restarts_is_refused_in_a_multikueue_queue_only():
    rules = [{"action": "FailJobSet"}, {"action": IGNORE_MAX_RESTARTS, "onJobFailureReasons": ["PodFailurePolicy"]}]
    s = spec(3, rules)
    assert runtime_problems(s, allow_rank_restart=False) == []
    found = runtime_problems(s, allow_rank_restart=False, multikueue=True)
    assert [(p.rule, p.field, p.seen) for p in found] == [
        (
            "runtime.multikueue-ignore-max-restarts",
            "spec.template.spec.failurePolicy.rules[1].action",
            IGNORE_MAX_RESTARTS,
        )
    ]
    assert runtime_problems(spec(3), allow_rank_restart=False, multikueue=True) == []


# -- the gate on the manager ------------------------------------------------------------------------


def test_the_gate_raises_a_by_k_before_its_ready_in_its_own_preconditioned_write():
    tj = managed(opened())
    d = decide_mk(tj, spec(2))
    assert d.action is Action.ADMIT
    assert d.new_a == 3  # max(A 0, no floor) + K 3
    assert d.message == (
        "the next dispatch starts with A 3, raised by K = maxRestarts + 1 = 3 by the gate before this check turns "
        "Ready (MultiKueue copies the TrainJob to a worker then)"
    )
    assert d.check_write is not None
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Ready"
    assert d.trainjob_patch is not None
    assert d.trainjob_patch[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "tj-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "100"},
    ]
    after = apply_json_patch(tj, d.trainjob_patch)
    assert (admission_count(after), admission_floor(after)) == (3, 3)
    changed = {op["path"] for op in d.trainjob_patch[2:]}
    assert changed == {
        "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template/metadata"
        "/annotations/dispatch.phpboyscout.uk~1admission",
        "/metadata/annotations/dispatch.phpboyscout.uk~1admission-floor",
        "/metadata/annotations/dispatch.phpboyscout.uk~1approved-admission",
    }
    assert approved_admission(after) == 3  # the approval of the A it raised, in the same write


def test_the_gate_stamps_the_a_it_raised_on_the_workload_before_its_ready():
    # MultiKueue clones the Workload into the remote one from the cache entry showing the Ready; the stamp, written
    # between the raise and the Ready and preconditioned on the Workload as read, is that dispatch's A there.
    tj, wl = managed(opened()), mk_workload()
    d = decide_mk(tj, spec(2), wl=wl)
    assert d.workload_patch is not None
    assert d.workload_patch[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": wl["metadata"]["uid"]},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": wl["metadata"]["resourceVersion"]},
    ]
    stamped = apply_json_patch(wl, d.workload_patch)
    assert stamped["metadata"]["annotations"][ANNOTATION_DISPATCHED] == "3" == str(d.new_a)
    again = decide_mk(apply_json_patch(tj, d.trainjob_patch), spec(2), wl=stamped)
    assert apply_json_patch(stamped, again.workload_patch)["metadata"]["annotations"][ANNOTATION_DISPATCHED] == "6"


def test_outside_multikueue_mode_the_gate_stamps_nothing():
    d = go(tj=opened())
    assert (d.action, d.workload_patch) == (Action.ADMIT, None)


def test_then_the_unsuspend_only_records_and_nothing_raises_twice():
    tj = managed(opened())
    first = decide_mk(tj, spec(2))
    raised = apply_json_patch(tj, first.trainjob_patch)
    raised["metadata"]["resourceVersion"] = "101"
    # A pass whose Ready was refused after its stamp landed, or that crashed after the stamp, raises again: a Ready
    # that landed may have sent a copy a worker started before the manager's unsuspend recorded its A, so every
    # stamped A is used once. (A raise whose stamp never landed is reused: tests/agent/domain/test_multicluster_mode.py.)
    again = decide_mk(raised, spec(2), wl=apply_json_patch(mk_workload(), first.workload_patch))
    assert (again.action, again.new_a) == (Action.ADMIT, 6)
    # The manager's unsuspend (Kueue's, through record-start or the webhook) records A 3 and raises nothing.
    assert start_count(raised, admission_started(raised)) == (3, False)
    ops = unsuspend_ops({**raised, "spec": {**raised["spec"], "suspend": False}}, None, kueue=True)
    assert ops == [{"op": "add", "path": "/metadata/annotations/dispatch.phpboyscout.uk~1admission-started",
                    "value": "3"}]  # fmt: skip
    started = _unsuspended(raised)
    assert (admission_count(started), admission_floor(started), admission_started(started)) == (3, 3, 3)
    # The next dispatch (after an eviction: suspended again) is raised by K again: R only rises.
    started["spec"]["suspend"] = True
    second = decide_mk(started, spec(2))
    assert second.new_a == 6
    assert second.new_a >= 3 + step(spec(2))


@given(a=st.integers(0, 5000), floor=st.none() | st.integers(0, 5000), m=st.integers(0, 50))
def test_each_raise_leaves_the_previous_dispatch_s_range_behind(a, floor, m):
    tj = _with_counts(managed(opened()), a=str(a), floor=None if floor is None else str(floor))
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = str(max(a, floor or 0))  # it has started
    d = decide_mk(tj, spec(m))
    assert d.action is Action.ADMIT
    highest_before = max(a, floor or 0) + m  # the previous dispatch's highest R
    assert d.new_a is not None
    assert d.new_a > highest_before
    assert d.new_a == max(a, floor or 0) + m + 1


def test_without_the_runtime_copy_or_with_a_forbidden_rule_the_gate_holds():
    tj = managed(opened())
    d = decide_mk(tj, None)
    assert (d.action, d.trainjob_patch) == (Action.HOLD, None)
    assert "the runtime copy, whose maxRestarts gives K, could not be read" in d.message
    d = decide_mk(tj, spec(2, [{"action": IGNORE_MAX_RESTARTS}]))
    assert d.action is Action.HOLD
    assert IGNORE_MAX_RESTARTS in d.message


def test_the_raise_refuses_to_let_a_dispatch_reach_the_bound():
    tj = _with_counts(managed(opened()), a=str(R_BOUND - 5), floor=str(R_BOUND - 5))
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = str(R_BOUND - 5)
    with pytest.raises(ContractError, match="past the epoch bound"):
        raise_dispatch(tj, 3)
    d = decide_mk(tj, spec(2))
    assert d.action is Action.HOLD
    assert "dispatches are spent" in d.message


def test_the_raise_needs_the_trainjob_suspended():
    tj = managed(opened())
    tj["spec"]["suspend"] = False
    with pytest.raises(ContractError, match="suspended"):
        raise_dispatch(tj, 3)


def test_a_dispatch_whose_a_was_never_recorded_as_started_still_gets_a_new_a():
    # The gate raised to 3 and set Ready; MultiKueue's copy started on a worker; the manager was evicted before
    # its own unsuspend, so admission-started was never written. The next dispatch must not reuse A 3.
    tj = managed(opened())
    first = decide_mk(tj, spec(2))
    raised = apply_json_patch(tj, first.trainjob_patch)
    assert admission_started(raised) is None
    assert start_count(raised, None) == (3, False)  # the unsuspend's condition alone would not raise
    assert decide_mk(raised, spec(2), wl=apply_json_patch(mk_workload(), first.workload_patch)).new_a == 6


def test_outside_multikueue_mode_the_gate_leaves_the_raise_to_the_unsuspend():
    d = go(tj=managed(opened()))
    assert d.new_a == 1
    assert d.trainjob_patch is not None
    assert {op["path"] for op in d.trainjob_patch[2:]} == {APPROVAL_PATH}  # the approval only, never A


# -- the update rules: only dispatch, and only on a TrainJob MultiKueue manages, raises by more than 1 --


def _raised_by(tj: dict[str, Any], k: int) -> dict[str, Any]:
    return apply_json_patch(tj, raise_dispatch(tj, k).patch)


def test_dispatch_may_raise_by_k_on_a_trainjob_multikueue_manages():
    tj = managed(opened())
    assert [p for p in update_problems(tj, _raised_by(tj, 3), dispatch=True) if p.rule == "update.counter"] == []


def test_nobody_else_and_nowhere_else_raises_by_more_than_one():
    tj = managed(opened())
    stranger = update_problems(tj, _raised_by(tj, 3), dispatch=False)
    assert any("only dispatch raises A" in p.accepted for p in stranger)
    plain = opened()
    jumped = _with_counts(copy.deepcopy(plain), a="3", floor="3")
    assert any("max(A, floor) + 1 = 1" in p.accepted for p in update_problems(plain, jumped, dispatch=True))
    # Even by dispatch, A and the floor go together.
    apart = _with_counts(copy.deepcopy(tj), a="3", floor=None)
    apart["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_FLOOR, None)
    assert any(p.rule == "update.counter" for p in update_problems(tj, apart, dispatch=True))


# -- Start ----------------------------------------------------------------------------------------------


def test_start_accepts_multikueue_s_managed_by_only_where_the_queue_lists_the_check():
    written = opened()
    read = managed(copy.deepcopy(written))
    assert readback_changes(written, read) == []
    mk = {MK_CHECK: ac(MK_CHECK, MULTIKUEUE_CONTROLLER)}
    assert multikueue_start_problems(read, mk, spec(2), min_dispatches=1000) == []
    refused = multikueue_start_problems(read, {}, spec(2), min_dispatches=1000)
    assert refused == [
        f"spec.managedBy is {MULTIKUEUE_MANAGED_BY!r}, but the queue's ClusterQueue lists no MultiKueue check"
    ]
    assert multikueue_start_problems(written, {}, spec(2), min_dispatches=1000) == []
    other = copy.deepcopy(written)
    other["spec"]["managedBy"] = "someone.else/controller"
    assert readback_changes(written, other) == ["spec.managedBy is 'someone.else/controller', set by someone else"]


def test_start_refuses_in_a_multikueue_queue_a_forbidden_rule_or_too_small_a_budget():
    read = managed(opened())
    mk = {MK_CHECK: ac(MK_CHECK, MULTIKUEUE_CONTROLLER)}
    bad = multikueue_start_problems(read, mk, spec(2, [{"action": IGNORE_MAX_RESTARTS}]), min_dispatches=1000)
    assert len(bad) == 1
    assert "runtime.multikueue-ignore-max-restarts" in bad[0]
    small = multikueue_start_problems(read, mk, spec(999), min_dispatches=1000)
    assert len(small) == 1
    assert "affords 999 dispatch(es)" in small[0]


# -- the webhook, at creation: Kueue's defaulting set managedBy before validation ------------------------


def test_the_webhook_refuses_a_multikueue_trainjob_whose_runtime_copy_ignores_max_restarts():
    sub = submission()
    rt = runtime()
    rt["spec"]["template"]["spec"]["failurePolicy"] = {"maxRestarts": 2, "rules": [{"action": IGNORE_MAX_RESTARTS}]}
    copy_ = as_read(build_runtime_copy(sub, rt), uid="rt-copy-uid")
    tj = build_trainjob(sub, rt["spec"])
    for runtime_copy in (copy_, runtime_facts(copy_)):
        found, _ = creation_problems(tj, runtime_copy, allow_spec_prologue=False, allow_rank_restart=False)
        assert [p.rule for p in found] == []  # not MultiKueue's: the rule is allowed (it raises J)
        refused, _ = creation_problems(managed(tj), runtime_copy, allow_spec_prologue=False, allow_rank_restart=False)
        assert [p.rule for p in refused] == ["runtime.multikueue-ignore-max-restarts"]
        tj["spec"].pop("managedBy")


def test_min_dispatches_is_an_api_setting_with_a_default_of_1000():
    assert ApiSettings().min_dispatches == 1000
    assert ApiSettings.model_validate({"minDispatches": 5}).min_dispatches == 5
    with pytest.raises(ValueError, match="minDispatches"):
        ApiSettings.model_validate({"minDispatches": 0})
