"""Numbering each dispatch on a MultiKueue manager (docs/multicluster.md, guarantees 1 and 2), and the manager's
wait for every worker before a dispatch (guarantee 4: the agent reads each worker with its own credential), against the real
MultiKueue of harness.multicluster: dispatch's agent on the manager, its check beside the MultiKueue check on a
ClusterQueue of the test's own.

The gate raises A by K = maxRestarts + 1 before it sets its check Ready, so the copy MultiKueue makes on a worker
carries the raised A; the manager's unsuspend (the record-start policy tier B installs) then only records it, and
MultiKueue copies the worker's status back. A second dispatch (Hold, then Release) raises A again by K: R only
rises. The Hold evicts through dispatch's check (Retry), never by deactivating a Workload a worker runs, and the
gate deactivates it only once the copied status shows no active Job (docs/multicluster.md, "Hold and Release on
a manager"): a deactivation first would make MultiKueue delete the worker's copy before copying its final status
back, and stall the job. The workers' owner policies are the chart's in role worker (harness.multicluster), so
MultiKueue's principal creates and deletes its copies there under them, and the manager's agent its replicas of
the runtime copy (docs/multicluster.md, "The runtime copy on the workers"): no test creates a runtime copy on a
worker."""

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

from agent.api.errors import ApiError as AgentApiError
from agent.api.models import HoldRequest, KueueSpec, ObjectRef, OutputRequest, PreflightRequest, RuntimeRef
from agent.api.settings import ApiSettings
from agent.constants import CONTACT_SECONDS
from agent.domain.operations import plan_open, plan_release
from agent.multicluster.worker_reads import WorkerClients
from contract.admission import admission_started
from contract.claims import DEFAULT_ORIGIN, dispatched_to
from contract.keys import (
    ANNOTATION_FENCED,
    FENCED_POWERED_OFF,
    FENCED_TRUE,
    LABEL_JOBSET_NAME,
    LABEL_REPLICA_OF,
    LEASE_MANAGER_CONTACT,
    LEASE_NAMESPACE,
    POD_FINALIZER,
    PROLOGUE_KEY,
)
from contract.prologue import PROLOGUE, PROLOGUE_CONFIGMAP
from contract.trainjob import Submission
from harness.agent_process import LEADER, AgentProcess, grant, start_agent
from harness.jobs import write_as_the_api
from harness.kube_http import ApiError, KubeHttp
from harness.multicluster import (
    ADMISSION_CHECK,
    KUEUE_V,
    MANAGER_AGENT_USER,
    MULTIKUEUE_CONTROLLER,
    WORKER_LOST_TIMEOUT,
    MultiCluster,
)
from harness.sandbox import site
from harness.tier_b import CLUSTER_QUEUE_QUOTA, KWOK_SLOW_KUBELET_ANNOTATION, RESOURCE_FLAVOR
from tests.agent.api.cluster import allowed, running_agent, supervisors
from tests.agent.gate import kit
from tests.agent.gate.kit import TRAINER_V, eventually

pytestmark = [pytest.mark.e2e, pytest.mark.multicluster]

QUEUE = "dispatch-mk"
MAX_RESTARTS = 2
K = MAX_RESTARTS + 1
RAISED_BY_K = (
    "the next dispatch starts with A {}, raised by K = maxRestarts + 1 = 3 by the gate before this check turns "
    "Ready (MultiKueue copies the TrainJob to a worker then)"
)
LINGER = "test.dispatch.phpboyscout.uk/linger"
SWEEP_SECONDS = 2


@dataclass
class Manager:
    mc: MultiCluster
    namespace: str
    check: str
    runtime: dict[str, Any]
    agent: AgentProcess
    credentials: dict[str, Path]
    """The agent's kubeconfig file for each worker (MultiCluster.agent_kubeconfigs)."""

    @property
    def admin(self) -> KubeHttp:
        return self.mc.manager.admin


def _queue(name: str, check: str) -> dict[str, Any]:
    return {
        "apiVersion": KUEUE_V,
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": list(CLUSTER_QUEUE_QUOTA),
                    "flavors": [
                        {
                            "name": RESOURCE_FLAVOR,
                            "resources": [{"name": k, "nominalQuota": v} for k, v in CLUSTER_QUEUE_QUOTA.items()],
                        }
                    ],
                }
            ],
            "admissionChecksStrategy": {"admissionChecks": [{"name": ADMISSION_CHECK}, {"name": check}]},
        },
    }


