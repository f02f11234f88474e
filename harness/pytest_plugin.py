"""pytest fixtures for the local control plane (registered from tests/conftest.py).

- `control_plane` (session): tier A, etcd + kube-apiserver with the CRDs; one per session.
- `tier_b` (session): the same API server plus controller-manager, scheduler, kwok, JobSet, Trainer
  and Kueue; requesting it extends the session's tier A instance.
- `tier_c` (session): tier B plus one real node (harness.real_node: a kubelet and containerd as local
  processes, real containers); requesting it extends the session's tier B instance.
- `multicluster` (session): three control planes of their own for Kueue's MultiKueue (harness.multicluster): a
  manager (a tier B without Trainer) and two workers (full tier B); independent of the session's tier A/B.
- `namespace` (function): a fresh namespace, deleted afterwards.
- `queue_namespace` (function, tier B): a fresh namespace with a ready LocalQueue.
- `multicluster_namespace` (function): a fresh namespace with a ready LocalQueue on the manager and each worker.
- `api_client` (function, async): a kubernetes_asyncio ApiClient authenticated as cluster admin.

A missing binary fails the requesting tests with the build command; it never skips them. The tests run in lanes
(harness.lanes), and the run ends with the time per tier and lane (harness.report).
When a test fails, the tail of every control-plane log is attached to its report.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes_asyncio import client

from harness.async_client import api_client as make_api_client
from harness.binaries import (
    REPO_ROOT,
    TIER_A_BINARIES,
    TIER_B_BINARIES,
    MissingBinaryError,
    await_builds,
    locate,
    locate_node,
)
from harness.cluster import ControlPlane, new_run_dir, start_control_plane
from harness.lanes import LANES, lane_of, sort_key
from harness.multicluster import MultiCluster, start_multicluster
from harness.processes import ProcessExitedError
from harness.real_node import RealNode, start_real_node
from harness.report import TimeReport
from harness.service_network import ServiceNetwork, start_service_network
from harness.tier_b import TierB, start_tier_b

_LOG_TAIL_LINES = 30
_started: list[ControlPlane] = []


def _require(names: tuple[str, ...]) -> None:
    """Fails (never skips) the requesting tests when a binary is missing, naming the build command."""
    try:
        locate().require(names)
    except MissingBinaryError as e:
        message = str(e)
    else:
        return
    pytest.fail(message, pytrace=False)


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    _require(TIER_A_BINARIES)
    cp = start_control_plane(new_run_dir())
    _started.append(cp)
    try:
        yield cp
    finally:
        cp.stop()


@pytest.fixture(scope="session")
def tier_b(control_plane: ControlPlane) -> TierB:
    # Its processes belong to the control plane's supervisor and stop with it.
    _require(TIER_B_BINARIES)
    return start_tier_b(control_plane)


@dataclass
class TierC:
    tier_b: TierB
    node: RealNode
    network: ServiceNetwork
    """kube-proxy and the `kubernetes` Service's endpoint: pods reach Services, the API server webhooks'."""
    image: str | None
    """The project's image (scripts/build-image), imported into the node; None when it is not built."""
    image_problem: str = ""


@pytest.fixture(scope="session")
def tier_c(tier_b: TierB) -> Iterator[TierC]:
    try:
        artifacts = locate_node().require()
    except MissingBinaryError as e:
        pytest.fail(str(e), pytrace=False)
    archive, image = _project_image()
    problem = "" if archive.is_file() else f"the project's image is not built ({archive}): run scripts/build-image"
    images = [archive] if archive.is_file() else []
    node = start_real_node(tier_b.control_plane, "real-node-0", artifacts, images=images)
    try:
        network = start_service_network(tier_b.control_plane, node, artifacts)
        try:
            yield TierC(tier_b, node, network, image if images else None, problem)
        finally:
            network.stop()
    finally:
        node.stop()


def _project_image() -> tuple[Path, str]:
    """Where scripts/build-image puts the image of this checkout, and its tag."""
    out = subprocess.run(
        [str(REPO_ROOT / "scripts" / "build-image"), "--print"], capture_output=True, text=True, check=True
    ).stdout.split()
    return Path(out[0]), out[1]


@pytest.fixture(scope="session")
def multicluster() -> Iterator[MultiCluster]:
    _require(TIER_B_BINARIES)
    mc = start_multicluster()
    _started.extend(mc.control_planes)
    try:
        yield mc
    finally:
        mc.stop()


@pytest.fixture
def multicluster_namespace(multicluster: MultiCluster) -> Iterator[str]:
    name = multicluster.create_queue_namespace(f"mc-{secrets.token_hex(3)}")
    yield name
    multicluster.delete_namespace(name)


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    name = control_plane.create_namespace(request.node.name)
    yield name
    control_plane.delete_namespace(name)


@pytest.fixture
def queue_namespace(tier_b: TierB, request: pytest.FixtureRequest) -> Iterator[str]:
    name = tier_b.control_plane.create_namespace(request.node.name)
    tier_b.create_local_queue(name)
    yield name
    tier_b.control_plane.delete_namespace(name)


@pytest_asyncio.fixture
async def api_client(control_plane: ControlPlane) -> AsyncIterator[client.ApiClient]:
    async with make_api_client(control_plane.admin_credentials) as api:
        yield api


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(TimeReport(), "dispatch-time-report")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lane", choices=LANES, help="only this lane's tests (harness.lanes; harness.run_lanes: all)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The lanes in their order (harness.lanes), and with --lane only that lane. The sort is stable: order is kept
    within each lane and kind."""
    items.sort(key=lambda item: sort_key(_markers(item), item.path))
    if lane := config.getoption("lane"):
        mine = {id(item) for item in items if lane_of(_markers(item), item.path) == lane}
        if len(mine) < len(items):
            config.hook.pytest_deselected(items=[item for item in items if id(item) not in mine])
            items[:] = [item for item in items if id(item) in mine]


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Where a selected test is outside the units lane (its clusters, the sandbox, the image), the session waits for
    the builds scripts/test runs beside the first tests before its first test: outside any test's timeout."""
    if any(lane_of(_markers(item), item.path) != "units" for item in session.items):
        try:
            await_builds()
        except MissingBinaryError as e:
            pytest.exit(str(e), returncode=pytest.ExitCode.TESTS_FAILED)


def _markers(item: pytest.Item) -> list[str]:
    return [m.name for m in item.iter_markers()]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    report = yield
    missing_binary = (
        call.when == "setup" and call.excinfo is not None and call.excinfo.errisinstance(pytest.fail.Exception)
    )
    if report.failed and _started and not missing_binary:
        for cp in _started:
            for name, text in cp.supervisor.log_tails(_LOG_TAIL_LINES).items():
                report.sections.append((f"control plane: {name} (last {_LOG_TAIL_LINES} lines)", text))
            try:
                cp.supervisor.check_alive()
            except ProcessExitedError as e:
                report.sections.append(("control plane: exited processes", str(e)))
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    for cp in _started:
        timings = ", ".join(f"{k} {v:.1f}s" for k, v in cp.timings.items())
        terminalreporter.write_line(f"control plane run folder: {cp.run_dir} ({timings})")
