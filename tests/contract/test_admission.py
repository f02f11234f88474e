import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from contract.admission import (
    admission_count,
    admission_floor,
    admission_started,
    parse_count,
    preconditions,
    raise_admission,
    start_count,
    unsuspend_ops,
)
from contract.errors import ContractError
from contract.keys import ANNOTATION_ADMISSION, ANNOTATION_ADMISSION_FLOOR, ANNOTATION_ADMISSION_STARTED
from contract.ownership import runtime_patches
from harness.fixtures import trainjob
from tests.harness.kubelet import PatchTestFailed, apply_json_patch

A_PATH = (
    "trainingRuntimeSpec",
    "template",
    "spec",
    "replicatedJobs",
    0,
    "template",
    "spec",
    "template",
    "metadata",
)


def entry_meta(tj, i=0):
    node = runtime_patches(tj)[i]
    for step in A_PATH:
        node = node[step]
    return node


def test_first_raise_goes_from_zero_to_one_and_sets_the_floor():
    tj = trainjob()
    assert admission_count(tj) == 0
    assert admission_floor(tj) is None
    raised = raise_admission(tj)
    assert raised.a == 1
    after = apply_json_patch(tj, raised.patch)
    assert admission_count(after) == 1
    assert admission_floor(after) == 1


def test_the_patch_is_exactly_preconditions_then_a_then_floor():
    tj = trainjob()
    assert raise_admission(tj).patch == [
        {"op": "test", "path": "/metadata/uid", "value": "tj-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "100"},
        {
            "op": "add",
            "path": "/spec/runtimePatches/0/trainingRuntimeSpec/template/spec/replicatedJobs/0/template/spec"
            "/template/metadata/annotations/dispatch.phpboyscout.uk~1admission",
            "value": "1",
        },
        {"op": "add", "path": "/metadata/annotations/dispatch.phpboyscout.uk~1admission-floor", "value": "1"},
    ]


def test_touches_nothing_else():
    tj = trainjob()
    after = apply_json_patch(tj, raise_admission(tj).patch)
    expected = copy.deepcopy(tj)
    entry_meta(expected)["annotations"][ANNOTATION_ADMISSION] = "1"
    expected["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "1"
    assert after == expected
    assert runtime_patches(after)[1] == runtime_patches(tj)[1]  # Kueue's entry, untouched


def test_the_floor_keeps_a_rewritten_patch_from_lowering_a():
    tj = trainjob()
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "7"
    entry_meta(tj)["annotations"][ANNOTATION_ADMISSION] = "2"
    assert raise_admission(tj).a == 8


def test_a_above_the_floor_wins():
    tj = trainjob()
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "3"
    entry_meta(tj)["annotations"][ANNOTATION_ADMISSION] = "5"
    assert raise_admission(tj).a == 6


def test_a_removed_from_the_patch_is_raised_from_the_floor_and_put_back():
    tj = trainjob()
    tj["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] = "4"
    del entry_meta(tj)["annotations"]
    raised = raise_admission(tj)
    assert raised.a == 5
    assert admission_count(apply_json_patch(tj, raised.patch)) == 5


def test_missing_annotations_map_on_the_trainjob_is_created():
    tj = trainjob()
    del tj["metadata"]["annotations"]
    after = apply_json_patch(tj, raise_admission(tj).patch)
    assert after["metadata"]["annotations"] == {ANNOTATION_ADMISSION_FLOOR: "1"}


def test_dispatchs_entry_found_wherever_it_sits():
    tj = trainjob()
    tj["spec"]["runtimePatches"].reverse()
    after = apply_json_patch(tj, raise_admission(tj).patch)
    assert admission_count(after) == 1
    assert runtime_patches(after)[0]["manager"] == "kueue.x-k8s.io/manager"


def test_stale_read_fails_the_uid_test():
    tj = trainjob()
    patch = raise_admission(tj).patch
    other = copy.deepcopy(tj)
    other["metadata"]["uid"] = "another-object"
    with pytest.raises(PatchTestFailed):
        apply_json_patch(other, patch)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda tj: tj["spec"].update(suspend=False), "spec.suspend"),
        (lambda tj: tj["spec"].pop("suspend"), "spec.suspend"),
        (lambda tj: tj["spec"]["runtimePatches"].pop(0), "spec.runtimePatches"),
        (
            lambda tj: (
                entry_meta(tj).pop("annotations"),
                tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_FLOOR, None),
            ),
            "spec.runtimePatches",
        ),
        (
            lambda tj: entry_meta(tj)["annotations"].update({ANNOTATION_ADMISSION: "07"}),
            "runtime patch annotation",
        ),
        (
            lambda tj: entry_meta(tj)["annotations"].update({ANNOTATION_ADMISSION: "-1"}),
            "runtime patch annotation",
        ),
        (
            lambda tj: tj["metadata"]["annotations"].update({ANNOTATION_ADMISSION_FLOOR: "x"}),
            "annotation dispatch",
        ),
        (lambda tj: tj["metadata"]["annotations"].update({ANNOTATION_ADMISSION_FLOOR: "999999"}), "A"),
        (lambda tj: tj["metadata"].pop("resourceVersion"), "metadata"),
        (lambda tj: tj["metadata"].pop("uid"), "metadata"),
        (
            lambda tj: tj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
                "replicatedJobs"
            ].append({"name": "other"}),
            "spec.runtimePatches[0]",
        ),
    ],
)
def test_refusals(mutate, field):
    tj = trainjob()
    mutate(tj)
    with pytest.raises(ContractError) as err:
        raise_admission(tj)
    assert err.value.field.startswith(field)


