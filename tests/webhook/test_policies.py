"""The ValidatingAdmissionPolicies on the real API server: they hold with no webhook at all."""

from __future__ import annotations

import copy
import json
import secrets
import time
from collections.abc import Iterator

import pytest

from contract.admission import admission_count, admission_floor, approval_ops, preconditions, raise_admission
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_JOBSET_UID,
    POD_FINALIZER,
)
from contract.multicluster import MULTIKUEUE_MANAGED_BY, raise_dispatch
from contract.runtime_patch import trainer_replicated_job
from contract.runtime_requirements import prologue_mount_problems
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.fixtures import runtime, submission
from harness.kube_http import ApiError
from harness.principals import Principals, bound_here, json_patch, merge_patch, principals
from webhook.config import Config
from webhook.config import Principals as ConfigPrincipals
from webhook.policies import admission_policies

pytestmark = pytest.mark.cluster
TRAINJOB = ("trainer.kubeflow.org/v1alpha1", "TrainJob")
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@pytest.fixture
def who(control_plane, namespace) -> Principals:
    return principals(control_plane, namespace)


@pytest.fixture
def policies(control_plane, namespace, who) -> Iterator[list[dict]]:
    """The chart's policies, renamed for this test and bound to its namespace alone."""
    config = Config(dispatch=ConfigPrincipals(usernames=(who.dispatch_username,)))
    suffix = secrets.token_hex(3)
    # The field rules alone: here the stranger plays an owner (Kueue, say) whose writes they police; the owner
    # policies, which refuse a stranger every write, are tests/webhook/test_owners_on_the_api_server.py's.
    docs = admission_policies(config, namespace="dispatch-system", owners_too=False)
    # The validating ones: the record of A that the mutating policy adds is tests/webhook/test_record_start.py's.
    docs = [d for d in docs if d["kind"].startswith("Validating")]
    for doc in bound_here(docs, namespace, suffix):
        control_plane.admin.create(doc)
    _wait_enforced(who, namespace)
    yield docs
    for doc in docs:
        control_plane.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


def _wait_enforced(who: Principals, namespace: str) -> None:
    """Policies load asynchronously: wait until a stranger's canary write is refused."""
    canary = runtime("TrainingRuntime")
    canary["metadata"] = {"name": "canary", "namespace": namespace, "labels": {"dispatch.phpboyscout.uk/canary": "x"}}
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            who.stranger.create(canary)
        except ApiError as err:
            if err.status in (403, 422) and "only dispatch adds" in err.body:
                return
            raise
        who.stranger.delete(canary["apiVersion"], canary["kind"], "canary", namespace)
        time.sleep(0.2)
    raise AssertionError("the admission policies were not enforced within 30 s")


def denied(http, obj: dict, patch, *, content_type: str = MERGE, subresource: str = "", method: str = "PATCH") -> str:
    """The API server's message refusing this write. Policies load asynchronously, each on its own: the write
    is first tried as a dry run (admission runs, nothing is stored) until it is refused, then for real."""
    path = http.object_path(obj) + (f"/{subresource}" if subresource else "")
    deadline = time.monotonic() + 30
    while True:
        try:
            http.request(method, path, patch, query={"dryRun": "All"}, content_type=content_type)
        except ApiError as err:
            if err.status != 403:
                raise
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"{method} {path} was not refused within 30 s")
        time.sleep(0.2)
    with pytest.raises(ApiError) as err:
        http.request(method, path, patch, content_type=content_type)
    assert err.value.status == 403, err.value
    return json.loads(err.value.body)["message"]


def create(who: Principals, namespace: str, **overrides) -> dict:
    sub = submission(namespace=namespace, **overrides)
    who.dispatch.create(build_runtime_copy(sub, runtime()))
    return who.dispatch.create(build_trainjob(sub, runtime()["spec"]))


def refused(call) -> str:
    """The API server's message refusing ``call``."""
    with pytest.raises(ApiError) as err:
        call()
    assert err.value.status == 403, err.value
    return json.loads(err.value.body)["message"]


def test_strangers_may_not_touch_reserved_keys(who, namespace, policies):
    tj = create(who, namespace)
    err = denied(who.stranger, tj, {"metadata": {"labels": {"dispatch.phpboyscout.uk/job-id": None}}})
    assert "only dispatch adds, changes or removes labels under dispatch.phpboyscout.uk/" in err
    err = denied(who.stranger, tj, {"metadata": {"annotations": {"dispatch.phpboyscout.uk/hold-who": "me"}}})
    assert "annotations under dispatch.phpboyscout.uk/" in err
    err = denied(who.stranger, tj, {"metadata": {"annotations": {ANNOTATION_ADMISSION_GATED_BY: None}}})
    assert "only dispatch adds or removes its gate" in err
    # dispatch may: Open removes the gate.
    merge_patch(who.dispatch, tj, {"metadata": {"annotations": {ANNOTATION_ADMISSION_GATED_BY: None}}})


