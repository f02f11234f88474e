"""The history checks of tests/agent/gate/test_jobset_restart_pin.py, on histories an upstream change would produce: each
check passes on what JobSet v0.12.0 does and fails on what a background deletion or an overlap would record."""

from __future__ import annotations

from typing import Any

from ulid import ULID

from contract.keys import ANNOTATION_ADMISSION, LABEL_RESTART_ATTEMPT
from contract.trainjob import Submission
from tests.agent.gate.test_jobset_restart_pin import (
    FOREGROUND_DELETION,
    deleted_at,
    deleted_in_the_foreground,
    overlaps,
)

SUB = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace="ns", image="i", command=["c"])


def job(uid: str, **meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "tj-node-0", "uid": uid, **meta}}


def trainer_pod(uid: str, a: int, j: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"tj-node-0-0-{uid}",
            "uid": uid,
            "annotations": {ANNOTATION_ADMISSION: str(a)},
            "labels": {LABEL_RESTART_ATTEMPT: str(j)},
        }
    }


def test_a_foreground_deletion_is_recognised_and_a_background_one_is_not() -> None:
    t = "2026-12-05T23:00:00Z"
    foreground = [job("u1"), job("u1", deletionTimestamp=t, finalizers=[FOREGROUND_DELETION])]
    background = [job("u1"), job("u1", deletionTimestamp=t, finalizers=["other"])]
    assert deleted_in_the_foreground(foreground)
    assert not deleted_in_the_foreground(background)
    assert not deleted_in_the_foreground([job("u1")])


def test_deleted_at_finds_the_objects_deletion_event() -> None:
    events = [("ADDED", job("u1")), ("ADDED", job("u2")), ("DELETED", job("u1"))]
    assert deleted_at(events, "u1") == 2
    assert deleted_at(events, "u2") is None


def test_no_overlap_when_j1_appears_after_j0_left() -> None:
    events = [
        ("ADDED", trainer_pod("p0", 1, 0)),
        ("MODIFIED", trainer_pod("p0", 1, 0)),
        ("DELETED", trainer_pod("p0", 1, 0)),
        ("ADDED", trainer_pod("p1", 1, 1)),
    ]
    assert overlaps(events, SUB) == []


def test_an_overlap_names_both_executions() -> None:
    events = [
        ("ADDED", trainer_pod("p0", 1, 0)),
        ("ADDED", trainer_pod("p1", 1, 1)),
        ("DELETED", trainer_pod("p0", 1, 0)),
    ]
    (found,) = overlaps(events, SUB)
    assert "tj-node-0-0-p1" in found
    assert f"{SUB.job_id}.1.0.1.1" in found
    assert f"{SUB.job_id}.1.0.1.0" in found


def test_pods_of_one_execution_do_not_overlap_each_other() -> None:
    events = [("ADDED", trainer_pod("p0", 1, 0)), ("ADDED", trainer_pod("p1", 1, 0))]
    assert overlaps(events, SUB) == []
