"""API requests per readmission, by verb and resource, counted on the API server's side (its audit log).

    .venv/bin/python -m benchmarks.agent_requests [--cycles 30] [--burst 1000] [--workers N]
    (from the repository root)

Tier A with the API server's audit log on for one user alone: the agent, signed in with a client certificate
of its own (user ``dispatch-bench-agent``, in ``system:masters`` so that RBAC is not what is measured), as
its own process with default settings but ``--workers``. This process plays Kueue with
benchmarks/agent_bench.py's setup (its writes are an admin's, not logged), with dispatch's
MutatingAdmissionPolicy ``record-start`` installed for the namespace (the unsuspend raises A), and plays
Trainer's one part that matters here: at a job's first start it creates the TrainJob's JobSet (owned by the
TrainJob, no Jobs, no pods), which the agent's JobSet watch sees and records the JobSet's UID on the
TrainJob (agent/gate/jobset_record.py). It bounds each phase by the wall clock; a request belongs to the phase in
which the API server received it. Phases:

1. **sequential**: ``--cycles`` readmissions of one dispatch Workload, one at a time, after its first
   admission and start (not counted). Each cycle is Kueue's eviction, its suspend of the TrainJob, the
   release of the quota, the reservation (the agent sets Ready), and Kueue's unsuspend (A raised in it).
2. **burst**: ``--burst`` dispatch Workloads, admitted once (not counted), then started: unsuspended and
   their JobSets created (counted as "first start": the agent's UID records), then evicted, suspended and
   released (counted as "release") and then all reserved again at once (counted as "reserve"). The burst's
   readmissions are not started again (nothing follows their Ready).

Each phase ends 3 s after its last Ready (or record), so the agent's answers to it are in; the agent's
background requests (its Lease renewals, its watches restarting) fall in every phase and are listed apart by
resource. Per readmission = the phase's requests / its readmissions (for "first start", its jobs). Printed
beside the goal: no GET, two writes per readmission (the gate's approval of the execution's A on the TrainJob, then
the Workload's status: Ready; the JobSet UID was recorded while the first execution ran, one TrainJob write per
job, outside any readmission), at most one
consistent LIST shared by concurrent passes, and Events that do not grow with the burst (the Events created
or patched, and the Event objects of ``dispatch-admission`` in the namespace with the sum of their counts).
Passes are the agent's own count (``dispatch_agent_reconcile_duration_seconds_count``, every result).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.constants import DEFAULT_WORKERS, EVENT_COMPONENT
from benchmarks.agent_bench import (
    JOBSET,
    TRAINER_V,
    WAIT,
    Agent,
    Api,
    Job,
    ReadyWatch,
    bounded,
    create_dispatch_job,
    evict_and_release,
    install_record_start,
    reserve,
    start,
)
from contract.admission import admission_count
from contract.keys import ANNOTATION_JOBSET_UID
from harness.agent_process import LEADER
from harness.agent_process import start_agent as start_process
from harness.async_client import api_client
from harness.cluster import ControlPlane, new_run_dir, start_control_plane

AGENT_USER = "dispatch-bench-agent"
SETTLE = 3.0
"""Seconds a phase lasts past its last Ready: the agent's Events and follow-up passes are answered by then."""
CHECK = "dispatch-admission"
PASSES = "dispatch_agent_reconcile_duration_seconds_count"

Key = tuple[str, str]
"""(verb, resource): e.g. ("get", "workloads"), ("apply", "workloads/status"), ("list (consistent)", "pods")"""


# -- the audit log -------------------------------------------------------------------------------------------


def verb_of(event: Mapping[str, Any]) -> str:
    """The request's verb; a PATCH with ``force`` is a server-side apply (only apply takes it), and a LIST
    says whether it was consistent (no resourceVersion: from etcd's revision) or any version (from the cache)."""
    verb = str(event.get("verb"))
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(str(event.get("requestURI", ""))).query)
    if verb == "patch" and "force" in query:
        return "apply"
    if verb == "list":
        rv = query.get("resourceVersion", [""])[0]
        return (
            "list (consistent)" if rv == "" else f"list (resourceVersion={rv})" if rv == "0" else "list (at a version)"
        )
    return verb


