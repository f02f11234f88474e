"""The Active condition's write on the real API server: our one condition, no resourceVersion, test ops on
the uid and the controllerName."""

from __future__ import annotations

import pytest

from agent.domain.admission_check import active_patch
from agent.runtime.kube import Kube
from serving.client import KubeError
from tests.agent import kueue_double as kueue

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

NOW = "2026-11-29T10:00:00Z"


async def test_active_is_applied_next_to_others_conditions_without_a_resource_version(control_plane, api_client):
    cp = control_plane
    name = kueue.create_admission_check(cp)
    other = {"type": "SomethingElse", "status": "False", "reason": "Theirs", "message": "", "lastTransitionTime": NOW}
    ac = cp.admin.request("PATCH", f"/apis/kueue.x-k8s.io/v1beta2/admissionchecks/{name}/status",
                          {"status": {"conditions": [other]}}, content_type="application/merge-patch+json")  # fmt: skip
    stale = dict(ac)
    # Kueue's finalizer update moves the resourceVersion: our write must not care.
    cp.admin.merge_patch(
        kueue.KUEUE_V, "AdmissionCheck", name, {"metadata": {"finalizers": ["kueue.x-k8s.io/resource-in-use"]}}
    )
    ops = active_patch(stale, NOW)
    assert ops is not None
    assert not any(op["path"] == "/metadata/resourceVersion" for op in ops)
    await Kube(api_client).patch_admission_check_status(name, ops)
    after = cp.admin.get(kueue.KUEUE_V, "AdmissionCheck", name)
    conditions = {c["type"]: c for c in after["status"]["conditions"]}
    assert conditions["Active"]["status"] == "True"
    assert conditions["SomethingElse"] == other  # someone else's condition is left alone
    assert active_patch(after, NOW) is None  # nothing more to write
    cp.admin.merge_patch(kueue.KUEUE_V, "AdmissionCheck", name, {"metadata": {"finalizers": None}})


async def test_active_is_not_written_through_to_a_recreated_admission_check(control_plane, api_client):
    cp = control_plane
    name = kueue.create_admission_check(cp)
    old = cp.admin.get(kueue.KUEUE_V, "AdmissionCheck", name)
    cp.admin.delete(kueue.KUEUE_V, "AdmissionCheck", name)
    cp.admin.create({"apiVersion": kueue.KUEUE_V, "kind": "AdmissionCheck", "metadata": {"name": name},
                     "spec": {"controllerName": "someone.else/controller"}})  # fmt: skip
    with pytest.raises(KubeError) as err:
        await Kube(api_client).patch_admission_check_status(name, active_patch(old, NOW))
    assert err.value.status == 422  # the uid test op
    assert "status" not in cp.admin.get(kueue.KUEUE_V, "AdmissionCheck", name) or not cp.admin.get(
        kueue.KUEUE_V, "AdmissionCheck", name
    )["status"].get("conditions")


async def test_active_is_never_written_on_someone_elses_check(control_plane, api_client):
    cp = control_plane
    name = kueue.create_admission_check(cp)
    ours = cp.admin.get(kueue.KUEUE_V, "AdmissionCheck", name)
    theirs = kueue.create_admission_check(cp)
    cp.admin.delete(kueue.KUEUE_V, "AdmissionCheck", theirs)
    other = cp.admin.create({"apiVersion": kueue.KUEUE_V, "kind": "AdmissionCheck", "metadata": {"name": theirs},
                             "spec": {"controllerName": "someone.else/controller"}})  # fmt: skip
    # Even with the right uid, the controllerName test refuses it.
    ops = active_patch({**ours, "metadata": {**ours["metadata"], "name": theirs, "uid": other["metadata"]["uid"]}}, NOW)
    with pytest.raises(KubeError) as err:
        await Kube(api_client).patch_admission_check_status(theirs, ops)
    assert err.value.status == 422
