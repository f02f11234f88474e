"""The naive check controller's writes, built from hand-made objects: the Workload status apply (only dispatch's
Pending check set Ready), the Lease (holder set, annotations kept), the first raise, and the disarming patch."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from chaos.naive import (
    IDENTITY,
    MESSAGE,
    SKIP_UNSUSPENDS,
    approval,
    first_raise,
    lease_body,
    skip_unsuspends_patch,
    trainjob_updates_webhook,
)
from contract.admission import admission_count, admission_floor, admission_path
from contract.keys import ANNOTATION_ADMISSION_FLOOR, ANNOTATION_PREFLIGHT_KUEUE, ANNOTATION_PREFLIGHT_PLAIN
from harness.fixtures import trainjob
from tests.harness.kubelet import apply_json_patch
from webhook.configurations import webhook_configurations

CHECK = "dispatch-admission"
NOW = "2026-11-29T10:00:00.000000Z"
EARLIER = "2026-11-29T09:00:00.000000Z"


def workload(*, dispatch: str = "Pending", reserved: bool = True, **conditions: bool) -> dict[str, Any]:
    status: dict[str, Any] = {
        "conditions": [{"type": "QuotaReserved", "status": "True" if reserved else "False"}]
        + [{"type": t, "status": "True"} for t, on in conditions.items() if on],
        "admissionChecks": [
            {"name": "provisioning", "state": "Pending", "message": "", "lastTransitionTime": EARLIER},
            {"name": CHECK, "state": dispatch, "message": "held", "lastTransitionTime": EARLIER, "retryCount": 2},
            {"name": "other", "state": "Ready", "message": "ok", "lastTransitionTime": EARLIER},
        ],
    }
    if reserved:
        status["admission"] = {"clusterQueue": "cq", "podSetAssignments": []}
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "team-a", "uid": "wl-uid", "resourceVersion": "500"},
        "spec": {"active": True},
        "status": status,
    }


def test_approval_sets_only_dispatchs_pending_check_ready() -> None:
    wl = workload()
    before = copy.deepcopy(wl)
    body = approval(wl, CHECK, NOW)
    assert body is not None
    assert body["metadata"] == {"name": "wl", "namespace": "team-a", "uid": "wl-uid", "resourceVersion": "500"}
    # One entry: the list is a map keyed by name, so server-side apply leaves the others to their managers.
    assert body["status"] == {
        "admissionChecks": [{"name": CHECK, "state": "Ready", "message": MESSAGE, "lastTransitionTime": NOW}]
    }
    assert wl == before


@pytest.mark.parametrize(
    ("why", "wl"),
    [
        ("check already Ready", workload(dispatch="Ready")),
        ("check Retry", workload(dispatch="Retry")),
        ("no quota reserved", workload(reserved=False)),
        ("evicted", workload(Evicted=True)),
        ("finished", workload(Finished=True)),
    ],
)
def test_no_approval_when_not_due(why: str, wl: dict[str, Any]) -> None:
    assert approval(wl, CHECK, NOW) is None, why


def test_no_approval_without_the_check() -> None:
    assert approval(workload(), "not-listed", NOW) is None


LEASE: dict[str, Any] = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {
        "name": "dispatch-admission",
        "namespace": "dispatch-system",
        "resourceVersion": "77",
        "annotations": {ANNOTATION_PREFLIGHT_KUEUE: '{"at":"x"}', ANNOTATION_PREFLIGHT_PLAIN: '{"at":"y"}'},
        "managedFields": [{"manager": "dispatch.phpboyscout.uk/adapter"}],
    },
    "spec": {
        "holderIdentity": "dispatch-k8s-sandbox",
        "leaseDurationSeconds": 15,
        "acquireTime": EARLIER,
        "renewTime": EARLIER,
        "leaseTransitions": 3,
    },
}


def test_lease_taken_from_the_agent_keeps_its_annotations() -> None:
    create, body = lease_body(LEASE, namespace="dispatch-system", name="dispatch-admission", identity=IDENTITY, now=NOW)
    assert not create
    assert body["metadata"]["annotations"] == LEASE["metadata"]["annotations"]
    assert body["metadata"]["resourceVersion"] == "77"  # the PUT's precondition
    assert "managedFields" not in body["metadata"]
    assert body["spec"] == {
        "holderIdentity": IDENTITY,
        "leaseDurationSeconds": 15,
        "acquireTime": NOW,
        "renewTime": NOW,
        "leaseTransitions": 4,
    }


def test_lease_renewed_keeps_acquire_time() -> None:
    _, taken = lease_body(LEASE, namespace="dispatch-system", name="dispatch-admission", identity=IDENTITY, now=EARLIER)
    _, renewed = lease_body(taken, namespace="dispatch-system", name="dispatch-admission", identity=IDENTITY, now=NOW)
    assert renewed["spec"]["acquireTime"] == EARLIER
    assert renewed["spec"]["renewTime"] == NOW
    assert renewed["spec"]["leaseTransitions"] == 4
    assert renewed["metadata"]["annotations"] == LEASE["metadata"]["annotations"]


def test_lease_created_when_absent() -> None:
    create, body = lease_body(None, namespace="dispatch-system", name="dispatch-admission", identity=IDENTITY, now=NOW)
    assert create
    assert body["metadata"] == {"name": "dispatch-admission", "namespace": "dispatch-system"}
    assert body["spec"]["holderIdentity"] == IDENTITY


def suspended(**overrides: Any) -> dict[str, Any]:
    tj = trainjob(**overrides)
    tj["spec"]["suspend"] = True
    return tj


def test_first_raise_takes_a_never_raised_job_to_one() -> None:
    tj = suspended()
    ops = first_raise(tj)
    assert ops is not None
    raised = apply_json_patch(tj, ops)
    assert (admission_count(raised), admission_floor(raised)) == (1, 1)


def test_no_raise_after_the_first() -> None:
    tj = apply_json_patch(suspended(), first_raise(suspended()) or [])
    assert first_raise(tj) is None
    floor_only = suspended()
    floor_only["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "3"
    assert first_raise(floor_only) is None
    a_only = suspended()  # A raised by someone, the floor lost: not the first admission either
    *parents, key = admission_path(a_only)
    node: Any = a_only
    for part in parents:
        node = node[part]
    node[key] = "2"
    assert first_raise(a_only) is None


def test_no_raise_of_a_job_not_dispatchs_or_running() -> None:
    stranger = suspended()
    stranger["metadata"]["name"] = "someone-elses-job"
    stranger["spec"]["runtimePatches"] = [p for p in stranger["spec"]["runtimePatches"] if "kueue" in p["manager"]]
    assert first_raise(stranger) is None
    running = suspended()
    running["spec"]["suspend"] = False
    assert first_raise(running) is None


def validating() -> dict[str, Any]:
    (config,) = [c for c in webhook_configurations(namespace="dispatch-system") if "Validating" in c["kind"]]
    config["metadata"]["uid"] = "vwc-uid"
    return config


def test_disarm_stops_only_unsuspends_reaching_the_webhook() -> None:
    config = validating()
    name = trainjob_updates_webhook()
    ops = skip_unsuspends_patch(config, name)
    assert ops is not None
    after = apply_json_patch(config, ops)
    changed = [
        (b["name"], [c["name"] for c in b["matchConditions"]])
        for a, b in zip(config["webhooks"], after["webhooks"], strict=True)
        if a != b
    ]
    assert changed == [(name, ["dispatch-objects", SKIP_UNSUSPENDS])]
    (hook,) = [h for h in after["webhooks"] if h["name"] == name]
    assert hook["matchConditions"][-1]["expression"].startswith("!(")
    assert any("trainjobs" in r["resources"] and r["operations"] == ["UPDATE"] for r in hook["rules"])
    assert skip_unsuspends_patch(after, name) is None  # done once


def test_disarm_needs_the_webhook() -> None:
    config = validating()
    config["webhooks"] = [h for h in config["webhooks"] if h["name"] != trainjob_updates_webhook()]
    assert skip_unsuspends_patch(config, trainjob_updates_webhook()) is None
