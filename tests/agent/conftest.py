from __future__ import annotations

from collections.abc import Iterator

import pytest

from agent.config import AgentConfig
from tests.agent import kueue_double
from tests.agent.running import RunningController


@pytest.fixture(autouse=True)
def _delete_admission_checks(request: pytest.FixtureRequest) -> Iterator[None]:
    """AdmissionChecks are cluster-scoped and outlive a test's namespace: delete the ones a test made, so
    later controllers in the session do not serve (and write Active on) a pile of them."""
    yield
    if "control_plane" in request.fixturenames:
        cp = request.getfixturevalue("control_plane")
        while kueue_double.created_checks:
            cp.admin.delete(kueue_double.KUEUE_V, "AdmissionCheck", kueue_double.created_checks.pop())


@pytest.fixture
def agent(control_plane, namespace) -> Iterator[RunningController]:
    """The controller running in this process, leading on a Lease of the test's namespace."""
    running = RunningController(control_plane, AgentConfig(leaseNamespace=namespace), f"in-test-{namespace}")
    running.start()
    try:
        yield running
    finally:
        running.stop()
