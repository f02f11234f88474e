"""The worker-side gate (docs/multicluster.md, guarantee 3) against the real MultiKueue of harness.multicluster:
dispatch's agent on the manager, as in test_numbering, and on every worker an agent in role worker, its check on a
worker ClusterQueue of the test's own that receives the copies.

The copy's first admission on the worker is approved, recorded as ``worker-admitted`` on the remote Workload
first. Then the copy is evicted on that worker (its Workload deactivated and reactivated there, with the manager's
Kueue frozen so that only the worker's Kueue acts): the worker's Kueue admits it again locally, and the worker's
gate holds it. Nothing starts under the dispatch's A again. Once the manager's Kueue runs again,
its MultiKueue check goes to Retry, the manager evicts, and its gate dispatches again with A raised by K. Across
both clusters no two executions share an identity, and R only rises."""

from __future__ import annotations

import asyncio
import copy
import secrets
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ulid import ULID

from agent.constants import REASON_OUT_OF_CONTACT, REASON_UNCLAIMED
from agent.domain.decide import WORKER_FIRST_MESSAGE, worker_held_message
from agent.domain.operations import plan_open
from agent.multicluster.contact_lease import contact_epoch
from contract.admission import admission_started
from contract.keys import (
    ANNOTATION_DISPATCHED,
    ANNOTATION_UNVERIFIED,
    ANNOTATION_VERIFIED_CONTACT,
    ANNOTATION_VERIFIED_COPY,
    ANNOTATION_WORKER_ADMITTED,
    LABEL_JOBSET_NAME,
    LEASE_MANAGER_CONTACT,
    POD_FINALIZER,
    UNVERIFIED_TRUE,
)
from contract.multicluster import ROLE_WORKER
from contract.objects import annotations
from contract.trainjob import Submission
from harness.agent_process import LEADER, WORKER_CLUSTER_RULES, AgentProcess, grant, start_agent
from harness.jobs import write_as_the_api
from harness.multicluster import KUEUE_V, MultiCluster, Worker, worker_unsuspend_policy
from harness.sandbox import site
from tests.agent.gate import kit
from tests.agent.gate.kit import TRAINER_V, eventually
from tests.agent.multicluster.test_numbering import (
    QUEUE,
    SWEEP_SECONDS,
    K,
    Manager,
    _active,
    _dispatched,
    _events,
    _get,
    _queue,
    _trainer_pod,
    _true,
    preflight_on_the_manager,
)

pytestmark = [pytest.mark.e2e, pytest.mark.multicluster]

MERGE = "application/merge-patch+json"
CONTACT_SECONDS = 8
"""The contact Lease's duration the manager's agent renews on the workers here: the least the agent accepts (60 s by
default). It stays below the manager's workerLostTimeout (15 s here, harness/multicluster.py), as the chart asks and
docs/multicluster.md's proof needs: a worker out of contact deletes its copies before Kueue gives the worker up."""


@dataclass
class Armed:
    manager: Manager
    worker_check: str
    system: str
    """The agents' Lease namespace, one name on all three clusters (the contact Lease's on the workers)."""


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
        config["workerContactSeconds"] = CONTACT_SECONDS
        config["workerRoundSeconds"] = SWEEP_SECONDS
    rules = WORKER_CLUSTER_RULES if role == ROLE_WORKER else None
    return start_agent(cp, kubeconfig=grant(cp, system, rules), name=f"dispatch-agent-{system}", config=config,
                       workdir=tmp, until=LEADER)  # fmt: skip


def _unsuspend_policy(suffix: str) -> list[dict[str, Any]]:
    return worker_unsuspend_policy(f"dispatch-mkg-{suffix}-unsuspend")


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
        # One Lease namespace name on all three: the manager's agent renews its contact Lease in the workers' agents'
        # Lease namespace, which it takes to be its own (workerLeaseNamespace unset).
        system = cp.create_namespace(system)
        agents.append((cp, _start_agent(cp, system, workdir, credentials=credentials)))
        for worker in mc.workers:
            w = worker.admin
            w.create(site.admission_check(check))
            w.create(_worker_queue(cq, check))
            w.apply({"apiVersion": KUEUE_V, "kind": "LocalQueue", "metadata": {"namespace": ns, "name": QUEUE},
                     "spec": {"clusterQueue": cq}})  # fmt: skip
            for doc in _unsuspend_policy(suffix):
                w.create(doc)
            wcp = worker.control_plane
            tmp = Path(tmp_path_factory.mktemp("agent"))
            wcp.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": system}})
            agents.append((wcp, _start_agent(wcp, system, tmp, ROLE_WORKER)))
        for http in (admin, *(w.admin for w in mc.workers)):
            eventually(lambda http=http: _true(kit.condition_true(http.get(KUEUE_V, "ClusterQueue", cq), "Active")),
                       60, "each ClusterQueue with its checks Active")  # fmt: skip
            eventually(lambda http=http: _true(kit.condition_true(http.get(KUEUE_V, "LocalQueue", QUEUE, ns),
                                                                  "Active")), 30, "LocalQueue Active")  # fmt: skip
        yield Armed(Manager(mc, ns, check, runtime, agents[0][1], credentials), check, system)
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
        for worker in mc.workers:
            for doc in _unsuspend_policy(suffix):
                worker.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
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
    frozen = False
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

        # Evicted on the worker, with the manager's Kueue frozen: only the worker's Kueue acts on the copy. (Frozen,
        # not cut off: cut off, the worker's MultiKueueCluster goes inactive, the manager claims the copy no more,
        # and the worker's agent deletes it: "The claim" in docs/multicluster.md.)
        manager_kueue = mc.manager.control_plane.supervisor
        manager_kueue.send_signal("kueue", signal.SIGSTOP)
        frozen = True
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

        # The manager's Kueue back: it sees its remote evicted, and the manager dispatches again, A raised by K.
        manager_kueue.send_signal("kueue", signal.SIGCONT)
        frozen = False
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
        if frozen:
            mc.manager.control_plane.supervisor.send_signal("kueue", signal.SIGCONT)
        trainjobs.stop()
        for recorder in (*copies.values(), *remotes.values()):
            recorder.stop()


