"""The claim (docs/multicluster.md, "The claim") against the real MultiKueue of harness.multicluster, with dispatch's
agent on the manager and on both workers (test_worker_gate's ``armed``): a worker runs a copy only while the
manager wants it there now, so whatever makes the manager stop wanting it (Kueue cut off from the worker while the
agent still reaches it, a fence, the worker dropped from the MultiKueueConfig) ends with the copy stopped by the
worker's agent, which can see it, before the job runs elsewhere. Each test asserts, from the copies' and pods' own
identities on the workers, that no two executions overlapped and R only rose."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from ulid import ULID

from agent.constants import REASON_OUT_OF_CONTACT, REASON_UNCLAIMED
from agent.domain.operations import plan_open
from contract.admission import admission_started
from contract.claims import DEFAULT_ORIGIN, claim_name
from contract.keys import (
    ANNOTATION_DISPATCHED_TO,
    ANNOTATION_FENCED,
    ANNOTATION_WORKER_ADMITTED,
    CLAIM_PREFIX,
    FENCED_TRUE,
    LABEL_CLAIM,
    LABEL_JOBSET_NAME,
    LABEL_REPLICA_OF,
    LEASE_MANAGER_CONTACT,
)
from contract.objects import annotations, labels
from contract.trainjob import Submission
from harness.agent_process import LEADER, AgentProcess, grant, start_agent
from harness.jobs import write_as_the_api
from harness.multicluster import KUEUE_V, MultiCluster, SecondManager, Worker, start_second_manager
from harness.sandbox import site
from tests.agent.gate import kit
from tests.agent.gate.kit import TRAINER_V, eventually
from tests.agent.multicluster.test_numbering import (
    QUEUE,
    SWEEP_SECONDS,
    K,
    Manager,
    _dispatched,
    _events,
    _fence,
    _get,
    _linger,
    _queue,
    _trainer_pod,
    _true,
    preflight_on_the_manager,
)
from tests.agent.multicluster.test_worker_gate_across_clusters import (
    CONTACT_SECONDS,
    Armed,
    _admissions,
    _worker_events,
)
from tests.agent.multicluster.test_worker_gate_across_clusters import armed as armed_clusters

pytestmark = [pytest.mark.e2e, pytest.mark.multicluster]
armed = armed_clusters  # test_worker_gate's fixture: the agents on the manager and both workers
NO_PODS = "dispatch-test-no-pods"
SECOND = "manager-b"
"""A second manager's MultiKueue origin."""
KWOK_FAIL_LABEL = "pod-container-running-failed.stage.kwok.x-k8s.io"
"""kwok's failure stage: the pod's container exits 1 (as in tests/agent/gate/test_readmission_gate.py)."""


