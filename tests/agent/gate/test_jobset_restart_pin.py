"""JobSet's restart waits for dispatch's pod finalizer (tier C): an upstream behaviour pinned on a real kubelet.

A JobSet restart (J to J+1) goes through no gate of dispatch's: JobSet deletes the failed execution's Jobs and
creates new ones. Nothing overlaps only because JobSet v0.12.0 deletes those Jobs with propagationPolicy
Foreground and recreates each under the same name, and only once the old object is gone. A foreground-deleted
Job stays while its pods do, and dispatch's finalizer keeps a pod that may still run. docs/nodeloss.md ("JobSet
restarts wait for the old pods") states the dependency; this test fails, naming it, if JobSet changes either half.

The failure is one the Job controller accepts without a kubelet: the lost Node object is deleted (as a cloud's
node controller does), so the pod garbage collector writes phase Failed on the pod and force-deletes it, and the
Job fails. (The Job controller of Kubernetes 1.36 does not mark a Job Failed while a pod is still terminating in
a non-terminal phase, so a pod that is only evicted from a silent node starts no JobSet restart.) The container
runs on: its machine is up, only its kubelet stopped.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterable
from typing import Any

import pytest

from contract.identity import attempt_token
from contract.keys import LABEL_JOBSET_NAME, POD_FINALIZER, TAINT_OUT_OF_SERVICE, TAINT_UNREACHABLE
from contract.trainjob import Submission
from harness.binaries import locate_node
from harness.pytest_plugin import TierC
from harness.real_node import start_real_node
from tests.agent.gate import kit
from tests.agent.gate.kit import JOBSET_V, TRAINER_V, eventually
from tests.agent.gate.test_readmission_gate import RAISED, Gate, admitted_workload, open_trainjob
from tests.prologue.test_prologue_on_a_kubelet import JOB_CPU, create, real_runtime, submission

pytestmark = [pytest.mark.e2e, pytest.mark.node]

DEPENDENCY = (
    "the upstream dependency 'JobSet deletes a restart's Jobs in the foreground and recreates them under the same "
    "names' (JobSet v0.12.0 pkg/controllers/jobset_controller.go deleteJobs, shouldCreateJob; "
    "pkg/util/placement/placement.go GenJobName) no longer holds: dispatch's pod finalizer does not hold J+1 back "
    "(docs/nodeloss.md, 'JobSet restarts wait for the old pods')"
)
FOREGROUND_DELETION = "foregroundDeletion"
"""The finalizer the API server puts on an object deleted with propagationPolicy Foreground."""
JOBS_V = "batch/v1"
Event = tuple[str, dict[str, Any]]


# -- what the recorded histories must show (pure: plain lists of watch events) ------------------------------


def deleted_in_the_foreground(versions: Iterable[dict[str, Any]]) -> bool:
    """Some version of the object carries the foreground-deletion finalizer: it was deleted with
    propagationPolicy Foreground (the API server writes it with the deletionTimestamp, before any dependent goes)."""
    return any(FOREGROUND_DELETION in (v["metadata"].get("finalizers") or []) for v in versions)


def first_index(events: list[Event], predicate: Any) -> int | None:
    return next((i for i, (_, obj) in enumerate(events) if predicate(obj)), None)


def deleted_at(events: list[Event], uid: str) -> int | None:
    return next(
        (i for i, (kind, obj) in enumerate(events) if kind == "DELETED" and obj["metadata"]["uid"] == uid), None
    )


def identity(pod: dict[str, Any], sub: Submission) -> str:
    """The pod's DISPATCH_ATTEMPT, from what the prologue reads (its A annotation, its J label)."""
    a, j = kit.pod_a_j(pod)
    return attempt_token(sub.job_id, sub.n, sub.attempt, a, j)


def overlaps(pod_events: list[Event], sub: Submission) -> list[str]:
    """Walking the pods' watch history in order: each moment a pod appeared while a pod of another execution
    (another DISPATCH_ATTEMPT) was still in the API, i.e. could still run (dispatch's finalizer keeps every pod
    that may)."""
    alive: dict[str, str] = {}  # pod uid -> its DISPATCH_ATTEMPT
    found = []
    for kind, pod in pod_events:
        uid = pod["metadata"]["uid"]
        if kind == "DELETED":
            alive.pop(uid, None)
            continue
        if uid in alive:
            continue
        mine = identity(pod, sub)
        others = sorted({other for other in alive.values() if other != mine})
        if others:
            found.append(f"{pod['metadata']['name']} ({mine}) appeared while {others} could still run")
        alive[uid] = mine
    return found


