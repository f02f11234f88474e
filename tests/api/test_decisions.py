"""The API's pure decisions: error mapping, idempotent Start, the copy's owner, holds, rank 0, the probe,
the Lease and the capabilities report."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from agent.api import decisions as d
from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import KubeError
from agent.api.models import ObjectRef
from agent.operations import Refused
from contract.keys import PROBE_NODE_SELECTOR_KEY
from contract.trainjob import build_trainjob, runtime_copy_owner_reference
from tests.api.objects import apply_patch
from tests.unit.fixtures import runtime, runtime_copy, submission, trainjob

NOW = dt.datetime(2026, 11, 29, 10, 0, 0, tzinfo=dt.UTC)


def kube_error(status: int, message: str = "boom", reason: str = "") -> KubeError:
    return KubeError(status, reason, message)


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (409, "the object has been modified", ErrorKind.CONFLICT),
        (422, "the server rejected our request due to an error in our request", ErrorKind.CONFLICT),
        (404, "not found", ErrorKind.NOT_FOUND),
        (403, 'admission webhook "validate.trainer" denied the request: no', ErrorKind.REJECTED),
        (400, "bad patch", ErrorKind.REJECTED),
        (403, 'trainjobs is forbidden: User "agent" cannot patch', ErrorKind.UNAVAILABLE),
        (500, "etcd timed out", ErrorKind.UNAVAILABLE),
        (0, "connection refused", ErrorKind.UNAVAILABLE),
    ],
)
def test_write_failures_map_to_typed_errors(status, message, kind):
    assert d.write_failed(kube_error(status, message), "TrainJob a/b").kind is kind


def test_a_webhook_denial_with_422_is_final_not_a_conflict():
    err = d.write_failed(kube_error(422, 'admission webhook "x" denied the request: immutable'), "w")
    assert err.kind is ErrorKind.REJECTED


@pytest.mark.parametrize(
    ("status", "message", "kind", "field"),
    [
        (404, 'namespaces "nope" not found', ErrorKind.INVALID, "namespace"),
        (422, "spec.trainer.image: Invalid value", ErrorKind.REJECTED, None),
        (403, 'admission webhook "dispatch" denied the request', ErrorKind.REJECTED, None),
        (403, "forbidden: User cannot create", ErrorKind.UNAVAILABLE, None),
    ],
)
def test_create_failures(status, message, kind, field):
    err = d.create_failed(kube_error(status, message), "TrainJob x", "ns")
    assert (err.kind, err.field) == (kind, field)


def test_contract_errors_are_invalid_requests_naming_the_field():
    with pytest.raises(ApiError) as err:
        d.contract(build_trainjob, submission(job_id="not-a-ulid"), runtime()["spec"])
    assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "JobID")


def test_refusals_keep_their_kind():
    assert d.refused(Refused("rejected", "fence")).kind is ErrorKind.REJECTED
    assert d.refused(Refused("conflict", "x")).kind is ErrorKind.CONFLICT


def test_own_refuses_a_missing_object_and_another_object_of_the_same_name():
    ref = ObjectRef(namespace="team-a", name="dj-x", uid="tj-uid")
    assert d.own(trainjob(), ref)["metadata"]["uid"] == "tj-uid"
    with pytest.raises(ApiError) as gone:
        d.own(None, ref)
    assert gone.value.kind is ErrorKind.NOT_FOUND
    with pytest.raises(ApiError) as other:
        d.own(trainjob(), ref.model_copy(update={"uid": "old-uid"}))
    assert other.value.kind is ErrorKind.CONFLICT
    assert "a different object of the same name" in other.value.message


def test_the_workload_is_the_one_the_trainjob_controls():
    ref = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "j", "controller": True}
    mine = {"metadata": {"name": "w1", "ownerReferences": [{**ref, "uid": "tj-uid"}]}}
    other = {"metadata": {"name": "w2", "ownerReferences": [{**ref, "uid": "else"}]}}
    owner_only = {"metadata": {"name": "w3", "ownerReferences": [{**ref, "uid": "tj-uid", "controller": False}]}}
    assert d.workload_of([other, owner_only, mine], "tj-uid") is mine
    assert d.workload_of([other, owner_only], "tj-uid") is None


def test_our_checks_are_those_of_our_controller():
    checks = [
        {"metadata": {"name": "dispatch-admission"}, "spec": {"controllerName": "dispatch.phpboyscout.uk/admission"}},
        {"metadata": {"name": "prov"}, "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}},
    ]
    assert d.our_checks(checks) == ["dispatch-admission"]
    checks[0]["status"] = {"conditions": [{"type": "Active", "status": "True"}]}
    assert d.active(checks, ["dispatch-admission"]) == ["dispatch-admission"]
    assert d.active(checks[1:], ["dispatch-admission"]) == []


# -- Start ----------------------------------------------------------------------------------------


def test_an_existing_trainjob_is_ours_only_while_it_is_as_start_created_it():
    built = build_trainjob(submission(), runtime()["spec"])
    assert d.existing_problems(built, trainjob()) == []
    other_attempt = build_trainjob(submission(attempt=7), runtime()["spec"])
    assert d.existing_problems(other_attempt, trainjob())  # another request's object
    opened = trainjob()
    del opened["metadata"]["annotations"]["kueue.x-k8s.io/admission-gated-by"]
    assert any("admission-gated-by" in p for p in d.existing_problems(built, opened))
    deleting = trainjob()
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert "it is being deleted" in d.existing_problems(built, deleting)


def test_a_left_runtime_copy_is_reused_only_when_it_is_ours_and_unowned():
    sub = submission()
    left = runtime_copy()
    assert d.copy_problems(left, sub) == []
    assert d.copy_problems(left, submission(n=4))
    owned = copy.deepcopy(left)
    owned["metadata"]["ownerReferences"] = [{"uid": "old"}]
    assert d.copy_problems(owned, sub) == ["it belongs to another (perhaps deleted) TrainJob"]


def test_the_owner_reference_is_added_once_with_preconditions():
    left, owner = runtime_copy(), runtime_copy_owner_reference(trainjob())
    ops = d.owner_patch(left, owner)
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": "tj-uid"}
    after = apply_patch(left, ops)
    assert after["metadata"]["ownerReferences"] == [owner]
    assert d.owner_patch(after, owner) == []
    other = copy.deepcopy(left)
    other["metadata"]["ownerReferences"] = [{"uid": "someone"}]
    assert apply_patch(other, d.owner_patch(other, owner))["metadata"]["ownerReferences"][-1] == owner


def test_a_workload_that_requests_nothing_is_admitted_unchecked():
    def workload(*containers):
        return {"spec": {"podSets": [{"name": "node", "template": {"spec": {"containers": list(containers)}}}]}}

    assert d.unchecked(None) is None
    assert d.unchecked(workload({"name": "node"})) == d.UNCHECKED
    assert d.unchecked(workload({"name": "node", "resources": {}})) == d.UNCHECKED
    assert d.unchecked(workload({"name": "node", "resources": {"requests": {"cpu": "1"}}})) is None
    assert d.unchecked(workload({"name": "node", "resources": {"limits": {"nvidia.com/gpu": "1"}}})) is None
    assert d.unchecked({"spec": {}}) == d.UNCHECKED


# -- Hold -----------------------------------------------------------------------------------------


def test_a_hold_stamps_since_and_checks_until():
    hold = d.hold_of(instance="I", now=NOW, who="alice", reason="r", until="2026-12-01T00:00:00+01:00")
    assert (hold.since, hold.until) == ("2026-11-29T10:00:00Z", "2026-12-01T00:00:00+01:00")
    for bad in ("tomorrow", "2026-12-01", "2026-12-01T00:00:00"):
        with pytest.raises(ApiError) as err:
            d.hold_of(instance="I", now=NOW, who="a", reason="r", until=bad)
        assert err.value.field == "until"


# -- Output ---------------------------------------------------------------------------------------


def pod(name, index="0", attempt="0", created="2026-11-29T10:00:00Z"):
    labels = {"batch.kubernetes.io/job-completion-index": index, "jobset.sigs.k8s.io/restart-attempt": attempt}
    return {"metadata": {"name": name, "labels": labels, "creationTimestamp": created}}


def test_rank0_is_index_0_of_the_latest_restart():
    pods = [pod("a", attempt="0"), pod("b", index="1", attempt="2"), pod("c", attempt="1"), pod("d", attempt="1",
            created="2026-11-29T11:00:00Z")]  # fmt: skip
    assert d.rank0(pods)["metadata"]["name"] == "d"
    assert d.rank0([pod("x", index="1")]) is None


# -- Preflight ------------------------------------------------------------------------------------


def test_the_probe_is_starts_trainjob_with_an_impossible_node_selector():
    sub = submission(image="dispatch.invalid/never:probe", credentials=(), publish=None)
    probe = d.probe_trainjob(sub, runtime()["spec"])
    plain = build_trainjob(sub, runtime()["spec"])
    template = probe["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0][
        "template"]["spec"]["template"]  # fmt: skip
    assert template.pop("spec") == {"nodeSelector": {PROBE_NODE_SELECTOR_KEY: "never"}}
    assert probe == plain


def test_probe_leaks():
    closed = trainjob()
    assert d.probe_leaks(closed, None, []) == []
    opened = copy.deepcopy(closed)
    opened["spec"]["suspend"] = False
    admitted = {"status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}}
    leaks = d.probe_leaks(opened, admitted, [pod("p-0")])
    assert leaks == ["pod p-0 appeared", "the probe TrainJob was unsuspended", "its Workload has QuotaReserved=True"]


def lease(renewed: str | None, duration: int | None = 15, holder: str = "agent-0"):
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration}}


def test_the_lease_is_alive_when_it_changes_while_watched_whatever_the_clocks_say():
    # renewTime is never compared with this agent's clock: a renewal an hour "in the future" is a renewal.
    renewed = d.lease_state(lease("2026-11-29T09:59:50Z"), lease("2026-11-29T10:59:55Z"), 5, "ns/l")
    assert (renewed.fresh, renewed.settled, renewed.renewed) == (True, True, "2026-11-29T10:59:55Z")
    assert renewed.reason == "the Lease ns/l was renewed by agent-0 while watched"
    failover = d.lease_state(lease("t1"), lease("t1", holder="agent-1"), 1, "ns/l")
    assert failover.fresh
    waiting = d.lease_state(lease("2099-01-01T00:00:00Z"), lease("2099-01-01T00:00:00Z"), 10, "ns/l")
    assert (waiting.fresh, waiting.settled) == (False, False)
    stale = d.lease_state(lease("2099-01-01T00:00:00Z"), lease("2099-01-01T00:00:00Z"), 15, "ns/l")
    assert (stale.fresh, stale.settled) == (False, True)
    assert stale.reason.startswith("the readmission controller is dead: its Lease ns/l was not renewed in 15s")
    assert stale.renewed == "2099-01-01T00:00:00Z"


def test_a_released_or_absent_lease_is_dead_at_once():
    released = d.lease_state(lease("t", 1, holder=""), lease("t2", 1, holder=""), 0, "ns/l")
    assert (released.fresh, released.settled) == (False, True)
    assert "was released (it has no holder)" in released.reason
    assert not d.lease_state(None, None, 0, "ns/l").fresh
    assert "does not exist" in d.lease_state(lease("t"), None, 0, "ns/l").reason
    assert d.not_watched(lease("t")).renewed == "t"


def test_the_verdict_round_trips_through_the_lease():
    caps = d.capabilities(kueue=False, probe=d.ProbeResult(10), lease=d.not_watched(None), versions=VERSIONS,
                          checks=[], active_checks=[])  # fmt: skip
    text = d.verdict_text(caps, "2026-12-01T10:00:00Z")
    read = {"metadata": {"name": "l", "namespace": "ns", "resourceVersion": "7", "managedFields": [{}],
                         "annotations": {"other": "x"}}, "spec": {"holderIdentity": "a"}}  # fmt: skip
    body = d.lease_with_verdict(read, text, "ns", "l")
    assert body["metadata"]["resourceVersion"] == "7"  # the PUT's precondition
    assert body["metadata"]["annotations"] == {"other": "x", "dispatch.phpboyscout.uk/preflight": text}
    assert body["spec"] == {"holderIdentity": "a"}
    assert "managedFields" not in body["metadata"]
    assert d.verdict_of(body) == caps
    assert d.verdict_of(read) is None
    created = d.lease_with_verdict(None, text, "ns", "l")
    assert (created["metadata"]["name"], created["spec"]) == ("l", {})
    garbled = {"metadata": {"annotations": {"dispatch.phpboyscout.uk/preflight": "{not json"}}}
    assert d.verdict_of(garbled).observe_only
    assert d.verdict_of(garbled).observe_only_reason == d.UNREADABLE_VERDICT


def test_api_versions_preferred_first():
    discovery = {
        "groups": [
            {
                "name": "kueue.x-k8s.io",
                "versions": [{"version": "v1beta1"}, {"version": "v1beta2"}],
                "preferredVersion": {"version": "v1beta2"},
            },
            {"name": "apps", "versions": [{"version": "v1"}]},
        ]
    }
    assert d.api_versions(discovery) == {
        "trainer.kubeflow.org": [],
        "jobset.x-k8s.io": [],
        "kueue.x-k8s.io": ["v1beta2", "v1beta1"],
    }


FRESH = d.LeaseState("2026-11-29T09:59:59Z", True, "renewed 1s ago")
VERSIONS = {"trainer.kubeflow.org": ["v1alpha1"], "jobset.x-k8s.io": ["v1alpha2"], "kueue.x-k8s.io": ["v1beta2"]}


def test_plain_mode_needs_no_readmission_gate():
    caps = d.capabilities(kueue=False, probe=d.ProbeResult(10), lease=d.LeaseState(None, False, "no lease"),
                          versions=VERSIONS, checks=[], active_checks=[])  # fmt: skip
    assert caps.start_gate
    assert not caps.readmission_gate
    assert not caps.observe_only
    assert caps.readmission_gate_reason.startswith("not needed")


def test_kueue_mode_proven():
    caps = d.capabilities(kueue=True, probe=d.ProbeResult(10), lease=FRESH, versions=VERSIONS,
                          checks=["dispatch-admission"], active_checks=["dispatch-admission"])  # fmt: skip
    assert caps.start_gate
    assert caps.readmission_gate
    assert not caps.observe_only
    assert caps.lease_renewed == FRESH.renewed


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"probe": d.ProbeResult(10, leaks=("pod x appeared",))}, "the start gate leaks: pod x appeared"),
        ({"probe": d.ProbeResult(10, error="cannot create")}, "the probe could not be run"),
        ({"lease": d.LeaseState("t", False, "the readmission controller is dead")}, "controller is dead"),
        ({"checks": [], "active_checks": []}, "no AdmissionCheck has controllerName"),
        ({"active_checks": []}, "is not Active"),
        ({"probe": d.ProbeResult(10, workload_problems=("Kueue is not managing",))}, "Kueue is not managing"),
        ({"versions": {**VERSIONS, "kueue.x-k8s.io": []}}, "serves no kueue.x-k8s.io API"),
    ],
)
def test_kueue_mode_observe_only_with_the_reason(kwargs, says):
    args = {"kueue": True, "probe": d.ProbeResult(10), "lease": FRESH, "versions": VERSIONS,
            "checks": ["dispatch-admission"], "active_checks": ["dispatch-admission"]} | kwargs  # fmt: skip
    caps = d.capabilities(**args)
    assert caps.observe_only
    assert says in caps.observe_only_reason


def test_before_any_preflight():
    assert not d.unproven("no Preflight has run yet", observe_only=False).observe_only
    assert d.unproven("x", observe_only=True).observe_only_reason == "x"