@pytest.fixture
def manager(
    multicluster: MultiCluster, multicluster_namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Manager]:
    mc, ns = multicluster, multicluster_namespace
    admin = mc.manager.admin
    suffix = secrets.token_hex(3)
    check, cq, rt = f"dispatch-mk-{suffix}", f"dispatch-mk-{suffix}", f"dispatch-mk-{suffix}"
    system = f"dispatch-mk-system-{suffix}"
    agent: AgentProcess | None = None
    try:
        admin.create(site.admission_check(check))
        admin.create(_queue(cq, check))
        runtime = kit.training_runtime(rt, cpu="1", failure_policy={"maxRestarts": MAX_RESTARTS})
        for tb in mc.tiers:
            tb.admin.create(copy.deepcopy(runtime))
        runtime = admin.get(TRAINER_V, "ClusterTrainingRuntime", rt)
        admin.apply({"apiVersion": KUEUE_V, "kind": "LocalQueue", "metadata": {"namespace": ns, "name": QUEUE},
                     "spec": {"clusterQueue": cq}})  # fmt: skip
        for worker in mc.workers:
            worker.tier_b.create_local_queue(ns, QUEUE)
        cp = mc.manager.control_plane
        system = cp.create_namespace(system)
        workdir = Path(tmp_path_factory.mktemp("agent"))
        credentials = mc.agent_kubeconfigs(workdir)  # guarantee 4: the agent's own read of every worker
        agent = start_agent(cp, kubeconfig=grant(cp, system), name=f"dispatch-agent-{system}",
                            config={"leaseNamespace": system, "leaseName": "dispatch-admission",
                                    "workerKubeconfigs": {w: str(p) for w, p in credentials.items()},
                                    "workerRoundSeconds": SWEEP_SECONDS},
                            workdir=workdir, until=LEADER)  # fmt: skip
        eventually(lambda: _true(kit.condition_true(admin.get(KUEUE_V, "ClusterQueue", cq), "Active")), 60,
                   "the ClusterQueue with both checks Active")  # fmt: skip
        eventually(lambda: _true(kit.condition_true(admin.get(KUEUE_V, "LocalQueue", QUEUE, ns), "Active")), 30,
                   "LocalQueue Active")  # fmt: skip
        yield Manager(mc, ns, check, runtime, agent, credentials)
    finally:
        if agent is not None:
            mc.manager.control_plane.supervisor.stop(agent.name)
        for tj in admin.list(TRAINER_V, "TrainJob", ns):
            admin.delete(TRAINER_V, "TrainJob", tj["metadata"]["name"], ns)
        eventually(lambda: _true(not admin.list(KUEUE_V, "Workload", ns)), 90, "the test's Workloads gone")
        for worker in mc.workers:  # no agent there removes dispatch's pod finalizer (the worker side is design)
            for replica in worker.admin.list(TRAINER_V, "TrainingRuntime", ns):  # the agent that sweeps is stopped
                worker.admin.delete(TRAINER_V, "TrainingRuntime", replica["metadata"]["name"], ns)
            for pod in worker.admin.list("v1", "Pod", ns):
                if POD_FINALIZER in pod["metadata"].get("finalizers", []):
                    worker.admin.merge_patch("v1", "Pod", pod["metadata"]["name"],
                                             {"metadata": {"finalizers": None}}, ns)  # fmt: skip
        admin.delete(KUEUE_V, "LocalQueue", QUEUE, ns)
        admin.delete(KUEUE_V, "ClusterQueue", cq)
        admin.delete(KUEUE_V, "AdmissionCheck", check)
        for tb in mc.tiers:
            tb.admin.delete(TRAINER_V, "ClusterTrainingRuntime", rt)
        if agent is not None:
            rbac = "rbac.authorization.k8s.io/v1"
            admin.delete(rbac, "ClusterRoleBinding", f"dispatch-agent-{system}")
            admin.delete(rbac, "ClusterRole", f"dispatch-agent-{system}")
            mc.manager.control_plane.delete_namespace(system)


def _true(value: object) -> object:
    assert value
    return value


def _active(trainjob: dict[str, Any]) -> int:
    """The active Jobs in the TrainJob's status: on the manager, as MultiKueue copied them from the worker."""
    return sum(j.get("active") or 0 for j in trainjob.get("status", {}).get("jobsStatus") or [])


def _copy(worker: Any, tj: dict[str, Any]) -> dict[str, Any] | None:
    return worker.admin.get_or_none(TRAINER_V, "TrainJob", tj["metadata"]["name"], tj["metadata"]["namespace"])