# -- the test ---------------------------------------------------------------------------------------------


def test_a_jobset_restart_waits_until_the_lost_pod_is_proven_gone(tier_c: TierC, gate: Gate, ns: str) -> None:
    admin, cp = gate.admin, gate.tier_b.control_plane
    node = start_real_node(cp, f"real-pin-{secrets.token_hex(3)}", locate_node().require())
    runtime_name = f"dispatch-real-pin-{secrets.token_hex(3)}"
    recorders: list[kit.Recorder] = []
    try:
        runtime = real_runtime(tier_c, runtime_name, cpu=JOB_CPU, max_restarts=1)  # J may rise once
        pod_spec = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        pod_spec["nodeSelector"] = {"kubernetes.io/hostname": node.name}
        admin.create(runtime)
        runtime = admin.get(TRAINER_V, "ClusterTrainingRuntime", runtime_name)
        sub = submission(ns, node.artifacts.base_image, gate.low)
        tj = create(gate, sub, runtime)
        name = tj["metadata"]["name"]
        selector = f"{LABEL_JOBSET_NAME}={name}"
        pods = kit.Recorder(admin, admin.collection_path("v1", "Pod", ns), label_selector=selector)
        jobs = kit.Recorder(admin, admin.collection_path(JOBS_V, "Job", ns), label_selector=selector)
        recorders += [pods, jobs]
        open_trainjob(gate, tj)
        admitted_workload(gate, tj, RAISED.format(1))

        def running_here() -> dict[str, Any]:
            live = kit.running(kit.pods_of(admin, ns, name))
            assert len(live) == 1, [p["metadata"]["name"] for p in live]
            assert live[0]["spec"]["nodeName"] == node.name
            return live[0]

        pod = eventually(running_here, 120, "the trainer Running on the test's real node")
        pod_name, pod_uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        assert kit.pod_a_j(pod) == (1, 0), kit.pod_a_j(pod)
        assert POD_FINALIZER in pod["metadata"]["finalizers"], pod["metadata"]
        (owner,) = [o for o in pod["metadata"]["ownerReferences"] if o["kind"] == "Job"]
        job_name, job_uid = owner["name"], owner["uid"]
        container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
        assert container_id in node.container_pids()

        # The kubelet dies, the container does not; the node is declared unreachable, and its Node object is
        # deleted. The pod GC then fails the orphaned pod (phase Failed) and force-deletes it: the Job fails,
        # and JobSet's failure policy restarts the JobSet (J 1).
        node.stop_kubelet()

        def lost() -> None:
            n = admin.get("v1", "Node", node.name)
            assert kit.conditions(n)["Ready"]["status"] == "Unknown", kit.conditions(n)["Ready"]
            assert TAINT_UNREACHABLE in {t["key"] for t in n["spec"].get("taints") or []}, n["spec"]

        eventually(lost, 90, "the node declared unreachable")
        admin.delete("v1", "Node", node.name)

        def restarted() -> None:
            js = admin.get(JOBSET_V, "JobSet", name, ns)
            assert js["status"].get("restarts") == 1, js["status"]

        eventually(restarted, 180, "the pod GC fails the orphaned pod, and JobSet restarts (J 1)")

        def old_job_deleted() -> list[dict[str, Any]]:
            versions = [obj for _, obj in jobs.events() if obj["metadata"]["uid"] == job_uid]
            assert (
                any(v["metadata"].get("deletionTimestamp") for v in versions)
                or deleted_at(jobs.events(), job_uid) is not None
            ), versions[-1]["metadata"]
            return versions

        versions = eventually(old_job_deleted, 60, "JobSet deletes J 0's Job")
        # Upstream fact 1: the restart deletes the old Job in the foreground.
        assert deleted_in_the_foreground(versions), (
            f"JobSet deleted J 0's Job {job_name} without propagationPolicy Foreground (no {FOREGROUND_DELETION} "
            f"finalizer in any version: {[v['metadata'].get('finalizers') for v in versions]}): {DEPENDENCY}"
        )

        # J 0's pod may still run (its container does): dispatch's finalizer alone keeps it, so the old Job
        # stays, and no Job or pod of J 1 exists.
        def held() -> None:
            old = admin.get_or_none("v1", "Pod", pod_name, ns)
            assert old is not None, f"J 0's pod {pod_name} left the API"
            assert old["metadata"]["uid"] == pod_uid, f"J 0's pod {pod_name} left the API and was replaced"
            assert old["metadata"].get("deletionTimestamp"), old["metadata"]
            assert old["metadata"]["finalizers"] == [POD_FINALIZER], old["metadata"]["finalizers"]
            assert old["status"]["phase"] == "Failed", old["status"]["phase"]  # the pod GC's, not the kubelet's
            listed = admin.list(JOBS_V, "Job", ns, label_selector=selector)
            current = [(j["metadata"]["name"], j["metadata"]["uid"]) for j in listed]
            assert current == [(job_name, job_uid)], (
                f"a Job of J 1 exists while J 0's Job {job_name} is held by its pod: {current}: {DEPENDENCY}"
            )
            job = admin.get(JOBS_V, "Job", job_name, ns)
            assert job["metadata"].get("deletionTimestamp"), job["metadata"]
            assert FOREGROUND_DELETION in (job["metadata"].get("finalizers") or []), job["metadata"]
            assert [kit.pod_a_j(p) for p in kit.pods_of(admin, ns, name)] == [(1, 0)]

        eventually(held, 60, "J 0's pod kept by dispatch's finalizer alone, its Job with it")
        for _ in range(6):  # and it stays so, while the container really runs
            held()
            assert container_id in node.container_pids(), "the container stopped with its kubelet"
            time.sleep(0.5)

        # The machine is powered off; the operator says so by registering its Node tainted out-of-service (the
        # only release of a pod whose Node is gone). The agent removes its finalizer; the pod goes, then the old
        # Job, and only then does JobSet create J 1's Job and pod.
        node.power_off()
        assert node.container_pids() == {}, "a container of the powered-off node is still alive"
        assert admin.get("v1", "Pod", pod_name, ns)["metadata"]["uid"] == pod_uid
        off_at = len(pods.events())  # J 0's pod is in the API at least until this point of the pods' history
        admin.create({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": node.name},
            "spec": {"taints": [{"key": TAINT_OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}]},
        })  # fmt: skip

        def restarted_pods() -> list[dict[str, Any]]:
            new = [p for p in pods.first_seen() if kit.pod_a_j(p)[1] == 1]
            assert new, [kit.pod_a_j(p) for p in pods.first_seen()]
            return new

        new_pods = eventually(restarted_pods, 120, "J 1's pod, once J 0's is released")
        job_events, pod_events = jobs.events(), pods.events()

        # Upstream fact 2: the restart's Job has the old Job's name.
        new_jobs = {obj["metadata"]["uid"]: obj["metadata"]["name"] for _, obj in job_events
                    if obj["metadata"]["uid"] != job_uid}  # fmt: skip
        assert new_jobs, "J 1's pod exists without a new Job"
        assert set(new_jobs.values()) == {job_name}, (
            f"JobSet named J 1's Job(s) {sorted(set(new_jobs.values()))}, not {job_name}: {DEPENDENCY}"
        )
        old_job_gone = deleted_at(job_events, job_uid)
        first_new_job = first_index(job_events, lambda o: o["metadata"]["uid"] != job_uid)
        assert old_job_gone is not None, "J 0's Job is still in the API"
        assert first_new_job is not None
        assert old_job_gone < first_new_job, f"J 1's Job appeared before J 0's Job was gone: {DEPENDENCY}"

        # J 1's pods appeared only after J 0's pod was proven gone: it left the API after the machine was off (only
        # dispatch may remove its finalizer, and the agent did so once the node was out of service), and before
        # any pod of J 1 appeared.
        old_gone = deleted_at(pod_events, pod_uid)
        assert old_gone is not None, "J 0's pod is still in the API"
        assert old_gone >= off_at, "J 0's pod left the API before its machine was off"
        first_new = first_index(pod_events, lambda o: kit.pod_a_j(o)[1] == 1)
        assert first_new is not None
        assert old_gone < first_new, "a pod of J 1 appeared before J 0's pod left the API"

        # From the pods' own identities (DISPATCH_ATTEMPT): never two executions at once; J 1's is A 1, J 1.
        assert overlaps(pod_events, sub) == []
        assert {identity(p, sub) for p in new_pods} == {attempt_token(sub.job_id, sub.n, sub.attempt, 1, 1)}
        assert kit.a_of(admin.get(TRAINER_V, "TrainJob", name, ns)) == 1, "a restart is no readmission"
    finally:
        for r in recorders:
            r.stop()
        node.stop()
        admin.delete("v1", "Node", node.name)
        admin.delete(TRAINER_V, "ClusterTrainingRuntime", runtime_name)
