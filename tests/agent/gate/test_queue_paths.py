"""The start carries the gate's approval (tier B: the real Kueue, Trainer, JobSet, kwok and the agent, with the
chart's policies armed on the namespace, or the webhook).

Someone who may edit Kueue's queues (namespaced LocalQueues, or ClusterQueues and AdmissionChecks) can make Kueue
admit a dispatch job without dispatch's check: re-point its LocalQueue at a ClusterQueue without the check, edit
the ClusterQueue's checks, delete the AdmissionCheck, and drain the LocalQueue to force the eviction first. Kueue
then admits the job at once; before the approval rule its unsuspend started the next execution while a pod of the
previous one could still run. Now each start must carry the readmission gate's approval of exactly its A
(``approved-admission``, written by the gate before its Ready), so each path leaves the job suspended.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from contract.keys import ANNOTATION_APPROVED_ADMISSION, LABEL_JOBSET_NAME
from harness.kube_http import ApiError
from harness.sandbox import site
from harness.tier_b import KWOK_SLOW_KUBELET_ANNOTATION
from tests.agent.gate import kit
from tests.agent.gate.kit import KUEUE_V, eventually
from tests.agent.gate.test_readmission_gate import (  # noqa: F401 (the fixtures)
    LOCAL_QUEUE,
    Gate,
    _assert,
    create_dispatch_trainjob,
    gate,
    get_trainjob,
    ns,
    open_trainjob,
    wait_running,
)
from tests.webhook.test_tampering import Guarded, _stranger, guarding

pytestmark = pytest.mark.e2e
QUOTA = {"cpu": "4", "memory": "16Gi"}
LINGER = "test.dispatch.phpboyscout.uk/linger"
STRATEGIC = "application/strategic-merge-patch+json"
WATCHED_SECONDS = 10
"""How long a job Kueue admitted without dispatch's check is watched staying suspended (Kueue retries its
unsuspend within a second of the admission)."""


@pytest.fixture
def queues(gate: Gate, ns: str) -> Iterator[dict[str, str]]:  # noqa: F811
    """The test's own flavor, AdmissionCheck (served by the agent) and two ClusterQueues: ``gated`` lists that
    check, ``open`` lists none. The namespace's LocalQueue points at ``gated``."""
    admin = gate.admin
    suffix = secrets.token_hex(3)
    names = {k: f"dispatch-e2e-{k}-{suffix}" for k in ("flavor", "check", "gated", "open")}
    made = [
        admin.create(site.resource_flavor(names["flavor"])),
        admin.create(site.admission_check(names["check"])),
        admin.create(site.gated_cluster_queue(names["gated"], check=names["check"], flavor=names["flavor"],
                                              quota=QUOTA)),
        admin.create(_open_cluster_queue(names["open"], names["flavor"])),
    ]  # fmt: skip
    _point(gate, ns, names["gated"])
    eventually(lambda: _assert(kit.condition_true(admin.get(KUEUE_V, "LocalQueue", LOCAL_QUEUE, ns), "Active")), 30,
               "the LocalQueue Active on the gated ClusterQueue")  # fmt: skip
    try:
        yield names
    finally:
        for obj in reversed(made):
            admin.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])


def _open_cluster_queue(name: str, flavor: str) -> dict[str, Any]:
    cq = site.gated_cluster_queue(name, check="unused", flavor=flavor, quota=QUOTA)
    del cq["spec"]["admissionChecksStrategy"]
    return cq


def _point(g: Gate, namespace: str, cluster_queue: str) -> None:
    """The LocalQueue, made again pointing at ``cluster_queue`` (Kueue makes spec.clusterQueue immutable)."""
    admin = g.admin
    if admin.get_or_none(KUEUE_V, "LocalQueue", LOCAL_QUEUE, namespace) is not None:
        admin.delete(KUEUE_V, "LocalQueue", LOCAL_QUEUE, namespace)
        eventually(lambda: _assert(admin.get_or_none(KUEUE_V, "LocalQueue", LOCAL_QUEUE, namespace) is None), 30,
                   "the LocalQueue deleted")  # fmt: skip
    admin.create(site.local_queue(namespace, LOCAL_QUEUE, cluster_queue))


