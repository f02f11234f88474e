"""The latency dispatch's webhook adds to a TrainJob create through the real API server (tier A).

Each measured create is a canonical dispatch TrainJob written by dispatch's ServiceAccount. With the
webhook registered, the API server calls /mutate and /validate (which looks up the runtime copy). The
baseline is the same create with the webhook configurations' matchConditions set to exclude it, so both
runs pay for the same API server path, authentication and CEL evaluation of the conditions.

    .venv/bin/python -m benchmarks.webhook_apiserver_bench [--creates 300]   (from the repository root)
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from contract.trainjob import build_runtime_copy, build_trainjob
from harness.cluster import new_run_dir, start_control_plane
from tests.cluster.principals import principals
from tests.cluster.webhook_process import start_webhook, wait_enforced
from tests.unit.fixtures import runtime, submission


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(creates: int) -> None:
    with start_control_plane(new_run_dir()) as cp:
        namespace = cp.create_namespace("bench")
        who = principals(cp, namespace)
        hook = start_webhook(cp, namespace, who.dispatch_username, Path(tempfile.mkdtemp()))
        wait_enforced(who.stranger, namespace)
        n = iter(range(1, 999_999))

        def measure(label: str) -> list[float]:
            subs = [submission(namespace=namespace, n=next(n)) for _ in range(creates)]
            for sub in subs:  # the runtime copies are not what is measured
                who.dispatch.create(build_runtime_copy(sub, runtime()))
            bodies = [build_trainjob(sub, runtime()["spec"]) for sub in subs]
            for body in bodies[:20]:  # warm connections and caches
                who.dispatch.create(body)
            timings = []
            for body in bodies[20:]:
                started = time.perf_counter()
                who.dispatch.create(body)
                timings.append((time.perf_counter() - started) * 1000)
            print(
                f"{label:<28} n={len(timings):4d}  mean {statistics.mean(timings):6.2f} ms  "
                f"p50 {percentile(timings, 0.5):6.2f} ms  p99 {percentile(timings, 0.99):6.2f} ms"
            )
            return timings

        with_webhook = measure("create, webhook called")
        for doc in hook.configurations:
            for h in doc["webhooks"]:
                h["matchConditions"] = [{"name": "dispatch-objects", "expression": "false"}]
            cp.admin.apply({**doc, "metadata": {"name": doc["metadata"]["name"]}})
        time.sleep(3)  # configurations load asynchronously
        baseline = measure("create, webhook excluded")
        added = statistics.median(with_webhook) - statistics.median(baseline)
        print(
            f"the webhook adds {added:.2f} ms to the median create "
            f"(p99 {percentile(with_webhook, 0.99) - percentile(baseline, 0.99):+.2f} ms)"
        )
        hook.unregister()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--creates", type=int, default=300, help="creates per run (20 of them warm up)")
    run(parser.parse_args().creates)