class Story:
    """One job on the armed clusters, with the histories of its TrainJob on the manager and its copies."""

    def __init__(self, a: Armed) -> None:
        self.m, self.mc = a.manager, a.manager.mc
        self.ns = self.m.namespace
        self.trainjobs = kit.Recorder(self.m.admin, self.m.admin.collection_path(TRAINER_V, "TrainJob", self.ns))
        self.copies = {w.name: kit.Recorder(w.admin, w.admin.collection_path(TRAINER_V, "TrainJob", self.ns))
                       for w in self.mc.workers}  # fmt: skip
        self.pods = {w.name: kit.Recorder(w.admin, w.admin.collection_path("v1", "Pod", self.ns))
                     for w in self.mc.workers}  # fmt: skip

    def start(self) -> tuple[dict[str, Any], Worker, str]:
        """Started, opened, dispatched with A = K, its trainer pod Running: the TrainJob, its worker, the pod."""
        sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace=self.ns, queue=QUEUE,
                         image="registry.invalid/dispatch-mc/train:1", command=["python", "train.py"])  # fmt: skip
        tj = kit.create_as_start(self.m.admin, sub, self.m.runtime)
        eventually(lambda: kit.workload_of(self.m.admin, self.ns, tj["metadata"]["uid"]), 30, "the Workload created")
        write_as_the_api(self.m.admin, tj, lambda t, w: plan_open(t).writes)
        _dispatched(self.m, tj, K)
        there = self.mc.worker(kit.workload_of(self.m.admin, self.ns, tj["metadata"]["uid"])["status"]["clusterName"])
        pod = eventually(lambda: _trainer_pod(there, tj), 120, f"the trainer pod Running on {there.name}")
        return tj, there, pod

    def other(self, worker: Worker) -> Worker:
        return next(w for w in self.mc.workers if w is not worker)

    def nothing_left(self, worker: Worker, name: str) -> None:
        """Nothing of the job on ``worker``: no copy, JobSet, Job or pod."""
        selector = f"{LABEL_JOBSET_NAME}={name}"
        assert worker.admin.get_or_none(TRAINER_V, "TrainJob", name, self.ns) is None, "the copy"
        assert worker.admin.get_or_none("jobset.x-k8s.io/v1alpha2", "JobSet", name, self.ns) is None, "its JobSet"
        assert not worker.admin.list("batch/v1", "Job", self.ns, label_selector=selector), "its Jobs"
        assert not worker.admin.list("v1", "Pod", self.ns, label_selector=selector), "its pods"

    def assert_one_at_a_time(self, name: str, expected: list[int], dispatched: list[int] | None = None) -> None:
        """Across both workers: the copies that started, each once, started with ``expected`` (the A of their
        dispatches), and R only rose; the manager admitted ``dispatched`` (default: ``expected``), A raised by K each
        time; no pod of one dispatch ran while a pod of another existed (the pods' own A, from their histories)."""
        admitted = kit.assert_a_rises_before_each_admission(self.trainjobs.versions(name))
        assert admitted == (dispatched or expected)
        assert all(b - a >= K for a, b in itertools.pairwise(admitted)), admitted

        def started() -> None:
            assert sorted(a for w in self.mc.workers for a in _admissions(self.copies[w.name], name)) == expected

        eventually(started, 30, "each copy's start in the workers' histories")
        spans = []  # each trainer pod's life on either worker, by this process's clock, and its A
        now = time.monotonic()
        for w in self.mc.workers:
            for first, gone, pod in self.pods[w.name].lifetimes().values():
                if "dispatch.phpboyscout.uk/admission" in (pod["metadata"].get("annotations") or {}):
                    spans.append((first, gone if gone is not None else now, kit.pod_a_j(pod)[0], w.name))
        assert sorted({a for *_, a, _ in spans}) == expected, spans
        for first, gone, a, w in spans:
            for first2, gone2, a2, w2 in spans:
                if a != a2:
                    assert gone <= first2 or gone2 <= first, (
                        f"a pod with A {a} on {w} overlapped one with A {a2} on {w2}"
                    )

    def stop(self) -> None:
        self.trainjobs.stop()
        for r in (*self.copies.values(), *self.pods.values()):
            r.stop()


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches
def test_kueue_cut_off_from_a_worker_the_agent_still_reaches_ends_with_the_copy_stopped_there_before_the_job_moves(
    armed: Armed,
) -> None:
    """Kueue's connection to the worker that runs the job breaks while the manager agent's credential still works,
    so the contact Lease is still renewed there; at the same moment its trainer fails, and the JobSet's restart
    cannot make pods there (a ResourceQuota), so a look at that worker's pods alone finds none while its JobSet
    and Jobs would start them again. The worker's MultiKueueCluster is no longer Active, so the manager claims the
    copy no more, and the worker's agent deletes it and says so. The job is dispatched to the other worker with A
    raised by K only once nothing of it is left on the first; when the quota there is lifted and Kueue reconnects,
    nothing of the first dispatch starts again."""
    s = Story(armed)
    cut_off: Worker | None = None
    quota: Worker | None = None
    try:
        tj, there, pod = s.start()
        name, uid = tj["metadata"]["name"], tj["metadata"]["uid"]
        copy_uid = there.admin.get(TRAINER_V, "TrainJob", name, s.ns)["metadata"]["uid"]
        assert annotations(_get(s.m, tj)).get(ANNOTATION_DISPATCHED_TO) == there.name, "recorded before its claim"

        # No pod can be made there any more; Kueue is cut off; the trainer fails (kwok's failure stage), so the
        # JobSet restarts into Jobs whose pods cannot be made.
        there.admin.create({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": NO_PODS, "namespace": s.ns},
                            "spec": {"hard": {"pods": "0"}}})  # fmt: skip
        quota = there
        s.mc.break_connection(there)
        cut_off = there
        there.admin.merge_patch("v1", "Pod", pod, {"metadata": {"labels": {KWOK_FAIL_LABEL: "true"}}}, s.ns)

        def deleted() -> list[dict[str, Any]]:
            assert there.admin.get_or_none(TRAINER_V, "TrainJob", name, s.ns) is None, "the copy still there"
            # The copy may be gone a moment before its event is listed.
            said = _worker_events(there, s.ns, copy_uid, REASON_UNCLAIMED)
            assert said, "the worker's agent has not said why yet"
            return said

        said = eventually(deleted, CONTACT_SECONDS + 60, "the copy deleted by the worker's agent, unclaimed")
        assert "does not claim this copy here now" in said[0]["message"]
        # Contact with the manager's agent never stopped: the claim, not the Lease, stopped the copy.
        eventually(lambda: s.nothing_left(there, name), 120, "nothing of the job left on the cut-off worker")

        _, again = _dispatched(s.m, tj, 2 * K, within=300)
        moved = s.mc.worker(kit.workload_of(s.m.admin, s.ns, uid)["status"]["clusterName"])
        assert moved is s.other(there), "dispatched again to the worker Kueue cannot reach"
        eventually(lambda: _trainer_pod(moved, tj), 120, f"the trainer pod Running on {moved.name}")

        there.admin.delete("v1", "ResourceQuota", NO_PODS, s.ns)
        quota = None
        s.mc.restore_connection(there)
        cut_off = None
        time.sleep(CONTACT_SECONDS)  # pods may be made there again, and Kueue reaches it: nothing of the job returns
        s.nothing_left(there, name)
        running = moved.admin.get(TRAINER_V, "TrainJob", name, s.ns)
        assert (kit.a_of(running), admission_started(running), kit.a_of(again)) == (2 * K, 2 * K, 2 * K)
        s.assert_one_at_a_time(name, [K, 2 * K])
    finally:
        if quota is not None:
            quota.admin.delete("v1", "ResourceQuota", NO_PODS, s.ns)
        if cut_off is not None:
            s.mc.restore_connection(cut_off)
        s.stop()


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches and a rejoin
def test_a_fenced_worker_that_rejoins_stops_its_copy_and_the_next_dispatch_waits_for_it(armed: Armed) -> None:
    """A worker fenced ``true`` while the job runs there: the manager claims nothing there and renews no contact, so
    its agent deletes the copy; the gate still reads the fenced worker (it can), and the quota and the next dispatch
    wait until nothing of the job is left there. The fence lifted, the worker rejoins; the job, dispatched again
    elsewhere, keeps running, and nothing of the first dispatch comes back."""
    s = Story(armed)
    fenced: Worker | None = None
    remotes: kit.Recorder | None = None
    try:
        tj, there, _ = s.start()
        name, uid = tj["metadata"]["name"], tj["metadata"]["uid"]
        copy_uid = there.admin.get(TRAINER_V, "TrainJob", name, s.ns)["metadata"]["uid"]
        before = {w["metadata"]["uid"] for w in there.admin.list(KUEUE_V, "Workload", s.ns)}  # the running copy's
        remotes = kit.Recorder(there.admin, there.admin.collection_path(KUEUE_V, "Workload", s.ns))
        fenced_at = dt.datetime.now(dt.UTC)
        s.m.admin.merge_patch(KUEUE_V, "MultiKueueCluster", there.name,
                              {"metadata": {"annotations": {ANNOTATION_FENCED: FENCED_TRUE}}})  # fmt: skip
        fenced = there
        eventually(lambda: _true(_worker_events(there, s.ns, copy_uid, REASON_UNCLAIMED)), CONTACT_SECONDS + 60,
                   "the fenced worker's copy deleted, unclaimed")  # fmt: skip
        # MultiKueue sees its remote gone and evicts; the gate dispatches again. MultiKueue still sends a copy to
        # the fenced worker (a fence is dispatch's, not Kueue's), but once its contact lapses the worker's gate there
        # admits none, so the job is admitted on the other worker.
        moved = s.other(there)

        def runs_elsewhere() -> int:
            wl = kit.workload_of(s.m.admin, s.ns, uid)
            assert wl["status"].get("clusterName") == moved.name, wl["status"].get("clusterName")
            copy = moved.admin.get(TRAINER_V, "TrainJob", name, s.ns)
            assert copy["spec"].get("suspend") is False, "not started yet"
            a = kit.a_of(copy)
            assert a is not None
            assert a >= 2 * K
            assert admission_started(copy) == a
            return a

        a_final = eventually(runs_elsewhere, 420, f"the job running on {moved.name}")
        eventually(lambda: _trainer_pod(moved, tj), 120, f"the trainer pod Running on {moved.name}")
        eventually(lambda: s.nothing_left(there, name), 120, "nothing of the job left on the fenced worker")
        eventually(lambda: _true(there.name not in annotations(_get(s.m, tj)).get(ANNOTATION_DISPATCHED_TO, "")), 60,
                   "the fenced worker taken off the record once a look found it empty")  # fmt: skip
        # Once the fenced worker's contact lapsed (no renewal since the fence: a quarter of the duration for the
        # manager's last round, three quarters for the worker's gate, a poll), its gate admitted no copy there: it
        # wrote no record. Before, it may have (a tie with the other worker), and that copy was never claimed.
        lapsed = fenced_at + dt.timedelta(seconds=CONTACT_SECONDS + 5)
        admitted = [dt.datetime.fromisoformat(annotations(o)[ANNOTATION_WORKER_ADMITTED]) for _, o in remotes.events()
                    if o["metadata"]["uid"] not in before and ANNOTATION_WORKER_ADMITTED in annotations(o)]  # fmt: skip
        assert all(t <= lapsed for t in admitted), f"copies admitted on the fenced worker after {lapsed}: {admitted}"

        s.m.admin.merge_patch(KUEUE_V, "MultiKueueCluster", there.name,
                              {"metadata": {"annotations": {ANNOTATION_FENCED: None}}})  # fmt: skip
        fenced = None
        time.sleep(CONTACT_SECONDS)  # rejoined: the job runs on where it is, nothing returns to the first worker
        s.nothing_left(there, name)
        running = moved.admin.get(TRAINER_V, "TrainJob", name, s.ns)
        assert (kit.a_of(running), running["spec"].get("suspend")) == (a_final, False)
        dispatched = kit.assert_a_rises_before_each_admission(s.trainjobs.versions(name))
        s.assert_one_at_a_time(name, [K, a_final], dispatched)
    finally:
        if fenced is not None:
            s.m.admin.merge_patch(KUEUE_V, "MultiKueueCluster", fenced.name,
                                  {"metadata": {"annotations": {ANNOTATION_FENCED: None}}})  # fmt: skip
        if remotes is not None:
            remotes.stop()
        s.stop()


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches
def test_a_worker_dropped_from_the_config_is_still_waited_for_where_the_job_ran(armed: Armed) -> None:
    """The worker that runs the job is dropped from the MultiKueueConfig: MultiKueue no longer sees the copy there
    and evicts the job on the manager. The record on the TrainJob still lists that worker, so the gate reads it
    (the agent's credential for it still works), and the manager claims the copy no more, so the worker's agent
    deletes it; only once nothing of the job is left there is the job dispatched to the other worker, with A raised
    by K."""
    s = Story(armed)
    config = s.m.admin.get(KUEUE_V, "MultiKueueConfig", s.mc.multikueue_config)
    clusters = list(config["spec"]["clusters"])
    dropped = False
    try:
        tj, there, _ = s.start()
        name = tj["metadata"]["name"]
        copy_uid = there.admin.get(TRAINER_V, "TrainJob", name, s.ns)["metadata"]["uid"]
        s.m.admin.merge_patch(KUEUE_V, "MultiKueueConfig", s.mc.multikueue_config,
                              {"spec": {"clusters": [c for c in clusters if c != there.name]}})  # fmt: skip
        dropped = True
        eventually(lambda: _true(_worker_events(there, s.ns, copy_uid, REASON_UNCLAIMED)), CONTACT_SECONDS + 120,
                   "the dropped worker's copy deleted, unclaimed")  # fmt: skip
        _, again = _dispatched(s.m, tj, 2 * K, within=300)
        s.nothing_left(there, name)
        moved = s.mc.worker(kit.workload_of(s.m.admin, s.ns, tj["metadata"]["uid"])["status"]["clusterName"])
        assert moved is s.other(there)
        eventually(lambda: _trainer_pod(moved, tj), 120, f"the trainer pod Running on {moved.name}")
        assert kit.a_of(again) == 2 * K
        s.assert_one_at_a_time(name, [K, 2 * K])
    finally:
        if dropped:
            s.m.admin.merge_patch(KUEUE_V, "MultiKueueConfig", s.mc.multikueue_config, {"spec": {"clusters": clusters}})
        s.stop()


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, two dispatches and a lost worker
def test_a_fence_set_on_the_copy_s_deletion_event_waits_for_a_trainer_still_stopping(armed: Armed) -> None:
    """Kueue is cut off from the worker that runs the job; the worker's agent deletes the copy and says so, but its
    trainer takes long to stop (its pod stays Running once deleted, as under a slow kubelet). An administrator
    fences the worker on that Event. The fence does not lift what the gate sees: the job's next dispatch waits for
    the trainer, naming it on that worker.
    Once the trainer has stopped, the job is dispatched to the other worker with A raised by K."""
    s = Story(armed)
    cut_off: Worker | None = None
    fenced: Worker | None = None
    lingering: tuple[Worker, str] | None = None
    try:
        tj, there, pod = s.start()
        name = tj["metadata"]["name"]
        copy_uid = there.admin.get(TRAINER_V, "TrainJob", name, s.ns)["metadata"]["uid"]
        _linger(there, s.ns, pod, True)
        lingering = (there, pod)
        s.mc.break_connection(there)
        cut_off = there
        eventually(lambda: _true(_worker_events(there, s.ns, copy_uid, REASON_UNCLAIMED)), CONTACT_SECONDS + 60,
                   "the copy's deletion said on the worker")  # fmt: skip
        _fence(s.m, there.name, FENCED_TRUE)
        fenced = there

        def waiting() -> None:
            # The gate's hold on its check (the job evicted and queued again), or the quota kept (still reserved).
            wl = kit.workload_of(s.m.admin, s.ns, tj["metadata"]["uid"])
            said = [e["message"] for e in _events(s.m, tj, "QuotaKept")]
            said += [e.get("message", "") for e in kit.check_entries(wl, s.m.check)]
            assert any(f"{pod} on worker {there.name}" in m for m in said), said

        eventually(waiting, 240, "the next dispatch waiting for the trainer still stopping on the fenced worker")
        time.sleep(CONTACT_SECONDS)
        assert there.admin.get("v1", "Pod", pod, s.ns)["status"]["phase"] == "Running"
        assert s.other(there).admin.get_or_none(TRAINER_V, "TrainJob", name, s.ns) is None, "dispatched meanwhile"
        assert kit.a_of(_get(s.m, tj)) == K

        _linger(there, s.ns, pod, False)  # the trainer stops at last
        lingering = None
        _, again = _dispatched(s.m, tj, 2 * K, within=300)
        moved = s.mc.worker(kit.workload_of(s.m.admin, s.ns, tj["metadata"]["uid"])["status"]["clusterName"])
        assert moved is s.other(there)
        eventually(lambda: _trainer_pod(moved, tj), 120, f"the trainer pod Running on {moved.name}")
        assert kit.a_of(again) == 2 * K
        s.assert_one_at_a_time(name, [K, 2 * K])
    finally:
        if lingering is not None:
            _linger(lingering[0], s.ns, lingering[1], False)
        if fenced is not None:
            _fence(s.m, fenced.name, None)
        if cut_off is not None:
            s.mc.restore_connection(cut_off)
        s.stop()