def test_strangers_may_not_claim_other_objects(who, namespace, policies):
    rt = runtime("TrainingRuntime")
    rt["metadata"] = {
        "name": "plain-runtime",
        "namespace": namespace,
        "labels": {"dispatch.phpboyscout.uk/job-id": "x"},
    }
    err = refused(lambda: who.stranger.create(rt))
    assert "labels under dispatch.phpboyscout.uk/" in err
    rt["metadata"]["labels"] = {"team": "a"}
    who.stranger.create(rt)


def test_strangers_may_write_unrelated_keys(who, namespace, policies):
    tj = create(who, namespace)
    denied(who.stranger, tj, {"metadata": {"labels": {"dispatch.phpboyscout.uk/x": "1"}}})
    after = merge_patch(who.stranger, tj, {"metadata": {"labels": {"team": "a"}}})
    assert after["metadata"]["labels"]["team"] == "a"


def test_a_and_the_floor_never_fall_even_for_dispatch(control_plane, who, namespace, policies):
    tj = create(who, namespace)
    once = json_patch(who.dispatch, tj, raise_admission(tj).patch)
    twice = json_patch(who.dispatch, once, raise_admission(once).patch)
    lower_a = copy.deepcopy(raise_admission(twice).patch)
    lower_a[2]["value"] = "1"
    lower_a.pop()  # leave the floor: only A falls
    err = denied(who.dispatch, twice, lower_a, content_type=JSON_PATCH)
    assert "A in dispatch's runtime patch never falls" in err
    assert "2 -> 1" in err
    err = denied(who.dispatch, twice, {"metadata": {"annotations": {ANNOTATION_ADMISSION_FLOOR: None}}})
    assert "admission-floor never falls and is never removed" in err
    err = denied(who.dispatch, twice, {"metadata": {"annotations": {ANNOTATION_ADMISSION_FLOOR: "1"}}})
    assert "2 -> 1" in err
    removed = [{"op": "test", "path": "/spec/runtimePatches/0/manager", "value": "dispatch.phpboyscout.uk/adapter"},
               {"op": "remove", "path": "/spec/runtimePatches/0"}]  # fmt: skip
    err = denied(who.dispatch, twice, removed, content_type=JSON_PATCH)
    assert "never falls and is never removed" in err


def test_jobset_uid_is_recorded_once(who, namespace, policies):
    tj = create(who, namespace)
    first = merge_patch(who.dispatch, tj, {"metadata": {"annotations": {ANNOTATION_JOBSET_UID: "js-1"}}})
    err = denied(who.dispatch, first, {"metadata": {"annotations": {ANNOTATION_JOBSET_UID: "js-2"}}})
    assert "recorded once and never changed" in err


def test_unrelated_trainjobs_pass(control_plane, who, namespace, policies):
    tj = runtime("TrainingRuntime")
    tj["metadata"] = {"name": "torch", "namespace": namespace}
    who.stranger.create(tj)
    job = who.stranger.create(
        {
            "apiVersion": "trainer.kubeflow.org/v1alpha1",
            "kind": "TrainJob",
            "metadata": {"name": "resnet", "namespace": namespace},
            "spec": {"runtimeRef": {"name": "torch", "kind": "TrainingRuntime"}, "suspend": True},
        }
    )
    assert merge_patch(who.stranger, job, {"spec": {"suspend": False}})["spec"]["suspend"] is False


# -- Issue 10: the same tampering, refused by the policies alone (no webhook) ----------------------------


def _patched_a(tj: dict, value: str) -> list[dict]:
    return [{"op": "replace", "path": A_PATH, "value": value}]


A_PATH = (
    "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template/metadata"
    "/annotations/dispatch.phpboyscout.uk~1admission"
)


def test_item_7_only_dispatch_raises_a_and_only_by_one(who, namespace, policies):
    tj = create(who, namespace)
    err = denied(who.stranger, tj, _patched_a(tj, "999999"), content_type=JSON_PATCH)
    assert "only dispatch, or admission in the write that unsuspends, raises A" in err
    jump = [*_patched_a(tj, "5"), {"op": "add", "path": FLOOR_PATH, "value": "5"}]
    assert "max(A, floor) + 1" in denied(who.dispatch, tj, jump, content_type=JSON_PATCH)
    json_patch(who.dispatch, tj, raise_admission(tj).patch)  # the raise itself passes


FLOOR_PATH = "/metadata/annotations/dispatch.phpboyscout.uk~1admission-floor"


