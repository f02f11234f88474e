"""benchmarks.anchor_bench's per-job spans, its arguments and its watches' label index (pure: no cluster)."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks import anchor_bench
from benchmarks.anchor_bench import Timeline


def _timeline(first: dict[str, dict[str, float]]) -> Timeline:
    t = Timeline(0.0, set(), None, Timeline.FIRST_START)
    for step, at in first.items():
        t.first[step] = at
    return t


def test_a_job_that_passes_two_steps_out_of_their_order_gets_no_negative_span() -> None:
    t = _timeline({
        "TrainJob created": {"a": 1.0, "b": 1.0},
        "Workload created": {"a": 2.0, "b": 3.0},
        "submitted": {"a": 1.5, "b": 4.0},
    })  # fmt: skip
    spans = {name: (p50, p90) for name, p50, p90 in t.spans()}
    assert spans == {
        "TrainJob created -> submitted": (0.5, 0.5),  # a
        "submitted -> Workload created": (0.5, 0.5),  # a
        "TrainJob created -> Workload created": (2.0, 2.0),  # b
        "Workload created -> submitted": (1.0, 1.0),  # b
    }
    assert next(name for name, _, _ in t.spans()) == "TrainJob created -> Workload created", "in the steps' order"


def test_a_step_a_job_never_passed_is_skipped_not_counted_as_zero() -> None:
    t = _timeline({"TrainJob created": {"a": 1.0}, "JobSet created": {}, "Workload created": {"a": 4.0}})
    assert t.spans() == [("TrainJob created -> Workload created", 3.0, 3.0)]


@pytest.mark.parametrize("arms", ["check,bogus", "check,check", ""])
def test_arms_must_be_distinct_known_arms(arms: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        anchor_bench.main(["--arms", arms])
    assert exited.value.code == 2
    assert "--arms: distinct arms of dispatch, design, baseline, check, size, copy, closed" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("text", "phases"),
    [
        ("first", {"first"}),
        ("readmission", {"readmission"}),
        ("first, readmission", {"first", "readmission"}),
        ("both", {"first", "readmission"}),
        ("both,first", None),
        ("", None),
        ("second", None),
    ],
)
def test_phases_are_named_or_both(text: str, phases: set[str] | None) -> None:
    assert anchor_bench.phases_of(text) == phases


def test_unknown_phases_are_refused_naming_what_is_allowed(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        anchor_bench.main(["--phases", "second"])
    assert exited.value.code == 2
    assert "--phases: first, readmission, first,readmission or both, not 'second'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("asked", "phases", "rounds"),
    [
        (None, {"first", "readmission"}, 2),
        (1, {"first", "readmission"}, 1),
        (None, {"readmission"}, 1),
        (2, {"readmission"}, 1),
    ],
)
def test_first_rounds_default_to_rounds_and_one_unreported_start(
    asked: int | None, phases: set[str], rounds: int
) -> None:
    assert anchor_bench.first_rounds_of(asked, 2, frozenset(phases)) == rounds


@pytest.mark.parametrize("asked", ["0", "3"])
def test_first_rounds_beyond_rounds_are_refused(asked: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        anchor_bench.main(["--rounds", "2", "--first-rounds", asked])
    assert exited.value.code == 2
    assert f"--first-rounds: from 1 to --rounds (2), not {asked}" in capsys.readouterr().err


def _obj(uid: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "labels": labels}}


def test_the_label_index_follows_adds_relabels_and_deletes() -> None:
    index = anchor_bench.LabelIndex("job-uid")
    a1, b = _obj("w1", **{"job-uid": "a"}), _obj("w2", **{"job-uid": "b"})
    index.update(None, a1)
    index.update(None, b)
    index.update(None, _obj("w3"))  # no label: not indexed
    assert (index.get("a"), index.get("b")) == ([a1], [b])
    a2 = _obj("w1", **{"job-uid": "a", "other": "x"})
    index.update(a1, a2)
    assert index.get("a") == [a2], "the object's newest state, once"
    moved = _obj("w1", **{"job-uid": "b"})
    index.update(a2, moved)
    assert index.get("a") == []
    assert sorted(o["metadata"]["uid"] for o in index.get("b")) == ["w1", "w2"]
    index.update(moved, None)
    index.update(b, None)
    assert index.get("b") == []


def test_without_a_label_nothing_is_indexed() -> None:
    index = anchor_bench.LabelIndex(None)
    index.update(None, _obj("w1", **{"job-uid": "a"}))
    assert index.get("a") == []