@pytest.fixture(scope="module")
def second_manager(multicluster: MultiCluster) -> Iterator[SecondManager]:
    """A second MultiKueue manager (origin ``SECOND``) with a control plane of its own, connected to the first worker
    only: started when a test first asks for it (one control plane, about two minutes), stopped after the module."""
    m2 = start_second_manager(multicluster, [multicluster.workers[0].name], origin=SECOND)
    try:
        yield m2
    finally:
        m2.stop()


@contextlib.contextmanager
def _second_armed(m2: SecondManager, first: Armed, workdir: Path) -> Iterator[Armed]:
    """Dispatch's agent on the second manager (``multikueueOrigin`` ``SECOND``, its own credential for the shared
    worker), its check on a ClusterQueue of its own beside the MultiKueue check, in the first manager's test
    namespace and under the same queue and runtime names, so MultiKueue's copies land in the shared worker's queue
    that the worker's agent gates."""
    admin, cp, ns, system = m2.manager.admin, m2.manager.control_plane, first.manager.namespace, first.system
    check = cq = f"{first.manager.check}-b"
    rt = first.manager.runtime["metadata"]["name"]
    agent: AgentProcess | None = None
    try:
        for name in (ns, system):
            admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        admin.create(site.admission_check(check))
        admin.create(_queue(cq, check))
        admin.create({**first.manager.runtime, "metadata": {"name": rt}})
        admin.apply({"apiVersion": KUEUE_V, "kind": "LocalQueue", "metadata": {"namespace": ns, "name": QUEUE},
                     "spec": {"clusterQueue": cq}})  # fmt: skip
        credentials = m2.agent_kubeconfigs(workdir, component="manager-agent-b")
        for w in m2.workers:  # the first manager renews the contact Lease there before the second's agent starts
            eventually(lambda w=w: _true(labels(w.admin.get_or_none("coordination.k8s.io/v1", "Lease",
                                                                    LEASE_MANAGER_CONTACT, system)).get(LABEL_CLAIM)
                                         == DEFAULT_ORIGIN), 60, f"the first manager in contact with {w.name}")  # fmt: skip
        config = {"leaseNamespace": system, "leaseName": "dispatch-admission", "multikueueOrigin": SECOND,
                  "workerKubeconfigs": {w: str(p) for w, p in credentials.items()},
                  "workerContactSeconds": CONTACT_SECONDS, "workerRoundSeconds": SWEEP_SECONDS}  # fmt: skip
        agent = start_agent(cp, kubeconfig=grant(cp, system), name=f"dispatch-agent-{system}", config=config,
                            workdir=workdir, until=LEADER)  # fmt: skip
        eventually(lambda: _true(kit.condition_true(admin.get(KUEUE_V, "ClusterQueue", cq), "Active")), 60,
                   "the second manager's ClusterQueue with both checks Active")  # fmt: skip
        eventually(lambda: _true(kit.condition_true(admin.get(KUEUE_V, "LocalQueue", QUEUE, ns), "Active")), 30,
                   "the second manager's LocalQueue Active")  # fmt: skip
        runtime = admin.get(TRAINER_V, "ClusterTrainingRuntime", rt)
        yield Armed(Manager(m2, ns, check, runtime, agent, credentials), first.worker_check, system)
    finally:
        if agent is not None:
            cp.supervisor.stop(agent.name)
        for tj in admin.list(TRAINER_V, "TrainJob", ns):  # MultiKueue deletes its copies with them
            admin.delete(TRAINER_V, "TrainJob", tj["metadata"]["name"], ns)
        eventually(lambda: _true(not admin.list(KUEUE_V, "Workload", ns)), 120, "the second manager's Workloads gone")
        admin.delete(KUEUE_V, "LocalQueue", QUEUE, ns)
        admin.delete(KUEUE_V, "ClusterQueue", cq)
        admin.delete(KUEUE_V, "AdmissionCheck", check)
        admin.delete(TRAINER_V, "ClusterTrainingRuntime", rt)


