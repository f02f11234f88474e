from contract.foreign import foreign_reasons, trainer_job_name, trainer_pods
from contract.keys import ANNOTATION_ADMISSION, ANNOTATION_ADMISSION_FLOOR
from tests.unit.fixtures import trainjob


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
