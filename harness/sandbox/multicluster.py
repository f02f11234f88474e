"""The sandbox's multi-cluster story (`scripts/sandbox --multicluster`; docs/multicluster.md): a MultiKueue
manager and two workers on this machine, dispatch's agent on the manager with its own credential for each worker,
and one job that runs on a worker, loses that worker, and moves to the other once an administrator fences the
lost one, with R above anything the lost execution can reach.

The three clusters are the tests' (harness.multicluster: three tier B control planes on loopback, the workers'
owner policies the chart's in role worker, kwok's nodes). The supervisor's writes are made as its API makes them
(harness.jobs); the agent is the real process.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from agent.domain.operations import plan_open
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_FENCED,
    FENCED_POWERED_OFF,
    LABEL_JOBSET_NAME,
    LABEL_RESTART_ATTEMPT,
)
from contract.trainjob import Submission
from harness.agent_process import LEADER, AgentProcess, grant, start_agent
from harness.jobs import create_as_start, workload_of, write_as_the_api
from harness.multicluster import ADMISSION_CHECK, KUEUE_V, MultiCluster
from harness.processes import wait_until
from harness.sandbox import site
from harness.sandbox.steps import Progress
from harness.tier_b import CLUSTER_QUEUE_QUOTA, RESOURCE_FLAVOR

NAMESPACE: Final = "team-a"
QUEUE: Final = "dispatch-mk"
CHECK: Final = "dispatch-admission"
RUNTIME: Final = "sandbox-mk-train"
MAX_RESTARTS: Final = 2
K: Final = MAX_RESTARTS + 1
ROUND_SECONDS: Final = 2
"""The agent's workerRoundSeconds here (60 by default): the release follows the fence at once."""
EXECUTIONS_TITLE: Final = "Executions, one per dispatch (the pods' A and J, as the prologue reads them):"
EXECUTIONS_HEADER: Final = ("#", "worker", "A", "J", "R", "R-reachable", "pod")


@dataclass
class Execution:
    worker: str
    pod: str
    a: int
    j: int

    @property
    def reachable(self) -> tuple[int, int]:
        """The R this execution can reach on its worker: A + J for J = 0..maxRestarts."""
        return self.a, self.a + MAX_RESTARTS


@dataclass
class Story:
    executions: list[Execution] = field(default_factory=list)
    kept: str = ""
    """The QuotaKept Event's message while the lost worker held the job."""
    agent: AgentProcess | None = None


def prepare(mc: MultiCluster, work: Path) -> AgentProcess:
    """The site on the manager and the workers: dispatch's AdmissionCheck beside MultiKueue's on a ClusterQueue,
    its LocalQueue in the job's namespace everywhere, the runtime everywhere; and dispatch's agent on the manager,
    leading, with its own credential for each worker."""
    admin = mc.manager.admin
    mc.create_queue_namespace(NAMESPACE)
    admin.create(site.admission_check(CHECK))
    admin.create(site.gated_cluster_queue(QUEUE, check=CHECK, flavor=RESOURCE_FLAVOR, quota=CLUSTER_QUEUE_QUOTA,
                                          also=(ADMISSION_CHECK,)))  # fmt: skip
    runtime = site.training_runtime(RUNTIME, cpu="1", failure_policy={"maxRestarts": MAX_RESTARTS})
    for tb in mc.tiers:
        tb.admin.create(copy.deepcopy(runtime))
    admin.apply(site.local_queue(NAMESPACE, QUEUE, QUEUE))
    for worker in mc.workers:  # MultiKueue sends the job to the same namespace and queue name on a worker
        worker.tier_b.create_local_queue(NAMESPACE, QUEUE)
    cp = mc.manager.control_plane
    system = cp.create_namespace("dispatch-system")
    credentials = mc.agent_kubeconfigs(work)
    agent = start_agent(cp, kubeconfig=grant(cp, system), name="dispatch-agent", workdir=work, until=LEADER,
                        config={"leaseNamespace": system, "leaseName": "dispatch-admission",
                                "workerKubeconfigs": {w: str(p) for w, p in credentials.items()},
                                "workerRoundSeconds": ROUND_SECONDS})  # fmt: skip
    for kind, name, namespace in (("ClusterQueue", QUEUE, None), ("LocalQueue", QUEUE, NAMESPACE)):
        wait_until(lambda k=kind, n=name, ns=namespace: _active(admin.get(KUEUE_V, k, n, ns)), 60,
                   what=f"{kind} {name} Active")  # fmt: skip
    return agent


