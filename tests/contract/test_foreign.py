import pytest

from contract.foreign import (
    foreign_reasons,
    jobset_uid_ops,
    owns_jobset,
    runtime_copy_reason,
    trainer_job_name,
    trainer_pods,
)
from contract.keys import ANNOTATION_ADMISSION, ANNOTATION_ADMISSION_FLOOR, ANNOTATION_JOBSET_UID
from harness.fixtures import trainjob


def pod(name, a, job="node"):
    return {
        "metadata": {
            "name": name,
            "labels": {"jobset.sigs.k8s.io/replicatedjob-name": job},
            "annotations": {ANNOTATION_ADMISSION: a},
        }
    }


def test_nothing_foreign_in_a_healthy_job():
    assert (
        foreign_reasons(
            trainjob(),
            jobset={"metadata": {"uid": "js"}},
            pods=[pod("p", "0")],
            runtime_copy={"metadata": {"generation": 1}},
        )
        == []
    )


def test_trainer_pods_are_those_of_dispatchs_replicated_job():
    assert trainer_job_name(trainjob()) == "node"
    assert [p["metadata"]["name"] for p in trainer_pods(trainjob(), [pod("a", "1"), pod("b", "1", job="init")])] == [
        "a"
    ]
    assert trainer_job_name({}) is None


def test_edited_runtime_copy_and_non_count_annotation():
    reasons = foreign_reasons(
        trainjob(), pods=[pod("p", "x")], runtime_copy={"metadata": {"name": "rc", "generation": 2}}
    )
    assert reasons == [
        "Pod p has admission annotation 'x', which is not a count.",
        "Runtime copy rc has generation 2: someone edited it after creation.",
    ]


def test_a_malformed_floor_does_not_hide_other_reasons():
    tj = trainjob()
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "junk"
    bare = pod("p", "1")
    del bare["metadata"]["annotations"][ANNOTATION_ADMISSION]
    assert foreign_reasons(tj, pods=[bare]) == [
        "Pod p has no admission annotation dispatch.phpboyscout.uk/admission: it was not started through a gate."
    ]


def test_below_the_floor_only_for_live_pods():
    tj = trainjob()
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "3"
    ended = {**pod("ended", "1"), "status": {"phase": "Failed"}}
    going = pod("going", "1")
    going["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    live = {**pod("live", "2"), "status": {"phase": "Running"}}
    assert foreign_reasons(tj, pods=[ended, going, live]) == [
        "Pod live has A 2, below the admission floor 3: A may have been reset."
    ]


def _jobset(uid, owner_uid, controller=True):
    ref = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "x", "uid": owner_uid}
    return {"metadata": {"uid": uid, "ownerReferences": [{**ref, "controller": controller}]}}


def test_only_the_trainjobs_own_jobset_is_recorded_and_only_once():
    tj = trainjob()
    tj["metadata"]["uid"] = "tj-uid"
    own = _jobset("js-1", "tj-uid")
    assert owns_jobset(tj, own)
    assert jobset_uid_ops(tj, own) == [
        {"op": "add", "path": f"/metadata/annotations/{ANNOTATION_JOBSET_UID.replace('/', '~1')}", "value": "js-1"}
    ]
    for orphan in (_jobset("js-0", "earlier-uid"), _jobset("js-0", "tj-uid", controller=False), {"metadata": {}}):
        assert not owns_jobset(tj, orphan)
        assert jobset_uid_ops(tj, orphan) == []
    assert jobset_uid_ops(tj, None) == []
    tj["metadata"]["annotations"][ANNOTATION_JOBSET_UID] = "js-1"
    assert jobset_uid_ops(tj, _jobset("js-2", "tj-uid")) == []  # recorded once, never corrected
    del tj["metadata"]["uid"]
    assert not owns_jobset(tj, own)


@pytest.mark.parametrize(
    ("metadata", "reported"),
    [
        ({"generation": 1}, False),
        ({"generation": 2}, True),
        # The API server raises generation by one as it sets deletionTimestamp on an object with finalizers.
        ({"generation": 2, "deletionTimestamp": "2026-12-02T05:00:00Z"}, False),
        ({"generation": 3, "deletionTimestamp": "2026-12-02T05:00:00Z"}, True),
    ],
)
def test_a_runtime_copy_being_deleted_is_not_reported_edited_for_its_deletion(metadata, reported):
    assert (runtime_copy_reason({"metadata": {"name": "rc", **metadata}}) is not None) is reported
