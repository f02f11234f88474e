"""The prologue on a real kubelet (tier C): the trainer pod of a dispatch TrainJob runs on a real node
(harness.real_node: kubelet, containerd, runc), so the Downward API values, the kubelet's ``$(VAR)``
expansion, PID 1, signals and exit codes are the kubelet's and the runtime's, not kwok's.

The user's command is a small Python program in the node's Debian image; it prints what dispatch gave it,
and the test reads that from the container's real log (``pods/log`` through the API server, which reaches
the kubelet with its client certificate) and checks it against the contract's formulas.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import secrets
import threading
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from ulid import ULID

from contract.identity import attempt_token, epoch, r_of
from contract.keys import LABEL_JOBSET_NAME, PROLOGUE_REFUSAL_EXIT
from contract.prologue import PROLOGUE_CONFIGMAP, prologue_configmap
from contract.runtime_requirements import runtime_problems
from contract.trainer import trainer_command
from contract.trainjob import Submission
from harness.kube_http import KubeHttp
from harness.pytest_plugin import TierC
from harness.real_node import real_node_pod_spec
from harness.tier_b import KWOK_COMPLETE_ANNOTATION
from tests.agent.gate import kit
from tests.agent.gate.kit import JOBSET_V, TRAINER_V, eventually
from tests.agent.gate.test_readmission_gate import (
    LOCAL_QUEUE,
    RAISED,
    Gate,
    admitted_workload,
    open_trainjob,
    preemptor,
)

pytestmark = [pytest.mark.e2e, pytest.mark.node]

# The real node has the machine's CPUs (2 here): the trainer asks for less than one, and still enough that
# with the preemptor's 3 the queue's 4 do not suffice (so Kueue preempts it).
JOB_CPU = "1500m"
USER_PROGRAM = """
import os, signal, sys, time
def said(signum, frame):
    print("SIGNAL=%d" % signum, flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, said)
print("DISPATCH_EPOCH=" + os.environ.get("DISPATCH_EPOCH", "<unset>"), flush=True)
print("DISPATCH_ATTEMPT=" + os.environ.get("DISPATCH_ATTEMPT", "<unset>"), flush=True)
print("PID=%d" % os.getpid(), flush=True)
print("LEFT=" + ",".join(sorted(k for k in os.environ if k.startswith("DISPATCH_K8S_"))), flush=True)
while True:
    time.sleep(1)
"""


def real_runtime(tier_c: TierC, name: str, *, cpu: str, max_restarts: int) -> dict[str, Any]:
    """A ClusterTrainingRuntime meeting the runtime requirements, its trainer on the real node in the node's
    Debian image (imported into containerd; never pulled)."""
    runtime = kit.training_runtime(name, cpu=cpu, failure_policy={"maxRestarts": max_restarts})
    job = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]
    pod = job["template"]["spec"]["template"]["spec"]
    pod.update(real_node_pod_spec(tier_c.node.name))
    container = pod["containers"][0]
    container["image"] = tier_c.node.artifacts.base_image
    container["imagePullPolicy"] = "Never"
    return runtime


def submission(namespace: str, image: str, priority_class: str) -> Submission:
    return Submission(
        job_id=str(ULID()),
        n=1,
        g=0,
        attempt=0,
        namespace=namespace,
        image=image,
        command=["python3", "-c", USER_PROGRAM],
        queue=LOCAL_QUEUE,
        priority_class=priority_class,
    )


def create(gate: Gate, sub: Submission, runtime: dict[str, Any]) -> dict[str, Any]:
    """As Start creates a dispatch TrainJob: the runtime copy, then the TrainJob, closed."""
    return kit.create_as_start(gate.admin, sub, runtime)


class LogFollower:
    """``pods/log?follow=true`` of one container through the API server, kept in a thread: what the container
    printed up to its very end, even when the pod is deleted right after."""

    def __init__(self, admin: KubeHttp, namespace: str, pod: str) -> None:
        self.lines: list[str] = []
        self._done = threading.Event()
        query = urllib.parse.urlencode({"follow": "true", "container": "node"})
        self._url = f"{admin.credentials.server}/api/v1/namespaces/{namespace}/pods/{pod}/log?{query}"
        self._context = admin.credentials.ssl_context()
        threading.Thread(target=self._run, daemon=True, name=f"log {pod}").start()

    def _run(self) -> None:
        try:
            with urllib.request.urlopen(self._url, context=self._context, timeout=300) as r:
                for raw in r:
                    self.lines.append(raw.decode(errors="replace").rstrip("\n"))
        except OSError as exc:
            self.lines.append(f"<log stream ended: {exc}>")
        finally:
            self._done.set()

    def values(self) -> dict[str, str]:
        return dict(line.split("=", 1) for line in self.lines if re.match(r"^[A-Z_]+=", line))

    def wait_closed(self, within: float) -> None:
        assert self._done.wait(within), f"the log stream did not end within {within:.0f}s: {self.lines}"


def the_pod(gate: Gate, ns: str, name: str, a: int) -> dict[str, Any]:
    def probe() -> dict[str, Any]:
        pods = kit.running(kit.pods_of(gate.admin, ns, name))
        assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
        assert kit.pod_a_j(pods[0])[0] == a, kit.pod_a_j(pods[0])
        return pods[0]

    return eventually(probe, 120, f"the trainer pod of A={a} Running on the real node")


def expect(sub: Submission, pod: dict[str, Any]) -> dict[str, str]:
    """What the user's command must see, by the contract's formulas, for this pod's A and J."""
    a, j = kit.pod_a_j(pod)
    return {
        "DISPATCH_EPOCH": str(epoch(sub.g, sub.n, r_of(a, j))),
        "DISPATCH_ATTEMPT": attempt_token(sub.job_id, sub.n, sub.attempt, a, j),
        "PID": "1",
        "LEFT": "",
    }


