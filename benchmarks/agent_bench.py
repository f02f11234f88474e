"""The readmission gate's latency and memory on tier A (etcd + kube-apiserver), this process playing Kueue.

    .venv/bin/python -m benchmarks.agent_bench [--cycles 200] [--burst 1000] [--total 10000] [--workers N]
    .venv/bin/python -m benchmarks.agent_bench --memory-only --total 100000     (memory alone, 1. to 3. skipped)
    (from the repository root)

The agent runs as its own process (``python -m agent serve``, admin credentials, default settings but
``--workers``). This process writes Workload status as Kueue does (server-side apply on workloads/status by
the field manager ``kueue-admission``, strict on resourceVersion; harness/doubles.py) and watches
the Workloads. The jobs have no JobSet and no pods, so the gate never holds and has no JobSet UID to record:
a pass of the agent reads the Workload and the TrainJob from its watches, LISTs the pods (a consistent LIST)
and writes the check Ready. A is not the agent's to raise: dispatch's MutatingAdmissionPolicy
``record-start`` (installed here for the benchmark's namespace) raises it in Kueue's unsuspend. Measured:

1. **one Workload, sequential**: ``--cycles`` admission cycles of one dispatch TrainJob's Workload. Each cycle
   is Kueue's eviction (Evicted, checks reset to Pending), its suspend of the TrainJob, the release of the
   quota, the reservation and, once the check is Ready, Kueue's unsuspend; the time is from the reserving
   status write (its response: the write is committed) to this process's watch seeing our check Ready. Each
   unsuspend must start the execution with A one above the last (the policy raised it).
2. **the same calls made by a minimal script**: the same cycles on a second Workload whose check has another
   controllerName (the agent ignores it), with this process making the API calls one pass of the agent
   makes, in sequence and nothing else: LIST pods, apply workloads/status (Ready) preconditioned on the
   Workload as the reservation left it. Timed the same way, so the ratio is the agent's overhead (its
   watches, work queue, decision and logging).
3. **a burst**: ``--burst`` dispatch Workloads, admitted once, evicted and released, then all reserved again
   at once (as fast as 32 concurrent writers can); each one's reserved-to-Ready and the total. The burst's
   jobs are not started (no unsuspend): what is timed is the gate alone.
4. **memory**: the agent's RSS (VmRSS; VmHWM is the peak) idle, after the burst, with ``--total`` Workloads in
   the cluster (the rest are other jobs' Workloads, pending, with no check of ours: what the watch caches
   cost), and a fresh agent started with all of them there (its initial LIST).
5. **the burst's floor**: with no agent running any more, the same two bursts on ``--burst`` other Workloads
   (check ``bench-raw``), served by benchmarks/gate_floor.py: the gate's calls alone (a LIST of pods and
   the Ready, the Workload from a watch), through the agent's own client layer, with as many workers. Its
   time to clear the burst and its CPU per readmission are the floor the agent's are compared with
   (skipped with ``--memory-only``).

Every loop is bounded in count and time; everything is on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import secrets
import statistics
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client
from ulid import ULID

from agent.constants import DEFAULT_WORKERS
from benchmarks.gate_floor import ready_status
from contract.admission import admission_count, admission_started
from contract.keys import (
    ADMISSION_CHECK_CONTROLLER,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_OPENED,
    FIELD_MANAGER,
    KUEUE_RUNTIME_PATCH_MANAGER,
    LABEL_JOBSET_NAME,
    LABEL_WORKLOAD_JOB_UID,
    OPENED_TRUE,
)
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.agent_process import LEADER, AgentProcess
from harness.agent_process import start_agent as start_process
from harness.async_client import api_client
from harness.cluster import ControlPlane, new_run_dir, start_control_plane
from harness.doubles import status_body as kueue_status
from harness.fixtures import runtime, submission
from harness.kube_http import ApiError, KubeHttp
from serving.client import KubeError
from serving.kube import read_json
from webhook.rules.record_start import record_start_policy

ROOT = Path(__file__).resolve().parent.parent
KUEUE = ("kueue.x-k8s.io", "v1beta2")
TRAINER = ("trainer.kubeflow.org", "v1alpha1")
TRAINER_V = "trainer.kubeflow.org/v1alpha1"
JOBSET = ("jobset.x-k8s.io", "v1alpha2")
KUEUE_MANAGER = "kueue-admission"
RAW_CONTROLLER = "bench.invalid/raw"
APPLY = "application/apply-patch+yaml"
MERGE_PATCH = "application/merge-patch+json"
CONCURRENCY = 32
WARMUP = 5
"""Cycles of the sequential runs not counted (connections, caches, the first admission and start)."""
WAIT = 60.0
"""Seconds any single Ready may take before the run is declared broken."""


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(values: list[float]) -> str:
    return (
        f"p50 {percentile(values, 0.5) * 1000:7.1f} ms  p99 {percentile(values, 0.99) * 1000:7.1f} ms  "
        f"mean {statistics.mean(values) * 1000:7.1f} ms  (n={len(values)})"
    )


# -- the API, as plain JSON ----------------------------------------------------------------------------


class Api:
    """kubernetes_asyncio calls with JSON in and out (as the agent makes them: agent/runtime/kube.py)."""

    def __init__(self, api: client.ApiClient) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)

    async def create(self, gv: tuple[str, str], plural: str, namespace: str, body: Mapping[str, Any]) -> dict:
        return await read_json(
            self.custom.create_namespaced_custom_object(*gv, namespace, plural, body, _preload_content=False)
        )

    async def get(self, gv: tuple[str, str], plural: str, namespace: str, name: str) -> dict | None:
        try:
            return await read_json(
                self.custom.get_namespaced_custom_object(*gv, namespace, plural, name, _preload_content=False)
            )
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise

    async def list_pods(self, namespace: str, jobset: str, *, any_version: bool = False) -> dict:
        """The JobSet's pods: a consistent LIST, as the agent makes it (or, ``any_version``, from the cache)."""
        extra = {"resource_version": "0"} if any_version else {}
        return await read_json(
            self.core.list_namespaced_pod(
                namespace, label_selector=f"{LABEL_JOBSET_NAME}={jobset}", _preload_content=False, **extra
            )
        )

    async def set_suspend(self, namespace: str, name: str, suspend: bool) -> dict:
        """Kueue's stop (``True``, at an eviction) or start (``False``, once admitted) of a TrainJob."""
        return await read_json(
            self.custom.patch_namespaced_custom_object(
                *TRAINER, namespace, "trainjobs", name, {"spec": {"suspend": suspend}},
                field_manager=KUEUE_MANAGER, _content_type=MERGE_PATCH, _preload_content=False,
            )
        )  # fmt: skip

    async def apply_status(self, body: Mapping[str, Any], manager: str) -> dict:
        meta = body["metadata"]
        return await read_json(
            self.custom.patch_namespaced_custom_object_status(
                *KUEUE, meta["namespace"], "workloads", meta["name"], body,
                field_manager=manager, force=True, _content_type=APPLY, _preload_content=False,
            )
        )  # fmt: skip