def _linger(g: Gate, namespace: str, pods: list[dict[str, Any]]) -> list[str]:
    """Keeps the pods listed and Running once deleted, as a kubelet that has not stopped their containers yet (a
    finalizer of the test's, and the harness's slow-kubelet mark): the previous execution may still run."""
    names = [p["metadata"]["name"] for p in pods]
    for name in names:
        g.admin.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
                        {"metadata": {"finalizers": [LINGER], "annotations": {KWOK_SLOW_KUBELET_ANNOTATION: "true"}}},
                        content_type=STRATEGIC)  # fmt: skip
    return names


def _let_go(g: Gate, namespace: str, names: list[str]) -> None:
    for name in names:
        try:
            g.admin.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{name}",
                            {"metadata": {"$deleteFromPrimitiveList/finalizers": [LINGER],
                                          "annotations": {KWOK_SLOW_KUBELET_ANNOTATION: None}}},
                            content_type=STRATEGIC)  # fmt: skip
        except ApiError as exc:
            if exc.status != 404:
                raise


def _drain(g: Gate, namespace: str, tj: dict[str, Any]) -> None:
    """Stops the LocalQueue with HoldAndDrain: Kueue evicts the running job (its TrainJob suspended)."""
    g.admin.merge_patch(KUEUE_V, "LocalQueue", LOCAL_QUEUE, {"spec": {"stopPolicy": "HoldAndDrain"}}, namespace)
    eventually(lambda: _assert(get_trainjob(g, tj)["spec"]["suspend"] is True), 60, "the job evicted")


def _resume(g: Gate, namespace: str) -> None:
    g.admin.merge_patch(KUEUE_V, "LocalQueue", LOCAL_QUEUE, {"spec": {"stopPolicy": "None"}}, namespace)


def _stays_suspended(g: Gate, tj: dict[str, Any], pods: kit.Recorder) -> None:
    """Watched for WATCHED_SECONDS: the TrainJob stays suspended, its approval (of A 1: the gate waits for the
    lingering pods) unchanged, no second execution."""
    approved = get_trainjob(g, tj)["metadata"]["annotations"][ANNOTATION_APPROVED_ADMISSION]
    assert approved.startswith("1/"), approved
    deadline = time.monotonic() + WATCHED_SECONDS
    while time.monotonic() < deadline:
        now = get_trainjob(g, tj)
        assert now["spec"]["suspend"] is True, "started without the g's approval"
        assert now["metadata"]["annotations"][ANNOTATION_APPROVED_ADMISSION] == approved
        time.sleep(0.5)
    assert kit.executions(pods.first_seen()) == [(1, 0)]


def _admitted_without_the_check(g: Gate, namespace: str, tj: dict[str, Any], check: str) -> None:
    """Kueue admitted the Workload (QuotaReserved, Admitted) and dispatch's check is not among its checks."""

    def admitted() -> dict[str, Any]:
        wl = kit.workload_of(g.admin, namespace, tj["metadata"]["uid"])
        assert kit.condition_true(wl, "Admitted"), kit.conditions(wl)
        assert not kit.check_entries(wl, check), wl["status"].get("admissionChecks")
        return wl

    eventually(admitted, 60, "Kueue admits the Workload without dispatch's check")


def _repointed(g: Gate, namespace: str, names: dict[str, str]) -> None:
    _point(g, namespace, names["open"])


def _checks_edited(g: Gate, namespace: str, names: dict[str, str]) -> None:
    g.admin.merge_patch(KUEUE_V, "ClusterQueue", names["gated"], {"spec": {"admissionChecksStrategy": None}})
    _resume(g, namespace)


PATHS: dict[str, Callable[[Gate, str, dict[str, str]], None]] = {
    "LocalQueue re-pointed": _repointed,
    "ClusterQueue's checks edited": _checks_edited,
}


@dataclass
class Running:
    tj: dict[str, Any]
    pods: kit.Recorder
    lingering: list[str] = field(default_factory=list)


