import copy

import pytest

from agent.domain.start import (
    NOT_MANAGED,
    earlier_incarnation,
    earlier_incarnation_message,
    readback_changes,
    workload_problems,
)
from contract.keys import GATE
from contract.trainjob import build_trainjob
from harness.fixtures import as_read, runtime, submission
from tests.agent.domain.test_gate import CHECK, workload


def written():
    return build_trainjob(submission(), runtime()["spec"])


def test_an_untouched_read_back_passes_despite_what_others_add():
    read = as_read(written())  # uid, resourceVersion, Trainer's time stamp, Kueue's entry
    read["spec"]["runtimeRef"].pop("apiGroup")  # defaulted by the CRD either way
    read["spec"]["managedBy"] = "trainer.kubeflow.org/trainjob-controller"
    read["spec"]["suspend"] = True
    read["metadata"]["labels"]["added-by-someone"] = "x"
    assert readback_changes(written(), read) == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            lambda tj: tj["metadata"]["labels"].update({"dispatch.phpboyscout.uk/submission": "9"}),
            "label dispatch.phpboyscout.uk/submission: wrote '3', read '9'",
        ),
        (
            lambda tj: tj["metadata"]["annotations"].pop("kueue.x-k8s.io/admission-gated-by"),
            "annotation kueue.x-k8s.io/admission-gated-by",
        ),
        (lambda tj: tj["spec"].update(runtimeRef={"name": "other"}), "spec.runtimeRef"),
        (lambda tj: tj["spec"]["trainer"].update(image="evil:1"), "spec.trainer"),
        (lambda tj: tj["spec"].update(activeDeadlineSeconds=5), "spec.activeDeadlineSeconds"),
        (lambda tj: tj["spec"]["runtimePatches"].pop(0), "dispatch's runtime patch"),
        (
            # MultiKueue's is judged once the Workload shows the queue (tests/contract/test_multicluster.py).
            lambda tj: tj["spec"].update(managedBy="example.com/other-controller"),
            "spec.managedBy is 'example.com/other-controller'",
        ),
    ],
)
def test_tampering_is_named(change, says):
    read = as_read(written())
    change(read)
    assert any(says in c for c in readback_changes(written(), read))


def test_workload_must_carry_the_gate_and_list_the_check():
    wl = workload()
    wl["metadata"]["annotations"] = {"kueue.x-k8s.io/admission-gated-by": GATE}
    assert workload_problems(wl, [CHECK]) == []
    assert workload_problems(None, [CHECK]) == [f"{NOT_MANAGED}: no Workload appeared"]
    ungated = copy.deepcopy(wl)
    ungated["metadata"]["annotations"] = {}
    assert workload_problems(ungated, [CHECK]) == [f"{NOT_MANAGED}: its Workload does not carry the gate {GATE}"]
    assert workload_problems(wl, ["not-listed"]) == [
        f"{NOT_MANAGED}: its Workload does not list dispatch's AdmissionCheck"
    ]


def test_plain_mode_compares_spec_suspend_its_own_start_gate():
    plain = build_trainjob(submission(queue=None), runtime()["spec"])
    read = as_read(plain)
    assert readback_changes(plain, read) == []
    read["spec"]["suspend"] = False
    assert readback_changes(plain, read) == ["spec.suspend: wrote True, read False"]
    kueue = as_read(written())
    kueue["spec"]["suspend"] = False  # Kueue's field in Kueue mode
    assert readback_changes(written(), kueue) == []


# -- an earlier TrainJob of the same name ----------------------------------------------------------------

NAME = "dj-01jdq7z9v3k8m2n4p6r8t0w2y4-s3"
OLD_UID = "0ld-0000"


def meta(name, **extra):
    return {"metadata": {"name": name, "namespace": "team-a", **extra}}


def owned_by_old(name, kind="TrainJob"):
    ref = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": kind, "name": NAME, "uid": OLD_UID}
    return meta(name, ownerReferences=[ref])


def left(**seen):
    return earlier_incarnation("team-a", NAME, **({"jobset": None, "pods": [], "runtime_copy": None} | seen))


def test_nothing_left_is_no_earlier_incarnation():
    assert left() == ()


def test_a_copy_an_interrupted_start_left_is_taken_up_not_an_orphan():
    assert left(runtime_copy=meta(NAME)) == ()  # no owner yet: the TrainJob was never created


def test_everything_an_earlier_trainjob_left_is_named_as_orphans():
    seen = left(
        jobset=owned_by_old(NAME),
        pods=[meta(f"{NAME}-node-0-0-x")],
        runtime_copy=owned_by_old(NAME),
    )
    assert seen == (
        f"team-a/jobset/{NAME}",
        f"team-a/pod/{NAME}-node-0-0-x",
        f"team-a/trainingruntime/{NAME}",
    )


def test_an_orphaned_jobset_or_pod_counts_whatever_its_owner():
    # A delete with propagationPolicy Orphan strips the owner references: the name still says whose they are.
    assert left(jobset=meta(NAME), pods=[meta(f"{NAME}-node-0-0-x")]) == (
        f"team-a/jobset/{NAME}",
        f"team-a/pod/{NAME}-node-0-0-x",
    )


@pytest.mark.parametrize(
    "runtime_copy",
    [owned_by_old(NAME), meta(NAME, deletionTimestamp="2026-12-01T00:00:00Z")],
)
def test_a_copy_owned_or_being_deleted_is_an_earlier_ones(runtime_copy):
    assert left(runtime_copy=runtime_copy) == (f"team-a/trainingruntime/{NAME}",)


def test_the_refusal_says_what_to_do():
    message = earlier_incarnation_message("team-a", NAME, ["a", "b"])
    assert f"TrainJob team-a/{NAME} does not exist" in message
    assert "left 2 object(s) behind" in message
    assert "nothing was written" in message
    assert "a new run of a job is a new submission N" in message
