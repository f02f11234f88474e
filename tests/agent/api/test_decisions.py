"""The API's pure decisions: error mapping, idempotent Start, the copy's owner, holds, rank 0, the probe,
the Lease and the capabilities report."""

from __future__ import annotations

import copy
import datetime as dt

import pytest

from agent.api.errors import ApiError, ErrorKind, contract
from agent.api.kube import KubeError
from agent.api.models import ObjectRef
from agent.api.service.capabilities import capabilities, no_verdict, unproven
from agent.api.service.failures import create_failed, refused, write_failed
from agent.api.service.heartbeat import Heartbeat, LeaseState, heartbeat, lease_state, not_watched, sighted
from agent.api.service.lifecycle_decisions import hold_of
from agent.api.service.output import rank0
from agent.api.service.probe import ProbeResult, api_versions, probe_leaks, probe_trainjob
from agent.api.service.start_decisions import copy_problems, existing_problems, owner_patch
from agent.api.service.targets import own, workload_of
from agent.api.service.verdict import (
    UNREADABLE_VERDICT,
    in_force,
    latest_mode,
    lease_with_verdict,
    refusal,
    verdict_key,
    verdict_of,
    verdict_text,
)
from agent.domain.kueue_objects import UNCHECKED, active, our_checks, unchecked
from agent.domain.operations import Refused
from contract.keys import PROBE_NODE_SELECTOR_KEY
from contract.trainjob import build_trainjob, runtime_copy_owner_reference
from harness.fixtures import runtime, runtime_copy, submission, trainjob
from tests.agent.api.objects import apply_patch

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
    assert write_failed(kube_error(status, message), "TrainJob a/b").kind is kind


def test_a_webhook_denial_with_422_is_final_not_a_conflict():
    err = write_failed(kube_error(422, 'admission webhook "x" denied the request: immutable'), "w")
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
    err = create_failed(kube_error(status, message), "TrainJob x", "ns")
    assert (err.kind, err.field) == (kind, field)


def test_contract_errors_are_invalid_requests_naming_the_field():
    with pytest.raises(ApiError) as err:
        contract(build_trainjob, submission(job_id="not-a-ulid"), runtime()["spec"])
    assert (err.value.kind, err.value.field) == (ErrorKind.INVALID, "JobID")


def test_refusals_keep_their_kind():
    assert refused(Refused("rejected", "fence")).kind is ErrorKind.REJECTED
    assert refused(Refused("conflict", "x")).kind is ErrorKind.CONFLICT


def test_own_refuses_a_missing_object_and_another_object_of_the_same_name():
    ref = ObjectRef(namespace="team-a", name="dj-x", uid="tj-uid")
    assert own(trainjob(), ref)["metadata"]["uid"] == "tj-uid"
    with pytest.raises(ApiError) as gone:
        own(None, ref)
    assert gone.value.kind is ErrorKind.NOT_FOUND
    with pytest.raises(ApiError) as other:
        own(trainjob(), ref.model_copy(update={"uid": "old-uid"}))
    assert other.value.kind is ErrorKind.CONFLICT
    assert "a different object of the same name" in other.value.message


def test_the_workload_is_the_one_the_trainjob_controls():
    ref = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "j", "controller": True}
    mine = {"metadata": {"name": "w1", "ownerReferences": [{**ref, "uid": "tj-uid"}]}}
    other = {"metadata": {"name": "w2", "ownerReferences": [{**ref, "uid": "else"}]}}
    owner_only = {"metadata": {"name": "w3", "ownerReferences": [{**ref, "uid": "tj-uid", "controller": False}]}}
    assert workload_of([other, owner_only, mine], "tj-uid") is mine
    assert workload_of([other, owner_only], "tj-uid") is None


def test_our_checks_are_those_of_our_controller():
    checks = [
        {"metadata": {"name": "dispatch-admission"}, "spec": {"controllerName": "dispatch.phpboyscout.uk/admission"}},
        {"metadata": {"name": "prov"}, "spec": {"controllerName": "kueue.x-k8s.io/provisioning-request"}},
    ]
    assert our_checks(checks) == ["dispatch-admission"]
    checks[0]["status"] = {"conditions": [{"type": "Active", "status": "True"}]}
    assert active(checks, ["dispatch-admission"]) == ["dispatch-admission"]
    assert active(checks[1:], ["dispatch-admission"]) == []


