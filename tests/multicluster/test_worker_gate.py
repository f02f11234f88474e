"""The worker-side gate (docs/multicluster.md, guarantee 3) against the real MultiKueue of harness.multicluster:
dispatch's agent on the manager, as in test_numbering, and on every worker an agent in role worker, its check on a
worker ClusterQueue of the test's own that receives the copies.

The copy's first admission on the worker is approved, recorded as ``worker-admitted`` on the remote Workload
first. Then the copy is evicted on that worker (its Workload deactivated and reactivated there, with the manager
cut off so that only the worker's Kueue acts): the worker's Kueue admits it again locally, and the worker's gate
holds it. Nothing starts under the dispatch's A again. Once the manager is back in touch (or gives the worker up),
its MultiKueue check goes to Retry, the manager evicts, and its gate dispatches again with A raised by K. Across
both clusters no two executions share an identity, and R only rises."""

from __future__ import annotations

import asyncio
import copy
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ulid import ULID

from agent.gate import WORKER_FIRST_MESSAGE, worker_held_message
from agent.operations import plan_open
from contract.admission import admission_started
from contract.keys import (
    ANNOTATION_DISPATCHED,
    ANNOTATION_UNVERIFIED,
    ANNOTATION_VERIFIED_COPY,
    ANNOTATION_WORKER_ADMITTED,
    POD_FINALIZER,
    UNVERIFIED_TRUE,
)
from contract.multicluster import ROLE_WORKER
from contract.objects import annotations
from contract.trainjob import Submission
from harness.agent_process import LEADER, WORKER_CLUSTER_RULES, AgentProcess, grant, start_agent
from harness.jobs import write_as_the_api
from harness.multicluster import KUEUE_V, MultiCluster, Worker
from harness.sandbox import site
from tests.e2e import kit
from tests.e2e.kit import TRAINER_V, eventually
from tests.multicluster.test_numbering import QUEUE, K, Manager, _dispatched, _queue, _true, preflight_on_the_manager

pytestmark = [pytest.mark.e2e, pytest.mark.multicluster]

MERGE = "application/merge-patch+json"


@dataclass
class Armed:
    manager: Manager
    worker_check: str


