"""What the gate's watch caches (agent/runtime/caches.py) keep per TrainJob, by tracemalloc, in process.

    .venv/bin/python -m benchmarks.agent_cache_bench [--count 2000]   (from the repository root)

A dispatch TrainJob as Start builds it and Open opens it (harness/fixtures: the runtime patch with its pod
template), with a managedFields entry as the API server returns it; and another job's TrainJob, of which only
the uid is kept. Reported: bytes traced per entry, the object's JSON size, and the time to keep one and to
read one back.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import time
import tracemalloc
from typing import Any

from agent.runtime.caches import Store, keep_trainjob


def dispatch_trainjob(i: int) -> dict[str, Any]:
    from contract.trainjob import build_trainjob
    from harness.doubles import opened
    from harness.fixtures import runtime, submission

    tj = opened(build_trainjob(submission(namespace="team-a"), runtime()["spec"]))
    tj["metadata"].update(
        name=f"dj-01arz3ndektsv4rrffq6{i:04d}-s1",
        uid=f"{i:032x}",
        resourceVersion=str(1000 + i),
        managedFields=[{"manager": "dispatch", "operation": "Apply", "fieldsV1": {"f:spec": {"f:runtimePatches": {}}}}],
    )
    return tj


def other_trainjob(i: int) -> dict[str, Any]:
    meta = {"namespace": "team-a", "name": f"other-{i}", "uid": f"{i:032x}", "resourceVersion": "5"}
    return {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "metadata": meta,
            "spec": {"runtimeRef": {"name": "torch"}, "suspend": True, "x": "y" * 2000}}  # fmt: skip


def measure(label: str, items: list[dict[str, Any]]) -> None:
    traced = Store("trainjobs")
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    for obj in items:
        keep_trainjob(traced, obj)
    per = (tracemalloc.get_traced_memory()[0] - base) / len(items)
    tracemalloc.stop()
    del traced
    store = Store("trainjobs")  # timed apart: tracemalloc slows every allocation
    started = time.perf_counter()
    for obj in items:
        keep_trainjob(store, obj)
    kept = time.perf_counter() - started
    started = time.perf_counter()
    for obj in items:
        store.read(obj["metadata"]["namespace"], obj["metadata"]["name"])
    read = time.perf_counter() - started
    size = len(json.dumps(items[0]).encode())
    n = len(items)
    print(f"{label:<26} {per:8.0f} B {size:9d} B {kept / n * 1e6:8.0f} us {read / n * 1e6:8.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    print(f"{platform.node()}, {os.cpu_count()} CPUs, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    print(f"{'TrainJob':<26} {'per entry':>10} {'its JSON':>11} {'keep one':>11} {'read one':>11}")
    measure("dispatch's (compressed)", [dispatch_trainjob(i) for i in range(args.count)])
    measure("another job's (its uid)", [other_trainjob(i) for i in range(args.count)])


if __name__ == "__main__":
    main()