# -- Start ----------------------------------------------------------------------------------------


def test_an_existing_trainjob_is_ours_only_while_it_is_as_start_created_it():
    built = build_trainjob(submission(), runtime()["spec"])
    assert existing_problems(built, trainjob()) == []
    other_attempt = build_trainjob(submission(attempt=7), runtime()["spec"])
    assert existing_problems(other_attempt, trainjob())  # another request's object
    opened = trainjob()
    del opened["metadata"]["annotations"]["kueue.x-k8s.io/admission-gated-by"]
    assert any("admission-gated-by" in p for p in existing_problems(built, opened))
    deleting = trainjob()
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    assert "it is being deleted" in existing_problems(built, deleting)


def test_a_left_runtime_copy_is_reused_only_when_it_is_ours_and_unowned():
    sub = submission()
    left = runtime_copy()
    assert copy_problems(left, sub) == []
    assert copy_problems(left, submission(n=4))
    owned = copy.deepcopy(left)
    owned["metadata"]["ownerReferences"] = [{"uid": "old"}]
    assert copy_problems(owned, sub) == ["it belongs to another (perhaps deleted) TrainJob"]


def test_the_owner_reference_is_added_once_with_preconditions():
    left, owner = runtime_copy(), runtime_copy_owner_reference(trainjob())
    ops = owner_patch(left, owner)
    assert ops[0] == {"op": "test", "path": "/metadata/uid", "value": "tj-uid"}
    after = apply_patch(left, ops)
    assert after["metadata"]["ownerReferences"] == [owner]
    assert owner_patch(after, owner) == []
    other = copy.deepcopy(left)
    other["metadata"]["ownerReferences"] = [{"uid": "someone"}]
    assert apply_patch(other, owner_patch(other, owner))["metadata"]["ownerReferences"][-1] == owner


def test_a_workload_that_requests_nothing_is_admitted_unchecked():
    def workload(*containers):
        return {"spec": {"podSets": [{"name": "node", "template": {"spec": {"containers": list(containers)}}}]}}

    assert unchecked(None) is None
    assert unchecked(workload({"name": "node"})) == UNCHECKED
    assert unchecked(workload({"name": "node", "resources": {}})) == UNCHECKED
    assert unchecked(workload({"name": "node", "resources": {"requests": {"cpu": "1"}}})) is None
    assert unchecked(workload({"name": "node", "resources": {"limits": {"nvidia.com/gpu": "1"}}})) is None
    assert unchecked({"spec": {}}) == UNCHECKED


# -- Hold -----------------------------------------------------------------------------------------


def test_a_hold_stamps_since_and_checks_until():
    hold = hold_of(instance="I", now=NOW, who="alice", reason="r", until="2026-12-01T00:00:00+01:00")
    assert (hold.since, hold.until) == ("2026-11-29T10:00:00Z", "2026-12-01T00:00:00+01:00")
    for bad in ("tomorrow", "2026-12-01", "2026-12-01T00:00:00"):
        with pytest.raises(ApiError) as err:
            hold_of(instance="I", now=NOW, who="a", reason="r", until=bad)
        assert err.value.field == "until"


# -- Output ---------------------------------------------------------------------------------------


def pod(name, index="0", attempt="0", created="2026-11-29T10:00:00Z"):
    labels = {"batch.kubernetes.io/job-completion-index": index, "jobset.sigs.k8s.io/restart-attempt": attempt}
    return {"metadata": {"name": name, "labels": labels, "creationTimestamp": created}}


def test_rank0_is_index_0_of_the_latest_restart():
    pods = [pod("a", attempt="0"), pod("b", index="1", attempt="2"), pod("c", attempt="1"), pod("d", attempt="1",
            created="2026-11-29T11:00:00Z")]  # fmt: skip
    assert rank0(pods)["metadata"]["name"] == "d"
    assert rank0([pod("x", index="1")]) is None


# -- Preflight ------------------------------------------------------------------------------------


def test_the_probe_is_starts_trainjob_with_an_impossible_node_selector():
    sub = submission(image="dispatch.invalid/never:probe", credentials=(), publish=None)
    probe = probe_trainjob(sub, runtime()["spec"])
    plain = build_trainjob(sub, runtime()["spec"])
    template, plain_template = (
        tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"][
            "spec"]["template"] for tj in (probe, plain)
    )  # fmt: skip
    # Start's pod spec (the prologue's volume and mount), and the node selector no node carries.
    assert template.pop("spec") == {**plain_template.pop("spec"), "nodeSelector": {PROBE_NODE_SELECTOR_KEY: "never"}}
    assert probe == plain