def resource_of(event: Mapping[str, Any]) -> str:
    ref = event.get("objectRef") or {}
    if not ref:
        return str(event.get("requestURI", "?")).split("?", 1)[0]
    sub = ref.get("subresource")
    return f"{ref.get('resource')}/{sub}" if sub else str(ref.get("resource"))


@dataclass
class Request:
    received: dt.datetime
    key: Key
    code: int


def read_audit(path: Path, user: str) -> list[Request]:
    """One Request per audit ID of ``user`` (a watch has a ResponseStarted and a ResponseComplete event)."""
    seen: dict[str, Request] = {}
    with path.open() as f:
        for line in f:
            event = json.loads(line)
            if (event.get("user") or {}).get("username") != user or event["auditID"] in seen:
                continue
            received = dt.datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            code = int((event.get("responseStatus") or {}).get("code") or 0)
            seen[event["auditID"]] = Request(received, (verb_of(event), resource_of(event)), code)
    return list(seen.values())


# -- phases ----------------------------------------------------------------------------------------------------


@dataclass
class Phase:
    name: str
    readmissions: int
    start: dt.datetime
    end: dt.datetime = field(default_factory=lambda: dt.datetime.now(dt.UTC))
    passes: float = 0.0
    events: tuple[int, int] = (0, 0)
    """Event objects of ours in the namespace at the phase's end, and the sum of their counts."""
    requests: Counter[Key] = field(default_factory=Counter)
    failed: Counter[tuple[Key, int]] = field(default_factory=Counter)
    """Requests answered with an error, by status code (a GET of a JobSet not created yet is a 404)."""

    def take(self, requests: Iterable[Request]) -> None:
        for r in requests:
            if self.start <= r.received < self.end:
                self.requests[r.key] += 1
                if r.code >= 400:
                    self.failed[r.key, r.code] += 1


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def our_events(cp: ControlPlane, namespace: str) -> tuple[int, int]:
    path = cp.admin.collection_path("v1", "Event", namespace)
    items = [
        e for e in cp.admin.request("GET", path)["items"] if (e.get("source") or {}).get("component") == EVENT_COMPONENT
    ]
    return len(items), sum(int(e.get("count") or 1) for e in items)