def _get(m: Manager, tj: dict[str, Any]) -> dict[str, Any]:
    return m.admin.get(TRAINER_V, "TrainJob", tj["metadata"]["name"], m.namespace)


def _hold_through_the_api(m: Manager, tj: dict[str, Any], directory: Path) -> str:
    """Hold as the supervisor calls it: the agent's API (its own ServiceAccount, with the documented RBAC) over
    real TLS, on the manager."""
    cp = m.mc.manager.control_plane
    who = supervisors(cp, m.namespace, cp.create_namespace("mc-api-other"))
    meta = tj["metadata"]

    async def hold() -> str:
        async with running_agent(cp, directory, ApiSettings()) as agent:
            await allowed(agent, who.tokens["supervisor"], m.namespace)
            async with agent.client(who.tokens["supervisor"]) as api:
                req = HoldRequest(namespace=m.namespace, name=meta["name"], uid=meta["uid"],
                                  who="tests/multicluster", reason="a second dispatch")  # fmt: skip
                return (await api.hold(req)).outcome

    return asyncio.run(hold())


def _status_and_output(m: Manager, tj: dict[str, Any], directory: Path) -> tuple[Any, str]:
    """Status as the supervisor calls it on the manager (the agent's API with its credential for each worker, over
    real TLS), and where Output goes for rank 0: the pod it streams, or its refusal (the workers' pods run on
    kwok's nodes, whose kubelet serves no log)."""
    cp = m.mc.manager.control_plane
    who = supervisors(cp, m.namespace, cp.create_namespace(f"mc-api-{secrets.token_hex(3)}"))
    ref = ObjectRef(namespace=m.namespace, name=tj["metadata"]["name"], uid=tj["metadata"]["uid"])
    workers = WorkerClients(m.credentials)

    async def read() -> tuple[Any, str]:
        try:
            async with running_agent(cp, directory, ApiSettings(), workers) as agent:
                await allowed(agent, who.tokens["supervisor"], m.namespace)
                async with agent.client(who.tokens["supervisor"]) as api:
                    status = await api.status(ref)
                req = OutputRequest(namespace=ref.namespace, name=ref.name, uid=ref.uid, tail_lines=1)
                try:
                    async with agent.server.service.output(req) as (pod, _):
                        return status, f"streams {pod}"
                except AgentApiError as exc:
                    return status, f"refused: {exc.message}"
        finally:
            await workers.close()

    return asyncio.run(read())


