"""The test run's time report, printed at the end of every run: the time per tier and the slowest tests.

A test's tier is the heaviest marker it carries (`TIERS`); one with none is a unit test. Per tier, and per lane
(harness.lanes), the report gives the tests, their summed time (setup, call and teardown) and the span on the
clock from the first test's start to the last test's end (lanes run side by side). The steps `scripts/test` ran
before pytest (setup, lint) reach it through `STEPS_ENV` as `name=seconds` pairs, so the budget can be read from one
table (docs/performance.md, "The CI budget"). Each lane's pytest writes its phases to `PHASES_ENV`'s file, and
harness.run_lanes prints the report of all lanes together.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path, PurePath

import pytest

from harness.binaries import PENDING_BUILDS_ENV
from harness.lanes import LANES, lane_of

TIERS = (
    ("multicluster", "three control planes"),
    ("node", "tier C"),
    ("e2e", "tier B"),
    ("cluster", "tier A"),
    ("shells", "prologue shells"),
)
UNIT = "unit"
STEPS_ENV = "DISPATCH_K8S_TEST_STEPS"
PHASES_ENV = "DISPATCH_K8S_TEST_PHASES"
SLOWEST = 25


@dataclass(frozen=True)
class Phase:
    """One phase (setup, call or teardown) of one test, as its report gives it."""

    nodeid: str
    tier: str
    lane: str
    start: float
    stop: float
    outcome: str = "passed"
    when: str = "call"


@dataclass(frozen=True)
class Row:
    name: str
    tests: int
    summed: float
    span: float


def tier_of(keywords: Iterable[str]) -> str:
    names = set(keywords)
    return next((label for marker, label in TIERS if marker in names), UNIT)


def rows(phases: Iterable[Phase], key: Callable[[Phase], str], order: Sequence[str]) -> list[Row]:
    """Per tier or lane, in `order`: tests, summed time, span on the clock."""
    grouped: dict[str, list[Phase]] = {}
    for phase in phases:
        grouped.setdefault(key(phase), []).append(phase)
    return [
        Row(
            name,
            len({p.nodeid for p in ps}),
            sum(p.stop - p.start for p in ps),
            max(p.stop for p in ps) - min(p.start for p in ps),
        )
        for name in order
        if (ps := grouped.get(name))
    ]


TIER_ORDER = (UNIT, *(label for _, label in reversed(TIERS)))


def slowest(phases: Iterable[Phase], count: int = SLOWEST) -> list[tuple[str, str, float]]:
    """The `count` tests that took longest, setup, call and teardown together: (nodeid, tier, seconds)."""
    total: dict[str, float] = {}
    tiers: dict[str, str] = {}
    for p in phases:
        total[p.nodeid] = total.get(p.nodeid, 0.0) + (p.stop - p.start)
        tiers[p.nodeid] = p.tier
    ranked = sorted(total.items(), key=lambda kv: (-kv[1], kv[0]))[:count]
    return [(nodeid, tiers[nodeid], seconds) for nodeid, seconds in ranked]


def outcomes(phases: Iterable[Phase]) -> dict[str, int]:
    """Tests by outcome, as pytest counts them: a failed call `failed`, a failed setup or teardown `error`."""
    by_test: dict[str, str] = {}
    for p in phases:
        if p.outcome == "failed":
            by_test[p.nodeid] = "failed" if p.when == "call" else "error"
        elif p.outcome == "skipped" and by_test.get(p.nodeid) not in ("failed", "error"):
            by_test[p.nodeid] = "skipped"
        elif p.when == "call" and p.nodeid not in by_test:
            by_test[p.nodeid] = "passed"
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0}
    for outcome in by_test.values():
        counts[outcome] += 1
    return counts


def parse_steps(text: str) -> list[tuple[str, float]]:
    """`name=seconds` pairs separated by commas; a malformed pair is left out (the report must never fail a run)."""
    steps = []
    for pair in filter(None, (p.strip() for p in text.split(","))):
        name, _, seconds = pair.partition("=")
        try:
            steps.append((name, float(seconds)))
        except ValueError:
            continue
    return steps


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:04.1f} s"


def _tier(phase: Phase) -> str:
    return phase.tier


def _lane(phase: Phase) -> str:
    return phase.lane


def builds_step(environ: Mapping[str, str]) -> list[tuple[str, float]]:
    """The builds scripts/test ran beside the tests, from their status file (`done SECONDS`), once they ended."""
    path = environ.get(PENDING_BUILDS_ENV)
    words = Path(path).read_text().split() if path and Path(path).is_file() else []
    if len(words) == 2 and words[0] == "done" and words[1].isdigit():
        return [("rest (beside)", float(words[1]))]
    return []


def render(phases: list[Phase], pytest_seconds: float, environ: Mapping[str, str] = os.environ) -> list[str]:
    lines = ["", "time per step, tier and lane (docs/performance.md, 'The CI budget'):"]
    for name, seconds in [*parse_steps(environ.get(STEPS_ENV, "")), *builds_step(environ)]:
        lines.append(f"  {'step ' + name:<26} {minutes(seconds):>14}")
    lines.append(f"  {'step pytest':<26} {minutes(pytest_seconds):>14}")
    for title, key, order in (("tier", _tier, TIER_ORDER), ("lane", _lane, LANES)):
        lines.append(f"  {title:<26} {'tests':>6} {'summed':>14} {'span':>14}")
        for row in rows(phases, key, order):
            lines.append(f"  {row.name:<26} {row.tests:>6} {minutes(row.summed):>14} {minutes(row.span):>14}")
    lines.append(f"slowest {SLOWEST} tests (setup + call + teardown):")
    for nodeid, tier, seconds in slowest(phases):
        lines.append(f"  {seconds:8.1f} s  {tier:<20} {nodeid}")
    return lines


def write_phases(path: Path, phases: Iterable[Phase]) -> None:
    path.write_text(json.dumps([asdict(p) for p in phases]))


def read_phases(path: Path) -> list[Phase]:
    """A lane's phases; none where its pytest wrote no file (it stopped before its end)."""
    try:
        return [Phase(**p) for p in json.loads(path.read_text())]
    except FileNotFoundError:
        return []


class TimeReport:
    """Collects every phase's report; prints the table, or writes the phases for harness.run_lanes."""

    def __init__(self) -> None:
        self.phases: list[Phase] = []
        self.started = time.time()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        start, stop = getattr(report, "start", None), getattr(report, "stop", None)
        if start is None or stop is None:
            return
        path = PurePath(report.nodeid.partition("::")[0])
        lane = lane_of(report.keywords, path)
        tier = tier_of(report.keywords)
        self.phases.append(Phase(report.nodeid, tier, lane, start, stop, report.outcome, report.when))

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if out := os.environ.get(PHASES_ENV):
            write_phases(Path(out), self.phases)
            return
        for line in render(self.phases, time.time() - self.started):
            terminalreporter.write_line(line)
