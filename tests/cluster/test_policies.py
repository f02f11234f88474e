"""The ValidatingAdmissionPolicies on the real API server: they hold with no webhook at all."""

from __future__ import annotations

import copy
import json
import secrets
import time
from collections.abc import Iterator

import pytest

from contract.admission import raise_admission
from contract.keys import ANNOTATION_ADMISSION_FLOOR, ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_JOBSET_UID
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.kube_http import ApiError
from tests.cluster.principals import Principals, json_patch, merge_patch, principals
from tests.unit.fixtures import runtime, submission
from webhook.config import Config
from webhook.config import Principals as ConfigPrincipals
from webhook.policies import admission_policies

pytestmark = pytest.mark.cluster
TRAINJOB = ("trainer.kubeflow.org/v1alpha1", "TrainJob")


@pytest.fixture
def who(control_plane, namespace) -> Principals:
    return principals(control_plane, namespace)


@pytest.fixture
def policies(control_plane, namespace, who) -> Iterator[list[dict]]:
    """The chart's policies, renamed for this test and bound to its namespace alone."""
    config = Config(dispatch=ConfigPrincipals(usernames=(who.dispatch_username,)))
    suffix = secrets.token_hex(3)
    docs = admission_policies(config, namespace="dispatch-system")
    for doc in docs:
        doc["metadata"]["name"] += f"-{suffix}"
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["policyName"] += f"-{suffix}"
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
    for doc in docs:
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


def test_policies_type_check_cleanly(control_plane, policies):
    deadline = time.monotonic() + 15
    for doc in policies:
        if doc["kind"] != "ValidatingAdmissionPolicy":
            continue
        while True:
            status = control_plane.admin.get(doc["apiVersion"], doc["kind"], doc["metadata"]["name"]).get("status", {})
            if "typeChecking" in status or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert status.get("typeChecking", {}).get("expressionWarnings", []) == [], status


def test_strangers_may_not_touch_reserved_keys(who, namespace, policies):
    tj = create(who, namespace)
    err = refused(
        lambda: merge_patch(who.stranger, tj, {"metadata": {"labels": {"dispatch.phpboyscout.uk/job-id": None}}})
    )
    assert "only dispatch adds, changes or removes labels under dispatch.phpboyscout.uk/" in err
    err = refused(
        lambda: merge_patch(who.stranger, tj, {"metadata": {"annotations": {"dispatch.phpboyscout.uk/hold-who": "me"}}})
    )
    assert "annotations under dispatch.phpboyscout.uk/" in err
    err = refused(
        lambda: merge_patch(who.stranger, tj, {"metadata": {"annotations": {ANNOTATION_ADMISSION_GATED_BY: None}}})
    )
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
    refused(lambda: merge_patch(who.stranger, tj, {"metadata": {"labels": {"dispatch.phpboyscout.uk/x": "1"}}}))
    after = merge_patch(who.stranger, tj, {"metadata": {"labels": {"team": "a"}}})
    assert after["metadata"]["labels"]["team"] == "a"


def test_a_and_the_floor_never_fall_even_for_dispatch(control_plane, who, namespace, policies):
    tj = create(who, namespace)
    once = json_patch(who.dispatch, tj, raise_admission(tj).patch)
    twice = json_patch(who.dispatch, once, raise_admission(once).patch)
    lower_a = copy.deepcopy(raise_admission(twice).patch)
    lower_a[2]["value"] = "1"
    lower_a.pop()  # leave the floor: only A falls
    err = refused(lambda: json_patch(who.dispatch, twice, lower_a))
    assert "A in dispatch's runtime patch never falls" in err
    assert "2 -> 1" in err
    err = refused(
        lambda: merge_patch(who.dispatch, twice, {"metadata": {"annotations": {ANNOTATION_ADMISSION_FLOOR: None}}})
    )
    assert "admission-floor never falls and is never removed" in err
    err = refused(
        lambda: merge_patch(who.dispatch, twice, {"metadata": {"annotations": {ANNOTATION_ADMISSION_FLOOR: "1"}}})
    )
    assert "2 -> 1" in err
    removed = [{"op": "test", "path": "/spec/runtimePatches/0/manager", "value": "dispatch.phpboyscout.uk/adapter"},
               {"op": "remove", "path": "/spec/runtimePatches/0"}]  # fmt: skip
    err = refused(lambda: json_patch(who.dispatch, twice, removed))
    assert "never falls and is never removed" in err


def test_jobset_uid_is_recorded_once(who, namespace, policies):
    tj = create(who, namespace)
    first = merge_patch(who.dispatch, tj, {"metadata": {"annotations": {ANNOTATION_JOBSET_UID: "js-1"}}})
    err = refused(
        lambda: merge_patch(who.dispatch, first, {"metadata": {"annotations": {ANNOTATION_JOBSET_UID: "js-2"}}})
    )
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
