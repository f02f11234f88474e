"""The readmission gate end to end (tier B): the real Kueue, JobSet, Trainer, kube-controller-manager,
scheduler and kwok, with the agent running as its own process (``python -m agent serve``) under the least
RBAC of docs/agent.md.

The module sets up what a site would: an AdmissionCheck served by dispatch, a ClusterQueue that requires it
(``admissionChecksStrategy``) with quota for one job at a time and preemption within the queue by priority,
two WorkloadPriorityClasses, and a ClusterTrainingRuntime that meets dispatch's runtime requirements. Each
test gets a namespace with a LocalQueue into that ClusterQueue.

Without the agent none of this runs at all: the ClusterQueue stays inactive until the agent sets the check
Active, and no Workload is admitted until the agent sets its check Ready.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from ulid import ULID

from agent.domain.operations import Hold, Target, plan_hold, plan_open, plan_release
from contract.keys import (
    FIELD_MANAGER,
    LABEL_JOBSET_NAME,
    LABEL_RESTART_ATTEMPT,
    POD_FINALIZER,
    TAINT_OUT_OF_SERVICE,
    TAINT_UNREACHABLE,
)
from contract.runtime_requirements import runtime_problems
from contract.trainjob import Submission
from harness.agent_process import LEADER, AgentProcess, grant, start_agent
from harness.kube_http import ApiError, KubeHttp
from harness.principals import principals
from harness.sandbox import site
from harness.tier_b import KWOK_COMPLETE_ANNOTATION, TierB
from tests.agent.gate import kit
from tests.agent.gate.kit import JOBSET_V, KUEUE_V, TRAINER_V, eventually
from webhook.config import Config
from webhook.config import Principals as ConfigPrincipals
from webhook.rules.pods import pod_policy

pytestmark = pytest.mark.e2e

LOCAL_QUEUE = "gated"
# Quota for one job at a time: the dispatch trainer asks for 3 CPUs, and so does the preemptor.
QUOTA = {"cpu": "4", "memory": "16Gi"}
JOB_CPU = "3"
KWOK_FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
RAISED = "the next execution starts with A {}, raised in the write that admits it"
"""The gate's Ready message when admission (Kueue's unsuspend, through the chart's record-start) raises A."""
NOT_DISPATCH = "not a dispatch TrainJob: the readmission gate does not apply"
JSON_PATCH = "application/json-patch+json"


@dataclass
class Gate:
    tier_b: TierB
    check: str
    cluster_queue: str
    low: str
    high: str
    runtime: dict[str, Any]
    """The ClusterTrainingRuntime as read back, a JobSet restart allowed (failurePolicy maxRestarts 2)."""
    agent: AgentProcess
    system: str = ""
    """The namespace of the agent's ServiceAccount (``dispatch-agent``)."""

    @property
    def admin(self) -> KubeHttp:
        return self.tier_b.admin


def _start_agent(tb: TierB, namespace: str, workdir: Path) -> AgentProcess:
    cp = tb.control_plane
    kubeconfig = grant(cp, namespace)  # the RBAC of docs/agent.md, the Lease rights in `namespace` only
    config = {"leaseNamespace": namespace, "leaseName": "dispatch-admission"}
    name = f"dispatch-agent-{namespace}"
    return start_agent(cp, kubeconfig=kubeconfig, name=name, config=config, workdir=workdir, until=LEADER)