def _worker_queue(name: str, check: str) -> dict[str, Any]:
    """A worker's ClusterQueue that receives the copies: dispatch's check only (no MultiKueue check there)."""
    queue = _queue(name, check)
    queue["spec"]["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    return queue


def _start_agent(
    cp: Any, system: str, tmp: Path, role: str = "", credentials: dict[str, Path] | None = None
) -> AgentProcess:
    config: dict[str, Any] = {"leaseNamespace": system, "leaseName": "dispatch-admission"}
    if role:
        config["multiclusterRole"] = role
    if credentials:
        config["workerKubeconfigs"] = {w: str(p) for w, p in credentials.items()}
    rules = WORKER_CLUSTER_RULES if role == ROLE_WORKER else None
    return start_agent(cp, kubeconfig=grant(cp, system, rules), name=f"dispatch-agent-{system}", config=config,
                       workdir=tmp, until=LEADER)  # fmt: skip


@pytest.fixture
def armed(
    multicluster: MultiCluster, multicluster_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Armed]:
    mc, ns = multicluster, multicluster_namespace
    admin = mc.manager.admin
    suffix = secrets.token_hex(3)
    check, cq, rt = f"dispatch-mkg-{suffix}", f"dispatch-mkg-{suffix}", f"dispatch-mkg-{suffix}"
    system = f"dispatch-mkg-system-{suffix}"
    agents: list[tuple[Any, AgentProcess]] = []
    try:
        admin.create(site.admission_check(check))
        admin.create(_queue(cq, check))
        runtime = kit.training_runtime(rt, cpu="1", failure_policy={"maxRestarts": K - 1})
        for tb in mc.tiers:
            tb.admin.create(copy.deepcopy(runtime))
        runtime = admin.get(TRAINER_V, "ClusterTrainingRuntime", rt)
        admin.apply({"apiVersion": KUEUE_V, "kind": "LocalQueue", "metadata": {"namespace": ns, "name": QUEUE},
                     "spec": {"clusterQueue": cq}})  # fmt: skip
        cp = mc.manager.control_plane
        workdir = Path(tmp_path_factory.mktemp("agent"))
        credentials = mc.agent_kubeconfigs(workdir)
        agents.append((cp, _start_agent(cp, cp.create_namespace(system), workdir, credentials=credentials)))
        for worker in mc.workers:
            w = worker.admin
            w.create(site.admission_check(check))
            w.create(_worker_queue(cq, check))
            w.apply({"apiVersion": KUEUE_V, "kind": "LocalQueue", "metadata": {"namespace": ns, "name": QUEUE},
                     "spec": {"clusterQueue": cq}})  # fmt: skip
            wcp = worker.control_plane
            tmp = Path(tmp_path_factory.mktemp("agent"))
            agents.append((wcp, _start_agent(wcp, wcp.create_namespace(system), tmp, ROLE_WORKER)))
        for http in (admin, *(w.admin for w in mc.workers)):
            eventually(lambda http=http: _true(kit.condition_true(http.get(KUEUE_V, "ClusterQueue", cq), "Active")),
                       60, "each ClusterQueue with its checks Active")  # fmt: skip
            eventually(lambda http=http: _true(kit.condition_true(http.get(KUEUE_V, "LocalQueue", QUEUE, ns),
                                                                  "Active")), 30, "LocalQueue Active")  # fmt: skip
        yield Armed(Manager(mc, ns, check, runtime, agents[0][1], credentials), check)
    finally:
        for cp, agent in agents:
            cp.supervisor.stop(agent.name)
        for worker in mc.workers:  # reconnect a worker a failed test left cut off
            mc.restore_connection(worker)
        for tj in admin.list(TRAINER_V, "TrainJob", ns):
            admin.delete(TRAINER_V, "TrainJob", tj["metadata"]["name"], ns)
        eventually(lambda: _true(not admin.list(KUEUE_V, "Workload", ns)), 120, "the test's Workloads gone")
        for worker in mc.workers:
            for tj in worker.admin.list(TRAINER_V, "TrainJob", ns):
                worker.admin.delete(TRAINER_V, "TrainJob", tj["metadata"]["name"], ns)
            for wl in worker.admin.list(KUEUE_V, "Workload", ns):
                worker.admin.delete(KUEUE_V, "Workload", wl["metadata"]["name"], ns)
            for pod in worker.admin.list("v1", "Pod", ns):  # the agents are stopped: nobody else removes it
                if POD_FINALIZER in pod["metadata"].get("finalizers", []):
                    worker.admin.merge_patch("v1", "Pod", pod["metadata"]["name"],
                                             {"metadata": {"finalizers": None}}, ns)  # fmt: skip
        for http in (admin, *(w.admin for w in mc.workers)):
            http.delete(KUEUE_V, "LocalQueue", QUEUE, ns)
            http.delete(KUEUE_V, "ClusterQueue", cq)
            http.delete(KUEUE_V, "AdmissionCheck", check)
        for tb in mc.tiers:
            tb.admin.delete(TRAINER_V, "ClusterTrainingRuntime", rt)
        rbac = "rbac.authorization.k8s.io/v1"
        for cp, _ in agents:
            cp.admin.delete(rbac, "ClusterRoleBinding", f"dispatch-agent-{system}")
            cp.admin.delete(rbac, "ClusterRole", f"dispatch-agent-{system}")
            cp.delete_namespace(system)


def _remote_workload(worker: Worker, namespace: str, name: str) -> dict[str, Any]:
    return worker.admin.get(KUEUE_V, "Workload", name, namespace)


def _ready_transitions(versions: list[dict[str, Any]], uid: str, check: str) -> int:
    """How many times the check turned Ready on the Workload with ``uid``, over its recorded versions."""
    count, before = 0, None
    for wl in versions:
        if wl["metadata"]["uid"] != uid:
            continue
        state = next((e.get("state") for e in kit.check_entries(wl, check)), None)
        if state == "Ready" and before != "Ready":
            count += 1
        before = state
    return count


def _verified(worker: Worker, namespace: str, name: str, workload: str, a: int, recorder: kit.Recorder) -> None:
    """The copy ``name`` on ``worker`` carries A ``a``, the stamp its remote Workload carries, was created marked
    unverified and no longer is, and is the copy the worker's agent recorded on that Workload."""

    def check() -> None:
        there = worker.admin.get(TRAINER_V, "TrainJob", name, namespace)
        wl = _remote_workload(worker, namespace, workload)
        assert annotations(wl).get(ANNOTATION_DISPATCHED) == str(a), wl["metadata"]
        assert ANNOTATION_UNVERIFIED not in annotations(there), there["metadata"]
        assert annotations(wl).get(ANNOTATION_VERIFIED_COPY) == there["metadata"]["uid"], wl["metadata"]
        first = next((v for v in recorder.versions(name) if v["metadata"]["uid"] == there["metadata"]["uid"]), None)
        assert first is not None, "the copy's creation not in the worker's history yet"
        assert annotations(first).get(ANNOTATION_UNVERIFIED) == UNVERIFIED_TRUE, first["metadata"]

    eventually(check, 30, "the copy verified against its dispatch's stamp")


def _admissions(recorder: kit.Recorder, name: str) -> list[int]:
    """A at each start of every copy of the TrainJob ``name`` on one worker, copy by copy (each checked by
    kit.assert_a_rises_before_each_admission)."""
    by_uid: dict[str, list[dict[str, Any]]] = {}
    for v in recorder.versions(name):
        by_uid.setdefault(v["metadata"]["uid"], []).append(v)
    return [a for versions in by_uid.values() for a in kit.assert_a_rises_before_each_admission(versions)]


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches and a hold
def test_a_copy_evicted_on_its_worker_is_held_there_and_the_manager_dispatches_it_again(armed: Armed) -> None:
    m, mc = armed.manager, armed.manager.mc
    trainjobs = kit.Recorder(m.admin, m.admin.collection_path(TRAINER_V, "TrainJob", m.namespace))
    copies = {w.name: kit.Recorder(w.admin, w.admin.collection_path(TRAINER_V, "TrainJob", m.namespace))
              for w in mc.workers}  # fmt: skip
    remotes = {w.name: kit.Recorder(w.admin, w.admin.collection_path(KUEUE_V, "Workload", m.namespace))
               for w in mc.workers}  # fmt: skip
    sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace=m.namespace,
                     image="registry.invalid/dispatch-mc/train:1", command=["python", "train.py"], queue=QUEUE)  # fmt: skip
    try:
        tj = kit.create_as_start(m.admin, sub, m.runtime)
        name = tj["metadata"]["name"]
        eventually(lambda: kit.workload_of(m.admin, m.namespace, tj["metadata"]["uid"]), 30, "the Workload created")
        write_as_the_api(m.admin, tj, lambda t, w: plan_open(t).writes)
        _dispatched(m, tj, K)

        # The copy's first admission on its worker: recorded, then approved.
        manager_wl = kit.workload_of(m.admin, m.namespace, tj["metadata"]["uid"])
        worker = mc.worker(manager_wl["status"]["clusterName"])
        remote = _remote_workload(worker, m.namespace, manager_wl["metadata"]["name"])
        assert ANNOTATION_WORKER_ADMITTED in remote["metadata"].get("annotations", {}), remote["metadata"]
        recorded = remote["metadata"]["annotations"][ANNOTATION_WORKER_ADMITTED]
        entry = kit.check_entry(remote, armed.worker_check)
        assert (entry["state"], entry["message"]) == ("Ready", WORKER_FIRST_MESSAGE)
        uid = remote["metadata"]["uid"]

        def started_first() -> None:
            there = worker.admin.get(TRAINER_V, "TrainJob", name, m.namespace)
            assert there["spec"].get("suspend") is False, "the copy not started yet"
            assert (kit.a_of(there), admission_started(there)) == (K, K)

        eventually(started_first, 120, "the copy started on its worker with the A the manager gave it")
        # The stale-copy defence in the real flow: MultiKueue cloned the manager gate's stamp into the remote
        # Workload; the copy was created marked unverified (mark-copy), and the worker's agent, finding its A equal
        # to the stamp, recorded it on the remote Workload and removed the mark.
        _verified(worker, m.namespace, name, remote["metadata"]["name"], K, copies[worker.name])

        # Evicted on the worker, with the manager cut off: only the worker's Kueue acts on the copy.
        mc.break_connection(worker)
        eventually(lambda: _true((mc.cluster_active(worker) or {}).get("status") == "False"), 60,
                   "the manager cut off from the worker")  # fmt: skip
        worker.admin.request("PATCH", worker.admin.object_path(remote), {"spec": {"active": False}},
                             content_type=MERGE)  # fmt: skip
        eventually(lambda: _true(kit.condition_true(_remote_workload(worker, m.namespace, remote["metadata"]["name"]),
                                                    "Evicted")), 60, "the copy evicted on the worker")  # fmt: skip
        worker.admin.request("PATCH", worker.admin.object_path(remote), {"spec": {"active": True}},
                             content_type=MERGE)  # fmt: skip

        def held() -> dict[str, Any]:
            wl = _remote_workload(worker, m.namespace, remote["metadata"]["name"])
            assert wl["metadata"]["uid"] == uid
            assert kit.condition_true(wl, "QuotaReserved"), wl.get("status")
            entry = kit.check_entry(wl, armed.worker_check)
            assert (entry["state"], entry["message"]) == ("Pending", worker_held_message(recorded)), entry
            return wl

        eventually(held, 60, "the copy admitted again on the worker, and held by the worker's gate")
        time.sleep(3)  # held, not only for a moment
        held()
        stored = worker.admin.get(TRAINER_V, "TrainJob", name, m.namespace)
        assert stored["spec"].get("suspend") is True, "the copy started again on the worker"

        # Back in touch (or given up after workerLostTimeout): the manager dispatches again, A raised by K.
        mc.restore_connection(worker)
        _dispatched(m, tj, 2 * K, within=300)
        chosen = mc.worker(kit.workload_of(m.admin, m.namespace, tj["metadata"]["uid"])["status"]["clusterName"])

        def started_there() -> None:
            there = chosen.admin.get(TRAINER_V, "TrainJob", name, m.namespace)
            assert there["spec"].get("suspend") is False, "the new copy not started yet"
            assert (kit.a_of(there), admission_started(there)) == (2 * K, 2 * K)

        eventually(started_there, 120, "the new copy started on its worker with A raised by K")
        _verified(chosen, m.namespace, name, manager_wl["metadata"]["name"], 2 * K, copies[chosen.name])

        # The histories: the held copy's check turned Ready once; each copy started once, with the A the manager
        # gave it; no two executions share an identity and R only rises.
        assert _ready_transitions(remotes[worker.name].versions(remote["metadata"]["name"]), uid,
                                  armed.worker_check) == 1  # fmt: skip
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(name)) == [K, 2 * K]

        def both_started() -> None:  # a watch may deliver the last start a moment after the GET above saw it
            started = sorted(a for w in mc.workers for a in _admissions(copies[w.name], name))
            assert started == [K, 2 * K], started

        eventually(both_started, 30, "each copy's start in the workers' histories")
    finally:
        trainjobs.stop()
        for recorder in (*copies.values(), *remotes.values()):
            recorder.stop()


