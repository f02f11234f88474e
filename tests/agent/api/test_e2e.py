"""Tier B: the API with the real Kueue, JobSet, Trainer, scheduler and kwok, and the agent's readmission
controller (``python -m agent serve``) as a process: Kueue mode end to end, the Workload check, Preflight
healthy and failing, Output of rank 0 through the API server's pods/log."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from agent.api.client import AgentClient, AgentError
from agent.api.errors import ErrorKind
from agent.api.models import HoldRequest, ObjectRef, OutputRequest, PreflightRequest, StartResponse
from agent.api.rbac import SUPERVISOR_RULES
from agent.api.settings import ApiSettings
from contract.prologue import PROLOGUE, PROLOGUE_CONFIGMAP
from contract.runtime_patch import prologue_mount, prologue_volume
from contract.trainer import trainer_command
from harness.cluster import ControlPlane
from harness.tier_b import TierB, training_runtime
from tests.agent.api.cluster import (
    RunningAgent,
    Supervisors,
    allowed,
    apply,
    bind,
    role,
    running_agent,
    supervisors,
)
from tests.agent.api.requests import fresh_job_id, start_request

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]
TRAINER = "trainer.kubeflow.org/v1alpha1"
KUEUE = "kueue.x-k8s.io/v1beta2"
RUNTIME = "dispatch-e2e-torch"
CHECK = "dispatch-admission-api-e2e"
"""Served by the agent by its controllerName; not the chart's default name, which tier C's `helm install` owns
(the ClusterQueue below keeps its check from being deleted: Kueue's finalizer)."""
CLUSTER_QUEUE = "dispatch-e2e-cq"
QUEUE = "dispatch-queue"
PROBE_SECONDS = 3.0
"""Preflight's watch of its probe here (the default is 10 s). kwok starts a pod at once, so a probe that leaks
shows in 3 s, as tests/agent/api/test_cluster.py's leaking gate shows in 2; the Lease is still watched until it
changes or its duration passes. Each Preflight of these tests waited 10 s for nothing more."""
WORKLOAD_SECONDS = 10.0
"""timeouts.workload here (the chart's default is 30 s): Kueue makes a TrainJob's Workload within a second or two
on this cluster, and the two tests of a Start refused for want of one waited the whole timeout."""
SETTINGS = ApiSettings(workloadTimeout=WORKLOAD_SECONDS, probeSeconds=PROBE_SECONDS)


def e2e_runtime(cp: ControlPlane) -> dict[str, Any]:
    """Upstream's torch-distributed, made to meet the runtime requirements (no restart in place), with
    resource requests: Kueue applies an AdmissionCheck only to the flavors a Workload is assigned, and a pod
    set that requests nothing is assigned none, so it would be admitted past the readmission gate."""
    rt = training_runtime(cp)
    rt["metadata"] = {"name": RUNTIME}
    job = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    job["backoffLimit"] = 0
    job["template"]["spec"]["restartPolicy"] = "Never"
    job["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1", "memory": "1Gi"}}
    return rt


def kueue_setup(tb: TierB) -> None:
    """dispatch's AdmissionCheck and a ClusterQueue that lists it (the harness's own queue has no checks)."""
    cp = tb.control_plane
    apply(cp, e2e_runtime(cp))
    apply(cp, {"apiVersion": KUEUE, "kind": "AdmissionCheck", "metadata": {"name": CHECK},
               "spec": {"controllerName": "dispatch.phpboyscout.uk/admission"}})  # fmt: skip
    apply(
        cp,
        {
            "apiVersion": KUEUE,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "admissionChecksStrategy": {"admissionChecks": [{"name": CHECK}]},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu", "memory"],
                        "flavors": [{"name": tb.resource_flavor, "resources": [
                            {"name": "cpu", "nominalQuota": "64"}, {"name": "memory", "nominalQuota": "256Gi"}]}],
                    }
                ],
            },
        },
    )  # fmt: skip