def _worker_events(worker: Worker, namespace: str, uid: str, reason: str) -> list[dict[str, Any]]:
    listed = worker.admin.list("v1", "Event", namespace)
    return [e for e in listed if e.get("reason") == reason and e["involvedObject"].get("uid") == uid]


def _contact_epoch(worker: Worker, namespace: str) -> int | None:
    """The epoch of the contact Lease in ``namespace`` (the agents' Lease namespace) on ``worker``."""
    return contact_epoch(worker.admin.get_or_none("coordination.k8s.io/v1", "Lease", LEASE_MANAGER_CONTACT, namespace))


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches and a lost worker
def test_a_worker_out_of_contact_stops_its_copy_and_brings_no_stale_copy_back_when_it_reconnects(armed: Armed) -> None:
    """A worker lost while the job runs there (Kueue's connection to it and the manager agent's credential both
    fail), the worker itself running on: no renewal of the contact Lease reaches it, so within the Lease's
    duration its agent deletes the copy it let start, and says so. On the manager Kueue evicts the job after
    workerLostTimeout and keeps its quota while the worker cannot be read. The worker reconnects: the manager's
    agent renews its Lease at a new epoch, its gate reads the worker, finds nothing of the job there, the quota is
    released and the job is dispatched again with A raised by K. The stale copy never comes back: no copy of the
    earlier dispatch exists or starts on either worker after the reconnect, and across both no two executions share
    an identity and R only rises."""
    m, mc = armed.manager, armed.manager.mc
    ns = m.namespace
    trainjobs = kit.Recorder(m.admin, m.admin.collection_path(TRAINER_V, "TrainJob", ns))
    copies = {w.name: kit.Recorder(w.admin, w.admin.collection_path(TRAINER_V, "TrainJob", ns)) for w in mc.workers}
    broken: tuple[Path, bytes] | None = None
    lost: Worker | None = None
    sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace=ns,
                     image="registry.invalid/dispatch-mc/train:1", command=["python", "train.py"], queue=QUEUE)  # fmt: skip
    try:
        tj = kit.create_as_start(m.admin, sub, m.runtime)
        name, uid = tj["metadata"]["name"], tj["metadata"]["uid"]
        eventually(lambda: kit.workload_of(m.admin, ns, uid), 30, "the Workload created")
        write_as_the_api(m.admin, tj, lambda t, w: plan_open(t).writes)
        _dispatched(m, tj, K)
        manager_wl = kit.workload_of(m.admin, ns, uid)
        lost = mc.worker(manager_wl["status"]["clusterName"])
        _verified(lost, ns, name, manager_wl["metadata"]["name"], K, copies[lost.name])
        remote = _remote_workload(lost, ns, manager_wl["metadata"]["name"])
        epoch = _contact_epoch(lost, armed.system)
        assert epoch is not None
        assert annotations(remote)[ANNOTATION_VERIFIED_CONTACT] == str(epoch), remote["metadata"]
        eventually(lambda: _trainer_pod(lost, tj), 120, f"the trainer pod Running on {lost.name}")
        stale = lost.admin.get(TRAINER_V, "TrainJob", name, ns)
        eventually(lambda: _true(_active(_get(m, tj)) > 0), 60, "the worker's active Job copied to the manager")

        # Lost: Kueue's connection and the manager agent's credential both fail; the worker runs on.
        mc.break_connection(lost)
        broken = (m.credentials[lost.name], mc.break_agent_kubeconfig(m.credentials[lost.name]))
        cut = time.monotonic()

        def stopped() -> list[dict[str, Any]]:
            assert lost.admin.get_or_none(TRAINER_V, "TrainJob", name, ns) is None, "the copy still there"
            # Out of contact, or unclaimed: the contact Lease and the copy's claim stop together here.
            uid = stale["metadata"]["uid"]
            return [
                *_worker_events(lost, ns, uid, REASON_OUT_OF_CONTACT),
                *_worker_events(lost, ns, uid, REASON_UNCLAIMED),
            ]

        said = eventually(stopped, CONTACT_SECONDS + 60, "the copy deleted by the worker's agent, out of contact")
        assert time.monotonic() - cut >= CONTACT_SECONDS - 4  # not before the Lease's duration (a renewal late)
        assert any(s in said[0]["message"] for s in ("has not renewed its contact Lease", "does not claim this copy"))
        selector = f"{LABEL_JOBSET_NAME}={name}"
        eventually(lambda: _true(not lost.admin.list("v1", "Pod", ns, label_selector=selector)), 120,
                   "the copy's pods gone from the lost worker")  # fmt: skip

        # The manager: evicted after workerLostTimeout, its quota kept while the worker cannot be read.
        def kept() -> None:
            wl = kit.workload_of(m.admin, ns, uid)
            assert kit.condition_true(wl, "Evicted"), wl["status"]
            assert kit.condition_true(wl, "QuotaReserved"), wl["status"]
            assert any(f"worker {lost.name}: cannot be read" in e["message"] for e in _events(m, tj, "QuotaKept"))

        eventually(kept, 240, "the job evicted on the manager, its quota kept for the lost worker")
        assert kit.a_of(_get(m, tj)) == K

        # The worker reconnects: a new contact epoch there; the gate reads it, nothing of the job runs there, and
        # the job is dispatched again, A raised by K.
        broken[0].write_bytes(broken[1])
        broken = None
        mc.restore_connection(lost)
        eventually(
            lambda: _true((_contact_epoch(lost, armed.system) or 0) > epoch), 60, "a new contact epoch on the worker"
        )
        _, again = _dispatched(m, tj, 2 * K, within=300)
        chosen = mc.worker(kit.workload_of(m.admin, ns, uid)["status"]["clusterName"])

        def started_there() -> None:
            there = chosen.admin.get(TRAINER_V, "TrainJob", name, ns)
            assert there["spec"].get("suspend") is False, "the new copy not started yet"
            assert (kit.a_of(there), admission_started(there)) == (2 * K, 2 * K)

        eventually(started_there, 120, "the new copy started with A raised by K")
        running = chosen.admin.get(TRAINER_V, "TrainJob", name, ns)["metadata"]["uid"]
        time.sleep(CONTACT_SECONDS)  # in contact again: the new copy runs on, and no stale copy appears
        for w in mc.workers:
            there = w.admin.get_or_none(TRAINER_V, "TrainJob", name, ns)
            assert (there or {}).get("metadata", {}).get("uid") == (running if w is chosen else None), w.name
        assert kit.workload_of(m.admin, ns, uid)["status"]["clusterName"] == chosen.name
        assert kit.a_of(again) == 2 * K

        # No two executions share an identity, and R only rises: one start per dispatch, across both workers.
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(name)) == [K, 2 * K]

        def both_started() -> None:
            started = sorted(a for w in mc.workers for a in _admissions(copies[w.name], name))
            assert started == [K, 2 * K], started

        eventually(both_started, 30, "each copy's start in the workers' histories")
    finally:
        if broken is not None:
            broken[0].write_bytes(broken[1])
        if lost is not None:
            mc.restore_connection(lost)
        trainjobs.stop()
        for recorder in copies.values():
            recorder.stop()


