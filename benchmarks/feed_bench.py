"""What Watch's change feed (agent/domain/changes.py) costs in the agent: memory per job, CPU per event, and CPU
per answer, in process.

    .venv/bin/python -m benchmarks.feed_bench [--jobs 10000]   (from the repository root)

The feed holds, per dispatch TrainJob, the fields its phase is computed from (trimmed) and those of the
Workloads it controls. Each TrainJob (as Start builds and Open opens it, with its managedFields) and a Workload
for it are fed once (memory by tracemalloc, timed apart); then every job changes once (a Workload event that
moves it from Queued to Admitting and back: CPU per event); then the answers: a snapshot of the namespace, an
answer after a version with one change (what a waiting caller gets), and one with none.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import time
import tracemalloc
from typing import Any

from agent.domain.changes import Feed
from benchmarks.agent_cache_bench import dispatch_trainjob

CHECK = "dispatch-admission"


def trainjob(i: int) -> dict[str, Any]:
    tj = dispatch_trainjob(i)
    tj["metadata"]["resourceVersion"] = str(10 + 2 * i)
    tj["metadata"].setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = "q"
    tj["spec"]["suspend"] = True
    return tj


def workload(i: int, rv: int, pending: bool) -> dict[str, Any]:
    tj = f"dj-01arz3ndektsv4rrffq6{i:04d}-s1"
    return {
        "metadata": {"name": f"trainjob-{tj}-1a2b3", "namespace": "team-a", "uid": f"w{i:031x}",
                     "resourceVersion": str(rv), "labels": {"kueue.x-k8s.io/job-uid": f"{i:032x}"},
                     "managedFields": [{"manager": "kueue", "operation": "Apply", "fieldsV1": {"f:status": {}}}],
                     "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                          "name": tj, "uid": f"{i:032x}", "controller": True}]},
        "spec": {"active": True, "queueName": "q", "podSets": [{"name": "node", "count": 1, "template": {}}]},
        "status": {
            "conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "x" * 80}],
            "admissionChecks": [{"name": CHECK, "state": "Pending" if pending else "Ready", "message": "y" * 80}],
        },
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    args = parser.parse_args(argv)
    n = args.jobs
    print(f"{platform.node()}, {os.cpu_count()} CPUs, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC, {n} jobs")
    tjs = [trainjob(i) for i in range(n)]
    wls = [workload(i, 11 + 2 * i, pending=True) for i in range(n)]

    traced = Feed()
    traced.admission_checks([CHECK], {"metadata": {"resourceVersion": "1"}})
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for tj, wl in zip(tjs, wls, strict=True):
        traced.trainjob(tj)
        traced.workload(wl)
    per_job = (tracemalloc.get_traced_memory()[0] - base) / n
    tracemalloc.stop()
    del traced

    feed = Feed()
    feed.admission_checks([CHECK], {"metadata": {"resourceVersion": "1"}})
    started = time.perf_counter()
    for tj, wl in zip(tjs, wls, strict=True):
        feed.trainjob(tj)
        feed.workload(wl)
    fed = (time.perf_counter() - started) / (2 * n)
    v = feed.position
    changes = [workload(i, 3 * n + i, pending=False) for i in range(n)]
    started = time.perf_counter()
    for wl in changes:
        feed.workload(wl)
    event = (time.perf_counter() - started) / n

    def timed(call: Any, rounds: int = 20) -> float:
        t = time.perf_counter()
        for _ in range(rounds):
            call()
        return (time.perf_counter() - t) / rounds

    snapshot = timed(lambda: feed.since("team-a", None))
    after_all = feed.position
    feed.workload(workload(0, 5 * n, pending=True))
    one = timed(lambda: feed.since("team-a", after_all))
    none = timed(lambda: feed.since("team-a", feed.position))
    assert len(feed.since("team-a", v)) == n
    assert len(feed.since("team-a", after_all)) == 1
    print(f"memory per job (TrainJob and its Workload, trimmed): {per_job:,.0f} B")
    print(f"an event fed (first sight):            {fed * 1e6:8.1f} us")
    print(f"an event that changes a phase:         {event * 1e6:8.1f} us")
    print(f"a snapshot of {n} jobs:                {snapshot * 1e3:8.1f} ms")
    print(f"an answer with one change of {n}:      {one * 1e3:8.1f} ms")
    print(f"an answer with none of {n}:            {none * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
