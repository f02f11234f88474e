from __future__ import annotations

import copy

from agent.status import orphans, phase, status
from contract.admission import raise_admission
from contract.identity import Execution
from contract.keys import ANNOTATION_ADMISSION, ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_OPENED
from tests.unit.fixtures import JOB_ID, runtime_copy, trainjob
from tests.unit.kubelet import apply_json_patch
from tests.unit.test_gate import CHECK, workload

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