def start(mc: MultiCluster, job_id: str) -> dict[str, Any]:
    """Start and Open, as the supervisor's API makes them."""
    admin = mc.manager.admin
    sub = Submission(job_id=job_id, n=1, g=0, attempt=0, namespace=NAMESPACE, queue=QUEUE,
                     image="registry.invalid/dispatch-sandbox/train:1", command=["python", "train.py"])  # fmt: skip
    trainjob = create_as_start(admin, sub, admin.get(site.TRAINER_V, "ClusterTrainingRuntime", RUNTIME))
    uid = trainjob["metadata"]["uid"]
    wait_until(lambda: workload_of(admin, NAMESPACE, uid), 30, what="the Workload created")
    write_as_the_api(admin, trainjob, lambda t, w: plan_open(t).writes)
    return trainjob


def dispatched(mc: MultiCluster, trainjob: dict[str, Any], a: int, timeout: float = 180) -> Execution:
    """The dispatch numbered ``a``: the Workload sent to a worker, its trainer pod Running there with that A."""
    uid, name = trainjob["metadata"]["uid"], trainjob["metadata"]["name"]

    def running() -> Execution | None:
        worker = workload_of(mc.manager.admin, NAMESPACE, uid).get("status", {}).get("clusterName")
        if worker is None:
            return None
        listed = mc.worker(worker).admin.list("v1", "Pod", NAMESPACE, label_selector=f"{LABEL_JOBSET_NAME}={name}")
        pods = [
            p for p in listed if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        ]
        if len(pods) != 1:
            return None
        found = Execution(worker, pods[0]["metadata"]["name"], *_a_j(pods[0]))
        return found if found.a == a else None

    return wait_until(running, timeout, what=f"the job's trainer pod Running on a worker with A = {a}")


def copied(mc: MultiCluster, trainjob: dict[str, Any], timeout: float = 120) -> None:
    """Until MultiKueue has copied the worker's status to the manager's TrainJob: an active Job. Only then does a
    worker lost keep the job's quota (agent/multicluster/lost_quota.py); a pod Running on the worker may come first."""
    name = trainjob["metadata"]["name"]

    def active() -> bool:
        status = mc.manager.admin.get(site.TRAINER_V, "TrainJob", name, NAMESPACE).get("status") or {}
        return any((j.get("active") or 0) > 0 for j in status.get("jobsStatus") or [])

    wait_until(active, timeout, what="the worker's status, an active Job, copied to the manager's TrainJob")


def lose(mc: MultiCluster, worker: str, credential: Path) -> None:
    """The worker is lost: Kueue's connection to it and the agent's credential for it both stop working."""
    mc.break_connection(worker)
    mc.break_agent_kubeconfig(credential)


def quota_kept(mc: MultiCluster, trainjob: dict[str, Any], worker: str, timeout: float = 240) -> str:
    """After workerLostTimeout: the job evicted on the manager, its quota kept, and dispatch's QuotaKept Event
    naming the lost worker; its message."""
    admin = mc.manager.admin

    def kept() -> str | None:
        wl = workload_of(admin, NAMESPACE, trainjob["metadata"]["uid"])
        if not (_condition(wl, "Evicted") and _condition(wl, "QuotaReserved")):
            return None
        return next((e["message"] for e in _events(mc, trainjob, "QuotaKept") if f"worker {worker}:" in e["message"]),
                    None)  # fmt: skip

    return wait_until(kept, timeout, what=f"the job evicted on the manager with its quota kept for {worker}")


def fence(mc: MultiCluster, worker: str) -> None:
    """An administrator's statement that the worker is shut down (docs/multicluster.md, guarantee 4)."""
    patch = {"metadata": {"annotations": {ANNOTATION_FENCED: FENCED_POWERED_OFF}}}
    mc.manager.admin.merge_patch(KUEUE_V, "MultiKueueCluster", worker, patch)


