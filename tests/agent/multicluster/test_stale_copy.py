"""The stale copy on a MultiKueue worker (agent/multicluster/copy_verdicts.py ``verify_copy``, contract/multicluster.py ``mark_copy_ops``): a copy starts
only with the A its remote Workload was stamped with, and only one copy per remote Workload
(docs/multicluster.md, "The stale copy")."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from agent.multicluster.contact_lease import NO_CONTACT
from agent.multicluster.copy_verdicts import CopyAction, unclaimed, unclaimed_marked, verify_copy
from contract.admission import admission_count, raise_to
from contract.keys import (
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_DISPATCHED,
    ANNOTATION_UNVERIFIED,
    ANNOTATION_VERIFIED_CONTACT,
    ANNOTATION_VERIFIED_COPY,
    UNVERIFIED_TRUE,
)
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL, PREBUILT_WORKLOAD, mark_copy_ops, prebuilt_workload
from harness.fixtures import trainjob
from tests.harness.kubelet import apply_json_patch

WORKLOAD = "trainjob-dj-01arz3ndektsv4rrffq69g5fav-s1-abcde"
EPOCH = 3
CLAIM = "4/manager-wl-uid"
"""The gate's approval the copy carries, which the manager's live claim names (contract/claims.py)."""
"""The contact epoch with the manager the worker's agent sees (contract/multicluster.py ``contact_epoch``)."""


def a_copy(a: int = 4, *, marked: bool = True, as_annotation: bool = False) -> dict[str, Any]:
    """MultiKueue's copy as it stands on a worker after its creation: origin label, prebuilt Workload, A."""
    tj = trainjob()
    tj = apply_json_patch(tj, [op for op in raise_to(tj, a).patch if op["path"] != "/metadata/resourceVersion"])
    tj["metadata"]["uid"], tj["metadata"]["resourceVersion"] = "copy-uid", "7"
    tj["metadata"]["annotations"][ANNOTATION_APPROVED_ADMISSION] = f"{a}/manager-wl-uid"
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
    v = verify_copy(c, wl, contact=EPOCH, claim=CLAIM)
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
    again = verify_copy(c, recorded, contact=EPOCH, claim=CLAIM)
    assert (again.action, again.workload_patch, again.copy_patch) == (CopyAction.VERIFY, None, v.copy_patch)


def test_a_copy_made_from_a_stale_view_of_the_manager_s_trainjob_is_deleted():
    v = verify_copy(a_copy(a=1), remote_workload(stamp="4"), contact=EPOCH, claim=CLAIM)
    assert v.action is CopyAction.DELETE
    assert "carries A 1, its dispatch was stamped 4" in v.reason


def test_a_second_copy_under_one_remote_workload_never_starts():
    # MultiKueue made the copy again under the admitted remote Workload: with the same A it would start a second
    # execution with the A the first one ran, J at 0 in a new JobSet.
    v = verify_copy(a_copy(), remote_workload(verified="an-earlier-copy"), contact=EPOCH, claim=CLAIM)
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
    v = verify_copy(a_copy(), workload, contact=EPOCH, claim=CLAIM)
    assert (v.action, v.workload_patch, v.copy_patch, v.final) == (CopyAction.WAIT, None, None, final)
    assert says in v.reason


def test_a_copy_naming_no_workload_stays_marked():
    c = a_copy()
    del c["metadata"]["labels"][PREBUILT_WORKLOAD]
    assert verify_copy(c, remote_workload(), contact=EPOCH, claim=CLAIM).action is CopyAction.WAIT


def test_no_copy_starts_out_of_contact_with_the_manager():
    # Its A is its stamp, but no renewal of the contact Lease was seen: the manager may not reach this worker, and
    # could not stop the copy. Not final: it starts once contact is seen.
    v = verify_copy(a_copy(), remote_workload(), contact=None, claim=CLAIM)
    assert (v.action, v.workload_patch, v.copy_patch, v.final) == (CopyAction.WAIT, None, None, False)
    assert v.reason == NO_CONTACT


def test_what_is_not_an_unverified_copy_is_left_alone():
    assert verify_copy(a_copy(marked=False), remote_workload(), contact=EPOCH, claim=CLAIM).action is CopyAction.NOTHING
    not_a_copy = a_copy()
    del not_a_copy["metadata"]["labels"][MULTIKUEUE_ORIGIN_LABEL]
    assert verify_copy(not_a_copy, remote_workload(), contact=EPOCH, claim=CLAIM).action is CopyAction.NOTHING


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


@pytest.mark.parametrize("claim", [None, "2/manager-wl-uid", "4/another-wl-uid"])
def test_a_copy_starts_only_under_a_live_claim_for_exactly_it(claim):
    # Its A is its stamp and the manager is in contact, but the manager's agent does not claim this copy here
    # now (no live claim, or one for another dispatch): it waits, and starts once claimed.
    v = verify_copy(a_copy(), remote_workload(), contact=EPOCH, claim=claim)
    assert (v.action, v.workload_patch, v.copy_patch, v.final) == (CopyAction.WAIT, None, None, False)
    assert "does not claim this copy here now (claim dispatch-claim-manager-wl-uid for 4/manager-wl-uid" in v.reason


def test_a_copy_without_the_gate_s_approval_never_starts():
    c = a_copy()
    del c["metadata"]["annotations"][ANNOTATION_APPROVED_ADMISSION]
    v = verify_copy(c, remote_workload(), contact=EPOCH, claim=CLAIM)
    assert (v.action, v.final) == (CopyAction.WAIT, True)


def _started() -> tuple[dict[str, Any], dict[str, Any]]:
    return a_copy(marked=False), remote_workload(verified="copy-uid")


def test_a_running_copy_runs_on_only_under_its_live_claim():
    c, wl = _started()
    assert unclaimed(c, wl, claim=CLAIM).action is CopyAction.NOTHING
    for claim in (None, "8/manager-wl-uid"):
        v = unclaimed(c, wl, claim=claim)
        assert v.action is CopyAction.DELETE
        assert v.reason.endswith("deleted, so it does not run on")


def test_a_finished_or_other_copy_is_kept_without_a_claim():
    c, wl = _started()
    done = copy.deepcopy(c)
    done["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    assert unclaimed(done, wl, claim=None).action is CopyAction.NOTHING
    assert unclaimed(c, remote_workload(verified="another"), claim=None).action is CopyAction.NOTHING
    assert unclaimed(a_copy(), wl, claim=None).action is CopyAction.NOTHING  # marked: never started


def test_a_marked_copy_is_deleted_once_it_waited_the_claim_s_duration_for_one():
    c = a_copy()
    assert unclaimed_marked(c, claim=None, waited=7.9, duration=8).action is CopyAction.NOTHING
    assert unclaimed_marked(c, claim=CLAIM, waited=100, duration=8).action is CopyAction.NOTHING
    v = unclaimed_marked(c, claim=None, waited=8, duration=8)
    assert v.action is CopyAction.DELETE
    assert "the job goes back through the manager" in v.reason