def test_in_a_multikueue_queue_dispatch_alone_raises_by_k(who, namespace, policies):
    # Kueue's defaulting sets spec.managedBy in a queue with the MultiKueue check; tier A plays it at creation.
    sub = submission(namespace=namespace, n=7)
    who.dispatch.create(build_runtime_copy(sub, runtime()))
    built = build_trainjob(sub, runtime()["spec"])
    built["spec"]["managedBy"] = MULTIKUEUE_MANAGED_BY
    tj = who.dispatch.create(built)
    by_k = raise_dispatch(tj, 3).patch
    err = denied(who.stranger, tj, _patched_a(tj, "3"), content_type=JSON_PATCH)
    assert "only dispatch, or admission in the write that unsuspends, raises A" in err
    after = json_patch(who.dispatch, tj, by_k)  # the gate's raise: A and the floor 0 -> 3
    assert (admission_count(after), admission_floor(after)) == (3, 3)
    plain = create(who, namespace)  # not MultiKueue's: dispatch too raises by 1 only
    assert "max(A, floor) + 1" in denied(who.dispatch, plain, raise_dispatch(plain, 3).patch, content_type=JSON_PATCH)


@pytest.mark.parametrize("queue", ["team-a-queue", None])
def test_items_3_and_4_the_queue_never_changes(who, namespace, policies, queue):
    tj = create(who, namespace, queue=queue)
    err = denied(who.stranger, tj, {"metadata": {"labels": {"kueue.x-k8s.io/queue-name": "no-check-queue"}}})
    assert "is chosen at Start and never changes" in err


def test_item_2_other_entries_may_not_override_a(who, namespace, policies):
    tj = create(who, namespace)
    entry = {
        "manager": "example.com/mine",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"metadata": {"annotations": {
                "dispatch.phpboyscout.uk/admission": "0"}}}}}}]}}},
    }  # fmt: skip
    err = denied(who.stranger, tj, [{"op": "add", "path": "/spec/runtimePatches/-", "value": entry}],
                 content_type=JSON_PATCH)  # fmt: skip
    assert "another manager's runtime-patch entry sets only pod labels and annotations" in err
    entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"] = {
        "spec": {"nodeSelector": {"zone": "a"}}
    }
    json_patch(who.stranger, tj, [{"op": "add", "path": "/spec/runtimePatches/-", "value": entry}])


@pytest.mark.parametrize(
    "pod",
    [
        # A file mounted over the prologue's shell decides the identity the job sees; a volume named as dispatch's
        # credential replaces its source; the service account, the JobSet's and the Job's metadata likewise.
        {"spec": {"containers": [{"name": "node", "volumeMounts": [{"name": "x", "mountPath": "/bin"}]}]}},
        {"spec": {"volumes": [{"name": "dispatch-credential-0", "emptyDir": {}}]}},
        {"spec": {"serviceAccountName": "powerful"}},
        {"metadata": {"finalizers": ["example.com/stuck"]}},
    ],
)
def test_item_2_other_entries_carry_only_what_kueues_does(who, namespace, policies, pod):
    tj = create(who, namespace)
    entry = {
        "manager": "example.com/mine",
        "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": pod}}}]}}},
    }  # fmt: skip
    err = denied(who.stranger, tj, [{"op": "add", "path": "/spec/runtimePatches/-", "value": entry}],
                 content_type=JSON_PATCH)  # fmt: skip
    assert "not the trainer container, its volumes or dispatch's keys" in err


ENTRY_PATH = "/spec/runtimePatches/0"
POD_PATH = ENTRY_PATH + "/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec/template"


SECOND_JOB = {
    "name": "extra",
    "template": {"spec": {"template": {"metadata": {"annotations": {"dispatch.phpboyscout.uk/admission": "5"}}}}},
}
REWRITES = {
    "a pod label": ("replace", POD_PATH + "/metadata/labels/dispatch.phpboyscout.uk~1submission", "9"),
    "a pod annotation": ("add", POD_PATH + "/metadata/annotations/example.com~1note", "x"),
    "the pod spec": ("add", POD_PATH + "/spec", {"nodeSelector": {"zone": "a"}}),
    "a second job": ("add", ENTRY_PATH + "/trainingRuntimeSpec/template/spec/replicatedJobs/-", SECOND_JOB),
}
"""Rewrites of dispatch's entry other than A. (A second entry of dispatch's manager the CRD refuses itself.)"""