@contextmanager
def _armed(gate: Gate, ns: str, mode: str, workdir: Path) -> Iterator[Guarded]:  # noqa: F811
    """The chart's policies bound to the namespace ("policies alone"), or dispatch's webhook for it ("webhook")."""
    with guarding(gate, ns, _stranger(gate, ns), mode, workdir) as g:
        g.arm()
        yield g


@contextmanager
def _running(gate: Gate, ns: str) -> Iterator[Running]:  # noqa: F811
    """A dispatch job opened and running its first execution (its start carried the gate's approval of A 1), its
    pods made to linger once deleted."""
    tj = create_dispatch_trainjob(gate, ns, gate.runtime)
    selector = f"{LABEL_JOBSET_NAME}={tj['metadata']['name']}"
    run = Running(tj, kit.Recorder(gate.admin, gate.admin.collection_path("v1", "Pod", ns), label_selector=selector))
    try:
        open_trainjob(gate, tj)
        run.lingering += _linger(gate, ns, wait_running(gate, tj, a=1))
        yield run
    finally:
        _let_go(gate, ns, run.lingering)
        run.pods.stop()


@pytest.mark.parametrize("mode", ["policies alone", "webhook"])
@pytest.mark.parametrize("path", list(PATHS))
def test_a_queue_that_admits_without_the_check_does_not_start_the_job(
    gate: Gate,  # noqa: F811
    ns: str,  # noqa: F811
    queues: dict[str, str],
    tmp_path: Path,
    mode: str,
    path: str,
) -> None:
    with _armed(gate, ns, mode, tmp_path / "webhook"), _running(gate, ns) as run:
        _drain(gate, ns, run.tj)
        PATHS[path](gate, ns, queues)
        _admitted_without_the_check(gate, ns, run.tj, queues["check"])
        _stays_suspended(gate, run.tj, run.pods)


def test_a_drained_queue_resumed_waits_for_the_gate(
    gate: Gate,  # noqa: F811
    ns: str,  # noqa: F811
    queues: dict[str, str],
) -> None:
    """The LocalQueue drained and resumed, dispatch's check in place: Kueue asks the gate again, which waits for the
    previous execution's pods, then approves the next A; the job starts with it, after them."""
    with _armed(gate, ns, "policies alone", Path()), _running(gate, ns) as run:
        tj = run.tj
        _drain(gate, ns, tj)
        _resume(gate, ns)

        def held() -> None:
            wl = kit.workload_of(gate.admin, ns, tj["metadata"]["uid"])
            entry = kit.check_entry(wl, queues["check"])
            assert entry["state"] == "Pending", entry
            assert all(p in entry["message"] for p in run.lingering), entry

        eventually(held, 60, "the gate waits for the lingering pods")
        _stays_suspended(gate, tj, run.pods)
        _let_go(gate, ns, run.lingering)
        wait_running(gate, tj, a=2)
        assert get_trainjob(gate, tj)["metadata"]["annotations"][ANNOTATION_APPROVED_ADMISSION].startswith("2/")
        assert kit.assert_r_strictly_increases(run.pods.first_seen()) == [(1, 0), (2, 0)]


def test_with_its_admission_check_deleted_the_job_is_not_started(
    gate: Gate,  # noqa: F811
    ns: str,  # noqa: F811
    queues: dict[str, str],
) -> None:
    """dispatch's AdmissionCheck deleted (Kueue's finalizer keeps it while a ClusterQueue lists it) while the job was
    drained; the chart's policies alone are armed. The job stays suspended after the drain ends: nothing admits it
    while a pod of the previous execution may still run."""
    admin = gate.admin
    with _armed(gate, ns, "policies alone", Path()), _running(gate, ns) as run:
        _drain(gate, ns, run.tj)
        # Kueue's finalizer keeps it while its ClusterQueue lists it: deleted, not gone.
        admin.delete(KUEUE_V, "AdmissionCheck", queues["check"])
        deleting = admin.get_or_none(KUEUE_V, "AdmissionCheck", queues["check"])
        assert deleting is None or deleting["metadata"].get("deletionTimestamp"), deleting
        _resume(gate, ns)
        _stays_suspended(gate, run.tj, run.pods)
