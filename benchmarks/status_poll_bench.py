"""What a supervisor's polling costs: Status (and List) through the agent's HTTPS API, on tier B.

    .venv/bin/python -m benchmarks.status_poll_bench [--jobs 100] [--interval 5] [--duration 60]
    (from the repository root; needs tier B and helm built: controlplane/build.sh)

Tier B, because Status reads what Kueue, Trainer and JobSet make of a job (its Workload, JobSet, Jobs, pods and
their Nodes; agent/api/service/status.py): on tier A a Kueue-mode job never gets a Workload (Start waits for
one and fails) and a job has no pods, so Status would skip half its reads. dispatch is installed as the sandbox
installs it (harness/sandbox/install.py: the chart rendered and applied but for its pods, the webhook and the
agent as local processes signed in as the chart's ServiceAccounts). A supervisor's ServiceAccount bound to the
chart's supervisor role Starts ``--jobs`` dispatch jobs through the agent's API and Opens them, in a ClusterQueue
gated by dispatch's AdmissionCheck with room for all of them; the benchmark waits until every trainer pod runs
(on kwok). Then three windows of ``--duration`` seconds each, one after the other:

* **idle**: no call; the background (the agent's gate and Lease, Kueue, kwok, the controllers) alone;
* **Status**: every ``--interval`` seconds a sweep: Status of every job (``--concurrency`` calls at a time; a
  sweep that overruns the interval is followed by the next at once);
* **List**: every ``--interval`` seconds ``--list-calls`` List pages of the namespace (``limit`` 500: every job in
  one page). A supervisor's sweep needs one; the default of 10 makes what each costs stand out of the background.
* **Watch**: ``--watchers`` supervisors each waiting on Watch (agent/api/feed.py) from the version of a snapshot
  taken before the window, ``timeoutSeconds`` = ``--interval``: the jobs run on unchanged, so each call waits its
  timeout and answers nothing, which is what a supervisor that stops polling pays to learn every phase change.
  The snapshot (the feed's first LISTs, and the watches it then holds open) falls between the windows.

Requests are counted from the API server's audit log (level Metadata, for the agent's ServiceAccount alone:
``start_control_plane(..., audit_users=[...])``), by verb and resource, in the window in which the API server
received them; the ``apiserver_request_total`` metric has no user label, so Kueue's, Trainer's and kwok's
requests would be mixed in. CPU is utime + stime (/proc/<pid>/stat) of kube-apiserver, etcd and the agent over
each window. Per call = (the window's figure - the idle window's) / calls: what the calls add to the background.
The audit log (blocking, one line per agent request) is part of what the API server spends per call here.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import math
import os
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ulid import ULID

from agent.api.client import AgentClient, AgentError, token_from_file
from agent.api.errors import ErrorKind
from agent.api.models import ListRequest, ObjectRef, StartRequest, WatchRequest
from benchmarks.agent_bench import process_cpu
from benchmarks.agent_requests import Key, read_audit
from benchmarks.anchor_bench import CPU_MILLI, MEMORY_MI, NODE_PODS, big_node, load, quota
from harness.cluster import ControlPlane, new_run_dir, start_control_plane
from harness.processes import ManagedProcess, stop_everything, wait_until
from harness.sandbox import install, site
from harness.tier_b import TierB, node_ready, start_kwok, start_tier_b

AGENT_USER = f"system:serviceaccount:{install.NAMESPACE}:{install.RELEASE}"
"""The chart's ServiceAccount, which the agent signs in as (harness/sandbox/install.py)."""
NAMESPACE, QUEUE, RUNTIME, PRIORITY = "poll", "poll", "poll-train", "poll-low"
IMAGE = "registry.invalid/dispatch-poll/train:1"
SETUP_CONCURRENCY = 4
"""Start and Open calls at a time while setting up (not measured): more, and Kueue falls behind on a loaded machine."""
START_ATTEMPTS = 3
LIST_LIMIT = 500
PROCESSES = ("kube-apiserver", "etcd", "dispatch-agent")


# -- the windows and their arithmetic (pure) ------------------------------------------------------------------