class Bench:
    def __init__(self, cp: ControlPlane, agent: Agent, api: Api, watch: ReadyWatch, ns: str) -> None:
        self.cp, self.agent, self.api, self.watch, self.ns = cp, agent, api, watch, ns

    async def phase(self, name: str, readmissions: int, began: dt.datetime, passes: float) -> Phase:
        await asyncio.sleep(SETTLE)
        p = Phase(name, readmissions, began)
        p.passes = self.agent.metric(PASSES) - passes
        p.events = our_events(self.cp, self.ns)
        return p

    async def admit(self, job: Job, wl: dict[str, Any]) -> dict[str, Any]:
        """Reserve ``wl`` and wait for our check's Ready; the Workload as Ready."""
        self.watch.arm(job.name, wl["metadata"]["resourceVersion"])
        wl, _ = await reserve(self.api, wl)
        await asyncio.to_thread(self.watch.wait, [job.name], WAIT)
        return self.watch.latest[job.name]

    async def sequential(self, cycles: int) -> Phase:
        job = await create_dispatch_job(self.api, self.ns, [CHECK])
        wl = await self.admit(job, job.workload)  # the first admission and start, not counted
        await self.first_start([job])
        await asyncio.sleep(SETTLE)
        began, passes = now(), self.agent.metric(PASSES)
        a = admission_count(job.trainjob) or 0
        for i in range(cycles):
            wl = await self.admit(job, await evict_and_release(self.api, wl, stop=job))
            started = await start(self.api, job)
            assert started == a + 1, f"readmission {i + 1} started with A {started} after A {a}"
            a = started
        return await self.phase("sequential", cycles, began, passes)

    async def burst(self, n: int) -> tuple[Phase, Phase, Phase]:
        jobs: list[Job] = await bounded(list(range(n)), lambda _: create_dispatch_job(self.api, self.ns, [CHECK]), 16)
        await self.all_ready(jobs, 600)  # the first admissions, not counted
        await asyncio.sleep(SETTLE)
        began, passes = now(), self.agent.metric(PASSES)
        await self.first_start(jobs)
        started = await self.phase("burst: first start", n, began, passes)
        began, passes = now(), self.agent.metric(PASSES)

        async def release(job: Job) -> None:
            job.workload = await evict_and_release(self.api, self.watch.latest[job.name], stop=job)

        await bounded(jobs, release)
        released = await self.phase("burst: release", n, began, passes)
        began, passes = now(), self.agent.metric(PASSES)
        t = time.monotonic()
        await self.all_ready(jobs, 600)
        print(f"burst of {n} readmissions: all Ready after {time.monotonic() - t:.1f}s")
        return started, released, await self.phase("burst: reserve", n, began, passes)

    async def first_start(self, jobs: list[Job]) -> None:
        """Each job started as Kueue does (the unsuspend raises A to 1) and its JobSet created as Trainer does;
        returns once the agent recorded every JobSet's UID on its TrainJob."""

        async def one(job: Job) -> None:
            assert await start(self.api, job) == 1
            meta = job.trainjob["metadata"]
            await self.api.create(JOBSET, "jobsets", meta["namespace"], jobset_body(job.trainjob))

        await bounded(jobs, one)
        deadline = time.monotonic() + 300
        names = {j.trainjob["metadata"]["name"] for j in jobs}
        while True:
            listed = self.cp.admin.request("GET", self.cp.admin.collection_path(TRAINER_V, "TrainJob", self.ns))
            missing = names - {
                t["metadata"]["name"]
                for t in listed["items"]
                if ANNOTATION_JOBSET_UID in (t["metadata"].get("annotations") or {})
            }
            if not missing:
                break
            assert time.monotonic() < deadline, f"{len(missing)} JobSet UID(s) not recorded within 300 s"
            await asyncio.sleep(0.5)
        stored = {t["metadata"]["name"]: t for t in listed["items"]}
        for job in jobs:
            job.trainjob = stored[job.trainjob["metadata"]["name"]]

    async def all_ready(self, jobs: list[Job], budget: float) -> None:
        for job in jobs:
            self.watch.arm(job.name, job.workload["metadata"]["resourceVersion"])

        async def one(job: Job) -> None:
            job.workload, _ = await reserve(self.api, job.workload)

        await bounded(jobs, one)
        await asyncio.to_thread(self.watch.wait, [j.name for j in jobs], budget)
        for job in jobs:
            job.workload = self.watch.latest[job.name]


def jobset_body(trainjob: dict[str, Any]) -> dict[str, Any]:
    """The TrainJob's JobSet as Trainer creates it at the first start: its name, a controller ownerReference
    to the TrainJob (what makes it the TrainJob's own, contract/foreign.py). Tier A runs no JobSet controller:
    it makes no Jobs and no pods."""
    meta = trainjob["metadata"]
    template = {"spec": {"restartPolicy": "Never", "containers": [{"name": "node", "image": "registry.invalid/t:1"}]}}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "ownerReferences": [{"apiVersion": trainjob["apiVersion"], "kind": trainjob["kind"], "name": meta["name"],
                                 "uid": meta["uid"], "controller": True, "blockOwnerDeletion": True}],
        },
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"template": template}}}]},
    }  # fmt: skip


def start_agent(cp: ControlPlane, namespace: str, workers: int) -> Agent:
    kubeconfig = cp.client_kubeconfig("bench-agent", AGENT_USER, groups=["system:masters"])
    config = {"leaseNamespace": namespace, "leaseName": "bench-requests"}
    agent = start_process(cp, kubeconfig=kubeconfig, name="dispatch-agent-requests", config=config,
                          workdir=cp.run_dir, extra=["--workers", str(workers)], until=LEADER, timeout=120)  # fmt: skip
    return Agent(agent.name, agent.process, agent.port)


