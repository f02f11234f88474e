"""MultiKueue mode on the manager is decided by the TrainJob's ``spec.managedBy``, never by the agent's cache of the
AdmissionChecks (docs/multicluster.md, "Numbering each dispatch"), against the real MultiKueue of
harness.multicluster, with the manager of test_numbering (dispatch's agent on the manager, no agent on the workers).

The MultiKueue AdmissionCheck is deleted and made again on the manager while the job's Workload holds quota, its
dispatch held by the gate: the agent's watch cache misses the check for a while, and Kueue may drop it from the
Workload's list. The gate must not take the one-cluster path meanwhile (no look at the workers, no raise of A by K,
the previous dispatch's stamp left on the Workload): it holds, saying it cannot identify the MultiKueue check.
Once the check is back the job is dispatched with A raised by K and a fresh stamp; on the workers no two executions
share an identity and R only rises."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.domain.operations import plan_release
from contract.keys import (
    ANNOTATION_DISPATCHED,
    ANNOTATION_DISPATCHED_SPENT,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
)
from contract.objects import annotations
from harness.jobs import write_as_the_api
from harness.multicluster import ADMISSION_CHECK, KUEUE_V, MULTIKUEUE_CONFIG, MULTIKUEUE_CONTROLLER
from tests.agent.gate import kit
from tests.agent.gate.kit import TRAINER_V, eventually
from tests.agent.multicluster import test_numbering as numbering
from tests.agent.multicluster.test_numbering import (
    MAX_RESTARTS,
    K,
    Manager,
    _copy,
    _dispatched,
    _linger,
    _running,
    _trainer_pod,
    _true,
)
from tests.agent.multicluster.test_numbering import _hold_through_the_api as hold_through_the_api

pytestmark = [pytest.mark.e2e, pytest.mark.multicluster]

manager = numbering.manager
"""test_numbering's fixture: the manager's agent, a ClusterQueue of the test's own with both checks."""

ONE_CLUSTER_NEVER = "never approved on the one-cluster path"
NUDGE = "test.dispatch.phpboyscout.uk/nudge"


def _check_body() -> dict[str, Any]:
    """The MultiKueue AdmissionCheck as harness.multicluster installs it."""
    params = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": MULTIKUEUE_CONFIG}
    return {"apiVersion": KUEUE_V, "kind": "AdmissionCheck", "metadata": {"name": ADMISSION_CHECK},
            "spec": {"controllerName": MULTIKUEUE_CONTROLLER, "parameters": params}}  # fmt: skip


def _delete_check(m: Manager) -> None:
    """Deletes the MultiKueue AdmissionCheck outright: Kueue keeps its in-use finalizer while a ClusterQueue lists
    it, so the test removes that too (as a person deleting and making it again would have to)."""
    m.admin.delete(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK)

    def gone() -> bool:
        found = m.admin.get_or_none(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK)
        if found is not None and found["metadata"].get("finalizers"):
            m.admin.merge_patch(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK, {"metadata": {"finalizers": None}})
        return _true(m.admin.get_or_none(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK) is None)

    eventually(gone, 60, f"AdmissionCheck {ADMISSION_CHECK} deleted")