@dataclass
class Window:
    name: str
    seconds: float
    calls: int = 0
    sweeps: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    """CPU seconds of each process over the window."""
    requests: Counter[Key] = field(default_factory=Counter)
    """The agent's requests to the API server received in the window, by (verb, resource)."""
    latencies: list[float] = field(default_factory=list)
    """Seconds per call, as the supervisor saw them."""
    sweep_seconds: list[float] = field(default_factory=list)
    fleet: int = 0
    """Calls a supervisor needs to see every job once: Status one per job, List one page per 500 jobs."""


def net(value: float, idle: float, seconds: float, idle_seconds: float) -> float:
    """``value`` over a window of ``seconds`` less the idle window's ``idle``, scaled to the same length."""
    return value - idle * seconds / idle_seconds


def per_call(w: Window, idle: Window, key: Key) -> float:
    """The agent's requests of ``key`` per call, the background (the idle window's rate) taken off."""
    if not w.calls:
        return math.nan
    return net(w.requests[key], idle.requests[key], w.seconds, idle.seconds) / w.calls


def cpu_per_thousand(w: Window, idle: Window, process: str) -> float:
    """CPU seconds of ``process`` per 1,000 calls, the background taken off."""
    if not w.calls:
        return math.nan
    return net(w.cpu[process], idle.cpu[process], w.seconds, idle.seconds) / w.calls * 1000