def test_probe_leaks():
    closed = trainjob()
    assert probe_leaks(closed, None, []) == []
    opened = copy.deepcopy(closed)
    opened["spec"]["suspend"] = False
    admitted = {"status": {"conditions": [{"type": "QuotaReserved", "status": "True"}]}}
    leaks = probe_leaks(opened, admitted, [pod("p-0")])
    assert leaks == ["pod p-0 appeared", "the probe TrainJob was unsuspended", "its Workload has QuotaReserved=True"]


def lease(renewed: str | None, duration: int | None = 15, holder: str = "agent-0"):
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration}}


def test_the_lease_is_alive_when_it_changes_while_watched_whatever_the_clocks_say():
    # renewTime is never compared with this agent's clock: a renewal an hour "in the future" is a renewal.
    renewed = lease_state(lease("2026-11-29T09:59:50Z"), lease("2026-11-29T10:59:55Z"), 5, "ns/l")
    assert (renewed.fresh, renewed.settled, renewed.renewed) == (True, True, "2026-11-29T10:59:55Z")
    assert renewed.reason == "the Lease ns/l was renewed by agent-0 while watched"
    failover = lease_state(lease("t1"), lease("t1", holder="agent-1"), 1, "ns/l")
    assert failover.fresh
    waiting = lease_state(lease("2099-01-01T00:00:00Z"), lease("2099-01-01T00:00:00Z"), 10, "ns/l")
    assert (waiting.fresh, waiting.settled) == (False, False)
    stale = lease_state(lease("2099-01-01T00:00:00Z"), lease("2099-01-01T00:00:00Z"), 15, "ns/l")
    assert (stale.fresh, stale.settled) == (False, True)
    assert stale.reason.startswith("the readmission controller is dead: its Lease ns/l was not renewed in 15s")
    assert stale.renewed == "2099-01-01T00:00:00Z"


def test_a_released_or_absent_lease_is_dead_at_once():
    released = lease_state(lease("t", 1, holder=""), lease("t2", 1, holder=""), 0, "ns/l")
    assert (released.fresh, released.settled) == (False, True)
    assert "was released (it has no holder)" in released.reason
    assert not lease_state(None, None, 0, "ns/l").fresh
    assert "does not exist" in lease_state(lease("t"), None, 0, "ns/l").reason
    assert not_watched(lease("t")).renewed == "t"


def test_the_verdict_round_trips_through_the_lease():
    caps = capabilities(kueue=False, probe=ProbeResult(10), lease=not_watched(None), versions=VERSIONS,
                          checks=[], active_checks=[])  # fmt: skip
    assert caps.mode == "plain"
    text = verdict_text(caps, "2026-12-01T10:00:00Z")
    read = {"metadata": {"name": "l", "namespace": "ns", "resourceVersion": "7", "managedFields": [{}],
                         "annotations": {"other": "x"}}, "spec": {"holderIdentity": "a"}}  # fmt: skip
    body = lease_with_verdict(read, text, "ns", "l", kueue=False)
    assert body["metadata"]["resourceVersion"] == "7"  # the PUT's precondition
    assert body["metadata"]["annotations"] == {"other": "x", "dispatch.phpboyscout.uk/preflight-plain": text}
    assert body["spec"] == {"holderIdentity": "a"}
    assert "managedFields" not in body["metadata"]
    assert verdict_of(body, kueue=False) == caps
    assert verdict_of(body, kueue=True) is None  # each mode has its own verdict
    assert verdict_of(read, kueue=False) is None
    created = lease_with_verdict(None, text, "ns", "l", kueue=True)
    assert (created["metadata"]["name"], created["spec"]) == ("l", {})
    assert list(created["metadata"]["annotations"]) == ["dispatch.phpboyscout.uk/preflight-kueue"]
    garbled = {"metadata": {"annotations": {"dispatch.phpboyscout.uk/preflight-kueue": "{not json"}}}
    assert verdict_of(garbled, kueue=True).observe_only
    assert verdict_of(garbled, kueue=True).observe_only_reason == UNREADABLE_VERDICT
    assert verdict_of(garbled, kueue=True).mode == "kueue"