def _hold_queue(worker: Worker, namespace: str, hold: bool) -> None:
    """The worker's ClusterQueue behind the test's LocalQueue admits nothing new while held (``stopPolicy: Hold``):
    MultiKueue's copy of a job there waits while another worker admits its own."""
    cq = worker.admin.get(KUEUE_V, "LocalQueue", QUEUE, namespace)["spec"]["clusterQueue"]
    worker.admin.merge_patch(KUEUE_V, "ClusterQueue", cq, {"spec": {"stopPolicy": "Hold" if hold else None}})


def _deleted(recorder: kit.Recorder, match: Callable[[dict[str, Any]], bool]) -> list[tuple[float, str]]:
    """When each object ``match`` selects was deleted (this process's clock), and its name."""
    return [(gone, obj["metadata"]["name"]) for _, gone, obj in recorder.lifetimes().values()
            if gone is not None and match(obj)]  # fmt: skip


@pytest.mark.timeout(1200)  # four control planes on a shared 2-core machine, two dispatches and a refusal
def test_a_second_manager_sharing_the_workers_keeps_to_its_claims_and_is_refused_by_its_preflight(
    armed: Armed, second_manager: SecondManager, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A second, real manager (its own control plane and Kueue, MultiKueue origin ``SECOND``, its own dispatch agent
    with a credential for the first worker) shares the worker the first manager's job runs on. Its agent never
    renews that worker's contact Lease, writes nothing there (no claim, no replica, so it deletes none of the first
    manager's), and its Preflight reports the worker not proven, naming the first manager's origin; its job is held,
    never run there (fail closed). Then the first manager is cut off from the worker (Kueue and its agent): nobody
    renews the contact Lease, the worker's agent deletes the first manager's copy, and the job moves to the other
    worker with R raised by K and no overlap."""
    s = Story(armed)
    m1, mc = armed.manager, armed.manager.mc
    shared, other = mc.workers[0], mc.workers[1]
    assert [w.name for w in second_manager.workers] == [shared.name]
    leases = kit.Recorder(shared.admin, shared.admin.collection_path("coordination.k8s.io/v1", "Lease", armed.system))
    replicas = kit.Recorder(shared.admin, shared.admin.collection_path(TRAINER_V, "TrainingRuntime", s.ns))
    cut_off = held = False
    agent_file = m1.credentials[shared.name]
    working: bytes | None = None
    try:
        with _second_armed(second_manager, armed, Path(tmp_path_factory.mktemp("agent-b"))) as b:
            m2 = b.manager
            _hold_queue(other, s.ns, True)  # the first manager's job goes to the shared worker
            held = True
            tj1, there, _ = s.start()
            assert there is shared, there.name
            _hold_queue(other, s.ns, False)
            held = False
            name1, uid1 = tj1["metadata"]["name"], tj1["metadata"]["uid"]
            wl1 = kit.workload_of(m1.admin, s.ns, uid1)["metadata"]["uid"]
            copy_uid = shared.admin.get(TRAINER_V, "TrainJob", name1, s.ns)["metadata"]["uid"]

            # The second manager's job, queued by its own Kueue towards the shared worker.
            sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace=s.ns, queue=QUEUE,
                             image="registry.invalid/dispatch-mc/train:1", command=["python", "train.py"])  # fmt: skip
            tj2 = kit.create_as_start(m2.admin, sub, m2.runtime)
            name2, uid2 = tj2["metadata"]["name"], tj2["metadata"]["uid"]
            eventually(lambda: kit.workload_of(m2.admin, s.ns, uid2), 30, "the second manager's Workload created")
            write_as_the_api(m2.admin, tj2, lambda t, w: plan_open(t).writes)

            def refused() -> str:
                entry = kit.check_entry(kit.workload_of(m2.admin, s.ns, uid2), m2.check)
                assert entry["state"] != "Ready", entry
                assert f"worker {shared.name}" in entry.get("message", ""), entry
                assert "another manager (MultiKueue origin multikueue)" in entry["message"], entry
                return str(entry["message"])

            eventually(refused, 120, "the second manager's dispatch held: the shared worker refused")
            report = asyncio.run(preflight_on_the_manager(m2, tmp_path_factory.mktemp("preflight"), m2.credentials,
                                                          armed.system, CONTACT_SECONDS, origin=SECOND))  # fmt: skip
            assert report.observe_only, report
            why = report.readmission_gate_reason
            assert f"{shared.name}: the manager agent's contact Lease" in why, why
            assert f"renewed by another manager (MultiKueue origin {DEFAULT_ORIGIN}, this one's is {SECOND})" in why
            assert "a worker shared by two managers is not supported" in why, why
            time.sleep(CONTACT_SECONDS)  # several rounds of both agents' claims, contact and sweeps
            refused()

            # The first manager cut off from the shared worker: Kueue and its agent both.
            mc.break_connection(shared)
            cut_off = True
            working = MultiCluster.break_agent_kubeconfig(agent_file)

            def lapsed() -> None:
                lease = shared.admin.get("coordination.k8s.io/v1", "Lease", LEASE_MANAGER_CONTACT, armed.system)
                renewed = dt.datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))
                age = (dt.datetime.now(dt.UTC) - renewed).total_seconds()
                assert age > lease["spec"]["leaseDurationSeconds"] + 2, f"renewed {age:.1f} s ago"

            eventually(lapsed, CONTACT_SECONDS + 60, "nobody renewing the shared worker's contact Lease")

            def stopped() -> list[dict[str, Any]]:
                assert shared.admin.get_or_none(TRAINER_V, "TrainJob", name1, s.ns) is None, "the copy still there"
                said = [e for r in (REASON_OUT_OF_CONTACT, REASON_UNCLAIMED)
                        for e in _worker_events(shared, s.ns, copy_uid, r)]  # fmt: skip
                assert said, "no Event says why"
                return said

            eventually(stopped, CONTACT_SECONDS + 60, "the first manager's copy deleted by the shared worker's agent")
            eventually(lambda: s.nothing_left(shared, name1), 120, "nothing of the first job left on the shared worker")
            restored = time.monotonic()
            agent_file.write_bytes(working)  # its gate reads the worker again, finds nothing of the job, moves it
            working = None

            _, again = _dispatched(m1, tj1, 2 * K, within=300)
            moved = mc.worker(kit.workload_of(m1.admin, s.ns, uid1)["status"]["clusterName"])
            assert moved is other, moved.name
            eventually(lambda: _trainer_pod(moved, tj1), 120, f"the trainer pod Running on {moved.name}")
            assert kit.a_of(again) == 2 * K
            s.assert_one_at_a_time(name1, [K, 2 * K])

            # The second manager never renewed the contact Lease, nor wrote a claim or a replica there; nothing of
            # the first manager's was deleted there but by the first manager, once it reached the worker again.
            contact = [v for _, v in leases.events() if v["metadata"]["name"] == LEASE_MANAGER_CONTACT]
            assert {labels(v).get(LABEL_CLAIM) for v in contact} == {DEFAULT_ORIGIN}, contact
            claims = [v for _, v in leases.events() if v["metadata"]["name"].startswith(CLAIM_PREFIX)]
            assert {labels(v).get(LABEL_CLAIM) for v in claims} == {DEFAULT_ORIGIN}, claims
            assert claim_name(wl1) in {v["metadata"]["name"] for v in claims}, "the first manager's claim"
            gone = _deleted(leases, lambda v: v["metadata"]["name"].startswith(CLAIM_PREFIX))
            assert all(at > restored for at, _ in gone), gone
            made = [v for _, v in replicas.events()]
            assert {labels(v).get(LABEL_REPLICA_OF) for v in made} == {uid1}, "a replica but the first job's"
            # Trainer v2.2.1's finalizer keeps a replica a TrainJob uses: a delete shows first as its deletionTimestamp.
            assert not _deleted(replicas, lambda v: True), "the first job's replica deleted"
            assert not [v for v in made if v["metadata"].get("deletionTimestamp")], "the first job's replica deleted"
            assert all(v["metadata"]["name"] != name2 for v in s.copies[shared.name].first_seen()), "ran there"
            refused()
    finally:
        if working is not None:
            agent_file.write_bytes(working)
        if cut_off:
            mc.restore_connection(shared)
        if held:
            _hold_queue(other, s.ns, False)
        leases.stop()
        replicas.stop()
        s.stop()