# -- playing Kueue (as tests/agent/kueue_double.py does) -----------------------------------------------


def checks_of(wl: Mapping[str, Any]) -> dict[str, tuple[str, str, str]]:
    return {
        c["name"]: (c["state"], c["message"], c["lastTransitionTime"])
        for c in (wl.get("status") or {}).get("admissionChecks") or []
    }


def workload_body(owner: Mapping[str, Any], *, filler: bool = False) -> dict[str, Any]:
    """The owner's Workload as Kueue makes it: a controller ownerReference, the job-uid label, one pod set."""
    meta = owner["metadata"]
    env = [{"name": f"VAR_{i}", "value": "x" * 24} for i in range(8)] if filler else []
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"{owner['kind'].lower()}-{meta['name']}-{secrets.token_hex(3)[:5]}",
            "namespace": meta["namespace"],
            "labels": {LABEL_WORKLOAD_JOB_UID: meta["uid"]},
            "ownerReferences": [{"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"],
                                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {
            "queueName": "lq",
            "podSets": [
                {
                    "name": "node",
                    "count": 1,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [
                        {"name": "node", "image": "registry.invalid/train:1", "env": env,
                         "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}},
                }
            ],
        },
    }  # fmt: skip


@dataclass
class Job:
    trainjob: dict[str, Any]
    workload: dict[str, Any]

    @property
    def name(self) -> str:
        return self.workload["metadata"]["name"]


async def create_dispatch_job(api: Api, namespace: str, checks: list[str]) -> Job:
    """A dispatch TrainJob as Start creates it (with Kueue's runtime patch entry, its webhook's part), its
    runtime copy, and its Workload with the checks Pending and no quota reserved."""
    sub = submission(namespace=namespace, job_id=str(ULID()), n=1)
    await api.create(TRAINER, "trainingruntimes", namespace, build_runtime_copy(sub, runtime()))
    body = build_trainjob(sub, runtime()["spec"])
    # As dispatch's Open leaves it: the readmission gate approves only a job dispatch opened.
    body["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY, None)
    body["metadata"]["annotations"][ANNOTATION_OPENED] = OPENED_TRUE
    body["spec"]["runtimePatches"].append(
        {"manager": KUEUE_RUNTIME_PATCH_MANAGER, "trainingRuntimeSpec": {"template": {"spec": {}}}}
    )
    tj = await api.create(TRAINER, "trainjobs", namespace, body)
    wl = await api.create(KUEUE, "workloads", namespace, workload_body(tj))
    wl = await api.apply_status(kueue_status(wl, {c: ("Pending", "") for c in checks}, reserved=False), KUEUE_MANAGER)
    return Job(tj, wl)


# -- watching for Ready ------------------------------------------------------------------------------------


class ReadyWatch:
    """A watch on the namespace's Workloads in a thread: the latest object of each, and when a check of
    ``checks`` was first seen Ready in a version newer than the one a waiter armed it with."""

    def __init__(self, admin: KubeHttp, namespace: str, checks: frozenset[str]) -> None:
        self._admin, self._checks = admin, checks
        self._path = admin.collection_path("kueue.x-k8s.io/v1beta2", "Workload", namespace)
        self._rv = admin.request("GET", self._path, query={"limit": "1"})["metadata"]["resourceVersion"]
        self._lock = threading.Condition()
        self.latest: dict[str, dict[str, Any]] = {}
        self._armed: dict[str, int] = {}
        self.ready_at: dict[str, float] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._run, name="ready-watch", daemon=True).start()

    def arm(self, name: str, after_rv: str) -> None:
        with self._lock:
            self.ready_at.pop(name, None)
            self._armed[name] = int(after_rv)

    def wait(self, names: list[str], timeout: float) -> dict[str, float]:
        deadline = time.monotonic() + timeout
        with self._lock:
            while not all(n in self.ready_at for n in names):
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = [n for n in names if n not in self.ready_at]
                    raise TimeoutError(f"{len(missing)} Workload(s) not Ready within {timeout:.0f}s: {missing[:3]}")
                self._lock.wait(min(left, 1.0))
            return {n: self.ready_at[n] for n in names}

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        creds = self._admin.credentials
        context = creds.ssl_context()
        while not self._stop.is_set():
            query = urllib.parse.urlencode(
                {"watch": "1", "resourceVersion": self._rv, "allowWatchBookmarks": "true", "timeoutSeconds": "120"}
            )
            request = urllib.request.Request(
                f"{creds.server}{self._path}?{query}", headers={"Accept": "application/json"}
            )
            try:
                with urllib.request.urlopen(request, context=context, timeout=5) as stream:
                    for line in stream:
                        seen = time.perf_counter()
                        event = json.loads(line)
                        obj = event["object"]
                        if event["type"] == "ERROR":
                            raise RuntimeError(f"watch failed: {obj}")
                        self._rv = obj["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._seen(obj, seen)
            except (TimeoutError, OSError, urllib.error.URLError, ValueError):
                continue

    def _seen(self, obj: dict[str, Any], seen: float) -> None:
        name = obj["metadata"]["name"]
        ready = any(
            c["name"] in self._checks and c["state"] == "Ready"
            for c in (obj.get("status") or {}).get("admissionChecks") or []
        )
        with self._lock:
            self.latest[name] = obj
            armed = self._armed.get(name)
            if ready and armed is not None and int(obj["metadata"]["resourceVersion"]) > armed:
                del self._armed[name]
                self.ready_at[name] = seen
                self._lock.notify_all()


# -- the agent process ---------------------------------------------------------------------------------------


@dataclass
class Agent(AgentProcess):
    """The agent process, read for what the benchmark reports: memory, CPU and its own pass time."""

    started: float = field(default_factory=time.monotonic)

    def proc(self, key: str) -> int:
        """A /proc/<pid>/status field in KiB (VmRSS, VmHWM)."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
        raise KeyError(key)

    def pass_metric(self) -> tuple[float, float]:
        """(count, sum of seconds) of the agent's passes that admitted a dispatch job (set Ready)."""
        name = "dispatch_agent_reconcile_duration_seconds"
        return self.metric(f"{name}_count", 'result="admit"'), self.metric(f"{name}_sum", 'result="admit"')

    def cpu_seconds(self) -> float:
        return process_cpu(self.process.pid)


def start_agent(cp: ControlPlane, namespace: str, workers: int, label: str) -> Agent:
    config = {"leaseNamespace": namespace, "leaseName": f"bench-{label}"}
    agent = start_process(cp, kubeconfig=cp.admin_kubeconfig, name=f"dispatch-agent-{label}", config=config,
                          workdir=cp.run_dir, extra=["--workers", str(workers)], until=LEADER, timeout=120)  # fmt: skip
    return Agent(agent.name, agent.process, agent.port)


# -- the measurements ------------------------------------------------------------------------------------------


async def bounded(items: list[Any], fn: Callable[[Any], Awaitable[Any]], limit: int = CONCURRENCY) -> list[Any]:
    semaphore = asyncio.Semaphore(limit)

    async def one(item: Any) -> Any:
        async with semaphore:
            return await fn(item)

    return await asyncio.gather(*(one(i) for i in items))


async def evict_and_release(api: Api, wl: dict[str, Any], stop: Job | None = None) -> dict[str, Any]:
    """Kueue's eviction (Evicted, every check not Pending reset to Pending) and the release of the quota; with
    ``stop`` (a job Kueue started), its job reconciler's suspend of the TrainJob in between, as Kueue does."""
    checks = {n: ("Pending", m if s == "Pending" else f"Reset to Pending after eviction. Previously: {s}")
              for n, (s, m, _) in checks_of(wl).items()}  # fmt: skip
    wl = await api.apply_status(kueue_status(wl, checks, reserved=True, evicted=True), KUEUE_MANAGER)
    if stop is not None:
        meta = stop.trainjob["metadata"]
        stop.trainjob = await api.set_suspend(meta["namespace"], meta["name"], True)
    current = {n: (s, m) for n, (s, m, _) in checks_of(wl).items()}
    return await api.apply_status(kueue_status(wl, current, reserved=False, evicted=True), KUEUE_MANAGER)


async def start(api: Api, job: Job) -> int:
    """Kueue's start of an admitted job: the unsuspend of its TrainJob, in which dispatch's admission (here the
    MutatingAdmissionPolicy ``record-start``, ``install_record_start``) raises A and records the start. The A
    the execution started with."""
    meta = job.trainjob["metadata"]
    job.trainjob = await api.set_suspend(meta["namespace"], meta["name"], False)
    a, started = admission_count(job.trainjob), admission_started(job.trainjob)
    assert a is not None, f"{meta['name']}: started with no A"
    assert started == a, f"{meta['name']}: started with A {a}, recorded {started}"
    return a


def install_record_start(cp: ControlPlane, namespace: str) -> None:
    """Dispatch's MutatingAdmissionPolicy ``record-start`` (webhook/policies.py), bound to ``namespace``: tier A
    has no admission of dispatch's, and without it Kueue's unsuspend would start an execution without raising
    A. Returns once it records an unsuspend (a dry run on a TrainJob of its own; the API server applies the
    policy only once it has loaded the TrainJob CRD's schema, and answers 503 until then)."""
    docs = record_start_policy("dispatch-system")
    docs[1]["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    }
    for doc in docs:
        cp.admin.create(doc)
    probe = cp.admin.create(build_trainjob(submission(namespace=namespace, job_id=str(ULID()), n=1), runtime()["spec"]))
    unsuspended = {**probe, "spec": {**probe["spec"], "suspend": False}}
    deadline = time.monotonic() + 30
    while True:
        try:
            stored = cp.admin.request("PUT", cp.admin.object_path(probe), unsuspended, query={"dryRun": "All"})
            if admission_started(stored) is not None:
                break
        except ApiError as err:
            if err.status != 503:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError("the MutatingAdmissionPolicy record-start was not in force within 30 s")
        time.sleep(0.2)
    cp.admin.delete(TRAINER_V, "TrainJob", probe["metadata"]["name"], namespace)


async def reserve(api: Api, wl: dict[str, Any]) -> tuple[dict[str, Any], float]:
    current = {n: (s, m) for n, (s, m, _) in checks_of(wl).items()}
    wl = await api.apply_status(kueue_status(wl, current, reserved=True), KUEUE_MANAGER)
    return wl, time.perf_counter()


async def sequential(api: Api, watch: ReadyWatch, job: Job, cycles: int, budget: float,
                     pass_: Callable[[Job, dict[str, Any]], Awaitable[None]] | None = None) -> list[float]:  # fmt: skip
    """``cycles`` admission cycles of one Workload; reserved-to-Ready of each. With ``pass_``, this process
    plays the check's controller (the minimal script); without, the agent does. After each Ready this process
    starts the job as Kueue does (``start``: the unsuspend raises A) and stops it at the next eviction, outside
    the time measured; each execution must start with A one above the last."""
    deadline = time.monotonic() + budget
    wl, out = job.workload, []
    last = admission_started(job.trainjob) or 0
    for i in range(cycles):
        if time.monotonic() > deadline:
            print(f"  (stopped after {i} cycles: the {budget:.0f}s budget is spent)")
            break
        if i:
            wl = await evict_and_release(api, watch.latest.get(job.name, wl), stop=job)
        watch.arm(job.name, wl["metadata"]["resourceVersion"])
        wl, reserved = await reserve(api, wl)
        if pass_ is not None:
            await pass_(job, wl)
        ready = await asyncio.to_thread(watch.wait, [job.name], WAIT)
        out.append(ready[job.name] - reserved)
        # Kueue's next write needs the Ready write's resourceVersion: the watch has that version now.
        wl = watch.latest[job.name]
        a = await start(api, job)
        assert a == last + 1, f"execution {i + 1} started with A {a} after A {last}"
        last = a
    return out


@dataclass
class CallTimes:
    per_call: dict[str, list[float]] = field(default_factory=dict)
    sequence: list[float] = field(default_factory=list)

    def add(self, name: str, seconds: float) -> None:
        self.per_call.setdefault(name, []).append(seconds)


def minimal_pass(api: Api, check: str, times: CallTimes) -> Callable[[Job, dict[str, Any]], Awaitable[None]]:
    """The API calls one pass of the agent makes for a dispatch Workload with no pods, as plain calls in
    sequence: the consistent LIST of pods and the Ready, preconditioned on the Workload as the reservation
    left it (the agent reads the Workload, the TrainJob and the JobSet from its watches). No TrainJob write:
    A is raised by the unsuspend that follows, and a job with no JobSet has no UID to record."""

    async def run(job: Job, wl: dict[str, Any]) -> None:
        namespace, tj_name = job.trainjob["metadata"]["namespace"], job.trainjob["metadata"]["name"]
        begun = time.perf_counter()

        async def timed(name: str, call: Awaitable[Any]) -> Any:
            t = time.perf_counter()
            result = await call
            times.add(name, time.perf_counter() - t)
            return result

        await timed("LIST pods", api.list_pods(namespace, tj_name))
        await timed("apply Workload status", api.apply_status(ready_status(wl, check), FIELD_MANAGER))
        times.sequence.append(time.perf_counter() - begun)
        # Not part of the pass, for comparison: the same LIST served from the watch cache as it stands
        # (resourceVersion=0), which the gate cannot use: it may miss a pod created just before.
        await timed("(LIST pods, resourceVersion=0: not used)", api.list_pods(namespace, tj_name, any_version=True))

    return run


async def burst(api: Api, watch: ReadyWatch, jobs: list[Job], budget: float) -> tuple[list[float], float, float]:
    """Every Workload reserved again at once; each one's reserved-to-Ready, the writes' window, the total."""
    for job in jobs:
        watch.arm(job.name, job.workload["metadata"]["resourceVersion"])
    reserved: dict[str, float] = {}
    started = time.perf_counter()

    async def one(job: Job) -> None:
        job.workload, reserved[job.name] = await reserve(api, job.workload)

    await bounded(jobs, one)
    written = time.perf_counter() - started
    ready = await asyncio.to_thread(watch.wait, [j.name for j in jobs], budget)
    return [ready[n] - reserved[n] for n in reserved], written, max(ready.values()) - started


@dataclass
class Bursts:
    first: list[float]
    """each Workload's reserved -> Ready, first admissions"""
    first_total: float
    readmissions: list[float]
    window: float
    """seconds the reserving writes of the readmissions took to be answered"""
    total: float
    """first reserving write -> last Ready, readmissions"""
    cpu: float
    """CPU seconds of the serving process over the readmissions"""


async def two_bursts(api: Api, watch: ReadyWatch, ns: str, check: str, n: int, pid: int, who: str) -> Bursts:
    """``n`` dispatch jobs whose Workloads name ``check``, all admitted at once, evicted and released, then
    all reserved again at once; the CPU of process ``pid`` (serving ``check``) over the readmissions."""
    t = time.monotonic()
    jobs: list[Job] = await bounded(list(range(n)), lambda _: create_dispatch_job(api, ns, [check]), 16)
    print(f"created {len(jobs)} dispatch TrainJobs, runtime copies and Workloads ({check}) in "
          f"{time.monotonic() - t:.0f}s")  # fmt: skip
    first, _, first_total = await burst(api, watch, jobs, 600)
    print(f"{who}: burst of {n} first admissions: {ms(first)}; all Ready after {first_total:.1f}s")

    async def release(job: Job) -> None:
        job.workload = await evict_and_release(api, watch.latest[job.name])

    await bounded(jobs, release)
    await asyncio.sleep(2)  # the evictions are seen and acted on by no one: no quota is reserved
    cpu = process_cpu(pid)
    readmissions, window, total = await burst(api, watch, jobs, 600)
    b = Bursts(first, first_total, readmissions, window, total, process_cpu(pid) - cpu)
    print(f"{who}: burst of {n} readmissions: {ms(readmissions)}; all Ready after {total:.1f}s")
    return b


@dataclass
class Results:
    agent: list[float] = field(default_factory=list)
    script: list[float] = field(default_factory=list)
    calls: CallTimes = field(default_factory=CallTimes)
    agent_cpu_per_admission: float = 0.0
    bursts: Bursts | None = None
    """3. the agent's"""
    floor: Bursts | None = None
    """5. the floor's"""
    rss: dict[str, tuple[int, int]] = field(default_factory=dict)
    """label -> (VmRSS, VmHWM) in KiB"""
    fresh_ready: float = 0.0
    workloads: int = 0
    workload_bytes: int = 0
    pass_mean: float = 0.0
    passes: int = 0


async def admissions(
    args: argparse.Namespace, r: Results, agent: Agent, api: Api, watch: ReadyWatch, ns: str, ours: str
) -> None:
    """Measurements 1. to 3."""
    # 1. One Workload, the agent serving it.
    job = await create_dispatch_job(api, ns, [ours])
    cpu = agent.cpu_seconds()
    count, total = agent.pass_metric()
    r.agent = await sequential(api, watch, job, args.cycles, 180)
    r.agent_cpu_per_admission = (agent.cpu_seconds() - cpu) / len(r.agent)
    count2, total2 = agent.pass_metric()
    r.passes, r.pass_mean = int(count2 - count), (total2 - total) / max(count2 - count, 1)
    a = stored_a(await api.get(TRAINER, "trainjobs", ns, job.trainjob["metadata"]["name"]))
    assert a == len(r.agent), f"A is {a} after {len(r.agent)} executions"
    print(f"one Workload, agent:          {ms(r.agent[WARMUP:])}")

    # 2. The same calls, made by a minimal script.
    raw_job = await create_dispatch_job(api, ns, ["bench-raw"])
    r.script = await sequential(api, watch, raw_job, args.cycles, 180, minimal_pass(api, "bench-raw", r.calls))
    print(f"one Workload, minimal script: {ms(r.script[WARMUP:])}")

    # 3. A burst: N dispatch Workloads admitted once, evicted and released, then reserved at once.
    r.bursts = await two_bursts(api, watch, ns, ours, args.burst, agent.process.pid, "agent")
    await asyncio.sleep(2)
    r.rss[f"after the burst ({args.burst + 2} Workloads)"] = (agent.proc("VmRSS"), agent.proc("VmHWM"))


async def run(args: argparse.Namespace) -> Results:
    r = Results()
    with start_control_plane(new_run_dir()) as cp:
        ns = cp.create_namespace("bench")
        install_record_start(cp, ns)
        ours = "dispatch-admission"
        for name, controller in ((ours, ADMISSION_CHECK_CONTROLLER), ("bench-raw", RAW_CONTROLLER)):
            cp.admin.create(
                {
                    "apiVersion": "kueue.x-k8s.io/v1beta2",
                    "kind": "AdmissionCheck",
                    "metadata": {"name": name},
                    "spec": {"controllerName": controller},
                }
            )
        t = time.monotonic()
        agent = start_agent(cp, ns, args.workers, "a")
        print(f"agent ready (leader) in {time.monotonic() - t:.1f}s, pid {agent.process.pid}")
        r.rss["idle, no Workloads"] = (agent.proc("VmRSS"), agent.proc("VmHWM"))
        watch = ReadyWatch(cp.admin, ns, frozenset({ours, "bench-raw"}))
        async with api_client(cp.admin_credentials) as raw_client:
            api = Api(raw_client)

            made = 0  # the burst's Workloads
            if not args.memory_only:
                await admissions(args, r, agent, api, watch, ns, ours)
                made = args.burst

            # 4. Memory with many Workloads: the others are other jobs' Workloads, pending, no check of ours.
            fillers = max(0, args.total - made - 2)
            t = time.monotonic()

            async def filler(i: int) -> None:
                uid = str(ULID()).lower()
                owner = {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "metadata": {"name": f"other-{i:05d}", "namespace": ns, "uid": uid},
                }
                await api.create(KUEUE, "workloads", ns, workload_body(owner, filler=True))

            await bounded(list(range(fillers)), filler)
            print(f"created {fillers} other Workloads in {time.monotonic() - t:.0f}s")
            await asyncio.sleep(5)
            r.workloads, r.workload_bytes = count_workloads(cp, ns)
            r.rss[f"{r.workloads} Workloads, watched as they were created"] = (agent.proc("VmRSS"), agent.proc("VmHWM"))

        watch.stop()
        cp.supervisor.stop(agent.process.name)
        t = time.monotonic()
        fresh = start_agent(cp, ns, args.workers, "b")
        r.fresh_ready = time.monotonic() - t  # started, listed everything, elected
        await asyncio.sleep(5)
        r.rss[f"fresh start with {r.workloads} Workloads"] = (fresh.proc("VmRSS"), fresh.proc("VmHWM"))
        cp.supervisor.stop(fresh.process.name)
        if not args.memory_only:
            await floor_bursts(args, r, cp, ns)
    return r


async def floor_bursts(args: argparse.Namespace, r: Results, cp: ControlPlane, ns: str) -> None:
    """5. The burst's floor: the same two bursts on as many other Workloads, served by
    benchmarks/gate_floor.py (the gate's calls alone, as many workers) with no agent running."""
    watch = ReadyWatch(cp.admin, ns, frozenset({"bench-raw"}))
    argv = [sys.executable, "-m", "benchmarks.gate_floor", "--kubeconfig", str(cp.admin_kubeconfig),
            "--namespace", ns, "--check", "bench-raw", "--workers", str(args.workers)]  # fmt: skip
    floor = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, cwd=ROOT)
    try:
        assert floor.stdout is not None
        line = (await asyncio.wait_for(floor.stdout.readline(), 60)).decode()
        assert line.strip() == "ready", f"benchmarks.gate_floor: {line!r}, exit {floor.returncode}"
        async with api_client(cp.admin_credentials) as raw_client:
            r.floor = await two_bursts(Api(raw_client), watch, ns, "bench-raw", args.burst, floor.pid, "floor")
    finally:
        watch.stop()
        floor.terminate()
        await asyncio.wait_for(floor.wait(), 10)


def process_cpu(pid: int) -> float:
    """User + system CPU seconds of a process, from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def count_workloads(cp: ControlPlane, namespace: str) -> tuple[int, int]:
    """How many Workloads there are, and the mean size of one as JSON (from the first page of 500)."""
    path = cp.admin.collection_path("kueue.x-k8s.io/v1beta2", "Workload", namespace)
    page = cp.admin.request("GET", path, query={"limit": "500"})
    size = len(json.dumps(page["items"])) // max(len(page["items"]), 1)
    return len(page["items"]) + int(page["metadata"].get("remainingItemCount") or 0), size


def per_workload(r: Results) -> str:
    idle = r.rss.get("idle, no Workloads")
    fresh = next((v for k, v in r.rss.items() if k.startswith("fresh start")), None)
    if idle is None or fresh is None or not r.workloads:
        return "-"
    rss, peak = ((fresh[i] - idle[i]) * 1024 / r.workloads for i in (0, 1))
    return f"{rss:.0f} bytes (peak {peak:.0f})"


def timing(r: Results) -> list[tuple[str, str]]:
    agent, script, calls = r.agent[WARMUP:], r.script[WARMUP:], r.calls.sequence[WARMUP:]
    overhead = (statistics.median(agent) - statistics.median(calls)) * 1000
    return [
        ("reserved -> Ready, one Workload, agent", ms(agent)),
        ("reserved -> Ready, one Workload, minimal script", ms(script)),
        ("  the script's calls alone, in sequence", ms(calls)),
        *((f"    {k}", ms(v[WARMUP:])) for k, v in r.calls.per_call.items()),
        ("agent / minimal script, medians", f"{statistics.median(agent) / statistics.median(script):.2f}x"),
        ("agent median minus the calls' median", f"{overhead:.1f} ms"),
        ("agent's own pass, sequential (its metric)", f"mean {r.pass_mean * 1000:.1f} ms over {r.passes} passes"),
        ("agent CPU per admission, sequential", f"{r.agent_cpu_per_admission * 1000:.1f} ms"),
        *burst_rows("agent", r.bursts),
        *burst_rows("floor (the gate's calls alone)", r.floor),
        *ratio_rows(r),
    ]


def burst_rows(who: str, b: Bursts | None) -> list[tuple[str, str]]:
    if b is None:
        return []
    n = len(b.readmissions)
    return [
        (f"{who}: burst of {len(b.first)} first admissions", f"{ms(b.first)}; all Ready after {b.first_total:.1f}s"),
        (f"{who}: burst of {n} readmissions at once", ms(b.readmissions)),
        ("  writes issued within / all Ready after", f"{b.window:.1f}s / {b.total:.1f}s ({n / b.total:.0f} per s)"),
        ("  CPU per readmission in the burst", f"{b.cpu / n * 1000:.1f} ms"),
    ]


def ratio_rows(r: Results) -> list[tuple[str, str]]:
    if r.bursts is None or r.floor is None:
        return []
    a, f = r.bursts, r.floor
    return [("agent / floor: all Ready after, CPU per readmission",
             f"{a.total / f.total:.2f}x, {a.cpu / max(f.cpu, 1e-9):.2f}x")]  # fmt: skip


def report(args: argparse.Namespace, r: Results, seconds: float) -> None:
    memory = [
        *((f"agent RSS: {k}", f"{rss / 1024:.1f} MiB (peak {hwm / 1024:.1f} MiB)") for k, (rss, hwm) in r.rss.items()),
        ("  the fresh agent was leader (listed all, elected) after", f"{r.fresh_ready:.1f}s"),
        ("  a Workload's JSON, mean (first 500 listed)", f"{r.workload_bytes} bytes"),
        ("  agent RSS per Workload, fresh start, above idle", per_workload(r)),
    ]
    rows = memory if args.memory_only else [*timing(r), *memory]
    print()
    print(
        f"workers {args.workers}; {args.cycles} cycles ({WARMUP} warm-up cycles not counted); {platform.node()}, "
        f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC; "
        f"run {seconds:.0f}s"
    )
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def stored_a(trainjob: Mapping[str, Any] | None) -> int:
    """A as the TrainJob holds it: the A its last execution started with (0 before the first)."""
    assert trainjob is not None
    return admission_count(trainjob) or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=200, help="admission cycles of one Workload (5 warm up)")
    parser.add_argument("--burst", type=int, default=1000, help="dispatch Workloads readmitted at once")
    parser.add_argument("--total", type=int, default=10000, help="Workloads in the cluster for the memory figure")
    parser.add_argument(
        "--workers", type=int, default=DEFAULT_WORKERS, help=f"the agent's --workers (default {DEFAULT_WORKERS})"
    )
    parser.add_argument("--memory-only", action="store_true", help="only the memory figures (skip 1. to 3.)")
    args = parser.parse_args()
    if args.cycles <= WARMUP:
        parser.error(f"--cycles must be above the {WARMUP} warm-up cycles")
    for name, most in (("cycles", 20000), ("burst", 20000), ("total", 200000)):
        if not 1 <= getattr(args, name) <= most:
            parser.error(f"--{name} must be from 1 to {most}")
    started = time.monotonic()
    with contextlib.suppress(KeyboardInterrupt):
        results = asyncio.run(run(args))
        report(args, results, time.monotonic() - started)


if __name__ == "__main__":
    main()