def _verdicts(**by_mode: tuple[str, bool]) -> dict:
    """A Lease carrying a verdict per mode: mode=(at, observe_only)."""
    found = {}
    for mode, (at, observe_only) in by_mode.items():
        caps = unproven("r", observe_only=observe_only, kueue=mode == "kueue")
        found[verdict_key(mode == "kueue")] = verdict_text(caps, at)
    return {"metadata": {"annotations": found}}


def test_a_plain_mode_verdict_does_not_clear_kueue_modes_observe_only():
    lease = _verdicts(kueue=("2026-12-01T10:00:00Z", True), plain=("2026-12-01T11:00:00Z", False))
    alive = Heartbeat(True, "renewed", "t")
    assert refusal(verdict_of(lease, True), alive, kueue=True, require_preflight=False) is not None
    assert refusal(verdict_of(lease, False), alive, kueue=False, require_preflight=False) is None
    assert latest_mode(lease) is False  # Capabilities reports the plain one, recorded last
    assert latest_mode(_verdicts(kueue=("2026-12-01T12:00:00Z", True), plain=("2026-12-01T11:00:00Z", False)))
    assert latest_mode({"metadata": {}}) is None
    # The old, mode-less annotation is no verdict of either mode.
    assert latest_mode({"metadata": {"annotations": {"dispatch.phpboyscout.uk/preflight": "{}"}}}) is None


def held(holder: str = "agent-0", renewed: str = "2026-11-29T09:59:55.000000Z", duration: int = 15) -> dict:
    return {"spec": {"holderIdentity": holder, "renewTime": renewed, "leaseDurationSeconds": duration}}


def beat(lease, sighting=None, now=NOW, clock=0.0):
    return heartbeat(lease, sighting, now=now, clock=clock, where="ns/l")


def test_the_heartbeat_is_alive_while_the_lease_is_renewed_within_its_duration():
    live = beat(held())
    assert (live.alive, live.renewed) == (True, "2026-11-29T09:59:55.000000Z")
    assert "held by agent-0" in live.reason
    stale = beat(held(renewed="2026-11-29T09:59:45.000000Z"))  # 15 s ago: its duration
    assert not stale.alive
    assert "15s ago, longer than its leaseDurationSeconds (15)" in stale.reason
    assert beat(held(), now=NOW + dt.timedelta(seconds=9)).alive
    assert not beat(held(), now=NOW + dt.timedelta(seconds=10)).alive


@pytest.mark.parametrize(
    ("lease", "says"),
    [
        (None, "its Lease ns/l does not exist"),
        (held(holder=""), "was released (it has no holder)"),
        (held(renewed="yesterday"), "has no readable renewTime"),
        ({"metadata": {}}, "was released (it has no holder)"),  # a Lease only a Preflight created: never led
    ],
)
def test_no_heartbeat(lease, says):
    dead = beat(lease)
    assert not dead.alive
    assert says in dead.reason


def test_a_renewtime_ahead_of_this_clock_expires_after_one_duration_of_watching():
    """A writer whose clock runs an hour ahead: by ``now`` alone it would be fresh for an hour."""
    ahead = held(renewed="2026-11-29T11:00:00.000000Z")
    seen = sighted(None, ahead, 100.0)
    assert beat(ahead, seen, clock=100.0).alive
    seen = sighted(seen, ahead, 114.0)
    assert seen.since == 100.0  # the same record: still the first sighting
    assert beat(ahead, seen, clock=114.0).alive
    late = beat(ahead, sighted(seen, ahead, 115.0), clock=115.0)
    assert not late.alive
    assert "not been renewed in 15s of watching" in late.reason
    renewed = held(renewed="2026-11-29T11:00:05.000000Z")
    seen = sighted(seen, renewed, 116.0)
    assert seen.since == 116.0  # a renewal is a new record
    assert beat(renewed, seen, clock=116.0).alive
    assert sighted(seen, None, 117.0) is None