class Controller:
    """The agent's readmission controller as its own process (started and stopped by its pid only)."""

    def __init__(self, cp: ControlPlane, log: Path) -> None:
        self.cp, self.log = cp, log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agent", "serve", "--kubeconfig", str(self.cp.admin_kubeconfig),
             "--health-port", "0", "--bind-address", "127.0.0.1", "--identity", "api-e2e"],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT,
        )  # fmt: skip

    async def wait_leading(self, within: float = 60) -> None:
        """Until it holds the Lease (its namespace exists once the agent's credentials are made): before that,
        Kueue-mode Start, Open and Release are observe-only."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            lease = self.cp.admin.get_or_none(
                "coordination.k8s.io/v1", "Lease", "dispatch-admission", "dispatch-system"
            )
            if (lease or {}).get("spec", {}).get("holderIdentity") == "api-e2e":
                return
            await asyncio.sleep(0.5)
        raise AssertionError(f"the controller did not take its Lease within {within:g}s (its log: {self.log})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None


@pytest.fixture(scope="module")
def controller(tier_b: TierB, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    kueue_setup(tier_b)
    running = Controller(tier_b.control_plane, tmp_path_factory.mktemp("controller") / "agent.log")
    running.start()
    try:
        yield running
    finally:
        running.stop()


@dataclass
class E2E:
    tb: TierB
    agent: RunningAgent
    who: Supervisors
    controller: Controller

    @property
    def cp(self) -> ControlPlane:
        return self.tb.control_plane

    @property
    def ns(self) -> str:
        return self.who.namespace

    def client(self) -> AgentClient:
        return self.agent.client(self.who.tokens["supervisor"])

    def get(self, kind: str, name: str, api_version: str = TRAINER) -> dict[str, Any] | None:
        return self.cp.admin.get_or_none(api_version, kind, name, self.ns)

    def dependents(self, name: str) -> dict[str, Any]:
        """What a foreground deletion waits for, to say why a TrainJob is still there."""
        meta = (self.get("TrainJob", name) or {}).get("metadata", {})
        jobset = (self.get("JobSet", name, "jobset.x-k8s.io/v1alpha2") or {}).get("metadata", {})
        return {
            "trainjob": {k: meta.get(k) for k in ("finalizers", "deletionTimestamp")},
            "jobset": {k: jobset.get(k) for k in ("finalizers", "deletionTimestamp")},
            "jobs": [(j["metadata"]["name"], j["metadata"].get("finalizers")) for j in self.cp.admin.list("batch/v1", "Job", self.ns)],
            "pods": [(p["metadata"]["name"], p["status"].get("phase"), p["metadata"].get("deletionTimestamp"))
                     for p in self.pods(name)],
            "workloads": [(w["metadata"]["name"], w["metadata"].get("finalizers"))
                          for w in self.cp.admin.list(KUEUE, "Workload", self.ns)],
        }  # fmt: skip

    def pods(self, name: str) -> list[dict[str, Any]]:
        return self.cp.admin.list("v1", "Pod", self.ns, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")


@pytest_asyncio.fixture
async def e2e(tier_b: TierB, controller: Controller, namespace: str, tmp_path: Path) -> AsyncIterator[E2E]:
    cp = tier_b.control_plane
    other = cp.create_namespace("api-e2e-other")
    for ns in (namespace,):
        apply(cp, {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"namespace": ns, "name": QUEUE},
                   "spec": {"clusterQueue": CLUSTER_QUEUE}})  # fmt: skip
        tier_b.create_local_queue(ns)  # the harness's queue, whose ClusterQueue does not list our check
    who = supervisors(cp, namespace, other)
    async with running_agent(cp, tmp_path, SETTINGS) as agent:
        await allowed(agent, who.tokens["supervisor"], namespace)
        await controller.wait_leading()
        yield E2E(tier_b, agent, who, controller)
    cp.delete_namespace(other)


async def eventually(probe, within: float = 60, what: str = "condition"):
    deadline = time.monotonic() + within
    while True:
        try:
            return await probe()
        except (AssertionError, AgentError) as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not within {within}s: {exc}") from exc
        await asyncio.sleep(0.5)


async def status_or_error(api: AgentClient, r: ObjectRef) -> Any:
    try:
        return await api.status(r)
    except AgentError as err:
        return err


def ref(s: StartResponse) -> ObjectRef:
    return ObjectRef(namespace=s.namespace, name=s.name, uid=s.uid)


def kueue_request(e: E2E, queue: str = QUEUE, **overrides: Any):
    body = {"jobId": fresh_job_id(), "runtime": {"name": RUNTIME}, "kueue": {"localQueue": queue}} | overrides
    return start_request(e.ns, **body)


def preflight(e: E2E, queue: str | None = QUEUE) -> PreflightRequest:
    body: dict[str, Any] = {"namespace": e.ns, "runtime": {"name": RUNTIME}}
    if queue:
        body["kueue"] = {"localQueue": queue}
    return PreflightRequest.model_validate(body)


# -- Kueue mode, the whole life -----------------------------------------------------------------------


async def test_kueue_mode_start_open_hold_release_stop(e2e: E2E):
    async with e2e.client() as api:
        started = await api.start(kueue_request(e2e))
        (workload,) = e2e.cp.admin.list(
            KUEUE, "Workload", e2e.ns, label_selector=f"kueue.x-k8s.io/job-uid={started.uid}"
        )
        assert (
            workload["metadata"]["annotations"]["kueue.x-k8s.io/admission-gated-by"] == "dispatch.phpboyscout.uk/gate"
        )
        await asyncio.sleep(3)
        assert e2e.pods(started.name) == []  # closed: nothing runs before Open
        assert (await api.status(ref(started))).phase == "Gated"

        opened = await api.open(ref(started))
        assert (opened.outcome, opened.held_by) == ("gate removed", [])

        async def running_once() -> Any:
            s = await api.status(ref(started))
            assert (s.phase, s.a, s.j, s.r, s.check_state) == ("Running", 1, 0, 1, "Ready"), s
            assert [p.phase for p in s.pods] == ["Running"], s.pods
            return s

        status = await eventually(running_once, 90, "admitted through the readmission gate, running on kwok")
        (pod,) = [p for p in e2e.pods(started.name) if not p["metadata"].get("deletionTimestamp")]
        assert pod["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission"] == "1"
        # The prologue as Trainer rendered it into the pod: a file from the namespace's ConfigMap (made by Start),
        # not the text, so neither the pod nor the JobSet nor the Workload carries it.
        (node,) = [c for c in pod["spec"]["containers"] if c["name"] == "node"]
        assert node["command"] == trainer_command()
        assert prologue_mount() in node["volumeMounts"]
        assert prologue_volume()["configMap"] == next(
            v["configMap"] for v in pod["spec"]["volumes"] if v["name"] == prologue_volume()["name"]
        )
        assert e2e.cp.admin.get("v1", "ConfigMap", PROLOGUE_CONFIGMAP, e2e.ns)["data"] == {"prologue.sh": PROLOGUE}
        assert "dispatch_k8s_refuse" in PROLOGUE
        for version, kind in (("jobset.x-k8s.io/v1alpha2", "JobSet"), (KUEUE, "Workload"), ("v1", "Pod")):
            assert "dispatch_k8s_refuse" not in json.dumps(e2e.cp.admin.list(version, kind, e2e.ns)), kind
        (execution,) = status.executions
        assert (execution.a, execution.j, execution.r, execution.pods) == (1, 0, 1, [pod["metadata"]["name"]])
        assert execution.epoch == 1 * 10**12 + 3 * 10**6 + 1
        assert status.pods[0].verdict == "Running"
        assert status.pods[0].node == pod["spec"]["nodeName"]
        assert status.ceased is False

        held = await api.hold(HoldRequest(**ref(started).model_dump(), who="ops", reason="drain"))
        assert held.outcome == "held: Workload deactivated"

        async def held_and_gone() -> None:
            s = await api.status(ref(started))
            assert s.phase == "Held", s.phase
            assert s.pods == [], s.pods

        await eventually(held_and_gone, 90, "evicted: the pods are gone")

        released = await api.release(ref(started))
        assert released.outcome == "released: Workload reactivated"

        async def running_twice() -> Any:
            s = await api.status(ref(started))
            assert (s.phase, s.a, s.r) == ("Running", 2, 2), s
            assert [p.a for p in s.pods] == [2], s.pods
            return s

        await eventually(running_twice, 90, "re-admitted with A raised in Kueue's unsuspend")

        assert (await api.stop(ref(started))).outcome == "stopping"

        async def gone() -> None:
            answer = await status_or_error(api, ref(started))
            assert isinstance(answer, AgentError), f"still there: {e2e.dependents(started.name)}; {answer}"
            assert answer.kind is ErrorKind.NOT_FOUND
            assert answer.orphans == []

        await eventually(gone, 120, "the TrainJob gone, with its pods, JobSet and runtime copy")
    assert e2e.get("TrainingRuntime", started.name) is None  # the runtime copy went with it (GC)


async def test_kueue_mode_start_is_refused_when_the_queue_lacks_our_check(e2e: E2E):
    async with e2e.client() as api:
        with pytest.raises(AgentError) as err:
            await api.start(kueue_request(e2e, queue=e2e.tb.local_queue))
    assert err.value.kind is ErrorKind.REJECTED
    assert "does not list dispatch's AdmissionCheck" in err.value.message
    assert e2e.cp.admin.list(TRAINER, "TrainJob", e2e.ns) == []


async def test_plain_mode_runs_on_open_and_stops(e2e: E2E):
    async with e2e.client() as api:
        started = await api.start(start_request(e2e.ns, jobId=fresh_job_id(), runtime={"name": RUNTIME}))
        await asyncio.sleep(2)
        assert e2e.pods(started.name) == []
        assert (await api.open(ref(started))).a == 1

        async def running() -> None:
            s = await api.status(ref(started))
            assert (s.phase, s.a, s.r, [p.phase for p in s.pods]) == ("Running", 1, 1, ["Running"]), s

        await eventually(running, 90, "plain mode: running after Open")
        await api.stop(ref(started))


# -- Kueue not managing the TrainJob -------------------------------------------------------------


async def test_start_refuses_and_stops_a_trainjob_kueue_does_not_manage(e2e: E2E):
    """The real Kueue ignores jobs in a namespace its managedJobsNamespaceSelector leaves out (kueue-system
    by default), queue label or not: no Workload appears in timeouts.workload, so Start stops the TrainJob
    and refuses, as the spec says."""
    unmanaged = "kueue-system"
    role(e2e.cp, "Role", "dispatch-supervisor", SUPERVISOR_RULES, unmanaged)
    bind(
        e2e.cp, "RoleBinding", f"supervisor-{e2e.ns}", "Role", "dispatch-supervisor", (e2e.ns, "supervisor"), unmanaged
    )
    await allowed(e2e.agent, e2e.who.tokens["supervisor"], unmanaged)
    request = start_request(unmanaged, jobId=fresh_job_id(), runtime={"name": RUNTIME}, kueue={"localQueue": QUEUE})
    async with e2e.client() as api:
        started = time.monotonic()
        with pytest.raises(AgentError) as refused:
            await api.start(request)
    assert refused.value.kind is ErrorKind.REJECTED
    assert "Kueue is not managing this TrainJob: no Workload appeared" in refused.value.message
    assert time.monotonic() - started >= SETTINGS.workload_timeout
    name = f"dj-{request.job_id.lower()}-s{request.n}"

    async def stopped() -> None:
        left = e2e.cp.admin.get_or_none(TRAINER, "TrainJob", name, unmanaged)
        assert left is None or left["metadata"].get("deletionTimestamp"), left

    await eventually(stopped, 30, "the refused TrainJob stopped")


# -- Output ---------------------------------------------------------------------------------------


def cri_line(text: str) -> str:
    """A line as the container runtime writes a log and kwok serves it."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{now} stdout F {text}\n"


