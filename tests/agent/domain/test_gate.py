from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from agent.domain.decide import Action, Blocker, decide, hold_message, is_opened_by_dispatch
from agent.domain.pod_owners import ForeignPod
from agent.domain.workload import check_state_apply, owner_trainjob, waiting_reason
from contract.admission import (
    admission_count,
    admission_floor,
    admission_started,
    approved_admission,
    preconditions,
    start_count,
    unsuspend_ops,
)
from contract.identity import R_BOUND
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_HOLD_INSTANCE,
    ANNOTATION_HOLD_WHO,
    ANNOTATION_JOBSET_UID,
    ANNOTATION_OPENED,
    GATE,
    HOLD_ANNOTATIONS,
    OPENED_TRUE,
)
from contract.ownership import is_dispatch, is_kueue_mode
from harness.fixtures import trainjob
from tests.harness.kubelet import apply_json_patch
from webhook.rules.unsuspend import unsuspend_problems

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


APPROVAL_PATH = "/metadata/annotations/dispatch.phpboyscout.uk~1approved-admission"


def beyond_approval(patch: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The gate's TrainJob patch without its approval of the execution (tested on its own, below): None when the
    approval is all it writes."""
    if patch is None:
        return None
    rest = [op for op in patch if op["path"] != APPROVAL_PATH]
    return None if len(rest) == 2 and len(patch) == 3 else rest


def test_an_admission_records_the_approval_of_its_a_and_workload_before_the_ready_and_only_once():
    d = go()
    assert d.trainjob_patch == [
        *preconditions(opened()),
        {"op": "add", "path": APPROVAL_PATH, "value": "1/wl-uid"},
    ]
    after = apply_json_patch(opened(), d.trainjob_patch)
    assert approved_admission(after) == d.new_a == 1
    assert (admission_count(after), admission_floor(after)) == (admission_count(opened()), admission_floor(opened()))
    assert go(tj=after).trainjob_patch is None  # recorded: nothing more to write


def test_a_changed_jobset_uid_holds_the_gate():
    tj = opened()
    tj["metadata"]["annotations"][ANNOTATION_JOBSET_UID] = "js-old"
    d = go(tj=tj, jobset=jobset("js-new"))
    assert (d.action, d.trainjob_patch, d.new_a) == (Action.HOLD, None, None)
    assert d.message.startswith("JobSet UID js-new is not the recorded js-old: J may have been reset.")
    assert "Stop it" in d.message
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Pending"
    assert go(tj=tj, jobset=jobset("js-old")).action is Action.ADMIT


def test_a_job_whose_namespace_is_out_of_scope_is_held_and_admitted_once_back_in_it():
    why = "namespace team-a is not selected by scope.namespaceSelector (its labels: none but its name)"
    d = decide(workload=workload(), check=CHECK, trainjob=opened(), jobset=None, pods=[], blockers=[], now=NOW,
               scope_problem=why)  # fmt: skip
    assert (d.action, d.trainjob_patch, d.new_a) == (Action.HOLD, None, None)
    assert d.message.startswith(why + ": an execution there would start unpoliced, so the gate holds it")
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Pending"
    assert go().action is Action.ADMIT


def test_the_agents_scope_is_the_apis_and_reads_labels_only_for_a_selector():
    from agent.config import AgentConfig

    plain = AgentConfig()
    assert not plain.scope_reads_labels
    assert plain.scope_problem("team-a", None) is None
    assert "kube-system" in (plain.scope_problem("kube-system", None) or "")
    chosen = AgentConfig.model_validate(
        {"api": {"scope": {"exemptNamespaces": ["lab"], "namespaceSelector": {"matchLabels": {"dispatch": "on"}}}}}
    )
    assert chosen.scope_reads_labels
    assert "scope.exemptNamespaces" in (chosen.scope_problem("lab", {"dispatch": "on"}) or "")
    assert "scope.namespaceSelector" in (chosen.scope_problem("team-a", {}) or "")
    assert chosen.scope_problem("team-a", {"dispatch": "on"}) is None


def test_a_clear_dispatch_job_is_admitted_with_the_check_ready_and_a_is_not_written():
    d = go()
    assert d.action is Action.ADMIT
    assert (
        beyond_approval(d.trainjob_patch) is None
    )  # no JobSet yet: nothing to record, and A is not the gate's to write
    assert d.new_a == 1  # A 0 in the fresh TrainJob: the unsuspend raises it to 1
    assert d.new_a == admission_count(_unsuspended(opened()))  # what the write that admits it will write
    message = "the next execution starts with A 1, raised in the write that admits it"
    assert d.message == message
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
            "admissionChecks": [{"name": CHECK, "state": "Ready", "message": message, "lastTransitionTime": NOW}]
        },
    }


def test_the_message_names_a_raise_only_when_one_is_due():
    raised = _with_counts(opened(), a="4", floor="4")  # Open or Release raised A in their own write
    raised["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = "3"
    d = go(tj=raised)
    assert (d.action, d.new_a, d.message) == (Action.ADMIT, 4, "the next execution starts with A 4")
    raised["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = "4"  # A 4 has started once: raise
    d = go(tj=raised)
    assert (d.new_a, d.message) == (5, "the next execution starts with A 5, raised in the write that admits it")
    assert beyond_approval(d.trainjob_patch) is None


def _with_counts(tj: dict[str, Any], *, a: str | None, floor: str | None) -> dict[str, Any]:
    """``tj`` with A (in dispatch's runtime patch) and the floor set, or removed when None."""
    notes = tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
        "spec"
    ]["template"]["metadata"]["annotations"]
    for where, key, value in (
        (notes, ANNOTATION_ADMISSION, a),
        (tj["metadata"]["annotations"], ANNOTATION_ADMISSION_FLOOR, floor),
    ):
        if value is None:
            where.pop(key, None)
        else:
            where[key] = value
    return tj


def jobset(uid: str = "js-1", owner: str = "tj-uid", controller: bool = True) -> dict[str, Any]:
    """A JobSet as Trainer creates it: its controller ownerReference names its TrainJob by uid."""
    ref = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": "dj-01arz3ndektsv4rrffq69g5fav-s3",
    }
    return {"metadata": {"uid": uid, "ownerReferences": [{**ref, "uid": owner, "controller": controller}]}}