def test_kueue_mode_follows_the_controller_and_comes_back_when_it_is_renewed():
    passed = capabilities(kueue=True, probe=ProbeResult(10), lease=FRESH, versions=VERSIONS,
                            checks=["dispatch-admission"], active_checks=["dispatch-admission"])  # fmt: skip
    alive, down = beat(held()), beat(held(holder=""))
    assert in_force(passed, alive, kueue=True, require_preflight=False) == passed
    assert refusal(passed, alive, kueue=True, require_preflight=False) is None
    now = in_force(passed, down, kueue=True, require_preflight=False)
    assert (now.observe_only, now.readmission_gate, now.mode) == (True, False, "kueue")
    assert now.observe_only_reason.startswith("the readmission controller is down: its Lease ns/l was released")
    why = refusal(passed, down, kueue=True, require_preflight=False)
    assert why.startswith("observe-only in Kueue mode: the readmission controller is down (its Lease ns/l was")
    assert "until its leader renews the Lease" in why
    # No verdict yet: Kueue mode still needs the controller; plain mode never does.
    assert refusal(None, down, kueue=True, require_preflight=False) is not None
    assert refusal(None, alive, kueue=True, require_preflight=False) is None
    assert refusal(None, down, kueue=False, require_preflight=False) is None
    assert in_force(None, down, kueue=False, require_preflight=False).observe_only is False
    assert "no Preflight has passed yet" in refusal(None, alive, kueue=False, require_preflight=True)


def test_a_failed_verdict_and_a_dead_controller_name_both_causes():
    failed = unproven("the start gate leaks", observe_only=True, kueue=True)
    why = refusal(failed, beat(None), kueue=True, require_preflight=False)
    assert "the readmission controller is down (its Lease ns/l does not exist)" in why
    assert "until a Kueue-mode Preflight passes: the start gate leaks" in why
    caps = in_force(failed, beat(None), kueue=True, require_preflight=False)
    assert caps.observe_only_reason == (
        "the readmission controller is down: its Lease ns/l does not exist; the start gate leaks"
    )


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
    assert api_versions(discovery) == {
        "trainer.kubeflow.org": [],
        "jobset.x-k8s.io": [],
        "kueue.x-k8s.io": ["v1beta2", "v1beta1"],
    }


FRESH = LeaseState("2026-11-29T09:59:59Z", True, "renewed 1s ago")
VERSIONS = {"trainer.kubeflow.org": ["v1alpha1"], "jobset.x-k8s.io": ["v1alpha2"], "kueue.x-k8s.io": ["v1beta2"]}


def test_plain_mode_needs_no_readmission_gate():
    caps = capabilities(kueue=False, probe=ProbeResult(10), lease=LeaseState(None, False, "no lease"),
                          versions=VERSIONS, checks=[], active_checks=[])  # fmt: skip
    assert caps.start_gate
    assert not caps.readmission_gate
    assert not caps.observe_only
    assert caps.readmission_gate_reason.startswith("not needed")


def test_kueue_mode_proven():
    caps = capabilities(kueue=True, probe=ProbeResult(10), lease=FRESH, versions=VERSIONS,
                          checks=["dispatch-admission"], active_checks=["dispatch-admission"])  # fmt: skip
    assert caps.start_gate
    assert caps.readmission_gate
    assert not caps.observe_only
    assert caps.lease_renewed == FRESH.renewed


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"probe": ProbeResult(10, leaks=("pod x appeared",))}, "the start gate leaks: pod x appeared"),
        ({"probe": ProbeResult(10, error="cannot create")}, "the probe could not be run"),
        ({"lease": LeaseState("t", False, "the readmission controller is dead")}, "controller is dead"),
        ({"checks": [], "active_checks": []}, "no AdmissionCheck has controllerName"),
        ({"active_checks": []}, "is not Active"),
        ({"probe": ProbeResult(10, workload_problems=("Kueue is not managing",))}, "Kueue is not managing"),
        ({"versions": {**VERSIONS, "kueue.x-k8s.io": []}}, "serves no kueue.x-k8s.io API"),
    ],
)
def test_kueue_mode_observe_only_with_the_reason(kwargs, says):
    args = {"kueue": True, "probe": ProbeResult(10), "lease": FRESH, "versions": VERSIONS,
            "checks": ["dispatch-admission"], "active_checks": ["dispatch-admission"]} | kwargs  # fmt: skip
    caps = capabilities(**args)
    assert caps.observe_only
    assert says in caps.observe_only_reason


def test_before_any_preflight():
    assert not unproven("no Preflight has run yet", observe_only=False).observe_only
    assert unproven("x", observe_only=True).observe_only_reason == "x"
    assert no_verdict(True).observe_only_reason == "no Preflight has passed yet"
    assert (no_verdict(False).observe_only, no_verdict(False).mode) == (False, None)