@pytest.fixture
def real_runtime_name(tier_c: TierC, gate: Gate) -> Iterator[str]:
    name = f"dispatch-real-{secrets.token_hex(3)}"
    gate.admin.create(real_runtime(tier_c, name, cpu=JOB_CPU, max_restarts=0))
    yield name
    gate.admin.delete(TRAINER_V, "ClusterTrainingRuntime", name)


def test_a_readmission_runs_with_a_higher_epoch_on_a_real_kubelet(
    tier_c: TierC, gate: Gate, ns: str, real_runtime_name: str
) -> None:
    admin = gate.admin
    runtime = admin.get(TRAINER_V, "ClusterTrainingRuntime", real_runtime_name)
    assert runtime_problems(runtime["spec"], allow_rank_restart=False) == []
    sub = submission(ns, tier_c.node.artifacts.base_image, gate.low)
    tj = create(gate, sub, runtime)
    name = tj["metadata"]["name"]
    open_trainjob(gate, tj)
    admitted_workload(gate, tj, RAISED.format(1))
    first = the_pod(gate, ns, name, a=1)
    assert first["spec"]["nodeName"] == tier_c.node.name
    log1 = LogFollower(admin, ns, first["metadata"]["name"])
    eventually(lambda: _assert(len(log1.values()) >= 4), 60, "the first execution's output")
    assert log1.values() == expect(sub, first), log1.lines

    # Preempted: the kubelet stops the container with SIGTERM, which reaches the user's command (PID 1).
    other = preemptor(gate, ns)
    admitted_workload(gate, other, "not a dispatch TrainJob: the readmission gate does not apply", within=90)
    log1.wait_closed(120)
    assert "SIGNAL=15" in log1.lines, log1.lines
    for pod in eventually(lambda: _assert(kit.running(kit.pods_of(admin, ns, other["metadata"]["name"]))), 90,
                          "the preemptor runs"):  # fmt: skip
        admin.merge_patch("v1", "Pod", pod["metadata"]["name"],
                          {"metadata": {"annotations": {KWOK_COMPLETE_ANNOTATION: "true"}}}, ns)  # fmt: skip

    # Re-admitted with A raised: the new container sees a higher R, hence a higher epoch.
    admitted_workload(gate, tj, RAISED.format(2), within=120)
    second = the_pod(gate, ns, name, a=2)
    log2 = LogFollower(admin, ns, second["metadata"]["name"])
    eventually(lambda: _assert(len(log2.values()) >= 4), 60, "the second execution's output")
    assert log2.values() == expect(sub, second), log2.lines
    assert int(log2.values()["DISPATCH_EPOCH"]) > int(log1.values()["DISPATCH_EPOCH"])