def _dispatched(m: Manager, tj: dict[str, Any], a: int, within: float = 180) -> tuple[dict[str, Any], dict[str, Any]]:
    """The dispatch numbered A: the manager's check Ready with the gate's message, the copy on the chosen worker
    carrying A, and the manager's TrainJob unsuspended with A recorded as started and not raised again."""
    uid, name = tj["metadata"]["uid"], tj["metadata"]["name"]

    def probe() -> tuple[dict[str, Any], dict[str, Any]]:
        wl = kit.workload_of(m.admin, m.namespace, uid)
        entry = kit.check_entry(wl, m.check)
        assert (entry["state"], entry["message"]) == ("Ready", RAISED_BY_K.format(a)), entry
        cluster = wl.get("status", {}).get("clusterName")
        assert cluster in m.mc.cluster_names, wl.get("status")
        remote = m.mc.worker(cluster).admin.get(TRAINER_V, "TrainJob", name, m.namespace)
        assert kit.a_of(remote) == a, "the copy on the worker does not carry the raised A"
        here = _get(m, tj)
        assert here["spec"].get("suspend") is False, "the manager has not unsuspended it yet"
        assert (kit.a_of(here), kit.floor_of(here), admission_started(here)) == (a, a, a)
        return here, remote

    return eventually(probe, within, f"the dispatch numbered A {a} sent to a worker")


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches
def test_the_manager_s_gate_raises_a_by_k_before_its_ready_and_r_only_rises(manager: Manager, tmp_path: Path) -> None:
    m = manager
    trainjobs = kit.Recorder(m.admin, m.admin.collection_path(TRAINER_V, "TrainJob", m.namespace))
    sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace=m.namespace,
                     image="registry.invalid/dispatch-mc/train:1", command=["python", "train.py"], queue=QUEUE)  # fmt: skip
    try:
        tj = kit.create_as_start(m.admin, sub, m.runtime)
        assert tj["spec"].get("managedBy") == MULTIKUEUE_CONTROLLER, tj["spec"]
        assert (kit.a_of(tj), kit.floor_of(tj)) == (0, None)

        eventually(lambda: kit.workload_of(m.admin, m.namespace, tj["metadata"]["uid"]), 30, "the Workload created")
        write_as_the_api(m.admin, tj, lambda t, w: plan_open(t).writes)
        first, _ = _dispatched(m, tj, K)
        # MultiKueue copies the worker's TrainJob status to the manager's: Kueue's controller, on the TrainJob it
        # manages (docs/security.md, "Several clusters"). Refused, MultiKueue's every later pass fails on it.
        eventually(lambda: _true(_active(_get(m, tj)) > 0), 120, "the worker's status, an active Job, copied")

        # A second dispatch: Hold (through the agent's API) evicts it through dispatch's check; MultiKueue stops the
        # worker's copy, copies its status back and deletes it; the gate deactivates the Workload; Release readmits
        # it.
        assert _hold_through_the_api(m, tj, tmp_path).startswith("held: evicted through MultiKueue")
        uid = tj["metadata"]["uid"]
        eventually(lambda: _true(kit.workload_of(m.admin, m.namespace, uid)["spec"].get("active") is False), 180,
                   "the held Workload deactivated by the gate once its copy stopped")  # fmt: skip
        # Kueue suspended the manager's TrainJob and MultiKueue copied the stopped copy's status back (a Workload
        # deactivated first stays unsuspended, its status active: the stall).
        eventually(lambda: _true(_get(m, tj)["spec"].get("suspend") is True and _active(_get(m, tj)) == 0), 60,
                   "the manager's TrainJob suspended, with no active Job")  # fmt: skip
        for worker in m.mc.workers:  # MultiKueue deleted the copy once the manager released the quota
            eventually(lambda w=worker: _true(_copy(w, tj) is None), 60, "the worker's copy deleted")
        write_as_the_api(m.admin, tj, lambda t, w: plan_release(t, w).writes)
        second, _ = _dispatched(m, tj, 2 * K)
        assert kit.a_of(second) >= kit.a_of(first) + K  # R only rises: above the first dispatch's whole range

        # The history: A rose only while suspended, and each unsuspend recorded it without raising it again.
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(tj["metadata"]["name"])) == [K, 2 * K]
    finally:
        trainjobs.stop()


async def preflight_on_the_manager(
    m: Manager,
    tmp_path: Path,
    credentials: dict[str, Path],
    lease_namespace: str = LEASE_NAMESPACE,
    contact_seconds: int = CONTACT_SECONDS,
    origin: str = DEFAULT_ORIGIN,
) -> Any:
    """Preflight through the test's MultiKueue queue, on the manager's API served with ``credentials`` (the agent's
    credential for each worker) as a supervisor of the test's namespace calls it; ``lease_namespace``: the agents'
    (the readmission controller's Lease on the manager, the contact Lease on the workers); ``contact_seconds``: the
    manager agent's workerContactSeconds, proven below the workerLostTimeout the manager's Kueue runs with."""
    cp = m.mc.manager.control_plane
    who = supervisors(cp, m.namespace, cp.create_namespace(f"mc-api-{secrets.token_hex(3)}"))
    workers = WorkerClients(credentials, lease_namespace=lease_namespace, origin=origin)
    settings = ApiSettings(probeSeconds=5, leaseNamespace=lease_namespace, workerContactSeconds=contact_seconds)
    try:
        async with running_agent(cp, tmp_path, settings, workers) as agent:
            await allowed(agent, who.tokens["supervisor"], m.namespace)
            async with agent.client(who.tokens["supervisor"]) as api:
                req = PreflightRequest(namespace=m.namespace, runtime=RuntimeRef(name=m.runtime["metadata"]["name"]),
                                       kueue=KueueSpec(local_queue=QUEUE))  # fmt: skip
                return await api.preflight(req)
    finally:
        await workers.close()