def _active_check(m: Manager) -> object:
    return _true(kit.condition_true(m.admin.get(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK), "Active"))


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches
def test_a_multikueue_check_deleted_and_made_again_never_lets_the_gate_take_the_one_cluster_path(
    manager: Manager, tmp_path: Path
) -> None:
    m = manager
    ns = m.namespace
    trainjobs = kit.Recorder(m.admin, m.admin.collection_path(TRAINER_V, "TrainJob", ns))
    pods: list[kit.Recorder] = []
    lingering: tuple[Any, str] | None = None
    deleted = False
    try:
        tj, ran_on, _, pod = _running(m)  # dispatched with A = K, its trainer pod Running on ran_on
        uid, name = tj["metadata"]["uid"], tj["metadata"]["name"]
        pods = [kit.Recorder(w.admin, w.admin.collection_path("v1", "Pod", ns), label_selector=f"{LABEL_JOBSET_NAME}={name}")
                for w in m.mc.workers]  # fmt: skip
        there = m.mc.worker(ran_on)
        stamp = annotations(kit.workload_of(m.admin, ns, uid))
        assert (stamp.get(ANNOTATION_DISPATCHED), stamp.get(ANNOTATION_DISPATCHED_SPENT)) == (str(K), str(K)), stamp

        # A second dispatch is due and held, its Workload holding quota: Hold stops the copy (its pod lingers),
        # Release readmits the job, and the gate waits for the pod on its worker.
        _linger(there, ns, pod, keep=True)
        lingering = (there, pod)
        assert hold_through_the_api(m, tj, tmp_path).startswith("held: evicted through MultiKueue")
        eventually(lambda: _true(kit.workload_of(m.admin, ns, uid)["spec"].get("active") is False), 180,
                   "the held Workload deactivated by the gate once its copy stopped")  # fmt: skip
        eventually(lambda: _true(_copy(there, tj) is None), 60, "the worker's copy deleted")
        write_as_the_api(m.admin, tj, lambda t, w: plan_release(t, w).writes)

        def held(*present: str) -> dict[str, Any]:
            wl = kit.workload_of(m.admin, ns, uid)
            assert kit.condition_true(wl, "QuotaReserved"), wl["status"].get("conditions")
            entry = kit.check_entry(wl, m.check)
            assert entry["state"] == "Pending", entry
            for text in present:
                assert text in entry["message"], entry
            return entry

        eventually(lambda: held(f"{pod} on worker {ran_on}: "), 120, f"the gate holding for {pod} on {ran_on}")
        # The hold removed the previous dispatch's stamp; the record of the highest A stamped stays.
        eventually(lambda: _true(ANNOTATION_DISPATCHED not in annotations(kit.workload_of(m.admin, ns, uid))), 60,
                   "the stamp of the previous dispatch removed by the hold")  # fmt: skip
        assert annotations(kit.workload_of(m.admin, ns, uid)).get(ANNOTATION_DISPATCHED_SPENT) == str(K)

        # The MultiKueue check is deleted while the Workload holds quota, and the pod the gate waited for ends.
        assert m.admin.get(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK)["spec"] == _check_body()["spec"]
        deleted = True
        _delete_check(m)
        _linger(there, ns, pod, keep=False)
        lingering = None

        def settled() -> dict[str, Any]:
            """The gate's answer once the pod ended with the check missing: Ready would be the one-cluster path."""
            entry = kit.check_entry(kit.workload_of(m.admin, ns, uid), m.check)
            assert entry["state"] == "Ready" or ONE_CLUSTER_NEVER in entry["message"], entry
            return dict(entry)

        window = eventually(settled, 120, "the gate's answer with the MultiKueue check missing")

        # The check is made again: MultiKueue acts on the job once more.
        m.admin.create(_check_body())
        deleted = False
        eventually(lambda: _active_check(m), 120, f"AdmissionCheck {ADMISSION_CHECK} Active again")
        # MultiKueue looks at a Workload again only on a change of it (a new AdmissionCheck does not enqueue it): any
        # later write does, as Kueue's and others' do in time. One of the test's own, so that it is now.
        m.admin.merge_patch(KUEUE_V, "Workload", kit.workload_of(m.admin, ns, uid)["metadata"]["name"],
                            {"metadata": {"annotations": {NUDGE: "1"}}}, ns)  # fmt: skip

        # Whatever the gate did, the next execution's pods on the workers: no two executions share an identity,
        # and R only rises.
        def second_execution() -> list[tuple[int, int]]:
            executions = _executions([obj for r in pods for _, obj in r.events()])
            wl = kit.workload_of(m.admin, ns, uid)
            assert len(executions) >= 2, (executions, wl["status"].get("admissionChecks"), window)
            return executions

        executions = eventually(second_execution, 240, "the next execution's pods on a worker")
        rs = [a + j for a, j in executions]
        assert len(set(rs)) == len(rs), f"two executions share an identity: (A, J) {executions}; the gate: {window}"
        assert rs == sorted(rs), f"R fell: (A, J) {executions}"
        assert executions[0] == (K, 0), executions
        assert executions[1][0] >= K + MAX_RESTARTS + 1, f"the next dispatch's A is not raised by K: {executions}"

        # And how: the gate held while it could not identify the MultiKueue check, then raised A by K, stamped it
        # fresh, and only then set its check Ready.
        assert window["state"] == "Pending", f"approved on the one-cluster path while the check was missing: {window}"
        _, remote = _dispatched(m, tj, 2 * K)
        assert kit.a_of(remote) == 2 * K
        notes = annotations(kit.workload_of(m.admin, ns, uid))
        assert (notes.get(ANNOTATION_DISPATCHED), notes.get(ANNOTATION_DISPATCHED_SPENT)) == (str(2 * K), str(2 * K))
        moved = m.mc.worker(kit.workload_of(m.admin, ns, uid)["status"]["clusterName"])
        eventually(lambda: _trainer_pod(moved, tj), 120, "the second dispatch's trainer pod Running")
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(name)) == [K, 2 * K]
    finally:
        if lingering is not None:
            _linger(lingering[0], ns, lingering[1], keep=False)
        if deleted and m.admin.get_or_none(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK) is None:
            m.admin.create(_check_body())
            eventually(lambda: _active_check(m), 120, f"AdmissionCheck {ADMISSION_CHECK} restored")
        for r in pods:
            r.stop()
        trainjobs.stop()


def _executions(pods: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """The (A, J) of each execution of the trainer's replicated job on any worker, in the order its first pod was
    created: one per Job (each JobSet, and each restart of one, makes its Jobs anew), so two executions that share
    an identity show as a repeated (A, J)."""
    found: dict[str, tuple[int, int]] = {}
    for pod in sorted(pods, key=lambda p: p["metadata"]["creationTimestamp"]):
        meta = pod["metadata"]
        if meta.get("labels", {}).get(LABEL_REPLICATED_JOB_NAME) != "node":
            continue
        job = next((r["uid"] for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        if job is not None:
            found.setdefault(job, kit.pod_a_j(pod))
    return list(found.values())