@pytest.mark.parametrize("rewrite", list(REWRITES))
def test_dispatchs_entry_changes_only_in_a_even_for_dispatch(who, namespace, policies, rewrite):
    """update.runtime-patch, in-process: the webhook is not sent the TrainJob's updates where the policies run."""
    tj = create(who, namespace)
    test = [{"op": "test", "path": ENTRY_PATH + "/manager", "value": "dispatch.phpboyscout.uk/adapter"}]
    op, path, value = REWRITES[rewrite]
    err = denied(who.dispatch, tj, [*test, {"op": op, "path": path, "value": value}], content_type=JSON_PATCH)
    assert "dispatch's runtime-patch entry is written at creation" in err or "never falls" in err, err
    raised = json_patch(who.dispatch, tj, raise_admission(tj).patch)  # A itself changes
    # Another manager's entry leaves dispatch's as it was.
    kueue = {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": {"spec": {"nodeSelector": {"zone": "a"}}}}}}]}}}}  # fmt: skip
    json_patch(who.stranger, raised, [{"op": "add", "path": "/spec/runtimePatches/-", "value": kueue}])


def test_a_runtime_copys_spec_never_changes_even_for_dispatch(who, namespace, policies):
    """runtime-copy.immutable, in-process; its metadata may change (Start's owner reference, Trainer's finalizer)."""
    sub = submission(namespace=namespace)
    copy_ = who.dispatch.create(build_runtime_copy(sub, runtime()))
    err = denied(who.dispatch, copy_, {"spec": {"template": {"metadata": {"labels": {"example.com/x": "y"}}}}})
    assert "a runtime copy's spec never changes after creation" in err
    merge_patch(who.dispatch, copy_, {"metadata": {"finalizers": ["example.com/in-use"]}})
    merge_patch(who.dispatch, copy_, {"metadata": {"finalizers": None}})


def _opened(who: Principals, tj: dict, *, mark: bool = True) -> dict:
    """Open in Kueue mode (the gate removed, with the opened mark unless ``mark`` is false), then the raise."""
    notes: dict = {ANNOTATION_ADMISSION_GATED_BY: None}
    if mark:
        notes["dispatch.phpboyscout.uk/opened"] = "true"
    opened = merge_patch(who.dispatch, tj, {"metadata": {"annotations": notes}})
    return json_patch(who.dispatch, opened, raise_admission(opened).patch)


def test_the_unsuspend_without_the_webhook(who, namespace, policies):
    """Kueue's admission, played by the stranger (the policies do not tell Kueue apart here)."""
    never_opened = _opened(who, create(who, namespace), mark=False)
    start = {"spec": {"suspend": False}, "metadata": {"annotations": {STARTED: "1"}}}
    assert "dispatch opens the job before any execution" in denied(who.stranger, never_opened, start)

    tj = _opened(who, create(who, namespace, n=4))
    err = denied(who.stranger, tj, {"spec": {"suspend": False}})
    assert "must record A 1 in the write that unsuspends" in err  # the mutating webhook is not there: closed
    # A queue without dispatch's check: no approval of the gate's, refused.
    assert "carries dispatch.phpboyscout.uk/approved-admission none" in denied(who.stranger, tj, start)
    tj = _approve(who, tj, 1)
    running = merge_patch(who.stranger, tj, start)  # what the mutating webhook would have added
    assert running["metadata"]["annotations"][STARTED] == "1"
    evicted = merge_patch(who.stranger, running, {"spec": {"suspend": True}})
    assert "A 1 is not above 1" in denied(who.stranger, evicted, start)  # item 1: re-admitted without a raise
    raised = json_patch(who.dispatch, evicted, raise_admission(evicted).patch)
    start_2 = {"spec": {"suspend": False}, "metadata": {"annotations": {STARTED: "2"}}}
    # One approval starts one execution: the approval of A 1 does not start A 2.
    assert "carries dispatch.phpboyscout.uk/approved-admission 1/wl-uid" in denied(who.stranger, raised, start_2)
    forged = {"metadata": {"annotations": {"dispatch.phpboyscout.uk/approved-admission": "2/wl-uid"}}}
    assert "only dispatch adds, changes or removes annotations" in denied(who.stranger, raised, forged)
    merge_patch(who.stranger, _approve(who, raised, 2), start_2)


def _approve(who: Principals, tj: dict, a: int) -> dict:
    """The readmission gate's approval of the execution that starts with A ``a`` (agent/domain/decide.py), as dispatch."""
    return json_patch(who.dispatch, tj, [*preconditions(tj), *approval_ops(tj, a, "wl-uid")])


STARTED = "dispatch.phpboyscout.uk/admission-started"


def _workload(who: Principals, namespace: str, owner: str) -> dict:
    return who.stranger.create({
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {"name": f"trainjob-{owner}-1a2b3", "namespace": namespace, "ownerReferences": [
            {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": owner, "uid": "0" * 8}]},
        "spec": {"queueName": "q", "podSets": [{"name": "node", "count": 1, "template": {"spec": {
            "containers": [{"name": "c", "image": "x"}]}}}]},
    })  # fmt: skip


def _check(state: str, **extra) -> dict:
    return {"name": "dispatch-admission", "state": state, "message": "", "lastTransitionTime": "2026-12-01T10:00:00Z",
            **extra}  # fmt: skip


def test_items_1_and_2_workload_status(control_plane, who, namespace, policies):
    wl = _workload(who, namespace, "dj-01arz3ndektsv4rrffq69g5fav-s3")
    pending = {"status": {"admissionChecks": [_check("Pending")]}}
    wl = control_plane.admin.request("PATCH", control_plane.admin.object_path(wl) + "/status", pending,
                                     content_type=MERGE)  # fmt: skip
    ready = {"status": {"admissionChecks": [_check("Ready")]}}
    err = denied(who.stranger, wl, ready, subresource="status")
    assert "only dispatch's admission controller sets its check Ready" in err
    forged = {"status": {"admissionChecks": [_check("Pending", podSetUpdates=[
        {"name": "node", "annotations": {"dispatch.phpboyscout.uk/admission": "0"}}])]}}  # fmt: skip
    assert "podSetUpdates may carry pod keys" in denied(who.stranger, wl, forged, subresource="status")
    who.dispatch.request("PATCH", who.dispatch.object_path(wl) + "/status", ready, content_type=MERGE)
    # Another party's Workload: its check is nobody's business here.
    other = _workload(who, namespace, "resnet")
    who.stranger.request("PATCH", who.stranger.object_path(other) + "/status", ready, content_type=MERGE)


def test_item_6_a_held_workload_stays_inactive(who, namespace, policies):
    wl = _workload(who, namespace, "dj-01arz3ndektsv4rrffq69g5fav-s3")
    held = merge_patch(who.dispatch, wl, {"spec": {"active": False}, "metadata": {"annotations": {
        "dispatch.phpboyscout.uk/hold-instance": "h-1", "dispatch.phpboyscout.uk/hold-who": "ops"}}})  # fmt: skip
    err = denied(who.stranger, held, {"spec": {"active": True}})
    assert "only Release reactivates it" in err
    released = {"spec": {"active": True}, "metadata": {"annotations": {
        "dispatch.phpboyscout.uk/hold-instance": None, "dispatch.phpboyscout.uk/hold-who": None}}}  # fmt: skip
    assert merge_patch(who.dispatch, held, released)["spec"]["active"] is True


def _jobset(who: Principals, namespace: str, name: str) -> dict:
    return who.stranger.create({
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"suspend": True, "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "node", "image": "x"}]}}}}}]},
    })  # fmt: skip


def test_item_5_j_never_falls(control_plane, who, namespace, policies):
    js = _jobset(who, namespace, "dj-01arz3ndektsv4rrffq69g5fav-s3")
    path = control_plane.admin.object_path(js) + "/status"
    js = control_plane.admin.request("PATCH", path, {"status": {"restarts": 2}}, content_type=MERGE)
    err = denied(who.stranger, js, {"status": {"restarts": 0}}, subresource="status")
    assert "J (restarts) of a dispatch job never falls: saw 2 -> 0" in err
    other = _jobset(who, namespace, "resnet")
    path = who.stranger.object_path(other) + "/status"
    who.stranger.request("PATCH", path, {"status": {"restarts": 2}}, content_type=MERGE)
    who.stranger.request("PATCH", path, {"status": {"restarts": 0}}, content_type=MERGE)


def _running_jobset(namespace: str, name: str, owner: str | None = None, **spec) -> dict:
    refs = [] if owner is None else [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                       "name": owner, "uid": "00000000-0000-0000-0000-000000000001"}]  # fmt: skip
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace, "ownerReferences": refs},
        "spec": {**spec, "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "node", "image": "x"}]}}}}}]},
    }  # fmt: skip


def _created_or_refused(http, obj: dict, *, refusal: bool) -> str:
    """Create ``obj`` as a dry run (the policy loads asynchronously: until it refuses, when a refusal is expected);
    the refusal's message, or '' when it was admitted."""
    path = http.collection_path(obj["apiVersion"], obj["kind"], obj["metadata"]["namespace"])
    deadline = time.monotonic() + 30
    while True:
        try:
            http.request("POST", path, obj, query={"dryRun": "All"})
        except ApiError as err:
            if err.status != 403:
                raise
            return json.loads(err.body)["message"]
        if not refusal:
            return ""
        assert time.monotonic() < deadline, f"the create of {obj['metadata']['name']} was not refused within 30 s"
        time.sleep(0.2)


def test_item_5_a_dispatch_jobset_is_created_suspended_by_everyone(control_plane, who, namespace, policies):
    """Trainer creates a JobSet with its TrainJob's spec.suspend, also for a TrainJob being deleted (Stop): a
    running create would restart J at 0 under the same A. Refused for every principal, the admin included."""
    name = "dj-01arz3ndektsv4rrffq69g5fav-s3"
    running = [
        _running_jobset(namespace, name, suspend=False),
        _running_jobset(namespace, name),  # spec.suspend left out
        _running_jobset(namespace, "renamed", owner=name, suspend=False),  # dispatch's by its owner alone
    ]
    for http in (who.stranger, who.dispatch, control_plane.admin):
        for js in running:
            message = _created_or_refused(http, js, refusal=True)
            assert "a dispatch JobSet is created suspended" in message, message
            assert "whose J starts again at 0" in message, message
        assert _created_or_refused(http, _running_jobset(namespace, name, suspend=True), refusal=False) == ""
    # Not dispatch's: created running as their owners like, "dj-" prefix or not.
    for other in ("resnet", "dj-resnet"):
        assert _created_or_refused(who.stranger, _running_jobset(namespace, other, owner=other), refusal=False) == ""


def _trainer_job(namespace: str, name: str, a: str | None, *, suspend: bool) -> dict:
    annotations = {} if a is None else {ANNOTATION_ADMISSION: a}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"suspend": suspend, "backoffLimit": 0, "template": {
            "metadata": {"annotations": annotations},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "node", "image": "x"}]}}},
    }  # fmt: skip