@pytest.mark.timeout(600)
def test_preflight_on_the_manager_reports_a_multikueue_queue_observe_only_and_why(
    manager: Manager, tmp_path: Path
) -> None:
    """Preflight through a queue whose ClusterQueue lists the MultiKueue check proves Kueue mode only when it
    proves every worker: here it does not, so observe-only, naming the check and what each worker lacks: no
    dispatch check on the workers' queue (no agent runs on them in this module), and no credential for a worker
    the agent was not given one for."""
    m = manager
    first, second = sorted(m.credentials)
    report = asyncio.run(preflight_on_the_manager(m, tmp_path, {first: m.credentials[first]}))
    assert report.observe_only, report
    assert not report.readmission_gate, report
    why = report.readmission_gate_reason
    assert f"lists the MultiKueue check {ADMISSION_CHECK}" in why, why
    assert "not every worker it may send a job to is proven" in (report.observe_only_reason or "")
    worker_cq = m.mc.worker(first).tier_b.cluster_queue
    assert f"{first}: " in why, why
    line = why.split(f"{first}: ", 1)[1]  # its line, and what follows it
    assert f"ClusterQueue {worker_cq} lists no AdmissionCheck of controller" in line, why
    # No agent on the workers here: the manager's agent renews no contact Lease in their Lease namespace.
    assert f"contact Lease {LEASE_MANAGER_CONTACT} there is not there (yet)" in line, why
    assert f"{second}: the agent has no credential to read it (workerKubeconfigs)" in why, why
    # The agent's default workerContactSeconds is not below the workerLostTimeout this harness's Kueue runs with,
    # as Preflight read it from Kueue's ConfigMap on the manager.
    too_long = f"workerContactSeconds ({CONTACT_SECONDS}s) is not below Kueue's multiKueue.workerLostTimeout"
    assert f"{too_long} ({WORKER_LOST_TIMEOUT}, " in why, why