async def test_output_streams_rank_0s_log_through_the_api_server(e2e: E2E, tier_b: TierB):
    """kwok stands where the kubelet would: the nodes advertise its port and it serves every container's
    log from one file (harness/tier_b.py), so pods/log goes through the API server to it for real."""
    marker = uuid.uuid4().hex[:8]
    lines = [f"{marker} step 1 loss 0.9", f"{marker} step 2 loss 0.5", f"{marker} done"]
    async with e2e.client() as api:
        started = await api.start(start_request(e2e.ns, jobId=fresh_job_id(), runtime={"name": RUNTIME}))
        await api.open(ref(started))

        async def scheduled() -> dict[str, Any]:
            pods = e2e.pods(started.name)
            assert [p["status"].get("phase") for p in pods] == ["Running"], pods
            return pods[0]

        await eventually(scheduled, 90, "rank 0 running")

        async def write() -> None:
            for line in lines:
                with tier_b.container_log.open("a") as log:
                    log.write(cri_line(line))
                await asyncio.sleep(0.5)

        writer = asyncio.create_task(write())
        received = b""
        async with asyncio.timeout(60):
            async for chunk in api.output(OutputRequest(**ref(started).model_dump(), follow=True)):
                received += chunk
                if f"{marker} done".encode() in received:
                    break
        await writer
        await api.stop(ref(started))
    ours = [line for line in received.decode().splitlines() if line.startswith(marker)]
    assert ours == lines


