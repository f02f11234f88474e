"""The fault-and-attack campaign, short and seeded (tier C): dispatch passes it, and a naive check controller in
place of its readmission gate fails it on the same seed and schedule (docs/reliability.md).

It runs on the suite's tier C cluster: the campaign adds two real worker nodes, installs the chart with two
replicas, runs the dispatch arm and then the naive arm, and leaves the cluster as it found it (as the session's
last test, where the cluster stops next, it stops only its worker nodes).

It installs the chart itself and shares no installation with the other tier C tests: its values are its own (two
replicas, so a leader's death hands the gate to the other), and its faults kill and restart what it installed.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import campaign, nemesis
from chaos import env as environment
from harness.pytest_plugin import TierC
from harness.sandbox import on_node

pytestmark = [pytest.mark.e2e, pytest.mark.node]

SEED = 20
DISPATCH_SECONDS = 120
NAIVE_SECONDS = 90
JOBS = 6
QUIET = 8
"""Seconds with no phase change before the final Statuses are read: four unchanged polls (the campaign's 20 s
read the same final phases and cost 12 s or more per arm)."""


@pytest.fixture
def env(tier_c: TierC, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[environment.Env]:
    image, why = on_node.available_image()
    if image is None:
        pytest.fail(f"the campaign needs the project's image: {why}", pytrace=False)
    tb = tier_c.tier_b
    e = environment.attach(tb.control_plane, tb, tier_c.node, tier_c.network, tmp_path, workers=2, image=image)
    try:
        yield e
    finally:
        # The session's last test (tests/conftest.py orders it so): the session stops the cluster next, so
        # deleting what the arms made and uninstalling the chart first would prove nothing and take about 35 s.
        if request.node is request.session.items[-1]:
            e.stop_workers()
        else:
            e.stop()


@pytest.mark.timeout(1500)
def test_dispatch_passes_the_campaign_and_the_naive_controller_fails_it(env: environment.Env) -> None:
    result = campaign.run_arm(env, arm="dispatch", seed=SEED, duration=DISPATCH_SECONDS, jobs=JOBS, quiet=QUIET)
    lines = "\n".join(campaign.summary(result))
    assert result.violations == 0, f"{lines}\n{result.report}"
    assert result.got_through == 0, f"an attacker's write got through:\n{lines}"
    # The campaign did what it claims: jobs ran and ran again, faults and attacks happened.
    assert result.executions > JOBS, lines
    assert sum(result.faults.values()) >= 3, lines
    assert result.attacks.get("refused", 0) >= 20, lines
    assert set(result.faults) <= set(nemesis.ALL), lines

    naive = campaign.run_arm(env, arm="naive", seed=SEED, duration=NAIVE_SECONDS, jobs=JOBS, quiet=QUIET)
    if naive.bounces == 0 or naive.executions <= naive.started_jobs:
        # No job that ran was readmitted in the window (every arm bounces two that ran, chaos/traffic.py, unless
        # faults kept each trainer from starting until its end), so the control was not exercised: once more, with
        # the next seed.
        naive = campaign.run_arm(env, arm="naive", seed=SEED + 1, duration=NAIVE_SECONDS, jobs=JOBS, quiet=QUIET)
    lines = "\n".join(campaign.summary(naive))
    assert naive.bounces > 0, lines
    assert naive.executions > naive.started_jobs, lines  # a job that ran was readmitted
    assert naive.violations > 0, f"the naive check controller passed the checker:\n{lines}"
