"""benchmarks.feed_bench runs and reports each figure (its numbers are docs/performance.md's, not asserted)."""

from __future__ import annotations

from benchmarks import feed_bench


def test_it_reports_memory_per_job_and_the_cost_of_events_and_answers(capsys):
    feed_bench.main(["--jobs", "50"])
    out = capsys.readouterr().out
    for line in ("memory per job", "an event fed", "an event that changes a phase", "a snapshot of 50 jobs",
                 "an answer with one change of 50", "an answer with none of 50"):  # fmt: skip
        assert line in out
