"""The claim (contract/claims.py, agent/multicluster/claims.py ``ClaimWatch``, agent/multicluster/workers.py ``worker_blockers``): the
manager claims a copy on a worker only while it wants it there now; the worker judges the claims by its own clock;
the manager's look counts what of the job may still make pods, not only its pods (docs/multicluster.md, "The
claim")."""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import pytest

from agent.multicluster.claims import ClaimWatch
from agent.multicluster.workers import WorkerLook, worker_blockers
from contract.claims import (
    Want,
    claim_lease,
    claim_name,
    claimed,
    copy_claim,
    dispatched_to,
    dispatched_worker,
    fresh_by_manager,
    record_ops,
    wanted_claim,
)
from contract.keys import (
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_DISPATCHED,
    ANNOTATION_DISPATCHED_TO,
    ANNOTATION_FENCED,
    ANNOTATION_HOLD_INSTANCE,
    LABEL_CLAIM,
)
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL
from tests.harness.kubelet import apply_json_patch

NOW = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)


def workload(worker: str | None = "w-1", *, stamp: str = "4", **conditions: str) -> dict[str, Any]:
    conds = {"QuotaReserved": "True", "Admitted": "True", **conditions}
    status: dict[str, Any] = {"conditions": [{"type": t, "status": v} for t, v in conds.items()]}
    if worker is not None:
        status["clusterName"] = worker
    return {
        "metadata": {
            "name": "wl",
            "namespace": "team-a",
            "uid": "wl-uid",
            "annotations": {ANNOTATION_DISPATCHED: stamp},
        },
        "spec": {"active": True},
        "status": status,
    }


def trainjob(approval: str | None = "4/wl-uid", **notes: str) -> dict[str, Any]:
    annotations = {**notes, **({ANNOTATION_APPROVED_ADMISSION: approval} if approval else {})}
    return {"metadata": {"name": "dj-1", "namespace": "team-a", "uid": "tj-uid", "resourceVersion": "9",
                         "annotations": annotations}}  # fmt: skip


def cluster(active: str = "True", fence: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "w-1", **({"annotations": {ANNOTATION_FENCED: fence}} if fence else {})}
    return {"metadata": meta, "status": {"conditions": [{"type": "Active", "status": active}]}}


def test_the_manager_claims_the_copy_of_the_dispatch_its_workload_runs_now():
    want = wanted_claim(workload(), trainjob(), {"w-1": cluster()})
    assert want == Want("w-1", "dispatch-claim-wl-uid", "4/wl-uid", "team-a/dj-1")


@pytest.mark.parametrize(
    ("wl", "tj", "clusters", "fenced"),
    [
        (workload(None), trainjob(), {"w-1": cluster()}, ()),  # dispatched nowhere
        (workload(Evicted="True"), trainjob(), {"w-1": cluster()}, ()),
        (workload(Finished="True"), trainjob(), {"w-1": cluster()}, ()),
        (workload(QuotaReserved="False"), trainjob(), {"w-1": cluster()}, ()),
        (workload(), trainjob(), {"w-1": cluster("False")}, ()),  # Kueue cannot reach the worker
        (workload(), trainjob(), {}, ()),  # the worker's MultiKueueCluster is gone
        (workload(), trainjob(), {"w-1": cluster()}, ("w-1",)),  # fenced
        (workload(), trainjob(**{ANNOTATION_HOLD_INSTANCE: "h-1"}), {"w-1": cluster()}, ()),  # held
        (workload(), trainjob(None), {"w-1": cluster()}, ()),  # never approved
        (workload(), trainjob("4/another-wl"), {"w-1": cluster()}, ()),  # approved on another Workload
        (workload(stamp="8"), trainjob(), {"w-1": cluster()}, ()),  # an earlier dispatch's approval
    ],
)
def test_nothing_is_claimed_while_the_manager_does_not_want_that_copy_there_now(wl, tj, clusters, fenced):
    assert wanted_claim(wl, tj, clusters, fenced=fenced) is None


def test_an_inactive_workload_is_dispatched_nowhere():
    wl = workload()
    wl["spec"]["active"] = False
    assert dispatched_worker(wl) is None
    assert dispatched_worker(workload()) == "w-1"


def test_the_claim_names_the_gate_s_approval_and_is_renewed_on_the_lease_as_read():
    want = Want("w-1", claim_name("wl-uid"), "4/wl-uid", "team-a/dj-1")
    create, body = claim_lease(None, want, namespace="dispatch-system", origin="mk-a", now=NOW, duration=8)
    assert create
    assert body["metadata"]["labels"] == {LABEL_CLAIM: "mk-a"}
    assert (claimed(body), body["spec"]["leaseDurationSeconds"]) == ("4/wl-uid", 8)
    body["metadata"]["resourceVersion"] = "3"
    later = NOW + dt.timedelta(seconds=2)
    create, renewed = claim_lease(body, replace_approval(want, "7/wl-uid"), namespace="dispatch-system",
                                  origin="mk-a", now=later, duration=8)  # fmt: skip
    assert not create
    assert renewed["metadata"]["resourceVersion"] == "3"  # a PUT that fails if anyone wrote it since
    assert claimed(renewed) == "7/wl-uid"
    assert renewed["spec"]["renewTime"] != body["spec"]["renewTime"]