def _resumed(http, job: dict, a: str | None) -> str:
    """Resume ``job`` as JobSet does (one update: the pod template's annotations merged, ``suspend: false``), as a
    dry run; the refusal's message, or '' when it was admitted."""
    patch: dict = {"spec": {"suspend": False}}
    if a is not None:  # None: the template left as it is
        patch["spec"]["template"] = {"metadata": {"annotations": {ANNOTATION_ADMISSION: a}}}
    path = http.object_path(job)
    try:
        http.request("PATCH", path, patch, content_type=MERGE, query={"dryRun": "All"})
    except ApiError as err:
        if err.status != 403:
            raise
        return json.loads(err.body)["message"]
    return ""


def _suspended_again(admin, job: dict) -> dict:
    return admin.request("PATCH", admin.object_path(job), {"spec": {"suspend": True}}, content_type=MERGE)


def test_a_dispatch_trainer_job_is_resumed_only_with_a_raised(control_plane, namespace, policies):
    """Kueue suspends the Job of a TrainJob whose Workload is gone (a TrainJob being deleted), Trainer resumes the
    JobSet, and JobSet the Job: without the rule its rank ran again under the same A and J. Refused for every
    principal (shown with the admin: the rule names nobody); the first start, and a resume with the A of a new
    admission, pass."""
    admin = control_plane.admin
    job = admin.create(_trainer_job(namespace, "dj-01arz3ndektsv4rrffq69g5fav-s3-node-0", "1", suspend=True))
    # The first start (generation 1: created suspended, never changed): whatever A JobSet created it with.
    assert _resumed(admin, job, "1") == ""
    admin.request("PATCH", admin.object_path(job), {"spec": {"suspend": False}}, content_type=MERGE)
    job = _suspended_again(admin, job)  # Kueue's suspension of a child
    deadline = time.monotonic() + 30
    while not (message := _resumed(admin, job, "1")):  # the policy loads asynchronously
        assert time.monotonic() < deadline, "the resume under the same A was not refused within 30 s"
        time.sleep(0.2)
    assert "resumed (spec.suspend true -> false) only with A raised" in message, message
    assert "saw A 1 -> 1" in message, message
    assert "saw A 1 -> 1" in _resumed(admin, job, None), "A merged unchanged, as JobSet merges it"
    assert "saw A 1 -> 0" in _resumed(admin, job, "0")
    assert "saw A 1 -> x" in _resumed(admin, job, "x")
    # The resume that follows a readmission: the JobSet's template carries the raised A.
    assert _resumed(admin, job, "2") == ""
    # A Job whose pods carry no A (another replicated job: no execution identity) resumes as it likes.
    other = admin.create(_trainer_job(namespace, "dj-01arz3ndektsv4rrffq69g5fav-s3-init-0", None, suspend=False))
    other = _suspended_again(admin, other)
    assert _resumed(admin, other, None) == ""


