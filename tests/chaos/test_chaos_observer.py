"""The campaign's own watch (chaos/observer.py): what it records of a Workload and a pod, as the API returns them,
and that it records changes of what the checker reads, not every event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos import checker
from chaos.observer import Stream, pod_state, probe_sent, workload_state
from harness.kube_http import Credentials, KubeHttp

WORKLOAD: dict[str, Any] = {
    "apiVersion": "kueue.x-k8s.io/v1beta2",
    "kind": "Workload",
    "metadata": {
        "name": "trainjob-dj-x-s1-1a2b3",
        "namespace": "chaos-dispatch",
        "uid": "wl-1",
        "resourceVersion": "10",
        "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "dj-x-s1"}],
        "managedFields": [
            {
                "manager": "kueue-admission",
                "operation": "Apply",
                "subresource": "status",
                "fieldsV1": {"f:status": {"f:admission": {}, "f:conditions": {'k:{"type":"Admitted"}': {}}}},
            },
            {
                "manager": "dispatch.phpboyscout.uk/adapter",
                "operation": "Update",
                "subresource": "status",
                "fieldsV1": {"f:status": {"f:admissionChecks": {}}},
            },
        ],
    },
    "status": {
        "admission": {"clusterQueue": "chaos-a"},
        "conditions": [
            {"type": "QuotaReserved", "status": "True"},
            {"type": "Admitted", "status": "True"},
            {"type": "PodsReady", "status": "False"},
        ],
    },
}
POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "dj-x-s1-node-0-0-abcde",
        "namespace": "chaos-dispatch",
        "uid": "pod-1",
        "labels": {"jobset.sigs.k8s.io/jobset-name": "dj-x-s1"},
    },
    "spec": {"nodeName": "chaos-worker-1"},
    "status": {"phase": "Running"},
}


def test_a_workload_is_its_trainjob_its_quota_and_its_admission_conditions():
    assert workload_state(WORKLOAD) == {
        "kind": "workload",
        "namespace": "chaos-dispatch",
        "name": "trainjob-dj-x-s1-1a2b3",
        "uid": "wl-1",
        "job": "dj-x-s1",
        "admission": True,
        "conditions": {"Admitted": "True", "QuotaReserved": "True"},
        "admitted_by": ["kueue-admission"],
    }
    evicted = {**WORKLOAD, "status": {"conditions": [{"type": "Evicted", "status": "True"}]}}
    assert workload_state(evicted)["admission"] is False
    assert workload_state(evicted)["conditions"] == {"Evicted": "True"}


def test_a_pod_is_its_jobset_its_phase_its_node_and_its_deletion():
    assert pod_state(POD) == {
        "kind": "pod",
        "namespace": "chaos-dispatch",
        "name": "dj-x-s1-node-0-0-abcde",
        "uid": "pod-1",
        "job": "dj-x-s1",
        "phase": "Running",
        "node": "chaos-worker-1",
        "deleting": False,
    }
    deleting = {**POD, "metadata": {**POD["metadata"], "deletionTimestamp": "2026-12-05T00:00:00Z"}}
    assert pod_state(deleting)["deleting"] is True


def test_a_probe_is_the_time_its_write_was_sent():
    assert probe_sent({"data": {"sent": "1764662400.25"}}) == 1764662400.25
    assert probe_sent({"data": {}}) is None


def test_only_changes_of_what_the_checker_reads_are_recorded_and_the_checker_reads_them():
    records: list[dict[str, Any]] = []
    admin = KubeHttp(Credentials("https://127.0.0.1:1", ca_file=Path("/nonexistent")))
    stream = Stream(admin, "kueue.x-k8s.io/v1beta2", "Workload", "chaos-dispatch", workload_state,
                    lambda **fields: records.append(fields))  # fmt: skip
    queued = {**WORKLOAD, "status": {"conditions": [{"type": "QuotaReserved", "status": "False"}]}}
    stream._note(queued, "ADDED", 100.0, None)
    stream._note({**queued, "metadata": {**queued["metadata"], "resourceVersion": "11"}}, "MODIFIED", 100.5, None)
    stream._note(WORKLOAD, "LISTED", 101.0, 99.0)  # found by a list after a broken watch
    stream._note(WORKLOAD, "DELETED", 102.0, None)
    assert [(r["event"], r["t"], r.get("since")) for r in records] == [
        ("ADDED", 100.0, None),
        ("LISTED", 101.0, 99.0),
        ("DELETED", 102.0, None),
    ]
    observed = checker.observe(records, delay=0.5)
    ((seen,),) = observed.admissions.values()
    assert (seen.lo, seen.hi) == (98.5, 101.0)


def _owned_by(*managers: str) -> dict[str, Any]:
    owned = {"f:status": {"f:conditions": {'k:{"type":"Admitted"}': {}}}}
    entries = [{"manager": m, "operation": "Update", "subresource": "status", "fieldsV1": owned} for m in managers]
    return {**WORKLOAD, "metadata": {**WORKLOAD["metadata"], "managedFields": entries}}


def test_an_admitted_condition_another_manager_wrote_is_not_taken_as_an_admission():
    """The checker's excuses rest on Kueue's admissions only: Admitted written under dispatch's manager (a
    product that forged it) or beside Kueue's by anyone else is not an admission; Kueue's alone is."""
    for managers, taken in ((("kueue-admission",), 1), (("dispatch.phpboyscout.uk/adapter",), 0),
                            (("kueue-admission", "kubectl-edit"), 0), ((), 0)):  # fmt: skip
        record = {**workload_state(_owned_by(*managers)), "t": 100.0, "event": "MODIFIED"}
        observed = checker.observe([record], delay=0.5)
        assert sum(len(v) for v in observed.admissions.values()) == taken, managers