def _trainer_pod(worker: Any, tj: dict[str, Any]) -> str:
    """The name of the job's one trainer pod Running on ``worker``."""
    selector = f"{LABEL_JOBSET_NAME}={tj['metadata']['name']}"
    pods = [p for p in worker.admin.list("v1", "Pod", tj["metadata"]["namespace"], label_selector=selector)
            if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"]  # fmt: skip
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    return pods[0]["metadata"]["name"]


def _linger(worker: Any, namespace: str, pod: str, keep: bool) -> None:
    """``keep``: the pod stays in the worker's API once deleted, still Running, as under a kubelet that has not
    stopped its containers yet (a finalizer of the test's, and the harness's slow-kubelet mark); else both go, and
    the pod ends."""
    meta = (
        {"finalizers": [LINGER], "annotations": {KWOK_SLOW_KUBELET_ANNOTATION: "true"}}
        if keep
        else {"$deleteFromPrimitiveList/finalizers": [LINGER], "annotations": {KWOK_SLOW_KUBELET_ANNOTATION: None}}
    )
    worker.admin.request("PATCH", f"/api/v1/namespaces/{namespace}/pods/{pod}", {"metadata": meta},
                         content_type="application/strategic-merge-patch+json")  # fmt: skip


def _fence(m: Manager, worker: str, value: str | None) -> None:
    patch = {"metadata": {"annotations": {ANNOTATION_FENCED: value}}}
    m.admin.merge_patch(KUEUE_V, "MultiKueueCluster", worker, patch)


def _running(m: Manager) -> tuple[dict[str, Any], str, str, str]:
    """A job started, opened and dispatched, numbered A = K, its trainer pod Running on its worker: the TrainJob,
    that worker, the other worker, and the pod's name."""
    sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace=m.namespace,
                     image="registry.invalid/dispatch-mc/train:1", command=["python", "train.py"], queue=QUEUE)  # fmt: skip
    tj = kit.create_as_start(m.admin, sub, m.runtime)
    uid = tj["metadata"]["uid"]
    eventually(lambda: kit.workload_of(m.admin, m.namespace, uid), 30, "the Workload created")
    write_as_the_api(m.admin, tj, lambda t, w: plan_open(t).writes)
    _dispatched(m, tj, K)
    ran_on = kit.workload_of(m.admin, m.namespace, uid)["status"]["clusterName"]
    other = next(name for name in m.mc.cluster_names if name != ran_on)
    pod = eventually(lambda: _trainer_pod(m.mc.worker(ran_on), tj), 120, f"the trainer pod Running on {ran_on}")
    return tj, ran_on, other, pod


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches
def test_the_manager_s_gate_waits_on_every_worker_until_nothing_may_run_there_or_it_is_fenced(
    manager: Manager, tmp_path: Path
) -> None:
    """Guarantee 4: the manager has no pod of the job, so before a dispatch its gate reads every worker of the
    MultiKueueConfig with its own credential. It holds while a pod of an earlier execution may still run on one,
    and while one cannot be read, naming the worker; a worker an administrator fences is no longer waited on."""
    m = manager
    trainjobs = kit.Recorder(m.admin, m.admin.collection_path(TRAINER_V, "TrainJob", m.namespace))
    fenced: str | None = None
    broken: tuple[Path, bytes] | None = None
    lingering: tuple[Any, str] | None = None
    try:
        tj, ran_on, other, pod = _running(m)
        uid, ns = tj["metadata"]["uid"], m.namespace
        there = m.mc.worker(ran_on)

        # Status and Output on the manager follow the job to its worker: the copy's pod there, numbered A = K.
        status, output = _status_and_output(m, tj, tmp_path)
        assert (status.cluster, status.cluster_reason) == (ran_on, ""), status
        assert [(p.name, p.a, p.may_still_run) for p in status.pods] == [(pod, K, True)], status.pods
        assert [(e.a, e.j, e.r) for e in status.executions] == [(K, 0, K)], status.executions
        assert (status.a, status.j, status.r, status.ceased) == (K, 0, K, False), status
        assert pod in output, output
        _linger(there, ns, pod, keep=True)
        lingering = (there, pod)

        # A second dispatch: Hold stops the copy (its pod lingers, still Running), Release readmits the job.
        assert _hold_through_the_api(m, tj, tmp_path).startswith("held: evicted through MultiKueue")
        eventually(lambda: _true(kit.workload_of(m.admin, ns, uid)["spec"].get("active") is False), 180,
                   "the held Workload deactivated by the gate once its copy stopped")  # fmt: skip
        eventually(lambda: _true(_copy(there, tj) is None), 60, "the worker's copy deleted")
        assert there.admin.get("v1", "Pod", pod, ns)["metadata"].get("deletionTimestamp"), "the pod was not deleted"
        write_as_the_api(m.admin, tj, lambda t, w: plan_release(t, w).writes)

        def held(*present: str, absent: str = "") -> dict[str, Any]:
            entry = kit.check_entry(kit.workload_of(m.admin, ns, uid), m.check)
            assert entry["state"] == "Pending", entry
            for text in present:
                assert text in entry["message"], entry
            assert not absent or absent not in entry["message"], entry
            return entry

        # The gate holds while the earlier execution's pod may still run on its worker, and says where.
        eventually(lambda: held(f"{pod} on worker {ran_on}: "), 120, f"the gate holding for {pod} on {ran_on}")
        # The agent's credential for the other worker stops working: the gate holds for it too, naming it (the
        # agent reads its kubeconfig file again at each look).
        broken = (m.credentials[other], m.mc.break_agent_kubeconfig(m.credentials[other]))
        eventually(lambda: held(f"worker {other}: cannot be read: "), 120, f"the gate holding for {other}")
        # The pod ends: the unreadable worker alone holds the dispatch.
        _linger(there, ns, pod, keep=False)
        lingering = None
        eventually(lambda: held(f"worker {other}: cannot be read: ", absent=pod), 120, "only the unreadable worker")
        here = _get(m, tj)
        assert (kit.a_of(here), here["spec"].get("suspend")) == (K, True), "dispatched while it had to wait"
        assert [w.name for w in m.mc.workers if _copy(w, tj) is not None] == [], "a copy sent while it had to wait"

        # An administrator fences the unreadable worker (it is shut down): the next dispatch goes, A raised by K.
        _fence(m, other, FENCED_TRUE)
        fenced = other
        _dispatched(m, tj, 2 * K)
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(tj["metadata"]["name"])) == [K, 2 * K]
    finally:
        if lingering is not None:
            _linger(lingering[0], m.namespace, lingering[1], keep=False)
        if fenced is not None:
            _fence(m, fenced, None)
        if broken is not None:
            broken[0].write_bytes(broken[1])
        trainjobs.stop()


def _replica(worker: Any, tj: dict[str, Any]) -> dict[str, Any] | None:
    """The replica of the job's runtime copy on ``worker``, or None."""
    name, namespace = tj["spec"]["runtimeRef"]["name"], tj["metadata"]["namespace"]
    return worker.admin.get_or_none(TRAINER_V, "TrainingRuntime", name, namespace)