@pytest.mark.timeout(600)
def test_preflight_proves_each_worker_with_dispatch_s_check_there_and_names_one_it_cannot_read(
    armed: Armed, tmp_path: Path
) -> None:
    """With dispatch's agent on every worker and its check on the worker ClusterQueue of the job's queue, the
    manager's Preflight proves each worker with the agent's own credential for it (the rights the gate uses, the
    queue, the check Active); a worker whose credential points nowhere is named, not proven. Kueue mode stays
    observe-only on a MultiKueue queue while a worker that comes back unfenced is not handled."""
    m, mc = armed.manager, armed.manager.mc
    for run in ("proven", "broken"):
        (tmp_path / run).mkdir()
    report = asyncio.run(preflight_on_the_manager(m, tmp_path / "proven", m.credentials))
    why = report.readmission_gate_reason
    assert report.observe_only, report
    assert "a lost worker that comes back unfenced may restart its stale copy" in why, why
    for worker in mc.cluster_names:
        assert f"{worker}: proven" in why, why

    lost = sorted(m.credentials)[0]
    working = mc.break_agent_kubeconfig(m.credentials[lost])
    try:
        report = asyncio.run(preflight_on_the_manager(m, tmp_path / "broken", m.credentials))
    finally:
        m.credentials[lost].write_bytes(working)
    why = report.readmission_gate_reason
    assert f"{lost}: cannot be read: " in why, why
    assert f"{lost}: proven" not in why, why
    assert all(f"{w}: proven" in why for w in mc.cluster_names if w != lost), why