def replace_approval(want: Want, approval: str) -> Want:
    return Want(want.worker, want.name, approval, want.job)


def test_a_copy_needs_the_claim_its_approval_names():
    tj = trainjob()
    assert copy_claim(tj) == ("dispatch-claim-wl-uid", "4/wl-uid")
    assert copy_claim(trainjob(None)) is None
    assert copy_claim(trainjob("4")) is None


def test_by_the_manager_s_clock_a_claim_is_fresh_within_its_duration():
    lease = {"spec": {"renewTime": "2026-12-05T11:59:55.000000Z", "leaseDurationSeconds": 8}}
    assert fresh_by_manager(lease, NOW)
    assert not fresh_by_manager(lease, NOW + dt.timedelta(seconds=3))
    assert not fresh_by_manager(None, NOW)
    assert fresh_by_manager({"spec": {}}, NOW)  # unreadable: fresh (the safe side)


def test_the_record_lists_the_workers_sorted_and_is_written_on_the_trainjob_as_read():
    tj = trainjob()
    ops = record_ops(tj, ["w-2", "w-1"])
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": "tj-uid"}
    written = apply_json_patch(tj, ops)
    assert dispatched_to(written) == ("w-1", "w-2")
    assert written["metadata"]["annotations"][ANNOTATION_DISPATCHED_TO] == "w-1,w-2"
    assert record_ops(written, ["w-1", "w-2"]) == []
    emptied = apply_json_patch(written, record_ops(written, []))
    assert ANNOTATION_DISPATCHED_TO not in emptied["metadata"]["annotations"]
    assert record_ops(tj, []) == []


def lease(name: str, holder: str, renewed: str, duration: int = 8) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"holderIdentity": holder, "renewTime": renewed,
                                                 "leaseDurationSeconds": duration}}  # fmt: skip


def test_the_worker_sees_a_claim_live_only_after_it_saw_it_change_and_for_its_duration():
    watch = ClaimWatch()
    watch.observe([lease("c-1", "4/u", "t0")], now=0.0)  # the baseline: not seen change
    assert watch.live("c-1", 0.0) is None
    watch.observe([lease("c-1", "4/u", "t0")], now=2.0)
    assert watch.live("c-1", 2.0) is None
    watch.observe([lease("c-1", "4/u", "t1"), lease("c-2", "6/v", "t0")], now=4.0)  # renewed; and a new claim
    assert (watch.live("c-1", 4.0), watch.live("c-2", 4.0)) == ("4/u", "6/v")
    assert watch.live("c-1", 11.9) == "4/u"
    assert watch.live("c-1", 12.0) is None  # no change seen for its duration
    watch.observe([lease("c-2", "6/v", "t0")], now=5.0)  # c-1 deleted
    assert watch.live("c-1", 5.0) is None
    watch.reset()  # a new leadership: nothing is live before a change is seen again
    watch.observe([lease("c-2", "6/v", "t9")], now=6.0)
    assert watch.live("c-2", 6.0) is None
    assert watch.duration == 8


COPY = {"metadata": {"name": "dj-1", "labels": {MULTIKUEUE_ORIGIN_LABEL: "multikueue"}}, "status": {}}
JOB = {
    "metadata": {
        "name": "dj-1-node-0",
        "ownerReferences": [
            {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "dj-1", "uid": "u", "controller": True}
        ],
    },
    "status": {},
}


def _look(**kwargs: Any) -> WorkerLook:
    return WorkerLook([], {}, {}, **kwargs)


@pytest.mark.parametrize(
    ("look", "says"),
    [
        (_look(copy=COPY), "MultiKueue's copy TrainJob dj-1 there is not finished"),
        (_look(jobset={"status": {}}), "JobSet dj-1 there is not finished"),
        (_look(all_jobs=[JOB]), "Job(s) dj-1-node-0 there"),
        (_look(claim=lease("dispatch-claim-wl-uid", "4/u", "2026-12-05T11:59:59.000000Z")), "is still fresh"),
    ],
)
def test_the_manager_s_look_holds_on_what_may_still_make_pods(look, says):
    found = worker_blockers("w-1", "dj-1", look, [], now=NOW)
    assert [b.worker for b in found] == ["w-1"]
    assert says in found[0].why
    assert not look.empty


def test_what_has_finished_or_lapsed_holds_nothing():
    done = {"status": {"conditions": [{"type": "Complete", "status": "True"}]}}
    failed_set = {"status": {"terminalState": "Failed"}}
    look = _look(copy=done, jobset=failed_set, all_jobs=[{"metadata": {"name": "j"}, **copy.deepcopy(done)}],
                 claim=lease("c", "4/u", "2026-12-05T11:00:00.000000Z"))  # fmt: skip
    assert worker_blockers("w-1", "dj-1", look, [], now=NOW) == []
    assert not look.empty  # something is there, so the record keeps the worker
    assert _look().empty