def pct(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else math.nan


def report(windows: Sequence[Window], idle: Window, jobs: int, interval: float) -> list[str]:
    """The markdown tables: requests per call by verb and resource, then CPU and latency per window."""
    keys = sorted({k for w in (*windows, idle) for k in w.requests}, key=lambda k: (k[1], k[0]))
    head = ["verb", "resource", *(f"per {w.name} call" for w in windows), "idle (per minute)"]
    lines = ["| " + " | ".join(head) + " |", "|---|---|" + "---:|" * (len(head) - 2)]
    for k in keys:
        cells = [f"{per_call(w, idle, k):.3f}" for w in windows]
        lines.append(f"| {k[0]} | `{k[1]}` | " + " | ".join(cells) + f" | {idle.requests[k] * 60 / idle.seconds:.1f} |")
    totals = [sum(per_call(w, idle, k) for k in keys) for w in windows]
    idle_total = sum(idle.requests.values()) * 60 / idle.seconds
    lines.append("| **all** | | " + " | ".join(f"**{t:.2f}**" for t in totals) + f" | {idle_total:.1f} |")
    lines.append("")
    head = ["window", "calls (sweeps)", "p50 / p99 call", "p50 / max sweep",
            *(f"{p} CPU s" for p in PROCESSES), *(f"{p} CPU s per 1,000 calls" for p in PROCESSES)]  # fmt: skip
    lines += ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for w in (idle, *windows):
        calls = f"{w.calls} ({w.sweeps})" if w is not idle else "0"
        lat = f"{pct(w.latencies, 0.5) * 1000:.0f} / {pct(w.latencies, 0.99) * 1000:.0f} ms" if w.latencies else "-"
        sweep = f"{pct(w.sweep_seconds, 0.5):.2f} / {max(w.sweep_seconds):.2f} s" if w.sweep_seconds else "-"
        used = [f"{w.cpu.get(p, math.nan):.2f}" for p in PROCESSES]
        rate = [f"{cpu_per_thousand(w, idle, p):.2f}" if w is not idle else "-" for p in PROCESSES]
        lines.append(
            f"| {w.name} ({w.seconds:.0f} s) | {calls} | {lat} | {sweep} | " + " | ".join([*used, *rate]) + " |"
        )
    lines.append("")
    for w in windows:
        api = net(w.cpu["kube-apiserver"], idle.cpu["kube-apiserver"], w.seconds, idle.seconds)
        lines.append(
            f"{w.name}: the calls add {api:.2f} CPU s to the API server's {w.cpu['kube-apiserver']:.2f} s in the "
            f"window of {w.seconds:.0f} s ({api / w.seconds * 100:.1f}% of one core)"
        )
        api, agent = (cpu_per_thousand(w, idle, p) * w.fleet / 1000 for p in ("kube-apiserver", "dispatch-agent"))
        lines.append(
            f"{w.name}: a sweep of all {jobs} jobs is {w.fleet} call(s), {api:.3f} API server and {agent:.3f} agent "
            f"CPU s; every {interval:g} s that is {api / interval:.1%} and {agent / interval:.1%} of a core"
        )
    return lines


# -- the cluster ------------------------------------------------------------------------------------------------


@dataclass
class Installed:
    api_url: str
    ca_file: Path
    token_file: Path
    check: str
    processes: dict[str, ManagedProcess]


def install_dispatch(cp: ControlPlane, tb: TierB, work: Path, jobs: int) -> Installed:
    """dispatch as the sandbox installs it, a gated ClusterQueue with room for ``jobs`` trainers, and a supervisor
    bound to the chart's supervisor role, its token in a file."""
    admin = cp.admin
    extra = math.ceil((jobs + 10) / NODE_PODS)
    for i in range(extra):  # one kwok per node, as tier B's own (TierB.add_node), with room for more pods
        start_kwok(tb, f"poll-node-{i}")
        admin.create(big_node(f"poll-node-{i}"))
    wait_until(lambda: all(node_ready(admin, f"poll-node-{i}") for i in range(extra)), 60, what="poll nodes Ready")
    rendered, _ = install.install(cp, work)
    certs = install.generate_certs(work)
    sa, kubeconfig = install.service_account_kubeconfig(cp, rendered)
    assert f"system:serviceaccount:{install.NAMESPACE}:{sa}" == AGENT_USER, f"the agent signs in as {sa}"
    _, webhook_kubeconfig = install.webhook_kubeconfig(cp, rendered, work)
    _, url = install.start_webhook(cp, work, certs, webhook_kubeconfig)
    install.apply_webhook_configurations(cp, rendered, url, certs)
    agent, api_url, _ = install.start_agent(cp, work, certs, kubeconfig)
    check = rendered.of("AdmissionCheck")[0]["metadata"]["name"]

    admin.apply(site.training_runtime(RUNTIME, cpu=f"{CPU_MILLI}m", memory=f"{MEMORY_MI}Mi", image=IMAGE))
    admin.apply(site.priority_class(PRIORITY, 10, "the polled jobs"))
    admin.apply(site.gated_cluster_queue(QUEUE, check=check, flavor=tb.resource_flavor, quota=quota(jobs)))
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    admin.apply(site.local_queue(NAMESPACE, QUEUE, QUEUE))
    subject = {"kind": "ServiceAccount", "name": "supervisor", "namespace": NAMESPACE}
    cp.ensure_service_account(NAMESPACE, "supervisor")
    role = f"{install.RELEASE}-supervisor"
    admin.apply(site.binding("RoleBinding", "supervisor", "ClusterRole", role, subject, NAMESPACE))
    token_file = work / "supervisor.token"
    token = cp.service_account_token(NAMESPACE, "supervisor", expiration_seconds=install.TOKEN_SECONDS)
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    wait_until(lambda: _active(cp, "ClusterQueue", QUEUE), 60, what=f"ClusterQueue {QUEUE} Active")
    wait_until(lambda: _active(cp, "LocalQueue", QUEUE, NAMESPACE), 30, what=f"LocalQueue {QUEUE} Active")
    processes = {p.name: p for p in cp.supervisor.processes if p.name in PROCESSES}
    processes["dispatch-agent"] = agent
    return Installed(api_url, certs.ca, token_file, check, processes)


def _active(cp: ControlPlane, kind: str, name: str, namespace: str | None = None) -> bool:
    obj = cp.admin.get(site.KUEUE_V, kind, name, namespace)
    return any(c["type"] == "Active" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions", []))


def running_pods(cp: ControlPlane) -> int:
    pods = cp.admin.request("GET", cp.admin.collection_path("v1", "Pod", NAMESPACE))["items"]
    return sum(1 for p in pods if (p.get("status") or {}).get("phase") == "Running")


async def bounded(items: Iterable[Any], fn: Callable[[Any], Awaitable[Any]], limit: int) -> list[Any]:
    gate = asyncio.Semaphore(limit)

    async def one(item: Any) -> Any:
        async with gate:
            return await fn(item)

    return await asyncio.gather(*(one(i) for i in items))


async def start_jobs(agent: AgentClient, jobs: int) -> list[ObjectRef]:
    """``jobs`` dispatch jobs Started and Opened through the API, as a supervisor does (harness/sandbox/scenario.py)."""

    async def one(_: int) -> ObjectRef:
        for attempt in range(START_ATTEMPTS):
            try:
                started = await agent.start(StartRequest.model_validate({
                    "jobId": str(ULID()), "n": 1, "attempt": 1, "namespace": NAMESPACE, "runtime": {"name": RUNTIME},
                    "image": IMAGE, "command": ["python", "train.py"],
                    "kueue": {"localQueue": QUEUE, "priorityClass": PRIORITY},
                }))  # fmt: skip
                break
            except AgentError as exc:
                # Kueue behind (a loaded machine): no Workload listing the check within workloadTimeout; Start
                # stopped that TrainJob, so another JobID is started.
                if exc.kind != ErrorKind.REJECTED or attempt == START_ATTEMPTS - 1:
                    raise
        ref = ObjectRef(namespace=started.namespace, name=started.name, uid=started.uid)
        await agent.open(ref)
        return ref

    return await bounded(list(range(jobs)), one, SETUP_CONCURRENCY)


# -- the windows ---------------------------------------------------------------------------------------------


def cpu_of(processes: Mapping[str, ManagedProcess]) -> dict[str, float]:
    return {name: process_cpu(p.pid) for name, p in processes.items()}


async def window(
    name: str, seconds: float, interval: float, processes: Mapping[str, ManagedProcess],
    sweep: Callable[[Window], Awaitable[None]] | None,
) -> tuple[Window, dt.datetime, dt.datetime]:  # fmt: skip
    """A window of ``seconds``: a ``sweep`` every ``interval`` seconds (none: idle); CPU over it, and its bounds in
    UTC to pick its requests from the audit log. Ends with the last sweep's calls answered."""
    w = Window(name, seconds)
    began, cpu0, t0 = dt.datetime.now(dt.UTC), cpu_of(processes), time.monotonic()
    if sweep is None:
        await asyncio.sleep(seconds)
    else:
        while (now := time.monotonic()) < t0 + seconds:
            await sweep(w)
            w.sweeps += 1
            w.sweep_seconds.append(time.monotonic() - now)
            await asyncio.sleep(max(0.0, now + interval - time.monotonic()))
    w.seconds = time.monotonic() - t0
    cpu1 = cpu_of(processes)
    w.cpu = {k: cpu1[k] - cpu0[k] for k in cpu0}
    return w, began, dt.datetime.now(dt.UTC)


async def timed(w: Window, call: Awaitable[Any]) -> None:
    t = time.monotonic()
    await call
    w.latencies.append(time.monotonic() - t)
    w.calls += 1


async def measure(args: argparse.Namespace, cp: ControlPlane, inst: Installed) -> tuple[Window, list[Window]]:
    async with AgentClient(inst.api_url, token_from_file(inst.token_file), ca_file=inst.ca_file, timeout=120) as agent:
        t = time.monotonic()
        refs = await start_jobs(agent, args.jobs)
        print(f"{args.jobs} jobs started and opened through the API in {time.monotonic() - t:.1f}s", flush=True)
        wait_until(lambda: running_pods(cp) == args.jobs, 900, interval=2, what=f"{args.jobs} trainer pods Running")
        print(f"all {args.jobs} running {time.monotonic() - t:.1f}s after the first Start; load {load()}", flush=True)

        async def statuses(w: Window) -> None:
            await bounded(refs, lambda ref: timed(w, agent.status(ref)), args.concurrency)

        page = ListRequest.model_validate({"namespace": NAMESPACE, "limit": LIST_LIMIT})

        async def list_page(w: Window) -> None:
            await bounded(range(args.list_calls), lambda _: timed(w, agent.list(page)), args.concurrency)

        versions: list[str] = []

        async def watches(w: Window) -> None:
            wait = max(1, round(args.interval))
            asks = [WatchRequest(namespace=NAMESPACE, version=v, timeout_seconds=wait) for v in versions]
            await bounded(asks, lambda ask: timed(w, agent.watch(ask)), args.watchers)

        await statuses(Window("warm-up", 0))  # the first Status of each job may record its JobSet's UID
        await asyncio.sleep(5)
        done: list[tuple[Window, dt.datetime, dt.datetime]] = []
        for name, sweep in (("idle", None), ("Status", statuses), ("List", list_page), ("Watch", watches)):
            if name == "Watch":  # the feed starts with the first Watch: its LISTs land between the windows
                snapshot = await agent.watch(WatchRequest(namespace=NAMESPACE))
                assert len(snapshot.items) == args.jobs, f"the snapshot lists {len(snapshot.items)} jobs"
                versions[:] = [snapshot.version] * args.watchers
                await asyncio.sleep(3)
            done.append(await window(name, args.duration, args.interval, inst.processes, sweep))
            print(f"{name} window: {done[-1][0].calls} calls; load {load()}", flush=True)
            await asyncio.sleep(3)  # the last answers' requests land in this window, not the next
    await asyncio.sleep(2)  # blocking audit mode: a request's event is written as it ends
    assert cp.audit_log is not None
    requests = read_audit(cp.audit_log, AGENT_USER)
    for w, began, ended in done:
        w.requests.update(r.key for r in requests if began <= r.received < ended)
    done[1][0].fleet, done[2][0].fleet, done[3][0].fleet = args.jobs, math.ceil(args.jobs / LIST_LIMIT), 1
    return done[0][0], [w for w, _, _ in done[1:]]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.status_poll_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="dispatch jobs, all running (default 100)")
    parser.add_argument("--interval", type=float, default=5, help="seconds between sweeps (default 5)")
    parser.add_argument("--duration", type=float, default=60, help="seconds of each window (default 60)")
    parser.add_argument("--concurrency", type=int, default=8, help="Status calls at a time in a sweep (default 8)")
    parser.add_argument("--list-calls", type=int, default=10, help="List pages per sweep in the List window (10)")
    parser.add_argument("--watchers", type=int, default=1, help="supervisors waiting on Watch in its window (1)")
    args = parser.parse_args(argv)
    if not 1 <= args.jobs <= LIST_LIMIT or args.interval <= 0 or args.duration < args.interval or args.list_calls < 1:
        parser.error(
            f"--jobs must be from 1 to {LIST_LIMIT}, --interval > 0, --duration >= --interval, --list-calls >= 1"
        )
    flags = " ".join(sys.argv[1:] if argv is None else argv)
    print(f"status_poll_bench {flags}: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC, {platform.node()}, "
          f"{os.cpu_count()} CPUs, Python {platform.python_version()}, load {load()}", flush=True)  # fmt: skip
    run_dir = new_run_dir()
    work = run_dir / "poll"
    work.mkdir(parents=True)
    cp: ControlPlane | None = None
    try:
        t = time.monotonic()
        cp = start_control_plane(run_dir, audit_users=[AGENT_USER])
        tb = start_tier_b(cp)
        inst = install_dispatch(cp, tb, work, args.jobs)
        print(f"tier B and dispatch ready in {time.monotonic() - t:.1f}s; run folder {run_dir}", flush=True)
        idle, windows = asyncio.run(measure(args, cp, inst))
        print()
        print("\n".join(report(windows, idle, args.jobs, args.interval)))
        mean = statistics.mean(windows[0].sweep_seconds) if windows[0].sweep_seconds else math.nan
        print(f"\nmean Status sweep {mean:.2f} s against an interval of {args.interval:g} s")
        print(f"end {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M:%S} UTC, load {load()}")
        return 0
    finally:
        if cp is not None:
            cp.stop()
        stop_everything()


if __name__ == "__main__":
    sys.exit(main())
