"""The stale copy on a MultiKueue worker (contract/multicluster.py ``verify_copy``, ``mark_copy_ops``): a copy starts
only with the A its remote Workload was stamped with, and only one copy per remote Workload
(docs/multicluster.md, "The stale copy")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contract.admission import admission_count, raise_to
from contract.keys import (
    ANNOTATION_DISPATCHED,
    ANNOTATION_UNVERIFIED,
    ANNOTATION_VERIFIED_CONTACT,
    ANNOTATION_VERIFIED_COPY,
    UNVERIFIED_TRUE,
)
from contract.multicluster import (
    MULTIKUEUE_ORIGIN_LABEL,
    NO_CONTACT,
    PREBUILT_WORKLOAD,
    CopyAction,
    mark_copy_ops,
    prebuilt_workload,
    verify_copy,
)
from tests.unit.fixtures import trainjob
from tests.unit.kubelet import apply_json_patch

WORKLOAD = "trainjob-dj-01arz3ndektsv4rrffq69g5fav-s1-abcde"
EPOCH = 3
"""The contact epoch with the manager the worker's agent sees (contract/multicluster.py ``contact_epoch``)."""


def a_copy(a: int = 4, *, marked: bool = True, as_annotation: bool = False) -> dict[str, Any]:
    """MultiKueue's copy as it stands on a worker after its creation: origin label, prebuilt Workload, A."""
    tj = trainjob()
    tj = apply_json_patch(tj, [op for op in raise_to(tj, a).patch if op["path"] != "/metadata/resourceVersion"])
    tj["metadata"]["uid"], tj["metadata"]["resourceVersion"] = "copy-uid", "7"
    tj["metadata"]["labels"][MULTIKUEUE_ORIGIN_LABEL] = "manager"
    (tj["metadata"]["annotations"] if as_annotation else tj["metadata"]["labels"])[PREBUILT_WORKLOAD] = WORKLOAD
    if marked:
        tj["metadata"]["annotations"][ANNOTATION_UNVERIFIED] = UNVERIFIED_TRUE
    return tj


def remote_workload(stamp: str | None = "4", verified: str | None = None) -> dict[str, Any]:
    notes = {k: v for k, v in ((ANNOTATION_DISPATCHED, stamp), (ANNOTATION_VERIFIED_COPY, verified)) if v is not None}
    return {
        "metadata": {
            "name": WORKLOAD,
            "namespace": "team-a",
            "uid": "wl-uid",
            "resourceVersion": "12",
            "labels": {MULTIKUEUE_ORIGIN_LABEL: "manager"},
            "annotations": notes,
        }
    }


@pytest.mark.parametrize("as_annotation", [False, True])
def test_a_copy_whose_a_is_its_stamp_is_recorded_then_unmarked(as_annotation):
    c, wl = a_copy(as_annotation=as_annotation), remote_workload()
    assert prebuilt_workload(c) == WORKLOAD
    v = verify_copy(c, wl, contact=EPOCH)
    assert v.action is CopyAction.VERIFY
    assert v.workload_patch is not None
    assert v.copy_patch is not None
    assert v.workload_patch[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "wl-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "12"},
    ]
    recorded = apply_json_patch(wl, v.workload_patch)
    assert recorded["metadata"]["annotations"][ANNOTATION_VERIFIED_COPY] == "copy-uid"
    assert recorded["metadata"]["annotations"][ANNOTATION_VERIFIED_CONTACT] == str(EPOCH)
    assert v.copy_patch[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "copy-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "7"},
    ]
    unmarked = apply_json_patch(c, v.copy_patch)
    assert ANNOTATION_UNVERIFIED not in unmarked["metadata"]["annotations"]
    assert admission_count(unmarked) == 4
    # After a crash between the two writes: the record names this copy, so only the mark goes.
    again = verify_copy(c, recorded, contact=EPOCH)
    assert (again.action, again.workload_patch, again.copy_patch) == (CopyAction.VERIFY, None, v.copy_patch)


def test_a_copy_made_from_a_stale_view_of_the_manager_s_trainjob_is_deleted():
    v = verify_copy(a_copy(a=1), remote_workload(stamp="4"), contact=EPOCH)
    assert v.action is CopyAction.DELETE
    assert "carries A 1, its dispatch was stamped 4" in v.reason


def test_a_second_copy_under_one_remote_workload_never_starts():
    # MultiKueue made the copy again under the admitted remote Workload: with the same A it would start a second
    # execution with the A the first one ran, J at 0 in a new JobSet.
    v = verify_copy(a_copy(), remote_workload(verified="an-earlier-copy"), contact=EPOCH)
    assert (v.action, v.copy_patch, v.final) == (CopyAction.WAIT, None, True)
    assert "another copy (uid an-earlier-copy)" in v.reason


@pytest.mark.parametrize(
    ("workload", "says", "final"),
    [
        (None, "is not there", False),
        (remote_workload(stamp=None), f"carries no {ANNOTATION_DISPATCHED}", True),
        (remote_workload(stamp="04"), "not a decimal count", True),
        ({**remote_workload(), "metadata": {**remote_workload()["metadata"], "labels": {}}}, "not MultiKueue's", False),
        ({**remote_workload(), "metadata": {**remote_workload()["metadata"], "name": "x"}}, "not MultiKueue's", False),
    ],
)
def test_a_copy_that_cannot_be_verified_stays_marked(workload, says, final):
    v = verify_copy(a_copy(), workload, contact=EPOCH)
    assert (v.action, v.workload_patch, v.copy_patch, v.final) == (CopyAction.WAIT, None, None, final)
    assert says in v.reason


def test_a_copy_naming_no_workload_stays_marked():
    c = a_copy()
    del c["metadata"]["labels"][PREBUILT_WORKLOAD]
    assert verify_copy(c, remote_workload(), contact=EPOCH).action is CopyAction.WAIT


def test_no_copy_starts_out_of_contact_with_the_manager():
    # Its A is its stamp, but no renewal of the contact Lease was seen: the manager may not reach this worker, and
    # could not stop the copy. Not final: it starts once contact is seen.
    v = verify_copy(a_copy(), remote_workload(), contact=None)
    assert (v.action, v.workload_patch, v.copy_patch, v.final) == (CopyAction.WAIT, None, None, False)
    assert v.reason == NO_CONTACT


def test_what_is_not_an_unverified_copy_is_left_alone():
    assert verify_copy(a_copy(marked=False), remote_workload(), contact=EPOCH).action is CopyAction.NOTHING
    not_a_copy = a_copy()
    del not_a_copy["metadata"]["labels"][MULTIKUEUE_ORIGIN_LABEL]
    assert verify_copy(not_a_copy, remote_workload(), contact=EPOCH).action is CopyAction.NOTHING


def test_the_mutation_marks_and_suspends_and_is_idempotent():
    c = a_copy(marked=False)
    c["spec"]["suspend"] = False
    marked = apply_json_patch(c, mark_copy_ops(c))
    assert marked["metadata"]["annotations"][ANNOTATION_UNVERIFIED] == UNVERIFIED_TRUE
    assert marked["spec"]["suspend"] is True
    assert mark_copy_ops(marked) == []
    bare = copy.deepcopy(c)
    del bare["metadata"]["annotations"]
    assert apply_json_patch(bare, mark_copy_ops(bare))["metadata"]["annotations"] == {
        ANNOTATION_UNVERIFIED: UNVERIFIED_TRUE
    }