@pytest.mark.timeout(600)
def test_the_manager_s_gate_makes_the_runtime_copy_on_every_worker_and_removes_it_with_the_job(
    manager: Manager,
) -> None:
    """The runtime copy on the workers: no worker has the job's runtime copy when it is started; before the
    dispatch the manager's gate makes the replica (the manager's copy, with replica-of) and the prologue's ConfigMap
    on every worker, under the workers' policies, and the copy runs on the worker MultiKueue picks. The manager
    agent's credential writes nothing else there. Once the TrainJob is deleted on the manager, its replicas go."""
    m = manager
    sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace=m.namespace,
                     image="registry.invalid/dispatch-mc/train:1", command=["python", "train.py"], queue=QUEUE)  # fmt: skip
    tj = kit.create_as_start(m.admin, sub, m.runtime)
    uid, ns = tj["metadata"]["uid"], m.namespace
    assert [w.name for w in m.mc.workers if _replica(w, tj) is not None] == [], "a runtime copy already on a worker"
    eventually(lambda: kit.workload_of(m.admin, ns, uid), 30, "the Workload created")
    write_as_the_api(m.admin, tj, lambda t, w: plan_open(t).writes)
    _dispatched(m, tj, K)

    source = m.admin.get(TRAINER_V, "TrainingRuntime", tj["spec"]["runtimeRef"]["name"], ns)
    for worker in m.mc.workers:  # every worker of the config, not only the one MultiKueue picked
        made = _replica(worker, tj)
        assert made is not None, f"no replica on {worker.name}"
        assert made["spec"] == source["spec"]
        assert made["metadata"]["labels"] == {**source["metadata"]["labels"], LABEL_REPLICA_OF: uid}
        assert made["metadata"]["annotations"] == source["metadata"]["annotations"]
        assert not made["metadata"].get("ownerReferences")
        assert worker.admin.get("v1", "ConfigMap", PROLOGUE_CONFIGMAP, ns)["data"] == {PROLOGUE_KEY: PROLOGUE}
    ran_on = kit.workload_of(m.admin, ns, uid)["status"]["clusterName"]
    there = m.mc.worker(ran_on)
    eventually(lambda: _trainer_pod(there, tj), 120, f"the trainer pod Running on {ran_on}, from the replica")

    # The manager agent's credential writes nothing but replicas and the prologue's ConfigMap on a worker
    # (the policy the chart renders in role worker), whatever its RBAC allows.
    agent = KubeHttp(there.control_plane.admin_credentials, impersonate=(MANAGER_AGENT_USER, None))
    other = kit.training_runtime("not-a-replica", cpu="1")
    other.update({"kind": "TrainingRuntime"})
    other["metadata"]["namespace"] = ns
    for kind, body in (
        ("TrainingRuntime", other),
        ("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": ns}}),
        ("ConfigMap", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "kube-system"}}),
    ):
        with pytest.raises(ApiError) as refused:
            agent.create(body)
        assert refused.value.status == 403, (kind, refused.value)
        assert "the manager's dispatch agent (multicluster.managerAgent) creates and deletes here only" in str(
            refused.value
        ), (kind, refused.value)

    # The job is deleted on the manager: MultiKueue deletes its copy, and the agent's sweep the replicas.
    m.admin.delete(TRAINER_V, "TrainJob", tj["metadata"]["name"], ns)
    for worker in m.mc.workers:
        _free(worker, ns)
        eventually(lambda w=worker: _true(_replica(w, tj) is None), 120, f"the replica on {worker.name} deleted")


def _free(worker: Any, namespace: str) -> None:
    """No agent runs on these workers to release dispatch's pod finalizer; its pods must go for the copy to go,
    and with it Trainer's hold on the replica (its resource-in-use finalizer)."""
    for pod in worker.admin.list("v1", "Pod", namespace):
        if POD_FINALIZER in pod["metadata"].get("finalizers", []):
            worker.admin.merge_patch("v1", "Pod", pod["metadata"]["name"], {"metadata": {"finalizers": None}},
                                     namespace)  # fmt: skip