def test_the_jobset_uid_is_recorded_the_first_time_in_a_preconditioned_patch_that_leaves_a_alone():
    d = go(jobset=jobset())
    assert d.action is Action.ADMIT
    assert beyond_approval(d.trainjob_patch) == [
        *preconditions(opened()),
        {"op": "add", "path": "/metadata/annotations/dispatch.phpboyscout.uk~1jobset-uid", "value": "js-1"},
    ]
    after = apply_json_patch(opened(), d.trainjob_patch)
    assert after["metadata"]["annotations"][ANNOTATION_JOBSET_UID] == "js-1"
    assert (admission_count(after), admission_floor(after)) == (admission_count(opened()), admission_floor(opened()))
    recorded = opened()
    recorded["metadata"]["annotations"][ANNOTATION_JOBSET_UID] = "js-1"
    again = go(tj=recorded, jobset=jobset())
    assert (again.action, beyond_approval(again.trainjob_patch), again.new_a) == (Action.ADMIT, None, d.new_a)


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
    assert d.action is Action.ADMIT  # the admission goes ahead; only the record is left out
    assert beyond_approval(d.trainjob_patch) is None
    assert go(jobset=jobset()).trainjob_patch is not None  # the TrainJob's own JobSet would be recorded


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
    assert beyond_approval(d.trainjob_patch) is None


def test_active_unset_means_active():
    assert waiting_reason(workload(active=None), CHECK) is None


