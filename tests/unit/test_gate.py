from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.gate import Action, Blocker, decide, hold_message, is_opened_by_dispatch
from agent.podowners import ForeignPod
from agent.workload import check_state_apply, owner_trainjob, waiting_reason
from contract.admission import admission_count, admission_floor, raise_admission
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_HOLD_INSTANCE,
    ANNOTATION_HOLD_WHO,
    ANNOTATION_JOBSET_UID,
    ANNOTATION_OPENED,
    GATE,
    HOLD_ANNOTATIONS,
    OPENED_TRUE,
)
from contract.ownership import is_dispatch
from tests.unit.fixtures import trainjob
from tests.unit.kubelet import apply_json_patch
from webhook.rules.updates import unsuspend_problems

CHECK = "dispatch-admission"
NOW = "2026-11-29T10:00:00Z"
EARLIER = "2026-11-29T09:00:00Z"


def workload(
    *,
    state: str = "Pending",
    message: str = "",
    reserved: bool = True,
    evicted: bool = False,
    finished: bool = False,
    active: bool | None = True,
    owner: dict[str, Any] | None = None,
    checks: bool = True,
) -> dict[str, Any]:
    conditions = [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
    if evicted:
        conditions.append({"type": "Evicted", "status": "True", "reason": "Preempted"})
    if finished:
        conditions.append({"type": "Finished", "status": "True"})
    wl: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "trainjob-dj-01arz3ndektsv4rrffq69g5fav-s3-1a2b3",
            "namespace": "team-a",
            "uid": "wl-uid",
            "resourceVersion": "500",
            "ownerReferences": [
                owner
                or {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "name": "dj-01arz3ndektsv4rrffq69g5fav-s3",
                    "uid": "tj-uid",
                    "controller": True,
                }
            ],
        },
        "spec": {},
        "status": {"conditions": conditions},
    }
    if active is not None:
        wl["spec"]["active"] = active
    if reserved:
        wl["status"]["admission"] = {"clusterQueue": "cq", "podSetAssignments": []}
    if checks:
        wl["status"]["admissionChecks"] = [
            {"name": "another-check", "state": "Ready", "message": "", "lastTransitionTime": EARLIER},
            {"name": CHECK, "state": state, "message": message, "lastTransitionTime": EARLIER, "retryCount": 2},
        ]
    return wl


def pod(name: str = "dj-x-node-0-0-abcde", a: str | None = "1", job: str = "node") -> dict[str, Any]:
    notes = {} if a is None else {ANNOTATION_ADMISSION: a}
    return {
        "metadata": {"name": name, "labels": {"jobset.sigs.k8s.io/replicatedjob-name": job}, "annotations": notes},
        "status": {"phase": "Running"},
    }


def opened(**overrides: Any) -> dict[str, Any]:
    """A dispatch TrainJob that dispatch's Open marked (and whose gate, in Kueue mode, it removed)."""
    tj = trainjob(**overrides)
    tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY, None)
    tj["metadata"]["annotations"][ANNOTATION_OPENED] = OPENED_TRUE
    return tj


def go(wl=None, tj="default", jobset=None, pods=(), blockers=(), foreign_pods=()):
    return decide(
        workload=wl or workload(),
        check=CHECK,
        trainjob=opened() if tj == "default" else tj,
        jobset=jobset,
        pods=list(pods),
        blockers=list(blockers),
        now=NOW,
        foreign_pods=list(foreign_pods),
    )


def test_raise_then_ready():
    d = go()
    assert d.action is Action.RAISE
    assert d.new_a == 1
    after = apply_json_patch(opened(), d.trainjob_patch)
    assert admission_count(after) == admission_floor(after) == 1
    assert d.check_write == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "trainjob-dj-01arz3ndektsv4rrffq69g5fav-s3-1a2b3",
            "namespace": "team-a",
            "uid": "wl-uid",
            "resourceVersion": "500",
        },
        "status": {
            "admissionChecks": [
                {"name": CHECK, "state": "Ready", "message": "admission count A raised to 1", "lastTransitionTime": NOW}
            ]
        },
    }