@pytest.fixture(scope="module")
def gate(tier_b: TierB, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gate]:
    cp, admin = tier_b.control_plane, tier_b.admin
    suffix = secrets.token_hex(3)
    system = cp.create_namespace("dispatch-e2e-system")
    names = {k: f"dispatch-e2e-{k}-{suffix}" for k in ("check", "flavor", "queue", "low", "high", "runtime")}
    cluster_scoped: list[tuple[str, str, str]] = []  # deleted in reverse order

    def create(obj: dict[str, Any]) -> dict[str, Any]:
        created = admin.create(obj)
        cluster_scoped.append((obj["apiVersion"], obj["kind"], obj["metadata"]["name"]))
        return created

    agent: AgentProcess | None = None
    try:
        create(site.admission_check(names["check"]))
        create(site.resource_flavor(names["flavor"]))
        create(site.priority_class(names["low"], 10))
        create(site.priority_class(names["high"], 1000))
        create(site.gated_cluster_queue(names["queue"], check=names["check"], flavor=names["flavor"], quota=QUOTA))
        create(kit.training_runtime(names["runtime"], cpu=JOB_CPU, failure_policy={"maxRestarts": 2}))
        runtime = admin.get(TRAINER_V, "ClusterTrainingRuntime", names["runtime"])
        assert runtime_problems(runtime["spec"], allow_rank_restart=False) == []

        # Until the agent serves the check, Kueue keeps the ClusterQueue inactive.
        queue = admin.get(KUEUE_V, "ClusterQueue", names["queue"])
        assert not kit.condition_true(queue, "Active"), queue.get("status")

        agent = _start_agent(tier_b, system, tmp_path_factory.mktemp("agent"))
        eventually(
            lambda: _assert(kit.condition_true(admin.get(KUEUE_V, "AdmissionCheck", names["check"]), "Active")),
            30,
            "the agent sets the AdmissionCheck Active",
        )
        eventually(
            lambda: _assert(kit.condition_true(admin.get(KUEUE_V, "ClusterQueue", names["queue"]), "Active")),
            30,
            "the ClusterQueue becomes Active",
        )
        yield Gate(tier_b, names["check"], names["queue"], names["low"], names["high"], runtime, agent, system)
    finally:
        if agent is not None:
            cp.supervisor.stop(agent.name)
        for api_version, kind, name in reversed(cluster_scoped):
            admin.delete(api_version, kind, name)
        rbac = "rbac.authorization.k8s.io/v1"
        admin.delete(rbac, "ClusterRoleBinding", f"dispatch-agent-{system}")
        admin.delete(rbac, "ClusterRole", f"dispatch-agent-{system}")
        cp.delete_namespace(system)


def _assert(value: object) -> object:
    assert value
    return value