def _events(m: Manager, tj: dict[str, Any], reason: str) -> list[dict[str, Any]]:
    """The agent's Events of ``reason`` on the manager's TrainJob."""
    listed = m.admin.list("v1", "Event", m.namespace)
    return [e for e in listed if e.get("reason") == reason and e["involvedObject"].get("uid") == tj["metadata"]["uid"]]


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches and a lost worker
def test_a_worker_lost_while_the_job_runs_keeps_it_until_fenced_then_it_moves_with_r_above_the_lost_one(
    manager: Manager,
) -> None:
    """A worker lost while the job runs (Kueue's connection to it and the agent's credential both fail): after
    workerLostTimeout Kueue evicts the job on the manager but keeps its quota, for the active Jobs MultiKueue had
    copied from the lost worker, so the job does not move while that worker may still run it; dispatch's agent
    says so in an Event naming the worker. An administrator fences the worker: the agent clears the copied active
    counts, Kueue releases the quota and queues the job again, and the gate dispatches it to the other worker with
    A raised by K, above every R the execution on the lost worker can reach."""
    m = manager
    trainjobs = kit.Recorder(m.admin, m.admin.collection_path(TRAINER_V, "TrainJob", m.namespace))
    lost: str | None = None
    broken: tuple[Path, bytes] | None = None
    fenced: str | None = None
    try:
        tj, lost, other, pod = _running(m)
        uid, ns = tj["metadata"]["uid"], m.namespace
        there = m.mc.worker(lost)
        eventually(lambda: _true(_active(_get(m, tj)) > 0), 60, "the worker's active Job copied to the manager")
        # A copy starts only under a claim, written only once the TrainJob's record lists its worker; these workers
        # run no dispatch agent, so the copy ran without one: wait for the record as a worker's agent would have.
        eventually(lambda: _true(lost in dispatched_to(_get(m, tj))), 30, f"{lost} in the job's record")

        # The worker is lost: Kueue's connection to it and the agent's credential for it both fail. Its pod runs on.
        m.mc.break_connection(lost)
        broken = (m.credentials[lost], m.mc.break_agent_kubeconfig(m.credentials[lost]))

        def kept() -> dict[str, Any]:
            wl = kit.workload_of(m.admin, ns, uid)
            assert kit.condition_true(wl, "Evicted"), wl["status"].get("conditions")
            assert kit.condition_true(wl, "QuotaReserved"), "the quota was released while the worker may run the job"
            events = _events(m, tj, "QuotaKept")
            assert any(f"worker {lost}: cannot be read" in e["message"] for e in events), events
            return wl

        # workerLostTimeout (15 s here): Kueue evicts the job on the manager but keeps its quota, and the agent
        # says why it cannot release it.
        eventually(kept, 240, f"the job evicted on the manager, its quota kept for {lost}")
        assert _get(m, tj)["spec"]["suspend"] is True, "Kueue's eviction suspends the manager's TrainJob"
        assert _copy(m.mc.worker(other), tj) is None, "dispatched while the lost worker may still run the job"
        assert there.admin.get("v1", "Pod", pod, ns)["status"]["phase"] == "Running"
        assert (kit.a_of(_get(m, tj)), _active(_get(m, tj))) == (K, 1)
        assert _events(m, tj, "QuotaReleased") == []

        # A fence alone is not trusted where the job ran and no look has found it gone since: the quota stays.
        _fence(m, lost, FENCED_TRUE)
        fenced = lost
        # (Held by what it does, not by the QuotaKept Event's new message: Events are spam-filtered per object, and
        # the rounds before the fence may have spent the filter's burst.)
        time.sleep(5 * SWEEP_SECONDS)  # five rounds of the agent's look at the kept quota
        kept()
        assert _events(m, tj, "QuotaReleased") == []
        assert _copy(m.mc.worker(other), tj) is None, "dispatched on a fence the job's record does not allow"
        # An administrator declares the lost worker shut down: the agent releases the quota, and the job moves to
        # the other worker, numbered A = 2K.
        _fence(m, lost, FENCED_POWERED_OFF)
        eventually(lambda: _true(_events(m, tj, "QuotaReleased")), 120, "the quota released by the agent")
        _, remote = _dispatched(m, tj, 2 * K)
        assert kit.workload_of(m.admin, ns, uid)["status"]["clusterName"] == other
        moved = eventually(lambda: _trainer_pod(m.mc.worker(other), tj), 120, f"the trainer pod Running on {other}")

        # No two executions share an identity, and R only rises: the lost worker's execution (A = K) can reach
        # R = K + maxRestarts at most, below the new execution's first R = 2K.
        old_a, _ = kit.pod_a_j(there.admin.get("v1", "Pod", pod, ns))
        new_a, new_j = kit.pod_a_j(m.mc.worker(other).admin.get("v1", "Pod", moved, ns))
        assert (old_a, new_a, new_j) == (K, 2 * K, 0)
        assert old_a + MAX_RESTARTS < new_a + new_j
        assert kit.a_of(remote) == 2 * K
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(tj["metadata"]["name"])) == [K, 2 * K]
    finally:
        if fenced is not None:
            _fence(m, fenced, None)
        if broken is not None:
            broken[0].write_bytes(broken[1])
        if lost is not None:
            m.mc.restore_connection(lost)
        trainjobs.stop()