def jobset(uid: str = "js-1", owner: str = "tj-uid", controller: bool = True) -> dict[str, Any]:
    """A JobSet as Trainer creates it: its controller ownerReference names its TrainJob by uid."""
    ref = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": "dj-01arz3ndektsv4rrffq69g5fav-s3",
    }
    return {"metadata": {"uid": uid, "ownerReferences": [{**ref, "uid": owner, "controller": controller}]}}


def test_the_jobset_uid_is_recorded_with_the_raise_the_first_time():
    d = go(jobset=jobset())
    assert apply_json_patch(opened(), d.trainjob_patch)["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == "js-1"
    recorded = opened()
    recorded["metadata"]["annotations"][ANNOTATION_JOBSET_UID] = "js-1"
    assert len(go(tj=recorded, jobset=jobset()).trainjob_patch) == 4


@pytest.mark.parametrize(
    "orphan",
    [
        jobset("js-0", owner="earlier-tj-uid"),  # left by an earlier TrainJob of this name
        jobset("js-0", controller=False),  # names the TrainJob, but not as its controller
        {"metadata": {"uid": "js-0"}},  # no owner at all
    ],
)
def test_the_jobset_uid_of_a_jobset_not_the_trainjobs_own_is_never_recorded(orphan):
    d = go(jobset=orphan)
    assert d.action is Action.RAISE  # the raise goes ahead; only the record is left out
    after = apply_json_patch(opened(), d.trainjob_patch)
    assert ANNOTATION_JOBSET_UID not in after["metadata"]["annotations"]
    assert len(d.trainjob_patch) == len(go().trainjob_patch)


@pytest.mark.parametrize(
    ("wl", "says"),
    [
        (workload(state="Ready"), "the check is Ready"),
        (workload(state="Retry"), "the check is Retry"),
        (workload(reserved=False), "quota is not reserved"),
        (workload(evicted=True), "being evicted"),
        (workload(finished=True), "finished"),
        (workload(active=False), "deactivated"),
        (workload(checks=False), "does not list the check"),
    ],
)
def test_waits_outside_its_turn_and_writes_nothing(wl, says):
    d = go(wl)
    assert d.action is Action.WAIT
    assert says in d.message
    assert d.check_write is None
    assert d.trainjob_patch is None


def test_active_unset_means_active():
    assert waiting_reason(workload(active=None), CHECK) is None


def test_other_owners_are_approved_at_once():
    d = go(
        workload(owner={"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}), tj=None
    )
    assert d.action is Action.APPROVE
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Ready"
    assert d.trainjob_patch is None


def test_non_dispatch_trainjobs_are_approved_at_once():
    other = {
        "metadata": {"name": "resnet", "uid": "tj-uid", "labels": {"dispatch.phpboyscout.uk/job-id": "x"}},
        "spec": {},
    }
    d = go(tj=other)
    assert d.action is Action.APPROVE
    assert d.trainjob_patch is None


def test_an_unread_or_replaced_trainjob_holds():
    assert go(tj=None).action is Action.HOLD
    replaced = trainjob()
    replaced["metadata"]["uid"] = "another"
    d = go(tj=replaced)
    assert d.action is Action.HOLD
    assert "uid tj-uid" in d.message


def test_pods_that_may_still_run_hold_the_check_and_are_named():
    blockers = [Blocker("p-0", "node n1 is unreachable since 10:00"), Blocker("p-1", "Terminating on n2")]
    d = go(blockers=blockers)
    assert d.action is Action.HOLD
    assert d.trainjob_patch is None
    assert d.message == hold_message(blockers)
    assert "p-0: node n1 is unreachable since 10:00" in d.message
    entry = d.check_write["status"]["admissionChecks"][0]
    assert entry["state"] == "Pending"
    assert entry["lastTransitionTime"] == EARLIER  # the state did not change


def test_an_unchanged_hold_writes_nothing():
    blockers = [Blocker("p-0", "why")]
    d = go(workload(message=hold_message(blockers)), blockers=blockers)
    assert d.action is Action.HOLD
    assert d.check_write is None


def test_a_trainjob_that_cannot_be_raised_holds_with_the_reason():
    running = opened()
    running["spec"]["suspend"] = False
    d = go(tj=running)
    assert d.action is Action.HOLD
    assert "cannot raise A: spec.suspend" in d.message


def test_foreign_objects_are_reported_and_do_not_stop_the_raise():
    tj = opened()
    tj["metadata"]["annotations"][ANNOTATION_JOBSET_UID] = "js-old"
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "3"
    tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["metadata"]["annotations"][ANNOTATION_ADMISSION] = "3"
    d = go(
        tj=tj,
        jobset={"metadata": {"uid": "js-new"}},
        pods=[pod("a", "2"), pod("b", None), pod("init", None, job="dataset-initializer")],
    )
    assert d.action is Action.RAISE
    assert d.foreign == (
        "JobSet UID js-new is not the recorded js-old: J may have been reset.",
        "Pod a has A 2, below the admission floor 3: A may have been reset.",
        "Pod b has no admission annotation dispatch.phpboyscout.uk/admission: it was not started through a gate.",
    )


# -- dispatch must have opened it, and no hold of dispatch's may be in force (issue 10) ----------


def test_a_job_dispatch_never_opened_is_held():
    d = go(tj=trainjob())  # plain mode, suspended, no opened mark: e.g. the queue label added by a stranger
    assert d.action is Action.HOLD
    assert d.trainjob_patch is None
    assert "dispatch has not opened this TrainJob" in d.message
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Pending"


def test_dispatch_s_gate_still_on_it_is_not_opened_even_with_the_mark():
    tj = opened(queue="q")
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] = GATE
    assert go(tj=tj).action is Action.HOLD


def test_a_kueue_job_past_its_gate_without_the_opened_mark_is_held_whatever_its_floor():
    """One answer with the unsuspend rules (webhook update.unsuspend, policy dispatch-k8s-unsuspend): they refuse
    the unsuspend of a job without the mark, so the gate approving its admission would leave it holding quota
    and never starting. It stays Pending, saying why, until Open writes the mark."""
    legacy = trainjob(queue="q")
    legacy["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY)
    assert go(tj=legacy).action is Action.HOLD
    legacy["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "2"  # admitted through the gate before
    d = go(tj=legacy)
    assert (d.action, d.trainjob_patch) == (Action.HOLD, None)
    assert "dispatch has not opened this TrainJob" in d.message
    assert unsuspend_problems(legacy, _unsuspended(legacy))  # the webhook refuses its unsuspend too
    legacy["metadata"]["annotations"][ANNOTATION_OPENED] = OPENED_TRUE  # what Open writes for it
    assert go(tj=legacy).action is Action.RAISE
    plain = trainjob()
    plain["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "2"
    assert go(tj=plain).action is Action.HOLD  # plain mode always had the mark


def _unsuspended(tj: dict[str, Any]) -> dict[str, Any]:
    """Kueue's unsuspend of ``tj`` after the gate's raise, with the record the mutating webhook adds."""
    after = apply_json_patch(tj, raise_admission(tj).patch)
    after["spec"]["suspend"] = False
    after["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = str(admission_count(after))
    return after


@pytest.mark.parametrize("where", ["trainjob", "workload"])
def test_a_hold_of_dispatch_s_keeps_the_check_pending_even_if_the_workload_is_reactivated(where):
    tj, wl = opened(queue="q"), workload()
    target = tj if where == "trainjob" else wl
    target["metadata"].setdefault("annotations", {}).update(
        {ANNOTATION_HOLD_INSTANCE: "01H", ANNOTATION_HOLD_WHO: "al"}
    )
    d = go(wl, tj=tj)
    assert d.action is Action.HOLD
    assert "held by dispatch: hold 01H by al" in d.message
    assert d.trainjob_patch is None


def test_foreign_pods_are_reported_and_not_waited_on():
    fake = ForeignPod("fake-0", "no Job controls it (JobSet's pods are each created by a Job)")
    d = go(foreign_pods=[fake])
    assert d.action is Action.RAISE
    assert fake.report() in d.foreign


def test_owner_trainjob_needs_a_controller_reference():
    wl = workload()
    wl["metadata"]["ownerReferences"][0]["controller"] = False
    assert owner_trainjob(wl) is None


def test_long_messages_are_truncated_to_the_crd_limit():
    body = check_state_apply(workload(), CHECK, "Pending", "x" * 40000, NOW)
    assert len(body["status"]["admissionChecks"][0]["message"]) <= 32768


# -- the property ------------------------------------------------------------------------------

st_state = st.sampled_from(["Pending", "Ready", "Retry", "Rejected"])
st_workload = st.builds(
    workload,
    state=st_state,
    reserved=st.booleans(),
    evicted=st.booleans(),
    finished=st.booleans(),
    active=st.sampled_from([True, False, None]),
    checks=st.booleans(),
)


@st.composite
def st_trainjob(draw, wl):
    tj = trainjob(queue=draw(st.sampled_from(["q", None])))
    tj["spec"]["suspend"] = draw(st.booleans())
    if draw(st.booleans()):
        tj["metadata"]["annotations"][ANNOTATION_OPENED] = OPENED_TRUE
    if draw(st.booleans()):
        tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY, None)
    if draw(st.booleans()):
        tj["metadata"]["annotations"][ANNOTATION_HOLD_INSTANCE] = "01HOLD"
    if draw(st.booleans()):
        wl["metadata"].setdefault("annotations", {})[ANNOTATION_HOLD_WHO] = "alice"
    notes = tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"
    ]["template"]["metadata"]["annotations"]
    a = draw(st.one_of(st.none(), st.integers(0, 999_999).map(str), st.sampled_from(["07", "x", ""])))
    if a is None:
        notes.pop(ANNOTATION_ADMISSION)
    else:
        notes[ANNOTATION_ADMISSION] = a
    floor = draw(st.one_of(st.none(), st.integers(0, 999_999).map(str)))
    if floor is not None:
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = floor
    if draw(st.booleans()):
        tj["spec"]["runtimePatches"].pop(0)
    if draw(st.booleans()):
        tj["metadata"]["uid"] = "other"
    return tj


@st.composite
def st_case(draw):
    wl = draw(st_workload)
    return wl, draw(st.one_of(st.none(), st_trainjob(wl)))


@given(
    case=st_case(),
    blockers=st.lists(st.builds(Blocker, st.text(max_size=5), st.text(max_size=5)), max_size=3),
)
def test_never_ready_for_a_dispatch_job_without_a_raise_nor_while_a_pod_may_run(case, blockers):
    wl, tj = case
    before = copy.deepcopy(tj)
    d = go(wl, tj=tj, blockers=blockers)
    ready = d.check_write is not None and d.check_write["status"]["admissionChecks"][0]["state"] == "Ready"
    if ready and tj is not None and is_dispatch(tj):
        assert d.action is Action.RAISE
        assert not blockers
        after = apply_json_patch(before, d.trainjob_patch)
        assert admission_count(after) == d.new_a
        highest = max(int(x) for x in (admission_count(before) or 0, admission_floor(before) or 0))
        assert d.new_a > highest
        assert d.check_write["metadata"]["resourceVersion"] == wl["metadata"]["resourceVersion"]
        # never for a job dispatch did not open, nor while a hold of dispatch's is in force
        assert is_opened_by_dispatch(tj)
        # and never for one whose unsuspend the webhook would refuse on those grounds (one answer)
        assert not [
            p
            for p in unsuspend_problems(after, {**after, "spec": {**after["spec"], "suspend": False}})
            if "opened" in p.field or "admission-gated-by" in p.field or p.field == "metadata.annotations"
        ]
        assert not any(k in (tj["metadata"].get("annotations") or {}) for k in HOLD_ANNOTATIONS)
        assert not any(k in (wl["metadata"].get("annotations") or {}) for k in HOLD_ANNOTATIONS)
    if ready:
        assert waiting_reason(wl, CHECK) is None
    if tj is not None and is_dispatch(tj):
        assert d.action is not Action.APPROVE
    assert tj == before  # decide never mutates what it read