@pytest.fixture
def ns(gate: Gate, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace with a LocalQueue into the gated ClusterQueue. Afterwards the test's jobs are deleted and
    their Workloads waited out, so the next test finds the quota free."""
    cp, admin = gate.tier_b.control_plane, gate.admin
    name = cp.create_namespace(request.node.name)
    admin.apply({"apiVersion": KUEUE_V, "kind": "LocalQueue", "metadata": {"namespace": name, "name": LOCAL_QUEUE},
                 "spec": {"clusterQueue": gate.cluster_queue}})  # fmt: skip
    eventually(
        lambda: _assert(kit.condition_true(admin.get(KUEUE_V, "LocalQueue", LOCAL_QUEUE, name), "Active")),
        30,
        "LocalQueue Active",
    )
    yield name
    for tj in admin.list(TRAINER_V, "TrainJob", name):
        admin.delete(TRAINER_V, "TrainJob", tj["metadata"]["name"], name)
    eventually(lambda: _assert(not admin.list(KUEUE_V, "Workload", name)), 90, "the test's Workloads gone")
    cp.delete_namespace(name)


# -- acting as dispatch and as an operator ----------------------------------------------------------


def create_dispatch_trainjob(gate: Gate, namespace: str, runtime: dict[str, Any]) -> dict[str, Any]:
    """A dispatch TrainJob in Kueue mode at low priority, as Start creates it: the runtime copy, then the
    TrainJob, closed (suspended, with dispatch's gate in kueue.x-k8s.io/admission-gated-by)."""
    sub = Submission(
        job_id=str(ULID()),
        n=1,
        g=0,
        attempt=0,
        namespace=namespace,
        image="registry.invalid/dispatch-e2e/train:1",
        command=["python", "train.py"],
        queue=LOCAL_QUEUE,
        priority_class=gate.low,
    )
    return kit.create_as_start(gate.admin, sub, runtime)


def get_trainjob(gate: Gate, tj: dict[str, Any]) -> dict[str, Any]:
    return gate.admin.get(TRAINER_V, "TrainJob", tj["metadata"]["name"], tj["metadata"]["namespace"])


def json_patch(admin: KubeHttp, obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return admin.request(
        "PATCH", admin.object_path(obj), ops, query={"fieldManager": FIELD_MANAGER}, content_type=JSON_PATCH
    )


def open_trainjob(gate: Gate, tj: dict[str, Any]) -> None:
    """Open, as the supervisor API does it: remove dispatch's gate from the TrainJob (agent/domain/operations.py),
    in a patch preconditioned on what was read; read again after a conflict (Kueue and Trainer write too)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        fresh = get_trainjob(gate, tj)
        plan = plan_open(fresh)
        if not plan.patch:
            return
        try:
            json_patch(gate.admin, fresh, plan.patch)
        except ApiError as exc:
            if exc.status != 409:
                raise
            time.sleep(0.2)
    raise AssertionError("Open kept conflicting for 30 s")


def patch_workload(gate: Gate, tj: dict[str, Any], plan: Callable[[dict[str, Any], dict[str, Any]], Any]) -> None:
    """Hold or Release, as the supervisor API does them: ``plan(trainjob, workload)``'s writes (the TrainJob's hold
    record and the Workload's), in order, each preconditioned on what was read; read both again after a conflict
    (Kueue writes the Workload too) and send what is left."""
    ns, uid = tj["metadata"]["namespace"], tj["metadata"]["uid"]
    # A deadline, not a count: under load Kueue may rewrite the Workload (a J rise) many times in a row.
    deadline, conflicts = time.monotonic() + 30, 0
    while time.monotonic() < deadline:
        trainjob, wl = get_trainjob(gate, tj), kit.workload_of(gate.admin, ns, uid)
        writes = plan(trainjob, wl).writes
        if not writes:
            return
        target = trainjob if writes[0].target is Target.TRAINJOB else wl
        try:
            json_patch(gate.admin, target, writes[0].patch)
        except ApiError as exc:
            if exc.status != 409:
                raise
            conflicts += 1
            time.sleep(0.2)
    raise AssertionError(f"the hold's writes kept conflicting ({conflicts} conflicts in 30 s)")


def wait_running(gate: Gate, tj: dict[str, Any], a: int, j: int = 0, within: float = 90) -> list[dict[str, Any]]:
    """The trainer pods of the execution (A, J), bound to kwok nodes and Running."""
    namespace, name = tj["metadata"]["namespace"], tj["metadata"]["name"]

    def probe() -> list[dict[str, Any]]:
        pods = kit.pods_of(gate.admin, namespace, name)
        live = kit.running(pods)
        assert live, f"no Running pod yet: {[(p['metadata']['name'], p['status'].get('phase')) for p in pods]}"
        assert {kit.pod_a_j(p) for p in live} == {(a, j)}, [(p["metadata"]["name"], kit.pod_a_j(p)) for p in live]
        return live

    return eventually(probe, within, f"the pods of execution A={a}, J={j} Running")


def admitted_workload(gate: Gate, tj: dict[str, Any], message: str, within: float = 60) -> dict[str, Any]:
    def probe() -> dict[str, Any]:
        wl = kit.workload_of(gate.admin, tj["metadata"]["namespace"], tj["metadata"]["uid"])
        entry = kit.check_entry(wl, gate.check)
        assert (entry["state"], entry["message"]) == ("Ready", message), entry
        assert kit.condition_true(wl, "Admitted"), kit.conditions(wl)
        return wl

    return eventually(probe, within, f"the Workload admitted with the check Ready: {message!r}")


def preemptor(gate: Gate, namespace: str) -> dict[str, Any]:
    """Someone else's TrainJob at high priority on upstream's runtime, needing the quota the dispatch job holds."""
    return gate.admin.create(
        site.preemptor("someone-elses-job", namespace, queue=LOCAL_QUEUE, priority_class=gate.high,
                       runtime=gate.tier_b.training_runtime, cpu=JOB_CPU)
    )  # fmt: skip


# -- the tests ---------------------------------------------------------------------------------------


def test_admitted_preempted_and_readmitted_with_a_higher_identity(gate: Gate, ns: str) -> None:
    admin = gate.admin
    trainjobs = kit.Recorder(admin, admin.collection_path(TRAINER_V, "TrainJob", ns))
    workloads = kit.Recorder(admin, admin.collection_path(KUEUE_V, "Workload", ns))
    tj = create_dispatch_trainjob(gate, ns, gate.runtime)
    name = tj["metadata"]["name"]
    pods = kit.Recorder(admin, admin.collection_path("v1", "Pod", ns), label_selector=f"{LABEL_JOBSET_NAME}={name}")
    try:
        # Created closed: Kueue holds the Workload at dispatch's gate; nothing raised A.
        def gated() -> dict[str, Any]:
            wl = kit.workload_of(admin, ns, tj["metadata"]["uid"])
            reserved = kit.conditions(wl).get("QuotaReserved", {})
            assert (reserved.get("status"), reserved.get("reason")) == ("False", "AdmissionGated"), reserved
            return wl

        eventually(gated, 30, "the Workload held at dispatch's gate")
        time.sleep(1)
        closed = get_trainjob(gate, tj)
        assert closed["spec"]["suspend"] is True
        assert (kit.a_of(closed), kit.floor_of(closed)) == (0, None)

        # Open: Kueue reserves quota, the agent sets the check Ready, Kueue admits: its unsuspend raises A to 1
        # (the chart's record-start, which tier B installs).
        open_trainjob(gate, tj)
        admitted_workload(gate, tj, RAISED.format(1))
        first = wait_running(gate, tj, a=1)
        assert (kit.a_of(get_trainjob(gate, tj)), kit.floor_of(get_trainjob(gate, tj))) == (1, 1)

        # A higher-priority job needs the quota: Kueue preempts the dispatch job, and the agent approves
        # the preemptor at once, as it is not dispatch's.
        other = preemptor(gate, ns)
        admitted_workload(gate, other, NOT_DISPATCH)
        suspended = get_trainjob(gate, tj)
        assert suspended["spec"]["suspend"] is True
        assert kit.a_of(suspended) == 1, "A was raised while the dispatch job had no quota"
        wl = kit.workload_of(admin, ns, tj["metadata"]["uid"])
        assert kit.check_entry(wl, gate.check)["state"] == "Pending"
        assert not kit.condition_true(wl, "QuotaReserved")
        other_pods = eventually(
            lambda: _assert(kit.running(kit.pods_of(admin, ns, other["metadata"]["name"]))), 90, "the preemptor runs"
        )
        # The preempted execution's pods are gone or being deleted (kwok confirms a deletion within the grace
        # period, so some may still be Terminating: the gate holds the readmission until they are gone).
        old = {p["metadata"]["uid"] for p in first}
        leftover = [p for p in kit.pods_of(admin, ns, name) if p["metadata"]["uid"] in old]
        assert all(p["metadata"].get("deletionTimestamp") for p in leftover), leftover

        # The preemptor finishes: the dispatch job gets the quota back, A is raised to 2 as it is admitted.
        for pod in other_pods:
            admin.merge_patch("v1", "Pod", pod["metadata"]["name"],
                              {"metadata": {"annotations": {KWOK_COMPLETE_ANNOTATION: "true"}}}, ns)  # fmt: skip
        admitted_workload(gate, tj, RAISED.format(2), within=90)
        wait_running(gate, tj, a=2)
        assert (kit.a_of(get_trainjob(gate, tj)), kit.floor_of(get_trainjob(gate, tj))) == (2, 2)

        # The histories: the dispatch Workload was preempted; A rose only from a suspended version, at the latest
        # in the write that admitted it; every pod carried the A of its admission, and R strictly increased.
        wl_name = wl["metadata"]["name"]
        evictions = [kit.conditions(v).get("Evicted", {}) for v in workloads.versions(wl_name)]
        assert any(e.get("status") == "True" and e.get("reason") == "Preempted" for e in evictions), evictions
        # Kueue may hand the quota back while a preempted pod is still Terminating; any hold named those pods.
        messages = [e["message"] for v in workloads.versions(wl_name) for e in kit.check_entries(v, gate.check)]
        for held in (m for m in messages if m.startswith("waiting for")):
            assert any(p["metadata"]["name"] in held for p in first), held
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(name)) == [1, 2]
        assert kit.assert_r_strictly_increases(pods.first_seen()) == [(1, 0), (2, 0)]
    finally:
        for r in (trainjobs, workloads, pods):
            r.stop()


def test_a_jobset_restart_raises_j_under_the_same_admission(gate: Gate, ns: str) -> None:
    admin = gate.admin
    trainjobs = kit.Recorder(admin, admin.collection_path(TRAINER_V, "TrainJob", ns))
    tj = create_dispatch_trainjob(gate, ns, gate.runtime)
    name = tj["metadata"]["name"]
    pods = kit.Recorder(admin, admin.collection_path("v1", "Pod", ns), label_selector=f"{LABEL_JOBSET_NAME}={name}")
    try:
        open_trainjob(gate, tj)
        wl = admitted_workload(gate, tj, RAISED.format(1))
        first = wait_running(gate, tj, a=1, j=0)

        # A trainer fails (kwok's failure stage: phase Failed, exit code 1). With backoffLimit 0 its Job
        # fails at once, and the runtime's failurePolicy restarts the whole JobSet: J becomes 1.
        for pod in first:
            admin.merge_patch(
                "v1", "Pod", pod["metadata"]["name"], {"metadata": {"labels": {KWOK_FAIL_LABEL: "true"}}}, ns
            )
        second = wait_running(gate, tj, a=1, j=1)
        assert all(p["metadata"]["labels"][LABEL_RESTART_ATTEMPT] == "1" for p in second)
        assert admin.get(JOBSET_V, "JobSet", name, ns)["status"]["restarts"] == 1

        # No readmission happened: the same admission, the same A; the Workload was never evicted.
        now = kit.workload_of(admin, ns, tj["metadata"]["uid"])
        assert now["metadata"]["uid"] == wl["metadata"]["uid"]
        assert kit.condition_true(now, "Admitted")
        assert "Evicted" not in kit.conditions(now) or not kit.condition_true(now, "Evicted")
        assert kit.check_entry(now, gate.check)["message"] == RAISED.format(1)
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(name)) == [1]
        assert kit.assert_r_strictly_increases(pods.first_seen()) == [(1, 0), (1, 1)]
    finally:
        for r in (trainjobs, pods):
            r.stop()


@pytest.mark.parametrize("stranger", [False, True], ids=["operator", "stranger-force-deletes"])
def test_a_pod_on_a_lost_node_holds_the_check_until_the_node_is_out_of_service(
    gate: Gate, ns: str, stranger: bool
) -> None:
    """With ``stranger``, issue 10 items 8 and 11 for real: a ServiceAccount with ordinary namespace RBAC puts a
    Running pod labelled as the job's on a healthy node (foreign: it must not hold the readmission), then
    force-deletes the real pods while their node is lost (dispatch's finalizer keeps them listed, so the gate
    still holds) and tries to strip the finalizer (refused by the policy)."""
    tb, admin = gate.tier_b, gate.admin
    suffix = secrets.token_hex(3)
    # A node of its own (the shared ones stay healthy), and a runtime that puts the trainer there.
    node = f"kwok-e2e-lost-{suffix}"
    tb.add_node(node)
    runtime_name = f"dispatch-e2e-pinned-{suffix}"
    admin.create(kit.training_runtime(runtime_name, cpu=JOB_CPU, node_selector={"kubernetes.io/hostname": node}))
    trainjobs = kit.Recorder(admin, admin.collection_path(TRAINER_V, "TrainJob", ns))
    recorders = [trainjobs]
    policies: list[str] = []
    fake = None
    stopped = False
    try:
        runtime = admin.get(TRAINER_V, "ClusterTrainingRuntime", runtime_name)
        assert runtime_problems(runtime["spec"], allow_rank_restart=False) == []
        tj = create_dispatch_trainjob(gate, ns, runtime)
        name = tj["metadata"]["name"]
        pods = kit.Recorder(admin, admin.collection_path("v1", "Pod", ns), label_selector=f"{LABEL_JOBSET_NAME}={name}")
        recorders.append(pods)
        open_trainjob(gate, tj)
        admitted_workload(gate, tj, RAISED.format(1))
        first = wait_running(gate, tj, a=1)
        assert {p["spec"]["nodeName"] for p in first} == {node}
        pod_names = sorted(p["metadata"]["name"] for p in first)

        # The node stops heartbeating; its processes may go on running, nobody can tell. Wait until the node
        # lifecycle controller says so (Ready Unknown, tainted unreachable): by then kwok, which plays the
        # kubelet, has long seen that it lost the node's Lease and will not confirm a deletion there (a kwok
        # stage queued before it noticed could still run: hence not sooner).
        tb.stop_node_heartbeat(node)
        stopped = True

        def lost() -> None:
            n = admin.get("v1", "Node", node)
            assert kit.conditions(n)["Ready"]["status"] == "Unknown", kit.conditions(n)["Ready"]
            assert TAINT_UNREACHABLE in {t["key"] for t in n["spec"].get("taints") or []}, n["spec"]

        eventually(lost, 90, "the node declared unreachable")

        # Hold, then Release, as the supervisor API does them: the Workload deactivated (Kueue evicts it,
        # suspends the TrainJob, the Job controller deletes the pods, which the lost node never confirms)
        # and reactivated (Kueue reserves the quota again and asks the check).
        hold = Hold(instance="e2e", since=kit.now(), who="tests/e2e", reason="node-loss test")
        patch_workload(gate, tj, lambda t, w: plan_hold(t, w, hold))

        def stopped_by_kueue() -> None:
            w = kit.workload_of(admin, ns, tj["metadata"]["uid"])
            assert not kit.condition_true(w, "QuotaReserved"), kit.conditions(w)
            assert get_trainjob(gate, tj)["spec"]["suspend"] is True
            left = kit.pods_of(admin, ns, name)
            assert sorted(p["metadata"]["name"] for p in left) == pod_names
            assert all(p["metadata"].get("deletionTimestamp") for p in left), "the pods are not being deleted"

        eventually(stopped_by_kueue, 60, "Kueue stops the job and releases its quota; its pods stay Terminating")
        patch_workload(gate, tj, plan_release)

        def held() -> dict[str, Any]:
            w = kit.workload_of(admin, ns, tj["metadata"]["uid"])
            assert kit.condition_true(w, "QuotaReserved"), kit.conditions(w)
            entry = kit.check_entry(w, gate.check)
            assert entry["state"] == "Pending", entry
            assert entry["message"].startswith(f"waiting for {len(pod_names)} pod(s) of the previous execution"), entry
            for pod in pod_names:
                assert f"{pod}: NodeLost: " in entry["message"], entry["message"]
            return entry

        if stranger:
            who = principals(tb.control_plane, ns)
            # The owner policies (tier B runs them) refuse the stranger's pod dressed as the job's; one made while
            # they were removed must still not hold the readmission: the admin (break-glass) plays that.
            with pytest.raises(ApiError) as claimed:
                _fake_pod(who.stranger, ns, name)
            assert claimed.value.status == 403
            assert "belongs to a dispatch job" in claimed.value.body
            fake = _fake_pod(admin, ns, name)
            eventually(lambda: _assert(kit.running([admin.get("v1", "Pod", fake, ns)])), 60, "the fake pod Running")
            policies.append(_pod_policy(gate, ns))
            for pod in pod_names:  # the pods' node is lost: a force delete proves nothing about their processes
                who.stranger.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{pod}", {"gracePeriodSeconds": 0})
            time.sleep(2)
            left = {p["metadata"]["name"]: p for p in kit.pods_of(admin, ns, name)}
            assert set(pod_names) <= set(left), "the force-deleted pods must stay listed: dispatch's finalizer"
            for pod in pod_names:
                assert POD_FINALIZER in left[pod]["metadata"]["finalizers"], left[pod]["metadata"]
                strip = [{"op": "remove", "path": "/metadata/finalizers"}]
                with pytest.raises(ApiError) as refused:
                    who.stranger.request("PATCH", f"/api/v1/namespaces/{ns}/pods/{pod}", strip,
                                         content_type=JSON_PATCH)  # fmt: skip
                assert refused.value.status == 403
                assert "only dispatch removes its finalizer" in refused.value.body
        entry = eventually(held, 60, "the check held, naming the pods on the lost node")
        if stranger:
            assert fake not in entry["message"], "a stranger's pod must not hold the readmission"
            reports = [e["message"] for e in admin.list("v1", "Event", ns) if e["reason"] == "Foreign"]
            assert any(fake in m and "is not its own" in m for m in reports), reports
        assert "its node is lost" in entry["message"], entry["message"]
        assert TAINT_UNREACHABLE in entry["message"], entry["message"]
        for _ in range(6):  # and it stays so: no readmission, no raise, while the pods may still run
            held()
            assert kit.a_of(get_trainjob(gate, tj)) == 1
            time.sleep(0.5)
        reports = [e for e in admin.list("v1", "Event", ns) if e["involvedObject"].get("uid") == tj["metadata"]["uid"]
                   and e["reason"] == "ReadmissionHeld"]  # fmt: skip
        assert any(all(pod in e["message"] for pod in pod_names) for e in reports), reports

        # The operator asserts the node is shut down. That alone makes the pods Ceased for the gate (a
        # not-ready node tainted out-of-service, pods being deleted: docs/nodeloss.md), so the agent sets the
        # check Ready (the admission raises A); the pods then go (usually the pod GC force-deletes them; kwok may still
        # confirm a deletion it had queued before the heartbeat stopped, which a real lost kubelet could not:
        # which of the two removed them is the simulation's business, not the gate's).
        admin.request(
            "PATCH",
            f"/api/v1/nodes/{node}",
            [{"op": "add", "path": "/spec/taints/-",
              "value": {"key": TAINT_OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}}],
            content_type=JSON_PATCH,
        )  # fmt: skip
        admitted_workload(gate, tj, RAISED.format(2), within=60)

        def numbered() -> None:  # Ready comes first; A rises in Kueue's unsuspend that follows it
            now = get_trainjob(gate, tj)
            assert (kit.a_of(now), kit.floor_of(now)) == (2, 2)

        eventually(numbered, 30, "Kueue's unsuspend numbers the next execution A 2")
        eventually(lambda: _gone(admin, ns, name, pod_names), 90, "the old execution's pods gone")

        def recorded_deleted() -> None:  # the recorder's watch may lag the poll above by a moment
            final = {obj["metadata"]["name"]: obj for kind, obj in pods.events() if kind == "DELETED"}
            assert sorted(final) == pod_names

        eventually(recorded_deleted, 30, "the recorder saw each old pod deleted")

        # The next execution's pods carry A = 2 (they wait for a node: theirs is out of service).
        def real() -> list[dict[str, Any]]:  # the stranger's pod is no execution of the job
            return [p for p in pods.first_seen() if p["metadata"]["name"] != fake]

        eventually(lambda: _assert(len(real()) > len(pod_names)), 60, "the new execution's pods")
        assert kit.assert_a_rises_before_each_admission(trainjobs.versions(name)) == [1, 2]
        assert kit.assert_r_strictly_increases(real()) == [(1, 0), (2, 0)]
    finally:
        for r in recorders:
            r.stop()
        if stopped:
            tb.resume_node_heartbeat(node)
        for policy in policies:
            admin.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", policy)
            admin.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", policy)
        tb.delete_node(node)
        admin.delete(TRAINER_V, "ClusterTrainingRuntime", runtime_name)


def _fake_pod(stranger: KubeHttp, namespace: str, jobset: str) -> str:
    """A stranger's pod dressed as rank 0 of a later JobSet restart: the labels only, no Job owns it."""
    name = f"{jobset}-node-0-0-fake"
    stranger.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace,
                         "labels": {LABEL_JOBSET_NAME: jobset, "jobset.sigs.k8s.io/replicatedjob-name": "node",
                                    LABEL_RESTART_ATTEMPT: "9", "batch.kubernetes.io/job-completion-index": "0"},
                         "annotations": {"dispatch.phpboyscout.uk/admission": "9"}},
            "spec": {"containers": [{"name": "node", "image": "registry.invalid/fake:1"}]},
        }
    )  # fmt: skip
    return name


def _pod_policy(gate: Gate, namespace: str) -> str:
    """dispatch's pod policy (webhook/policies.py), with the agent's ServiceAccount as dispatch, bound here."""
    admin = gate.admin
    system = gate.agent.name.removeprefix("dispatch-agent-")  # harness/agent_process.py grant()
    user = f"system:serviceaccount:{system}:dispatch-agent"
    policy = pod_policy(Config(dispatch=ConfigPrincipals(usernames=(user,))))
    policy["metadata"]["name"] = f"{policy['metadata']['name']}-{namespace}"
    admin.create(policy)
    admin.create({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
                  "metadata": {"name": policy["metadata"]["name"]},
                  "spec": {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"],
                           "matchResources": {"namespaceSelector": {
                               "matchLabels": {"kubernetes.io/metadata.name": namespace}}}}})  # fmt: skip
    time.sleep(3)  # policies load asynchronously; the refusal below is asserted, so a slow load shows
    return policy["metadata"]["name"]


def _gone(admin: KubeHttp, namespace: str, jobset: str, names: list[str]) -> None:
    left = [p["metadata"]["name"] for p in kit.pods_of(admin, namespace, jobset)]
    assert not set(left) & set(names), f"still there: {left}"