def test_other_owners_are_approved_at_once():
    d = go(
        workload(owner={"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}), tj=None
    )
    assert d.action is Action.APPROVE
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Ready"
    assert beyond_approval(d.trainjob_patch) is None


def test_non_dispatch_trainjobs_are_approved_at_once():
    other = {
        "metadata": {"name": "resnet", "uid": "tj-uid", "labels": {"dispatch.phpboyscout.uk/job-id": "x"}},
        "spec": {},
    }
    d = go(tj=other)
    assert d.action is Action.APPROVE
    assert beyond_approval(d.trainjob_patch) is None


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
    assert beyond_approval(d.trainjob_patch) is None
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


@pytest.mark.parametrize(
    ("a", "floor", "started", "says"),
    [
        (None, None, None, "neither the runtime patch annotation"),  # both gone: from nothing could repeat an R
        (None, None, "3", "neither the runtime patch annotation"),
        ("07", "7", None, "'07' is not a decimal count"),  # A not a count
        ("7", "x", None, "'x' is not a decimal count"),  # the floor not a count
        ("3", "3", "-1", "'-1' is not a decimal count"),  # the last start not a count
        (str(R_BOUND - 1), None, str(R_BOUND - 1), f"reaches the epoch bound {R_BOUND}"),
    ],
)
def test_a_trainjob_whose_next_execution_cannot_be_numbered_holds_with_the_reason(a, floor, started, says):
    tj = _with_counts(opened(queue="q"), a=a, floor=floor)
    if started is not None:
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = started
    d = go(tj=tj, jobset=jobset())
    assert d.action is Action.HOLD
    assert d.message.startswith("cannot number the next execution: ")
    assert says in d.message
    assert (beyond_approval(d.trainjob_patch), d.new_a) == (None, None)  # nothing recorded, no A promised
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Pending"
    assert unsuspend_problems(tj, _unsuspended(tj))  # one answer: the unsuspend would be refused too


def test_a_trainjob_without_dispatch_s_runtime_patch_entry_holds():
    tj = opened()
    tj["spec"]["runtimePatches"].pop(0)
    d = go(tj=tj)
    assert d.action is Action.HOLD
    assert "cannot number the next execution: spec.runtimePatches" in d.message


def test_foreign_objects_are_reported_and_do_not_stop_the_raise():
    tj = opened()
    tj["metadata"]["annotations"][ANNOTATION_JOBSET_UID] = "js-old"
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "3"
    tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
        "template"
    ]["metadata"]["annotations"][ANNOTATION_ADMISSION] = "3"
    d = go(
        tj=tj,
        jobset={"metadata": {"uid": "js-old"}},
        pods=[pod("a", "2"), pod("b", None), pod("init", None, job="dataset-initializer")],
    )
    assert (d.action, d.new_a, beyond_approval(d.trainjob_patch)) == (
        Action.ADMIT,
        3,
        None,
    )  # A 3 never started: no raise due
    assert d.foreign == (
        "Pod a has A 2, below the admission floor 3: A may have been reset.",
        "Pod b has no admission annotation dispatch.phpboyscout.uk/admission: it was not started through a gate.",
    )


# -- dispatch must have opened it, and no hold of dispatch's may be in force (issue 10) ----------


def test_a_job_dispatch_never_opened_is_held():
    d = go(tj=trainjob())  # plain mode, suspended, no opened mark: e.g. the queue label added by a stranger
    assert d.action is Action.HOLD
    assert beyond_approval(d.trainjob_patch) is None
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
    assert (d.action, beyond_approval(d.trainjob_patch)) == (Action.HOLD, None)
    assert "dispatch has not opened this TrainJob" in d.message
    assert unsuspend_problems(legacy, _unsuspended(legacy))  # the webhook refuses its unsuspend too
    legacy["metadata"]["annotations"][ANNOTATION_OPENED] = OPENED_TRUE  # what Open writes for it
    assert go(tj=legacy).action is Action.ADMIT
    plain = trainjob()
    plain["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "2"
    assert go(tj=plain).action is Action.HOLD  # plain mode always had the mark


def _unsuspended(tj: dict[str, Any]) -> dict[str, Any]:
    """The unsuspend of ``tj`` (Kueue's, in Kueue mode) as admission leaves it: the raise of A when one is due
    and the record of the start (contract/admission.py ``unsuspend_ops``, what the policy and webhook write)."""
    new = copy.deepcopy(tj)
    new["spec"]["suspend"] = False
    try:
        started = admission_started(tj)
    except ValueError:  # a malformed record: admission writes nothing, validation refuses
        return new
    return apply_json_patch(new, unsuspend_ops(new, started, kueue=is_kueue_mode(tj)))


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
    assert beyond_approval(d.trainjob_patch) is None


def test_foreign_pods_are_reported_and_not_waited_on():
    fake = ForeignPod("fake-0", "no Job controls it (JobSet's pods are each created by a Job)")
    d = go(foreign_pods=[fake])
    assert d.action is Action.ADMIT
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
    started = draw(st.one_of(st.none(), st.integers(0, 999_999).map(str), st.just("x")))
    if started is not None:
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = started
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
    js=st.sampled_from([None, jobset(), jobset("js-0", owner="earlier-tj-uid")]),
)
def test_never_ready_for_a_dispatch_job_that_cannot_be_numbered_nor_while_a_pod_may_run(case, blockers, js):
    wl, tj = case
    before = copy.deepcopy(tj)
    d = go(wl, tj=tj, jobset=js, blockers=blockers)
    ready = d.check_write is not None and d.check_write["status"]["admissionChecks"][0]["state"] == "Ready"
    if d.trainjob_patch is not None:
        # the gate's only TrainJob write records the JobSet UID, preconditioned; it never writes A or the floor
        assert d.trainjob_patch[:2] == preconditions(before)
        after = apply_json_patch(before, d.trainjob_patch)
        assert (admission_count(after), admission_floor(after)) == (admission_count(before), admission_floor(before))
        assert {k for k in after["metadata"]["annotations"]} - set(before["metadata"]["annotations"]) <= {
            ANNOTATION_JOBSET_UID,
            ANNOTATION_APPROVED_ADMISSION,
        }
    if ready and tj is not None and is_dispatch(tj):
        assert d.action is Action.ADMIT
        assert not blockers
        started = admission_started(before)
        assert (d.new_a, "raised" in d.message) == (start_count(before, started)[0], start_count(before, started)[1])
        # the A promised is the one the write that admits it writes: above the last start, not below the floor
        unsuspended = _unsuspended(before)
        assert admission_count(unsuspended) == admission_started(unsuspended) == d.new_a
        assert d.new_a > (started or 0)
        assert d.new_a >= (admission_floor(before) or 0)
        assert d.check_write["metadata"]["resourceVersion"] == wl["metadata"]["resourceVersion"]
        # never for a job dispatch did not open, nor while a hold of dispatch's is in force
        assert is_opened_by_dispatch(tj)
        # and never for one whose unsuspend the webhook would refuse on those grounds, nor on A's (one answer)
        assert not [
            p
            for p in unsuspend_problems(before, unsuspended)
            if "opened" in p.field
            or "admission-gated-by" in p.field
            or p.field == "metadata.annotations"
            or "admission" in p.field
        ]
        assert not any(k in (tj["metadata"].get("annotations") or {}) for k in HOLD_ANNOTATIONS)
        assert not any(k in (wl["metadata"].get("annotations") or {}) for k in HOLD_ANNOTATIONS)
    if ready:
        assert waiting_reason(wl, CHECK) is None
    if tj is not None and is_dispatch(tj):
        assert d.action is not Action.APPROVE
    assert tj == before  # decide never mutates what it read


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and (value == "0" or not value.startswith("0")) else None


st_count = st.one_of(st.none(), st.integers(0, 30).map(str), st.sampled_from(["07", "x", str(R_BOUND - 1)]))


@given(
    a=st_count,
    floor=st_count,
    started=st_count,
    js=st.sampled_from([None, jobset(), jobset("js-0", owner="earlier-tj-uid")]),
    recorded=st.booleans(),
)
def test_a_clear_job_is_admitted_without_writing_a_for_a_start_above_the_last_or_held(a, floor, started, js, recorded):
    """A dispatch job clear to start, whatever its counts: either admitted (Ready) for an execution the write
    that starts it numbers above the last start and not below the floor, the TrainJob written at most to record
    the JobSet UID; or held because no execution can be numbered, and then that unsuspend is refused too."""
    # Every start records an A its write raised to (or Open or Release did), and every raise sets the floor
    # too, which never falls: a start above the floor is not a state the API server lets arise.
    assume(not (_count(started) or 0) > (_count(floor) or 0))
    tj = _with_counts(opened(queue="q"), a=a, floor=floor)
    if started is not None:
        tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = started
    if recorded:
        tj["metadata"]["annotations"][ANNOTATION_JOBSET_UID] = "js-1"
    before = copy.deepcopy(tj)
    d = go(tj=tj, jobset=js)
    unsuspended = _unsuspended(before)
    if recorded and js is not None and js["metadata"]["uid"] != "js-1":
        # Not the JobSet whose UID was recorded: its J started again, and the gate holds until a person decides.
        assert (d.action, d.trainjob_patch, d.new_a) == (Action.HOLD, None, None)
        assert d.message.startswith("JobSet UID js-0 is not the recorded js-1")
        return
    if d.action is Action.HOLD:
        assert d.message.startswith("cannot number the next execution: ")
        assert (beyond_approval(d.trainjob_patch), d.new_a) == (None, None)
        assert unsuspend_problems(before, unsuspended)
        return
    assert d.action is Action.ADMIT
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Ready"
    if js is not None and js["metadata"]["uid"] == "js-1" and not recorded:
        assert beyond_approval(d.trainjob_patch) == [
            *preconditions(before),
            {"op": "add", "path": "/metadata/annotations/dispatch.phpboyscout.uk~1jobset-uid", "value": "js-1"},
        ]
    else:
        assert beyond_approval(d.trainjob_patch) is None
    assert admission_count(unsuspended) == admission_started(unsuspended) == d.new_a
    assert d.new_a > int(started or 0)
    assert d.new_a >= int(floor or 0)
    assert d.message.endswith("raised in the write that admits it") == (admission_count(before) != d.new_a)
    assert unsuspend_problems(before, unsuspended) == []  # the start it approves is one the API server accepts
    assert tj == before