def released(mc: MultiCluster, trainjob: dict[str, Any], timeout: float = 120) -> str:
    return wait_until(lambda: next((e["message"] for e in _events(mc, trainjob, "QuotaReleased")), None), timeout,
                      what="the quota released by dispatch's agent")  # fmt: skip


def run(out: Progress, mc: MultiCluster, work: Path, job_id: str, logs: list[Path]) -> Story:
    """The story, one progress step each."""
    story = Story()
    with out.step("dispatch", timeout=120, logs=logs) as done:
        story.agent = prepare(mc, work)
        done.detail = f"dispatch-agent on the manager, leading; its own credential for {', '.join(mc.cluster_names)}"
        done.more.append(f"ClusterQueue {QUEUE}: AdmissionChecks {CHECK} (dispatch's) and {ADMISSION_CHECK} "
                         f"(MultiKueue's), Active; ClusterTrainingRuntime {RUNTIME} with maxRestarts {MAX_RESTARTS}, "
                         f"so K = {K}")  # fmt: skip
    with out.step("run", timeout=300, logs=logs) as done:
        trainjob = start(mc, job_id)
        first = dispatched(mc, trainjob, K)
        copied(mc, trainjob)
        story.executions.append(first)
        done.detail = (
            f"TrainJob {NAMESPACE}/{trainjob['metadata']['name']} started and opened; dispatched to {first.worker}"
        )
        done.more.append(
            f"the gate raised A by K = {K} before MultiKueue copied it: pod {first.pod} Running, A = {first.a}"
        )
    lost = first.worker
    with out.step("lost", timeout=300, logs=logs) as done:
        lose(mc, lost, work / f"{lost}.kubeconfig")
        story.kept = quota_kept(mc, trainjob, lost)
        done.detail = f"{lost} unreachable (Kueue and the agent); after workerLostTimeout Kueue evicted the job"
        done.more.append(f"QuotaKept: {story.kept}")
        done.more.append(f"its pod {first.pod} still Running on {lost}: the job does not move")
    with out.step("fence", timeout=300, logs=logs) as done:
        fence(mc, lost)
        said = released(mc, trainjob)
        second = dispatched(mc, trainjob, 2 * K)
        story.executions.append(second)
        fenced = f"{ANNOTATION_FENCED}={FENCED_POWERED_OFF}"
        done.detail = f"MultiKueueCluster {lost} annotated {fenced}; dispatched to {second.worker}"
        done.more.append(f"QuotaReleased: {said}")
        done.more.append(f"the gate raised A by K again: pod {second.pod} Running, A = {second.a}")
    return story


def table(story: Story) -> list[str]:
    rows = [EXECUTIONS_HEADER] + [
        (str(i), e.worker, str(e.a), str(e.j), str(e.a + e.j), f"{e.reachable[0]}..{e.reachable[1]}", e.pod)
        for i, e in enumerate(story.executions, start=1)
    ]
    widths = [max(len(row[c]) for row in rows) for c in range(len(EXECUTIONS_HEADER))]
    lines = [EXECUTIONS_TITLE]
    lines += ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return lines


def _a_j(pod: dict[str, Any]) -> tuple[int, int]:
    return int(pod["metadata"]["annotations"][ANNOTATION_ADMISSION]), int(
        pod["metadata"]["labels"][LABEL_RESTART_ATTEMPT]
    )


def _events(mc: MultiCluster, trainjob: dict[str, Any], reason: str) -> list[dict[str, Any]]:
    listed = mc.manager.admin.list("v1", "Event", NAMESPACE)
    uid = trainjob["metadata"]["uid"]
    return [e for e in listed if e.get("reason") == reason and e["involvedObject"].get("uid") == uid]


def _condition(obj: dict[str, Any], type_: str) -> bool:
    return any(
        c.get("type") == type_ and c.get("status") == "True" for c in obj.get("status", {}).get("conditions", [])
    )


def _active(obj: dict[str, Any]) -> bool:
    return _condition(obj, "Active")