def test_item_10_no_runtime_copy_restarts_in_place(who, namespace, policies):
    sub = submission(namespace=namespace)
    copy_ = build_runtime_copy(sub, runtime())
    copy_["spec"]["template"]["spec"]["failurePolicy"] = {"restartStrategy": "InPlaceRestart", "maxRestarts": 1}
    collection = who.dispatch.collection_path(copy_["apiVersion"], copy_["kind"], namespace)
    deadline = time.monotonic() + 30
    refusal: ApiError | None = None
    while refusal is None:  # the policy loads asynchronously: dry runs until it refuses
        try:
            who.dispatch.request("POST", collection, copy_, query={"dryRun": "All"})
        except ApiError as err:
            refusal = err
        else:
            assert time.monotonic() < deadline, "InPlaceRestart was not refused within 30 s"
            time.sleep(0.2)
    assert refusal.status == 403, refusal
    assert "never restarts in place" in json.loads(refusal.body)["message"]


def test_item_10_failure_rules_that_raise_j_pass_the_runtime_copies_policy(who, namespace, policies):
    """The policy's RestartJob expression evaluates on a copy with failure rules without an error (an error
    would refuse every such copy) and the type check above passes. Trainer v2.2.1's CRD itself refuses
    the RestartJob action before any policy sees it, so the refusal cannot be shown on this Trainer; the
    webhook's rule (contract.runtime_requirements) is unit-tested."""
    sub = submission(namespace=namespace)
    copy_ = build_runtime_copy(sub, runtime())
    trainer = trainer_replicated_job(copy_["spec"])["name"]
    rules = [
        {"name": "a", "action": "RestartJobSet", "targetReplicatedJobs": [trainer]},
        {"name": "b", "action": "FailJobSet"},
    ]
    copy_["spec"]["template"]["spec"]["failurePolicy"] = {"maxRestarts": 1, "rules": rules}
    collection = who.dispatch.collection_path(copy_["apiVersion"], copy_["kind"], namespace)
    who.dispatch.request("POST", collection, copy_, query={"dryRun": "All"})