# -- Preflight --------------------------------------------------------------------------------------


async def test_preflight_healthy_then_failing_without_the_controller_or_our_check(e2e: E2E):
    async with e2e.client() as api:
        caps = await eventually(lambda: _passing(api, preflight(e2e)), 60, "the controller's Lease and check Active")
        assert caps.start_gate
        assert caps.readmission_gate
        assert caps.lease_renewed is not None
        assert caps.versions["kueue.x-k8s.io"][0] == "v1beta2"
        assert caps.versions["jobset.x-k8s.io"]
        assert caps.versions["trainer.kubeflow.org"]
        assert e2e.cp.admin.list(TRAINER, "TrainJob", e2e.ns) == []  # the probe is removed

        plain = await api.preflight(preflight(e2e, queue=None))
        assert (plain.start_gate, plain.readmission_gate, plain.observe_only) == (True, False, False)

        no_check = await api.preflight(preflight(e2e, queue=e2e.tb.local_queue))
        assert no_check.observe_only
        assert "does not list dispatch's AdmissionCheck" in no_check.observe_only_reason
        with pytest.raises(AgentError) as err:
            await api.start(kueue_request(e2e))
        assert err.value.kind is ErrorKind.OBSERVE_ONLY

        e2e.controller.stop()
        try:
            # No wait first: Preflight judges the Lease by watching it (released, or unchanged for its duration).
            dead = await api.preflight(preflight(e2e))
            assert dead.observe_only
            assert "the readmission controller is dead" in dead.observe_only_reason
        finally:
            e2e.controller.start()
        await eventually(lambda: _passing(api, preflight(e2e)), 60, "Preflight passes again")
        await api.start(kueue_request(e2e))
    assert e2e.cp.admin.list(TRAINER, "TrainingRuntime", e2e.ns)  # the started job's copy; no probe's


async def _passing(api: AgentClient, req: PreflightRequest):
    caps = await api.preflight(req)
    assert not caps.observe_only, caps.observe_only_reason
    return caps
