"""`scripts/sandbox --multicluster --no-wait`, as the README shows it: three control planes here (a MultiKueue
manager and two workers), dispatch's agent on the manager, and one job whose worker is lost. What it prints must
tell the story: the job kept while the lost worker may still run it, then moved to the other worker once fenced,
with R above anything the lost execution can reach."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.sandbox.multicluster import EXECUTIONS_HEADER, EXECUTIONS_TITLE, MAX_RESTARTS, K
from tests.harness.test_sandbox import TIMEOUT, sandbox

pytestmark = [pytest.mark.e2e, pytest.mark.multicluster]


def _executions(output: str) -> list[list[str]]:
    lines = output.splitlines()
    start = lines.index(EXECUTIONS_TITLE)
    assert lines[start + 1].split() == list(EXECUTIONS_HEADER), lines[start + 1]
    rows = []
    for line in lines[start + 2 :]:
        if not line.strip():
            break
        rows.append(line.split())
    return rows


@pytest.mark.timeout(TIMEOUT + 30)
def test_the_multicluster_sandbox_shows_a_worker_lost_and_the_job_moving(tmp_path: Path) -> None:
    output, shown = sandbox(tmp_path, "--no-wait", "--multicluster")

    for step in ("clusters", "dispatch", "run", "lost", "fence"):
        assert re.search(rf"^  {step}\s+\S.*\(\d+\.\d+s\)$", output, re.M), f"no step {step}\n{shown}"
    rows = _executions(output)
    assert [row[0] for row in rows] == ["1", "2"], shown
    (_, lost, a1, j1, r1, reach1, _), (_, moved, a2, j2, r2, _, _) = rows
    assert lost != moved, f"the job did not move off the lost worker\n{shown}"
    assert (int(a1), int(j1), int(r1)) == (K, 0, K), shown
    assert reach1 == f"{K}..{K + MAX_RESTARTS}", shown
    assert (int(a2), int(j2), int(r2)) == (2 * K, 0, 2 * K), shown
    assert int(r2) > K + MAX_RESTARTS, "the moved execution's R is not above the lost one's reach"

    # While the lost worker could not be read, dispatch said why the job kept its quota; once fenced, released it.
    assert re.search(rf"QuotaKept: .*keeps its quota.*worker {lost}: cannot be read", output), shown
    assert re.search(r"QuotaReleased: no execution of the job may still run on any worker", output), shown
    assert (
        f"MultiKueueCluster {lost} annotated dispatch.phpboyscout.uk/fenced=powered-off; dispatched to {moved}"
        in output
    ), shown
