from __future__ import annotations

import copy

import pytest

from agent.domain.decide import blockers_of
from agent.domain.node_loss import assess
from agent.domain.status import copy_of, on_worker, orphans, phase, status
from contract.admission import raise_admission
from contract.identity import Execution
from contract.keys import ANNOTATION_ADMISSION, ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_OPENED
from harness.fixtures import JOB_ID, runtime_copy, trainjob
from tests.agent.domain.test_gate import CHECK, workload
from tests.harness.kubelet import apply_json_patch

NODES = {
    "n1": {"metadata": {"name": "n1"}, "spec": {}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
}


def pod(name, a, j, *, phase_="Running", job="node", node="n1"):
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {"jobset.sigs.k8s.io/replicatedjob-name": job, "jobset.sigs.k8s.io/restart-attempt": str(j)},
            "annotations": {ANNOTATION_ADMISSION: str(a)},
        },
        "spec": {"nodeName": node, "containers": [{"name": "node"}]},
        "status": {"phase": phase_},
    }


def opened_running():
    tj = trainjob()
    tj = apply_json_patch(tj, raise_admission(tj).patch)
    tj = apply_json_patch(tj, raise_admission(tj).patch)  # A = 2
    del tj["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY]
    tj["spec"]["suspend"] = False
    return tj


def test_status_of_a_running_job_reads_the_executions_off_the_pods():
    tj = opened_running()
    tj["metadata"]["uid"] = "tj-uid"
    jobset = {
        "metadata": {"name": "js", "uid": "js-uid", "ownerReferences": [{"uid": "tj-uid"}]},
        "status": {"restarts": 1},
    }
    pods = [
        pod("p0", 2, 1),
        pod("p1", 2, 1),
        pod("old", 1, 0, phase_="Failed"),
        pod("init", 0, 1, job="dataset-initializer"),
    ]
    copy_ = runtime_copy()
    copy_["metadata"]["ownerReferences"] = [{"uid": "tj-uid"}]
    s = status(
        trainjob=tj,
        workload=workload(state="Ready"),
        jobset=jobset,
        pods=pods,
        nodes=NODES,
        runtime_copy=copy_,
        checks=[CHECK],
    )
    assert (s.phase, s.mode, s.gate, s.a, s.floor, s.j, s.r) == ("Running", "kueue", "open", 2, 2, 1, 3)
    assert s.check_state == "Ready"
    first, current = s.executions
    assert (first.a, first.j, first.r, first.pods) == (1, 0, 1, ("old",))
    expected = Execution(job_id=JOB_ID, g=1, n=3, attempt=2, a=2, j=1)
    assert (current.r, current.epoch, current.attempt, current.pods) == (
        3,
        expected.epoch,
        expected.token,
        ("p0", "p1"),
    )
    assert current.epoch == 1_000_003_000_003
    assert [p.name for p in s.pods if p.may_still_run] == ["p0", "p1", "init"]
    assert not s.ceased
    assert s.foreign == ()
    assert s.orphans == ()


def test_ceased_when_every_pod_ended():
    tj = opened_running()
    tj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    s = status(
        trainjob=tj,
        workload=None,
        jobset=None,
        pods=[pod("p0", 2, 0, phase_="Succeeded")],
        nodes=NODES,
        runtime_copy=None,
        checks=[CHECK],
    )
    assert s.ceased
    assert s.j is None
    assert s.r is None
    assert s.pods[0].verdict == "Ended"
    assert "the current execution (A=2) creates no more, and none can start: it ended (Complete)" in s.ceased_reason


def _ceased(tj, pods=(), wl=None, jobset=None, nodes=NODES):
    s = status(trainjob=tj, workload=wl, jobset=jobset, pods=list(pods), nodes=nodes, runtime_copy=None, checks=[CHECK])
    return s.ceased, s.ceased_reason


def jobset_(*conditions: str, deleting: bool = False):
    """The TrainJob's JobSet, with these of its conditions True."""
    js = {
        "metadata": {"name": "js", "uid": "js-uid", "ownerReferences": [{"uid": "tj-uid", "controller": True}]},
        "status": {"conditions": [{"type": c, "status": "True"} for c in conditions]},
    }
    if deleting:
        js["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return js


def terminating(p):
    p = copy.deepcopy(p)
    p["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return p


T0 = "2026-12-01T00:00:00Z"
LOST = {
    "n1": {
        "metadata": {"name": "n1"},
        "spec": {"taints": [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": T0}]},
        "status": {"conditions": [{"type": "Ready", "status": "Unknown", "lastHeartbeatTime": T0}]},
    }
}
FENCED = copy.deepcopy(LOST)
FENCED["n1"]["spec"]["taints"].append(
    {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute", "timeAdded": T0}
)


def _ended(kind: str):
    tj = opened_running()
    tj["status"] = {"conditions": [{"type": kind, "status": "True", "reason": "DeadlineExceeded"}]}
    return tj


def _held_kueue():
    tj = opened_running()
    tj["spec"]["suspend"] = True
    return tj


def _held_plain():
    tj = opened_running()
    tj["metadata"]["labels"].pop("kueue.x-k8s.io/queue-name")
    tj["metadata"]["annotations"][ANNOTATION_OPENED] = "true"
    tj["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-who"] = "alice"
    tj["spec"]["suspend"] = True
    return tj


def _stopped():
    tj = opened_running()
    tj["metadata"]["deletionTimestamp"] = T0
    return tj


RUNNING = pod("p0", 2, 0)
INACTIVE = workload(active=False)

# Each way a job ends: (TrainJob, Workload, JobSet, pods, nodes) once its processes are certainly gone, and the
# same a moment earlier, while they may not be. A trainer pod gone from the API has ended: it carried dispatch's
# finalizer, which the agent removes only once its processes are proven gone.
ENDS = {
    "finished, its pods listed Succeeded": (
        (_ended("Complete"), None, jobset_("Completed"), [pod("p0", 2, 0, phase_="Succeeded")], NODES),
        (_ended("Complete"), None, jobset_(), [RUNNING], NODES),
    ),
    "finished, its pods gone": (
        (_ended("Complete"), None, None, [], NODES),
        (_ended("Complete"), None, None, [terminating(RUNNING)], NODES),
    ),
    "failed, its pods gone": (
        (_ended("Failed"), None, jobset_("Failed"), [], NODES),
        (_ended("Failed"), None, jobset_("Failed"), [terminating(RUNNING)], NODES),
    ),
    "held (Kueue), its pods gone": (
        (_held_kueue(), INACTIVE, jobset_("Suspended"), [], NODES),
        (_held_kueue(), INACTIVE, jobset_(), [], NODES),  # JobSet not at rest yet: a Job may still create pods
    ),
    "held (Kueue), the TrainJob not suspended yet": (
        (_held_kueue(), INACTIVE, jobset_("Suspended"), [], NODES),
        (opened_running(), INACTIVE, jobset_(), [], NODES),
    ),
    "held (plain), its pods gone": (
        (_held_plain(), None, jobset_("Suspended"), [], NODES),
        (_held_plain(), None, jobset_("Suspended"), [terminating(RUNNING)], NODES),
    ),
    "stopped (being deleted), its JobSet being deleted": (
        (_stopped(), None, jobset_(deleting=True), [], NODES),
        (_stopped(), None, jobset_(deleting=True), [terminating(RUNNING)], NODES),
    ),
    "stopped (being deleted), its JobSet gone": (
        (_stopped(), None, None, [], NODES),
        (_stopped(), None, jobset_(), [], NODES),  # the garbage collector has not reached the JobSet yet
    ),
    "deadline: Failed, the JobSet deleted by Trainer": (
        (_ended("Failed"), None, None, [], NODES),
        (_ended("Failed"), None, None, [terminating(RUNNING)], NODES),
    ),
    "node lost, then fenced (out-of-service)": (
        (_held_kueue(), INACTIVE, jobset_("Suspended"), [terminating(RUNNING)], FENCED),
        (_held_kueue(), INACTIVE, jobset_("Suspended"), [terminating(RUNNING)], LOST),
    ),
    "node lost, fenced, and its pods released": (
        (_ended("Failed"), None, None, [], NODES),
        (_ended("Failed"), None, None, [terminating(RUNNING)], LOST),
    ),
}


@pytest.mark.parametrize("end", list(ENDS))
def test_ceased_in_each_way_a_job_ends(end):
    (tj, wl, js, pods, nodes), (tj_before, wl_before, js_before, pods_before, nodes_before) = ENDS[end]
    ceased, why = _ceased(tj, pods, wl, js, nodes)
    assert ceased, why
    assert _ceased(tj_before, pods_before, wl_before, js_before, nodes_before)[0] is False


@pytest.mark.parametrize("end", list(ENDS))
def test_ceased_rests_on_the_gates_evidence(end):
    """Ceased is false on a pod that may still run exactly when the gate would wait on it: the same blockers."""
    for tj, wl, js, pods, nodes in ENDS[end]:
        waiting = blockers_of(assess(pods, nodes))
        ceased, why = _ceased(tj, pods, wl, js, nodes)
        assert why.startswith(f"{len(waiting)} pod(s) may still run: ") == bool(waiting), why
        if waiting:
            assert not ceased
            assert all(b.pod in why for b in waiting)


def test_no_pods_is_evidence_only_where_none_can_appear():
    running = opened_running()
    assert _ceased(running, [pod("p0", 2, 0, phase_="Succeeded")])[0] is False  # not ended: JobSet may go on
    queued = copy.deepcopy(running)
    queued["spec"]["suspend"] = True
    assert _ceased(queued, wl=workload(reserved=False)) == (
        False,
        "a new execution may start without a dispatch call (it is queued, admitted or running)",
    )
    assert _ceased(queued, wl=workload())[0] is False  # Admitting
    held = _ceased(queued, wl=INACTIVE, jobset=jobset_())
    assert held == (
        False,
        "the current execution (A=2) may still create pods: its JobSet is not at rest yet (none of Completed, "
        "Failed, Suspended): a Job of it may still create pods",
    )
    assert _ceased(queued, wl=INACTIVE, jobset=jobset_("Suspended"))[0] is True
    assert _ceased(queued, wl=INACTIVE)[0] is True  # no JobSet: Trainer makes a suspended TrainJob's suspended
    unsuspended = copy.deepcopy(running)
    assert _ceased(unsuspended, wl=INACTIVE, jobset=jobset_("Suspended")) == (
        False,
        "the current execution (A=2) may still create pods: the TrainJob is not suspended yet: its JobSet may "
        "still create pods",
    )


def test_a_trainjob_whose_pods_carry_no_finalizer_needs_its_current_pods_seen_to_end():
    """Created before dispatch's pod finalizer existed: a pod gone from the API is no evidence there."""
    old = _held_kueue()
    entry = old["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    del entry["template"]["spec"]["template"]["metadata"]["finalizers"]
    ceased, why = _ceased(old, wl=INACTIVE, jobset=jobset_("Suspended"))
    assert ceased is False
    assert "no pod of the current execution (A=2) is listed" in why
    assert _ceased(old, [pod("p0", 2, 0, phase_="Failed")], INACTIVE, jobset_("Suspended"))[0] is True
    assert _ceased(old, [pod("old", 1, 0, phase_="Failed")], INACTIVE, jobset_("Suspended"))[0] is False


def test_a_job_never_opened_has_ceased_unless_a_pod_may_run():
    gated = trainjob()
    assert _ceased(gated, wl=workload(reserved=False)) == (
        True,
        "no execution was ever admitted and none can start: it was never opened",
    )
    assert _ceased(gated, [pod("leak", 0, 0)])[0] is False
    plain = trainjob(queue=None)
    assert _ceased(plain)[0] is True
    plain["metadata"]["annotations"][ANNOTATION_OPENED] = "true"
    plain = apply_json_patch(plain, raise_admission(plain).patch)
    plain["spec"]["suspend"] = False
    assert _ceased(plain)[0] is False  # just unsuspended: its pods do not exist yet
    plain["spec"]["suspend"] = True
    assert _ceased(plain)[0] is False  # suspended by someone else: they may unsuspend it
    plain["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-who"] = "alice"
    assert _ceased(plain, jobset=jobset_())[0] is False  # held, its JobSet not suspended yet
    assert _ceased(plain, jobset=jobset_("Suspended"))[0] is True  # held, its pods gone: they ended
    assert _ceased(plain, [pod("p", 1, 0, phase_="Succeeded")], jobset=jobset_("Suspended"))[0] is True


def test_hold_until_is_reported_not_acted_on():
    import datetime as dt

    plain = trainjob(queue=None)
    plain["metadata"]["annotations"].update(
        {"dispatch.phpboyscout.uk/hold-who": "alice", "dispatch.phpboyscout.uk/hold-until": "2026-01-01T00:00:00Z"}
    )

    def hold(now):
        return status(
            trainjob=plain, workload=None, jobset=None, pods=[], nodes={}, runtime_copy=None, checks=[], now=now
        ).hold

    assert hold(dt.datetime(2026, 1, 1, tzinfo=dt.UTC)).expired is True
    before = hold(dt.datetime(2025, 12, 31, 23, 59, tzinfo=dt.UTC))
    assert (before.who, before.until, before.expired) == ("alice", "2026-01-01T00:00:00Z", False)
    assert hold(None).expired is False
    del plain["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-who"]
    del plain["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-until"]
    assert hold(None) is None


def test_held_by_reads_other_parties_gates_on_the_workload_too():
    tj = opened_running()
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] = "example.com/a"
    wl = workload(active=False)
    wl["metadata"].setdefault("annotations", {})[ANNOTATION_ADMISSION_GATED_BY] = (
        "dispatch.phpboyscout.uk/gate,example.com/b,example.com/a"
    )
    s = status(trainjob=tj, workload=wl, jobset=None, pods=[], nodes={}, runtime_copy=None, checks=[CHECK])
    assert s.held_by == ("example.com/a", "example.com/b")


def test_phases():
    gated = trainjob()
    assert phase(gated, workload(), [CHECK]) == "Gated"
    tj = opened_running()
    tj["spec"]["suspend"] = True
    assert phase(tj, workload(), [CHECK]) == "Admitting"
    assert phase(tj, workload(reserved=False), [CHECK]) == "Queued"
    assert phase(tj, workload(active=False), [CHECK]) == "Held"
    plain = trainjob(queue=None)
    assert phase(plain, None, []) == "Gated"
    plain["metadata"]["annotations"][ANNOTATION_OPENED] = "true"
    assert phase(plain, None, []) == "Suspended"
    plain["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-who"] = "alice"
    assert phase(plain, None, []) == "Held"
    plain["spec"]["suspend"] = False
    assert phase(plain, None, []) == "Running"
    done = copy.deepcopy(plain)
    done["status"] = {"conditions": [{"type": "Failed", "status": "True"}]}
    assert phase(done, None, []) == "Failed"


def test_an_unreadable_identity_still_reports_a_and_j():
    tj = opened_running()
    tj["spec"]["trainer"]["env"] = []
    s = status(
        trainjob=tj, workload=None, jobset=None, pods=[pod("p", 0, 0)], nodes=NODES, runtime_copy=None, checks=[]
    )
    assert (s.executions[0].a, s.executions[0].epoch) == (0, None)


def test_orphans_are_named_as_the_spec_writes_them():
    jobset = {"metadata": {"name": "dj-x", "ownerReferences": [{"uid": "gone"}]}}
    found = orphans(
        None, namespace="ns", jobset=jobset, pods=[pod("p0", 1, 0)], runtime_copy={"metadata": {"name": "dj-x"}}
    )
    assert found == ("ns/jobset/dj-x", "ns/pod/p0", "ns/trainingruntime/dj-x")
    assert orphans(None, namespace="ns", pods=[pod("p0", 1, 0)]) == ("ns/pod/p0",)


# -- Kueue mode: the hold is read from the TrainJob, its record ----------------------------------------------


def _kueue_status(tj, wl):
    return status(trainjob=tj, workload=wl, jobset=None, pods=[], nodes={}, runtime_copy=None, checks=[CHECK])


def test_a_kueue_hold_is_reported_from_the_trainjob_and_an_older_agents_from_the_workload():
    tj = opened_running()
    tj["spec"]["suspend"] = True
    tj["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-who"] = "alice"
    wl = workload()  # active: a Hold interrupted before its Workload write, or a Release before its TrainJob's
    s = _kueue_status(tj, wl)
    assert (s.phase, s.hold.who) == ("Held", "alice")
    wl["metadata"]["annotations"] = {"dispatch.phpboyscout.uk/hold-who": "bob"}
    assert _kueue_status(tj, wl).hold.who == "alice"  # the TrainJob is the record
    del tj["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-who"]
    wl["spec"]["active"] = False
    s = _kueue_status(tj, wl)
    assert (s.phase, s.hold.who) == ("Held", "bob")  # a hold an older agent wrote on the Workload only
    wl["spec"]["active"] = True
    del wl["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-who"]
    s = _kueue_status(tj, wl)
    assert (s.phase, s.hold) == ("Admitting", None)


def test_a_suspended_kueue_job_held_on_its_trainjob_alone_cannot_restart():
    tj = opened_running()
    tj["spec"]["suspend"] = True
    ended = pod("p", 2, 0, phase_="Failed")
    assert _ceased(tj, [ended], wl=workload())[0] is False  # Kueue may admit it again at any time
    tj["metadata"]["annotations"]["dispatch.phpboyscout.uk/hold-who"] = "alice"
    assert _ceased(tj, [ended], wl=workload()) == (
        True,
        "none of its pods can run any more (a trainer pod gone from the API has ended), the current execution (A=2) "
        "creates no more, and none can start: it is held (suspended, with dispatch's hold annotations)",
    )
    tj["spec"]["suspend"] = False  # a Hold not finished on a running job: its JobSet may still start pods
    assert _ceased(tj, [ended], wl=workload())[0] is False


def test_a_job_multikueue_runs_is_never_ceased_on_the_manager_once_a_dispatch_was_admitted():
    """Its pods are on a worker: the manager's empty pod list proves nothing, whatever ended or is held here."""
    for tj, wl, js, pods, nodes in (ends[0] for ends in ENDS.values()):
        assert _ceased(tj, pods, wl, js, nodes)[0] is True
        managed = copy.deepcopy(tj)
        managed["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
        ceased, why = _ceased(managed, pods, wl, js, nodes)
        assert ceased is False
        assert "runs through MultiKueue" in why or "may still run" in why, why
    # Never dispatched: no copy was ever made (the manager's gate raises A before its first Ready).
    gated = trainjob()
    gated["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    assert _ceased(gated, wl=workload(reserved=False))[0] is True


def _manager_and_copy(copy_a: int = 2):
    """A manager's TrainJob MultiKueue runs (A = 2, its Workload named wl-1) and the copy on its worker."""
    tj = opened_running()
    tj["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    wl = workload(state="Ready")
    wl["metadata"]["name"] = "wl-1"
    wl.setdefault("status", {})["clusterName"] = "worker-1"
    remote = trainjob()
    for _ in range(copy_a):
        remote = apply_json_patch(remote, raise_admission(remote).patch)
    remote["metadata"]["uid"] = "copy-uid"
    remote["metadata"]["labels"] = {"kueue.x-k8s.io/multikueue-origin": "manager",
                                    "kueue.x-k8s.io/prebuilt-workload-name": "wl-1"}  # fmt: skip
    return tj, wl, remote


def test_a_manager_s_status_shows_the_pods_of_the_copy_on_the_worker_that_runs_it():
    tj, wl, remote = _manager_and_copy()
    assert copy_of(wl, remote)
    s = status(trainjob=tj, workload=wl, jobset=None, pods=[], nodes={}, runtime_copy=None, checks=[CHECK])
    assert (s.j, s.r, s.pods, s.ceased) == (None, None, (), False)
    jobset = {"metadata": {"name": "js", "uid": "js-uid"}, "status": {"restarts": 1}}
    there = on_worker(s, "worker-1", copy=remote, jobset=jobset, pods=[pod("p0", 2, 1), pod("old", 2, 0, phase_="Failed")],
                      foreign=["stray: its Job x belongs to JobSet y"], nodes=NODES)  # fmt: skip
    assert (there.cluster, there.cluster_reason) == ("worker-1", "")
    assert (there.a, there.floor, there.j, there.r) == (2, 2, 1, 3)
    assert [(e.a, e.j, e.r, e.pods) for e in there.executions] == [(2, 0, 2, ("old",)), (2, 1, 3, ("p0",))]
    assert [(p.name, p.may_still_run) for p in there.pods] == [("p0", True), ("old", False)]
    assert there.foreign == ("on worker worker-1: stray: its Job x belongs to JobSet y",)
    assert not there.ceased, "Ceased needs every worker, never the one that runs the job"


def test_a_copy_of_an_earlier_dispatch_reports_its_executions_but_not_the_current_j_or_r():
    tj, wl, remote = _manager_and_copy(copy_a=1)
    s = status(trainjob=tj, workload=wl, jobset=None, pods=[], nodes={}, runtime_copy=None, checks=[CHECK])
    there = on_worker(s, "worker-1", copy=remote, jobset={"status": {"restarts": 0}}, pods=[pod("p0", 1, 0)],
                      foreign=[], nodes=NODES)  # fmt: skip
    assert (there.a, there.j, there.r) == (2, None, None)
    assert [(e.a, e.j, e.r) for e in there.executions] == [(1, 0, 1)]


def test_only_multikueue_s_copy_of_this_job_is_its_copy():
    _, wl, remote = _manager_and_copy()
    assert copy_of(wl, remote)
    other = copy.deepcopy(remote)
    other["metadata"]["labels"]["kueue.x-k8s.io/prebuilt-workload-name"] = "wl-2"
    assert not copy_of(wl, other), "the copy of another dispatch's Workload"
    del remote["metadata"]["labels"]["kueue.x-k8s.io/multikueue-origin"]
    assert not copy_of(wl, remote), "a TrainJob of the name that MultiKueue did not make"
    annotated = copy.deepcopy(other)
    annotated["metadata"]["labels"].pop("kueue.x-k8s.io/prebuilt-workload-name")
    annotated["metadata"]["annotations"]["kueue.x-k8s.io/prebuilt-workload-name"] = "wl-1"
    assert copy_of(wl, annotated), "Kueue's WorkloadIdentifierAnnotations names it by an annotation"
    assert not copy_of(None, other)
    assert not copy_of(wl, None)