@pytest.mark.timeout(600)
def test_preflight_proves_each_worker_with_dispatch_s_check_there_and_names_one_it_cannot_read(
    armed: Armed, tmp_path: Path
) -> None:
    """With dispatch's agent on every worker and its check on the worker ClusterQueue of the job's queue, the
    manager's Preflight proves each worker with the agent's own credential for it (the rights the gate uses, the
    queue, the check Active, the contact Lease renewed there), and so proves Kueue mode through the MultiKueue
    queue, with its workerContactSeconds below the workerLostTimeout the manager's Kueue runs with; a worker whose
    credential points nowhere is named, not proven, and the agent is observe-only."""
    m, mc = armed.manager, armed.manager.mc
    for run in ("proven", "broken"):
        (tmp_path / run).mkdir()
    # Proven too: the agents' workerContactSeconds is below the workerLostTimeout in Kueue's ConfigMap there.
    report = asyncio.run(preflight_on_the_manager(m, tmp_path / "proven", m.credentials, armed.system, CONTACT_SECONDS))
    assert not report.observe_only, report
    assert report.readmission_gate, report

    lost = sorted(m.credentials)[0]
    working = mc.break_agent_kubeconfig(m.credentials[lost])
    try:
        report = asyncio.run(
            preflight_on_the_manager(m, tmp_path / "broken", m.credentials, armed.system, CONTACT_SECONDS)
        )
    finally:
        m.credentials[lost].write_bytes(working)
    assert report.observe_only, report
    why = report.readmission_gate_reason
    assert "not every worker it may send a job to is proven" in why, why
    assert f"{lost}: cannot be read: " in why, why
    assert f"{lost}: proven" not in why, why
    assert all(f"{w}: proven" in why for w in mc.cluster_names if w != lost), why
