import pytest

from contract.errors import ContractError
from contract.keys import GATE
from contract.trainjob import build_runtime_copy, build_trainjob, runtime_copy_owner_reference, runtime_source
from harness.fixtures import JOB_ID, runtime, submission, trainjob


def test_kueue_mode_trainjob():
    tj = build_trainjob(submission(priority_class="high", site_labels={"team": "a"}), runtime()["spec"])
    meta = tj["metadata"]
    assert meta["name"] == "dj-01arz3ndektsv4rrffq69g5fav-s3"
    assert meta["namespace"] == "team-a"
    assert meta["labels"] == {
        "team": "a",
        "dispatch.phpboyscout.uk/job-id": JOB_ID,
        "dispatch.phpboyscout.uk/submission": "3",
        "kueue.x-k8s.io/queue-name": "team-a-queue",
        "kueue.x-k8s.io/priority-class": "high",
    }
    assert meta["annotations"] == {
        "dispatch.phpboyscout.uk/comment": "dispatch:s=3;a=2",
        "kueue.x-k8s.io/admission-gated-by": GATE,
    }
    assert tj["spec"]["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "TrainingRuntime",
        "name": meta["name"],
    }
    assert tj["spec"]["suspend"] is True
    assert [p["manager"] for p in tj["spec"]["runtimePatches"]] == ["dispatch.phpboyscout.uk/adapter"]
    assert "activeDeadlineSeconds" not in tj["spec"]


def test_plain_mode_is_suspended_without_gate_or_queue():
    tj = build_trainjob(submission(queue=None, active_deadline_seconds=600), runtime()["spec"])
    assert tj["spec"]["suspend"] is True
    assert "kueue.x-k8s.io/admission-gated-by" not in tj["metadata"]["annotations"]
    assert "kueue.x-k8s.io/queue-name" not in tj["metadata"]["labels"]
    assert tj["spec"]["activeDeadlineSeconds"] == 600


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"job_id": "nope"}, "JobID"),
        ({"n": 1_000_000}, "N"),
        ({"g": -1}, "G"),
        ({"attempt": -1}, "attempt"),
        ({"site_labels": {"kueue.x-k8s.io/queue-name": "x"}}, "site labels.kueue.x-k8s.io/queue-name"),
        (
            {"site_annotations": {"dispatch.phpboyscout.uk/x": "y"}},
            "site annotations.dispatch.phpboyscout.uk/x",
        ),
        ({"queue": ""}, "kueue.localQueue"),
        ({"queue": None, "priority_class": "high"}, "kueue.priorityClass"),
        ({"active_deadline_seconds": 0}, "activeDeadlineSeconds"),
        ({"active_deadline_seconds": True}, "activeDeadlineSeconds"),
        ({"command": []}, "command"),
        ({"env": {"DISPATCH_X": "1"}}, "env.DISPATCH_X"),
    ],
)
def test_refusals_name_the_field(overrides, field):
    with pytest.raises(ContractError) as err:
        build_trainjob(submission(**overrides), runtime()["spec"])
    assert err.value.field == field


def test_runtime_copy():
    src = runtime()
    copy_ = build_runtime_copy(submission(), src)
    assert copy_["kind"] == "TrainingRuntime"
    assert copy_["metadata"] == {
        "name": "dj-01arz3ndektsv4rrffq69g5fav-s3",
        "namespace": "team-a",
        "labels": {"dispatch.phpboyscout.uk/job-id": JOB_ID, "dispatch.phpboyscout.uk/submission": "3"},
        "annotations": {"dispatch.phpboyscout.uk/runtime-source": "ClusterTrainingRuntime/torch-distributed@4711"},
    }
    assert copy_["spec"] == src["spec"]
    copy_["spec"]["mlPolicy"]["numNodes"] = 9
    assert src["spec"]["mlPolicy"]["numNodes"] == 1  # verbatim, but not aliased


def test_runtime_copy_refusals():
    with pytest.raises(ContractError, match="no spec"):
        build_runtime_copy(submission(), {"kind": "TrainingRuntime", "metadata": {"name": "x", "resourceVersion": "1"}})
    with pytest.raises(ContractError, match="as read from the API"):
        runtime_source({"kind": "Pod", "metadata": {"name": "x", "resourceVersion": "1"}})
    with pytest.raises(ContractError, match="as read from the API"):
        runtime_source({"kind": "TrainingRuntime", "metadata": {"name": "x"}})
    no_trainer = runtime()
    no_trainer["spec"]["template"]["spec"]["replicatedJobs"].pop()
    with pytest.raises(ContractError):
        build_runtime_copy(submission(), no_trainer)


def test_owner_reference_is_not_a_controller():
    assert runtime_copy_owner_reference(trainjob()) == {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "name": "dj-01arz3ndektsv4rrffq69g5fav-s3",
        "uid": "tj-uid",
        "controller": False,
        "blockOwnerDeletion": False,
    }
    with pytest.raises(ContractError):
        runtime_copy_owner_reference({"metadata": {"name": "x"}})
