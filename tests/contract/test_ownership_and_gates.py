import pytest

from contract.gates import gates_of, has_dispatch_gate, is_opened_by_dispatch, parse_gates, without_dispatch_gate
from contract.keys import GATE
from contract.ownership import (
    dispatch_patch,
    dispatch_patch_index,
    is_dispatch,
    is_kueue_mode,
    runtime_patches,
)
from harness.fixtures import trainjob


def test_dispatch_trainjob_is_dispatchs():
    tj = trainjob()
    assert is_dispatch(tj)
    assert dispatch_patch_index(tj) == 0
    assert dispatch_patch(tj)["manager"] == "dispatch.phpboyscout.uk/adapter"


def test_by_name_alone():
    tj = {"metadata": {"name": "dj-01arz3ndektsv4rrffq69g5fav-s1"}, "spec": {}}
    assert is_dispatch(tj)
    assert dispatch_patch(tj) is None


def test_by_runtime_patch_manager_alone_whatever_the_name():
    tj = trainjob()
    tj["metadata"]["name"] = "renamed"
    tj["spec"]["runtimePatches"].reverse()
    assert is_dispatch(tj)
    assert dispatch_patch_index(tj) == 1


def test_labels_are_never_consulted():
    stripped = trainjob()
    stripped["metadata"]["labels"] = {}
    assert is_dispatch(stripped)
    claimed = {
        "metadata": {
            "name": "mine",
            "labels": {"dispatch.phpboyscout.uk/job-id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"},
        },
        "spec": {"runtimePatches": [{"manager": "kueue.x-k8s.io/manager"}]},
    }
    assert not is_dispatch(claimed)


@pytest.mark.parametrize(
    "obj",
    [
        None,
        {},
        {"metadata": None},
        {"spec": {"runtimePatches": "x"}},
        {"spec": {"runtimePatches": [None, 3]}},
        [],
    ],
)
def test_malformed_objects_are_not_dispatchs_and_do_not_crash(obj):
    assert not is_dispatch(obj)
    assert dispatch_patch_index(obj) is None
    assert isinstance(runtime_patches(obj), list)


def test_mode_is_the_queue_name_label():
    assert is_kueue_mode(trainjob())
    assert not is_kueue_mode(trainjob(queue=None))
    assert not is_kueue_mode({"metadata": {"labels": {"kueue.x-k8s.io/queue-name": ""}}})


@pytest.mark.parametrize(
    ("value", "gates"),
    [
        (None, []),
        ("", []),
        (GATE, [GATE]),
        (f" a.example/x , {GATE},", ["a.example/x", GATE]),
        (7, []),
    ],
)
def test_parse_gates_trims_like_kueue(value, gates):
    assert parse_gates(value) == gates


@pytest.mark.parametrize(
    ("value", "rest"),
    [
        (GATE, None),
        (f"{GATE},other.example/hold", "other.example/hold"),
        ("other.example/hold", "other.example/hold"),
        ("", None),
        (None, None),
    ],
)
def test_without_dispatch_gate_deletes_rather_than_empties(value, rest):
    assert without_dispatch_gate(value) == rest


def test_gates_of_reads_the_annotation():
    assert gates_of(trainjob()) == [GATE]
    assert has_dispatch_gate(trainjob())
    assert not has_dispatch_gate(trainjob(queue=None))


@pytest.mark.parametrize(
    ("mark", "gates", "opened"),
    [
        ("true", None, True),
        ("true", "example.com/other", True),  # someone else's gate: not dispatch's to answer
        ("true", f"example.com/other, {GATE}", False),
        (None, None, False),  # past Kueue's gate without the mark (opened before Open wrote it)
        ("false", None, False),
        ("True", None, False),
    ],
)
def test_opened_by_dispatch_is_the_mark_and_no_gate_of_dispatchs(mark, gates, opened):
    tj = trainjob()
    notes = tj["metadata"]["annotations"]
    notes.pop("kueue.x-k8s.io/admission-gated-by", None)
    if mark is not None:
        notes["dispatch.phpboyscout.uk/opened"] = mark
    if gates is not None:
        notes["kueue.x-k8s.io/admission-gated-by"] = gates
    assert is_opened_by_dispatch(tj) is opened
    notes["dispatch.phpboyscout.uk/admission-floor"] = "7"  # admitted before: no other answer for old jobs
    assert is_opened_by_dispatch(tj) is opened