_MOUNT_PATHS = [
    "/var/run/dispatch-k8s/prologue", "/var/run/dispatch-k8s/prologue/prologue.sh", "/var/run/dispatch-k8s", "/",
    "/var/run/dispatch-k8s//prologue/prologue.sh", "/var/run/dispatch-k8s/./prologue", "/x/../var/run", "/data/",
    "//data", "data", "", "/var/run/dispatch-k8s/prologues", "/var/run/secrets", "/data", "/opt/dispatch-x",
]  # fmt: skip


def test_the_runtime_copies_policy_refuses_a_trainer_mount_over_the_prologue_as_the_webhook_does(who, namespace,
                                                                                                   policies):  # fmt: skip
    """runtime.prologue-mount and its CEL twin decide alike on every path (they read only canonical ones: CEL
    cannot normalise), for mounts and devices of the trainer container and for a volume under the prologue's
    volume name; mounts of other containers pass both."""
    sub = submission(namespace=namespace)
    base = build_runtime_copy(sub, runtime())
    collection = who.dispatch.collection_path(base["apiVersion"], base["kind"], namespace)

    def variant(change) -> dict:
        copy_ = copy.deepcopy(base)
        job = trainer_replicated_job(copy_["spec"])
        change(job["template"]["spec"]["template"]["spec"])
        return copy_

    def refused(copy_: dict) -> bool:
        try:
            who.dispatch.request("POST", collection, copy_, query={"dryRun": "All"})
        except ApiError as err:
            refusal = err
        else:
            return False
        assert refusal.status == 403, refusal
        assert "mounts nothing at, above or below /var/run/dispatch-k8s/prologue" in refusal.body, refusal.body
        return True

    def webhook_refuses(copy_: dict) -> bool:
        job = trainer_replicated_job(copy_["spec"])
        return bool(prologue_mount_problems(job["template"]["spec"]["template"]["spec"], "x"))

    over = variant(lambda pod: pod["containers"][0].update(volumeMounts=[{"name": "x", "mountPath": "/var"}]))
    deadline = time.monotonic() + 30
    while not refused(over):  # the policy loads asynchronously
        assert time.monotonic() < deadline, "a mount over the prologue was not refused within 30 s"
        time.sleep(0.2)
    cases = [(f"mount {p!r}", variant(lambda pod, p=p: pod["containers"][0].update(
        volumeMounts=[{"name": "x", "mountPath": p}]))) for p in _MOUNT_PATHS]  # fmt: skip
    cases += [(f"device {p!r}", variant(lambda pod, p=p: pod["containers"][0].update(
        volumeDevices=[{"name": "x", "devicePath": p}]))) for p in _MOUNT_PATHS[:6]]  # fmt: skip
    cases.append(("volume named dispatch-prologue", variant(lambda pod: pod.update(
        volumes=[{"name": "dispatch-prologue", "emptyDir": {}}]))))  # fmt: skip
    cases.append(("a sidecar's mount", variant(lambda pod: pod["containers"].append(
        {"name": "sidecar", "image": "busybox", "volumeMounts": [{"name": "x", "mountPath": "/var/run"}]}))))  # fmt: skip
    decisions = {what: (refused(c), webhook_refuses(c)) for what, c in cases}
    assert {what: d for what, d in decisions.items() if d[0] != d[1]} == {}, "the policy and the rule disagree"
    assert decisions["mount '/data'"] == (False, False)
    assert decisions["device '/var/run/dispatch-k8s'"] == (True, True)
    assert decisions["volume named dispatch-prologue"] == (True, True)
    assert decisions["a sidecar's mount"] == (False, False)


