"""The burst's floor: the readmission gate's API calls and nothing else, as a process of its own.

    .venv/bin/python -m benchmarks.gate_floor --kubeconfig K --namespace NS --check NAME [--workers 16]
    (started by benchmarks/agent_bench.py; prints "ready" once its watch is live)

Serves every Workload of ``NS`` whose check ``NAME`` is Pending while quota is reserved, with ``--workers``
concurrent passes, each making exactly the calls one pass of the agent makes for a readmission of a job with
no pods, through the agent's own client layer (agent/runtime/kube.py, so the same one LIST of pods for many passes):
the consistent LIST of pods, then apply workloads/status (Ready) preconditioned on the Workload as its watch
delivered it (the agent reads the Workload, the TrainJob and the JobSet from its watches; A is raised by
Kueue's unsuspend, not by the gate, and a recorded JobSet UID leaves no TrainJob write). What it leaves out
is what the agent adds: the decision and its proofs, leader election, the TrainJob, JobSet, pod and node
watches, Events, metrics and logging. Its CPU and its time to clear a burst are the floor the agent's are
compared with, in the same run, on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
from collections.abc import Mapping
from typing import Any

from agent.runtime.kube import Kube
from contract import upstream
from contract.objects import dig
from serving.client import KubeError
from serving.kube import api_client
from serving.watch import run as watch

Key = tuple[str, str]


def wanted(wl: Mapping[str, Any], check: str) -> bool:
    """Quota reserved and ``check`` Pending: what makes Kueue wait for the check's controller."""
    status = wl.get("status") or {}
    conditions = status.get("conditions") or []
    checks = status.get("admissionChecks") or []
    reserved = any(c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in conditions)
    return reserved and any(c.get("name") == check and c.get("state") == "Pending" for c in checks)


class Events:
    """The watch's handler: the key of each Workload that needs a pass, once while it is queued."""

    def __init__(self, check: str) -> None:
        self.check = check
        self.queue: asyncio.Queue[Key] = asyncio.Queue()
        self.queued: set[Key] = set()
        self.latest: dict[Key, Mapping[str, Any]] = {}
        """Each Workload as the watch last delivered it: what a pass reads, as the agent's store is."""

    def begin(self) -> None: ...

    def end(self) -> None: ...

    def page(self, items: list[Mapping[str, Any]]) -> None:
        for item in items:
            self.event("ADDED", item)

    def event(self, kind: str, obj: Mapping[str, Any]) -> None:
        key = (str(dig(obj, "metadata", "namespace")), str(dig(obj, "metadata", "name")))
        if kind == "DELETED":
            self.latest.pop(key, None)
            return
        self.latest[key] = obj
        if wanted(obj, self.check) and key not in self.queued:
            self.queued.add(key)
            self.queue.put_nowait(key)


def ready_status(wl: Mapping[str, Any], check: str) -> dict[str, Any]:
    """The workloads/status apply that sets ``check`` Ready, preconditioned on the Workload as read."""
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {k: wl["metadata"][k] for k in ("name", "namespace", "uid", "resourceVersion")},
        "status": {"admissionChecks": [
            {"name": check, "state": "Ready", "message": "admitted", "lastTransitionTime": now}]},
    }  # fmt: skip


async def one_pass(kube: Kube, events: Events, key: Key, check: str) -> None:
    wl = events.latest.get(key)
    if wl is None or not wanted(wl, check):
        return
    await kube.list_pods(key[0], str(dig(wl, "metadata", "ownerReferences", 0, "name")))
    await kube.apply_workload_status(ready_status(wl, check))


async def serve(kubeconfig: str, namespace: str, check: str, workers: int) -> None:
    api = await api_client(kubeconfig)
    kube = Kube(api)
    events = Events(check)
    synced = asyncio.Event()

    def live(on: bool) -> None:
        if on:
            print("ready", flush=True)

    call = kube.rest.collection(upstream.WORKLOADS.path(namespace))

    async def worker() -> None:
        while True:
            key = await events.queue.get()
            events.queued.discard(key)
            try:
                await one_pass(kube, events, key, check)
            except KubeError as exc:  # a conflict: the watch brings the Workload again if it still waits
                print(f"{key[0]}/{key[1]}: {exc.status} {exc.reason}", flush=True)

    await asyncio.gather(watch("workloads", kube, call, events, synced, on_live=live),
                         *(worker() for _ in range(workers)))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--check", required=True)
    parser.add_argument("--workers", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(serve(args.kubeconfig, args.namespace, args.check, args.workers))


if __name__ == "__main__":
    main()