@given(st.lists(st.sampled_from(["raise", "rewrite", "drop-a"]), min_size=1, max_size=30))
def test_a_only_rises_whatever_happens_to_the_patch(events):
    # Each raise must exceed every A raised before it, even when the patch is rewritten between raises.
    tj = trainjob()
    highest = 0
    for event in events:
        if event == "raise":
            raised = raise_admission(tj)
            assert raised.a > highest
            highest = raised.a
            tj = apply_json_patch(tj, raised.patch)
        elif event == "rewrite":
            entry_meta(tj).setdefault("annotations", {})[ANNOTATION_ADMISSION] = "0"
        else:
            entry_meta(tj).pop("annotations", None)
            if ANNOTATION_ADMISSION_FLOOR not in tj["metadata"]["annotations"]:
                entry_meta(tj)["annotations"] = {ANNOTATION_ADMISSION: "0"}


@pytest.mark.parametrize(("text", "value"), [("0", 0), ("1", 1), ("999999", 999999)])
def test_parse_count(text, value):
    assert parse_count("x", text) == value


@pytest.mark.parametrize("text", ["", "01", "+1", "1.0", " 1", "1\n", 1, None, "1" * 19])
def test_parse_count_refuses(text):
    with pytest.raises(ContractError):
        parse_count("x", text)


def test_preconditions_name_the_read_object():
    assert preconditions({"metadata": {"uid": "u", "resourceVersion": "9"}}) == [
        {"op": "test", "path": "/metadata/uid", "value": "u"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "9"},
    ]


# -- the raise in the write that starts an execution ----------------------------------------------------


def started_with(tj, a: int | None, floor: int | None, started: int | None):
    tj = copy.deepcopy(tj)
    if a is None:
        entry_meta(tj)["annotations"].pop(ANNOTATION_ADMISSION)
    else:
        entry_meta(tj)["annotations"][ANNOTATION_ADMISSION] = str(a)
    for key, value in ((ANNOTATION_ADMISSION_FLOOR, floor), (ANNOTATION_ADMISSION_STARTED, started)):
        tj["metadata"]["annotations"].pop(key, None)
        if value is not None:
            tj["metadata"]["annotations"][key] = str(value)
    return tj


@pytest.mark.parametrize(
    ("a", "floor", "started", "expected"),
    [
        (0, None, None, (1, True)),  # the first admission of a Kueue-mode job
        (1, 1, None, (1, False)),  # Open raised it (plain mode)
        (2, 2, 2, (3, True)),  # re-admitted: not raised since the last start
        (3, 3, 2, (3, False)),  # raised since
        (1, 3, 0, (4, True)),  # A below the floor
        (None, 2, 2, (3, True)),  # A removed: raised from the floor and put back
    ],
)
def test_start_count(a, floor, started, expected):
    tj = started_with(trainjob(), a, floor, started)
    assert start_count(tj, admission_started(tj)) == expected


@pytest.mark.parametrize(
    ("a", "floor", "says"),
    [(None, None, "raising A from nothing"), (999999, 999999, "epoch bound")],
)
def test_start_count_refuses(a, floor, says):
    tj = started_with(trainjob(), a, floor, floor)
    with pytest.raises(ContractError, match=says):
        start_count(tj, admission_started(tj))


def test_the_unsuspend_raises_and_records_in_kueue_mode_and_only_records_in_plain_mode():
    tj = started_with(trainjob(), 2, 2, 2)
    raised = apply_json_patch(tj, unsuspend_ops(tj, 2, kueue=True))
    assert (admission_count(raised), admission_floor(raised), admission_started(raised)) == (3, 3, 3)
    recorded = apply_json_patch(tj, unsuspend_ops(tj, 2, kueue=False))
    assert (admission_count(recorded), admission_floor(recorded), admission_started(recorded)) == (2, 2, 2)
    assert unsuspend_ops(started_with(trainjob(), 3, 3, 3), 2, kueue=True) == []  # raised and recorded already


def test_the_unsuspend_creates_the_annotations_map_once():
    tj = started_with(trainjob(), 0, None, None)
    del tj["metadata"]["annotations"]
    ops = unsuspend_ops(tj, None, kueue=True)
    done = apply_json_patch(tj, ops)
    assert (admission_count(done), admission_floor(done), admission_started(done)) == (1, 1, 1)


@given(st.lists(st.sampled_from(["admit", "evict", "dispatch-raise", "drop-a"]), min_size=1, max_size=40))
def test_every_start_is_numbered_above_every_start_before_it(events):
    # Kueue mode: whatever order Kueue's admissions and evictions, dispatch's own raises and a removed A come
    # in, each execution starts with an A above every A an execution started with before.
    tj = started_with(trainjob(), 0, None, None)
    starts: list[int] = []
    for event in events:
        suspended = tj["spec"].get("suspend") is True
        if event == "admit" and suspended:
            new = copy.deepcopy(tj)
            new["spec"]["suspend"] = False
            tj = apply_json_patch(new, unsuspend_ops(new, admission_started(tj), kueue=True))
            a = admission_count(tj)
            assert a is not None
            assert a == admission_started(tj)
            assert all(a > s for s in starts)
            starts.append(a)
        elif event == "evict":
            tj["spec"]["suspend"] = True
        elif event == "dispatch-raise" and suspended:
            tj = apply_json_patch(tj, raise_admission(tj).patch)
        elif event == "drop-a" and suspended and ANNOTATION_ADMISSION_FLOOR in tj["metadata"]["annotations"]:
            entry_meta(tj)["annotations"].pop(ANNOTATION_ADMISSION, None)
