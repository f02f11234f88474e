"""harness.report: the time per tier and the slowest tests that end every run."""

from harness.report import (
    TIER_ORDER,
    UNIT,
    Phase,
    outcomes,
    parse_steps,
    read_phases,
    render,
    rows,
    slowest,
    tier_of,
    write_phases,
)
from harness.run_lanes import closing_line, verdict


def test_a_test_belongs_to_its_heaviest_marker():
    assert tier_of(["cluster", "e2e", "node"]) == "tier C"
    assert tier_of(["e2e", "multicluster"]) == "three control planes"
    assert tier_of(["cluster"]) == "tier A"
    assert tier_of(["shells", "test_x.py"]) == "prologue shells"
    assert tier_of(["test_x.py", "asyncio"]) == UNIT


def test_a_tier_sums_its_phases_and_spans_the_clock_from_first_start_to_last_stop():
    phases = [
        Phase("a", "tier A", "units", 10.0, 11.0),
        Phase("a", "tier A", "units", 11.0, 14.0),
        Phase("b", "tier A", "units", 20.0, 22.0),
        Phase("c", UNIT, "units", 0.0, 0.5),
    ]
    table = rows(phases, lambda p: p.tier, TIER_ORDER)
    assert [(r.name, r.tests, r.summed, r.span) for r in table] == [(UNIT, 1, 0.5, 0.5), ("tier A", 2, 6.0, 12.0)]
    assert [(r.name, r.span) for r in rows(phases, lambda p: p.lane, ["units"])] == [("units", 22.0)]


def test_the_slowest_adds_a_tests_phases_and_ranks_by_time():
    phases = [
        Phase("a", UNIT, "units", 0, 1),
        Phase("a", UNIT, "units", 1, 4),
        Phase("b", "tier B", "tier-b", 0, 3.5),
        Phase("c", UNIT, "units", 0, 0.1),
    ]
    assert slowest(phases, 2) == [("a", UNIT, 4.0), ("b", "tier B", 3.5)]


def test_steps_are_name_seconds_pairs_and_a_malformed_pair_is_left_out():
    assert parse_steps("setup=12.5, lint=3,broken,x=y,") == [("setup", 12.5), ("lint", 3.0)]
    assert parse_steps("") == []


def test_the_report_shows_steps_tiers_and_slowest():
    lines = render([Phase("tests/x.py::t", "tier B", "tier-b", 0, 61.5)], 90.0, {"DISPATCH_K8S_TEST_STEPS": "setup=30"})
    text = "\n".join(lines)
    assert any(line.split() == ["step", "setup", "0", "min", "30.0", "s"] for line in lines), text
    assert any(line.split() == ["step", "pytest", "1", "min", "30.0", "s"] for line in lines), text
    assert any(line.split()[:4] == ["tier", "B", "1", "1"] for line in lines), text
    assert "tests/x.py::t" in text


def test_outcomes_count_a_test_once_as_pytest_does():
    def p(nodeid, when, outcome):
        return Phase(nodeid, UNIT, "units", 0, 1, outcome, when)

    phases = [
        p("ok", "setup", "passed"), p("ok", "call", "passed"), p("ok", "teardown", "passed"),
        p("bad", "setup", "passed"), p("bad", "call", "failed"), p("bad", "teardown", "passed"),
        p("broken", "setup", "failed"),
        p("late", "call", "passed"), p("late", "teardown", "failed"),
        p("skip", "setup", "skipped"),
    ]  # fmt: skip
    assert outcomes(phases) == {"passed": 1, "failed": 1, "error": 2, "skipped": 1}


def test_a_lanes_phases_go_through_its_file(tmp_path):
    phases = [Phase("t", "tier A", "units", 1.0, 2.5, "failed", "call")]
    write_phases(tmp_path / "units.json", phases)
    assert read_phases(tmp_path / "units.json") == phases
    assert read_phases(tmp_path / "missing.json") == []


def test_the_run_closes_with_one_plain_line_and_the_first_failing_lanes_code():
    assert closing_line({"passed": 3, "failed": 1, "error": 1, "skipped": 0}) == "lanes: 3 passed, 2 failed"
    assert closing_line({"passed": 3, "failed": 0, "error": 0, "skipped": 2}) == "lanes: 3 passed, 0 failed, 2 skipped"
    assert verdict({"units": 0, "tier-b": 5, "multicluster": 5, "tier-c": 5}) == 0  # a selection in one lane
    assert verdict({"units": 5, "tier-b": 5, "multicluster": 5, "tier-c": 5}) == 5  # nothing selected at all
    assert verdict({"units": 0, "tier-b": 2, "multicluster": 0, "tier-c": 1}) == 2


def test_the_builds_beside_the_tests_show_as_a_step_once_done(tmp_path):
    status = tmp_path / "status"
    status.write_text("done 734\n")
    lines = render([], 1.0, {"DISPATCH_K8S_PENDING_BUILDS": str(status)})
    assert any(line.split() == ["step", "rest", "(beside)", "12", "min", "14.0", "s"] for line in lines), lines
    status.write_text("running\n")
    assert not any("beside" in line for line in render([], 1.0, {"DISPATCH_K8S_PENDING_BUILDS": str(status)}))