def test_a_pod_started_behind_dispatchs_back_exits_125_and_fails_the_jobset(tier_c: TierC, gate: Gate, ns: str) -> None:
    """A dispatch TrainJob (plain mode) unsuspended by someone else, with no dispatch webhook to refuse it: its
    pods carry the admission count A = "0" of creation, so the prologue, the last line of defence, refuses to
    run the command (exit 125, one line), the Job fails at once (backoffLimit 0) and the JobSet fails (no
    restart left), as the runtime requirements intend."""
    admin = gate.admin
    with _plain_job(tier_c, gate, ns, "plain") as name:
        admin.merge_patch(TRAINER_V, "TrainJob", name, {"spec": {"suspend": False}}, ns)

        def failed_pod() -> dict[str, Any]:
            pods = kit.pods_of(admin, ns, name)
            assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
            assert pods[0]["status"].get("phase") == "Failed", pods[0]["status"].get("phase")
            return pods[0]

        pod = eventually(failed_pod, 120, "the trainer pod Failed")
        assert pod["spec"]["nodeName"] == tier_c.node.name
        assert kit.pod_a_j(pod) == (0, 0)
        terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
        assert terminated["exitCode"] == PROLOGUE_REFUSAL_EXIT, terminated
        log = admin.request("GET", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/log")
        assert str(log).splitlines() == [
            "dispatch: DISPATCH_K8S_ADMISSION '0': no gate admitted this pod, so dispatch did not start it"
        ], log

        def jobset_failed() -> None:
            js = admin.get(JOBSET_V, "JobSet", name, ns)
            assert kit.condition_true(js, "Failed"), json.dumps(js.get("status"))

        eventually(jobset_failed, 60, "the JobSet Failed")
        pods = admin.list("v1", "Pod", ns, label_selector=f"{LABEL_JOBSET_NAME}={name}")
        assert [p["status"]["phase"] for p in pods] == ["Failed"], "the JobSet restarted"


def test_a_pod_without_the_prologues_configmap_does_not_start_until_it_is_back(
    tier_c: TierC, gate: Gate, ns: str
) -> None:
    """The trainer's command is ``/bin/sh <file>``, the file the prologue's ConfigMap mounted by dispatch's runtime
    patch, not optional: with the ConfigMap gone (break-glass deleted it) the real kubelet does not start the
    container at all (FailedMount), so nothing runs without the prologue; once it is back, the kubelet's retry
    mounts it and the container runs the prologue from it (here it refuses A = 0, exit 125, as it must)."""
    admin = gate.admin
    with _plain_job(tier_c, gate, ns, "mount") as name:
        admin.delete("v1", "ConfigMap", PROLOGUE_CONFIGMAP, ns)
        admin.merge_patch(TRAINER_V, "TrainJob", name, {"spec": {"suspend": False}}, ns)

        def mount_failed() -> dict[str, Any]:
            pods = kit.pods_of(admin, ns, name)
            assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
            selector = {"fieldSelector": f"involvedObject.name={pods[0]['metadata']['name']}"}
            events = admin.request("GET", f"/api/v1/namespaces/{ns}/events", query=selector)["items"]
            assert [e for e in events if e.get("reason") == "FailedMount" and PROLOGUE_CONFIGMAP in e["message"]], [
                (e.get("reason"), e.get("message")) for e in events
            ]
            return pods[0]

        pod = eventually(mount_failed, 120, "the kubelet's FailedMount of the prologue's ConfigMap")
        (node,) = [c for c in pod["spec"]["containers"] if c["name"] == "node"]
        assert node["command"] == trainer_command()
        assert pod["spec"]["nodeName"] == tier_c.node.name
        status = pod.get("status", {})
        assert status.get("phase") == "Pending", status
        waiting = (status.get("containerStatuses") or [{}])[0].get("state", {}).get("waiting", {})
        assert waiting.get("reason", "ContainerCreating") == "ContainerCreating", status

        admin.create(prologue_configmap(ns))

        def refused_by_the_prologue() -> dict[str, Any]:
            (p,) = kit.pods_of(admin, ns, name)
            state = ((p["status"].get("containerStatuses") or [{}])[0]).get("state", {})
            assert state.get("terminated", {}).get("exitCode") == PROLOGUE_REFUSAL_EXIT, state
            return p

        pod = eventually(refused_by_the_prologue, 180, "the container ran the prologue from the mounted file")
        log = admin.request("GET", f"/api/v1/namespaces/{ns}/pods/{pod['metadata']['name']}/log")
        assert str(log).splitlines() == [
            "dispatch: DISPATCH_K8S_ADMISSION '0': no gate admitted this pod, so dispatch did not start it"
        ], log


@contextlib.contextmanager
def _plain_job(tier_c: TierC, gate: Gate, ns: str, what: str) -> Iterator[str]:
    """A dispatch TrainJob in plain mode (no queue), created closed on a runtime of its own that runs on the real
    node; yields its name and deletes the runtime after."""
    admin = gate.admin
    runtime_name = f"dispatch-real-{what}-{secrets.token_hex(3)}"
    admin.create(real_runtime(tier_c, runtime_name, cpu="100m", max_restarts=0))
    try:
        runtime = admin.get(TRAINER_V, "ClusterTrainingRuntime", runtime_name)
        sub = dataclasses.replace(submission(ns, tier_c.node.artifacts.base_image, gate.low), queue=None,
                                  priority_class=None)  # fmt: skip
        yield create(gate, sub, runtime)["metadata"]["name"]
    finally:
        admin.delete(TRAINER_V, "ClusterTrainingRuntime", runtime_name)


def _assert(value: Any) -> Any:
    assert value
    return value