async def run(args: argparse.Namespace) -> list[Phase]:
    with start_control_plane(new_run_dir(), audit_users=[AGENT_USER]) as cp:
        assert cp.audit_log is not None
        ns = cp.create_namespace("bench")
        install_record_start(cp, ns)
        cp.admin.create(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "AdmissionCheck",
                "metadata": {"name": CHECK},
                "spec": {"controllerName": "dispatch.phpboyscout.uk/admission"},
            }
        )
        agent = start_agent(cp, ns, args.workers)
        print(f"agent ready (leader), pid {agent.process.pid}; audit log {cp.audit_log}")
        watch = ReadyWatch(cp.admin, ns, frozenset({CHECK}))
        try:
            async with api_client(cp.admin_credentials) as raw:
                bench = Bench(cp, agent, Api(raw), watch, ns)
                phases = [await bench.sequential(args.cycles)]
                print(f"sequential: {args.cycles} readmissions done")
                if args.burst:
                    phases.extend(await bench.burst(args.burst))
        finally:
            watch.stop()
        requests = read_audit(cp.audit_log, AGENT_USER)
        for p in phases:
            p.take(requests)
        cp.supervisor.stop(agent.process.name)
    return phases


# -- the report ------------------------------------------------------------------------------------------------

GOAL: dict[Key, str] = {
    ("patch", "trainjobs"): "1 (the approval; first start: the JobSet UID)",
    ("apply", "workloads/status"): "1 (Ready)",
    ("list (consistent)", "pods"): "<= 1, shared",
}
WRITES = {"create", "update", "patch", "apply", "delete", "deletecollection"}


def per(n: float, d: int) -> str:
    return f"{n / d:.3f}" if d else "-"


def report(args: argparse.Namespace, phases: list[Phase], seconds: float) -> None:
    keys = sorted({k for p in phases for k in p.requests}, key=lambda k: (k[1], k[0]))
    head = ["verb", "resource", *(f"{p.name} ({p.readmissions})" for p in phases), "goal"]
    rows: list[list[str]] = []
    for k in keys:
        goal = GOAL.get(k, "0" if k[0] == "get" and k[1] != "leases" else "")
        cells = []
        for p in phases:
            failed = "".join(f" ({per(n, p.readmissions)} {code})" for (key, code), n in p.failed.items() if key == k)
            cells.append(f"{per(p.requests[k], p.readmissions)}{failed}")
        rows.append([k[0], k[1], *cells, goal])

    def total(pred: Any) -> list[str]:
        return [per(sum(v for k, v in p.requests.items() if pred(k)), p.readmissions) for p in phases]

    background = ("leases", "events")
    rows.append(["**GETs**", "(not leases)", *total(lambda k: k[0] == "get" and k[1] not in background), "0"])
    rows.append(["**writes**", "(not leases, not events)", *total(
        lambda k: k[0] in WRITES and k[1] not in background), "2"])  # fmt: skip
    rows.append(["**all requests**", "", *total(lambda k: True), ""])
    lists = [p.requests[("list (consistent)", "pods")] for p in phases]
    served = (f"{p.passes:.0f} / {n} = {p.passes / n:.1f}" if n else f"{p.passes:.0f} / 0"
              for p, n in zip(phases, lists, strict=True))  # fmt: skip
    rows.append(["passes per consistent LIST of pods", "", *served, ">= 1"])
    rows.append(["passes per readmission", "", *(per(p.passes, p.readmissions) for p in phases), ""])
    rows.append(["Events created + patched", "", *total(lambda k: k[1] == "events" and k[0] != "watch"), "bounded"])
    rows.append(["Event objects of ours (sum of counts)", "",
                 *(f"{p.events[0]} ({p.events[1]})" for p in phases), "bounded"])  # fmt: skip
    print()
    print(
        f"workers {args.workers}; {platform.node()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}; "
        f"{now():%Y-%m-%d %H:%M} UTC; run {seconds:.0f}s; per readmission (readmissions in brackets)"
    )
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=30, help="sequential readmissions of one Workload")
    parser.add_argument("--burst", type=int, default=1000, help="dispatch Workloads readmitted at once (0: none)")
    parser.add_argument(
        "--workers", type=int, default=DEFAULT_WORKERS, help=f"the agent's --workers (default {DEFAULT_WORKERS})"
    )
    args = parser.parse_args()
    if not 1 <= args.cycles <= 5000 or not 0 <= args.burst <= 20000:
        parser.error("--cycles must be from 1 to 5000 and --burst from 0 to 20000")
    started = time.monotonic()
    phases = asyncio.run(run(args))
    report(args, phases, time.monotonic() - started)


if __name__ == "__main__":
    main()
