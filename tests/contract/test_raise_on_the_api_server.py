"""The contract's raise of A, sent to the real API server: exactly the fields we own, and a stale read
fails instead of landing."""

from __future__ import annotations

import copy

import pytest

from contract.admission import admission_count, admission_floor, raise_admission
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.fixtures import runtime, submission
from harness.kube_http import ApiError
from harness.principals import json_patch, merge_patch

pytestmark = pytest.mark.cluster


def create_trainjob(cp, namespace, **overrides):
    sub = submission(namespace=namespace, **overrides)
    cp.admin.create(build_runtime_copy(sub, runtime()))
    tj = build_trainjob(sub, runtime()["spec"])
    # Kueue's webhook appends its own entry; tier A has no Kueue, so the test plays its part.
    tj["spec"]["runtimePatches"].append(
        {"manager": "kueue.x-k8s.io/manager", "trainingRuntimeSpec": {"template": {"spec": {}}}}
    )
    return cp.admin.create(tj)


def test_raise_writes_a_and_floor_and_nothing_else(control_plane, namespace):
    tj = create_trainjob(control_plane, namespace)
    raised = raise_admission(tj)
    after = json_patch(control_plane.admin, tj, raised.patch)
    assert admission_count(after) == admission_floor(after) == 1
    assert after["spec"]["runtimePatches"][1] == tj["spec"]["runtimePatches"][1]  # Kueue's entry
    expected = copy.deepcopy(tj["spec"])
    after_spec = copy.deepcopy(after["spec"])
    for spec in (expected, after_spec):
        spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"
        ]["metadata"]["annotations"] = {}
    assert after_spec == expected
    assert json_patch(control_plane.admin, after, raise_admission(after).patch) is not None


def test_a_stale_read_fails_with_conflict_and_changes_nothing(control_plane, namespace):
    tj = create_trainjob(control_plane, namespace)
    stale = raise_admission(tj)
    merge_patch(control_plane.admin, tj, {"metadata": {"labels": {"someone": "else"}}})
    with pytest.raises(ApiError) as err:
        json_patch(control_plane.admin, tj, stale.patch)
    assert err.value.status == 409
    now = control_plane.admin.get("trainer.kubeflow.org/v1alpha1", "TrainJob", tj["metadata"]["name"], namespace)
    assert admission_count(now) == 0
    assert admission_floor(now) is None


def test_a_different_object_of_the_same_name_is_refused(control_plane, namespace):
    tj = create_trainjob(control_plane, namespace)
    raised = raise_admission(tj)
    control_plane.admin.delete("trainer.kubeflow.org/v1alpha1", "TrainJob", tj["metadata"]["name"], namespace)
    again = copy.deepcopy(tj)
    for key in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        again["metadata"].pop(key, None)
    again = control_plane.admin.create(again)
    # Same name, new uid: the JSON Patch test of the uid fails.
    with pytest.raises(ApiError) as err:
        json_patch(control_plane.admin, again, raised.patch)
    assert err.value.status == 422  # the uid test op fails before the resourceVersion is compared
    assert (
        admission_count(
            control_plane.admin.get("trainer.kubeflow.org/v1alpha1", "TrainJob", again["metadata"]["name"], namespace)
        )
        == 0
    )