# -- dispatch's pod finalizer and what ties a trainer pod to its execution (issue 10, item 11) --------


def _may_edit_pods(control_plane, namespace: str) -> None:
    """Both principals may patch pods (the stranger of issue 10 has ordinary pod RBAC)."""
    name = f"pods-{secrets.token_hex(3)}"
    rbac = "rbac.authorization.k8s.io/v1"
    rules = [{"apiGroups": [""], "resources": ["pods", "pods/status"], "verbs": ["get", "update", "patch", "delete"]}]
    control_plane.admin.create({"apiVersion": rbac, "kind": "Role", "metadata": {"name": name, "namespace": namespace},
                                "rules": rules})  # fmt: skip
    for sa in ("dispatch", "stranger"):
        control_plane.admin.create(
            {
                "apiVersion": rbac,
                "kind": "RoleBinding",
                "metadata": {"name": f"{name}-{sa}", "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": namespace}],
            }
        )


def _trainer_pod(control_plane, namespace: str) -> dict:
    control_plane.ensure_service_account(namespace, "default")
    return control_plane.admin.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"dj-x-node-0-0-{secrets.token_hex(3)}",
                "namespace": namespace,
                "labels": {"jobset.sigs.k8s.io/jobset-name": "dj-x", "jobset.sigs.k8s.io/restart-attempt": "0",
                           "batch.kubernetes.io/job-completion-index": "0", "team": "a"},
                "annotations": {"dispatch.phpboyscout.uk/admission": "1"},
                "finalizers": [POD_FINALIZER],
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "dj-x-node-0",
                                     "uid": "00000000-0000-0000-0000-000000000001", "controller": True}],
            },
            "spec": {"nodeName": "gone-node", "automountServiceAccountToken": False,
                     "containers": [{"name": "node", "image": "pytorch/pytorch"}]},
        }
    )  # fmt: skip


def test_only_dispatch_removes_its_pod_finalizer_and_nobody_unties_a_trainer_pod(
    control_plane, who, namespace, policies
):
    _may_edit_pods(control_plane, namespace)
    p = _trainer_pod(control_plane, namespace)
    path = who.stranger.object_path(p)

    def patch(client, ops, sub=""):
        return client.request("PATCH", path + sub, ops, content_type="application/json-patch+json")

    strip = [{"op": "test", "path": "/metadata/finalizers/0", "value": POD_FINALIZER},
             {"op": "remove", "path": "/metadata/finalizers/0"}]  # fmt: skip

    # Each refusal through denied: the canary proves one policy loaded, and these are others.
    def stranger(ops, sub=""):
        return denied(who.stranger, p, ops, content_type=JSON_PATCH, subresource=sub)

    assert "only dispatch removes its finalizer" in stranger(strip)
    assert "only dispatch removes its finalizer" in stranger(strip, "status")
    orphan = [{"op": "remove", "path": "/metadata/ownerReferences"}]
    assert "ownerReferences of a dispatch trainer pod" in stranger(orphan)
    unlabel = [{"op": "remove", "path": "/metadata/labels/jobset.sigs.k8s.io~1jobset-name"}]
    assert "labels of a dispatch trainer pod" in stranger(unlabel)
    relabel = [{"op": "replace", "path": "/metadata/labels/jobset.sigs.k8s.io~1restart-attempt", "value": "9"}]
    assert "labels of a dispatch trainer pod" in stranger(relabel)
    re_a = [{"op": "replace", "path": "/metadata/annotations/dispatch.phpboyscout.uk~1admission", "value": "5"}]
    assert "annotations of a dispatch trainer pod" in stranger(re_a)
    # What does not tie the pod to its execution stays the stranger's to change; a delete is not refused
    # (the finalizer keeps the object until dispatch proves its processes gone).
    patch(who.stranger, [{"op": "replace", "path": "/metadata/labels/team", "value": "b"}])
    who.stranger.request("DELETE", path, {"gracePeriodSeconds": 0})
    deleting = control_plane.admin.get("v1", "Pod", p["metadata"]["name"], namespace)
    assert deleting["metadata"]["deletionTimestamp"]  # still there: deleted, not gone
    # dispatch may remove it, and then the pod goes.
    patch(who.dispatch, strip)
    deadline = time.monotonic() + 15
    while control_plane.admin.get_or_none("v1", "Pod", p["metadata"]["name"], namespace) is not None:
        assert time.monotonic() < deadline, "the pod stayed after its last finalizer was removed"
        time.sleep(0.2)
