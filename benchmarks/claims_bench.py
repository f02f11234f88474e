"""The claims' own cost per round (docs/multicluster.md, "The claim"), for N jobs dispatched at once.

    .venv/bin/python -m benchmarks.claims_bench [--jobs 1000] [--rounds 20]
    (from the repository root)

On the manager, one round decides every claim from the objects as read: ``wanted_claim`` for each dispatched
Workload and its TrainJob, then ``claim_lease`` for each claim it renews. On a worker, one look judges every claim
by the agent's clock (``ClaimWatch.observe``, then ``live`` for each copy). This measures that pure work, in CPU
time per round, on the objects the API returns (built here in their shape). The requests of a round are fixed by
the code, not measured here: on the manager one LIST of Workloads and one GET of each dispatched job's TrainJob,
then per worker one LIST of its claims and one PUT per claim renewed (a create the first time); on a worker one
LIST of the Leases carrying the claim label every 2 s, and one GET of a claim before a copy is let start.
"""

from __future__ import annotations

import argparse
import datetime as dt
import statistics
import time
import uuid
from typing import Any

from agent.claims import ClaimWatch
from contract.claims import claim_lease, wanted_claim
from contract.keys import ANNOTATION_APPROVED_ADMISSION, ANNOTATION_DISPATCHED

NOW = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)


def dispatched(n: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``n`` (Workload, TrainJob) pairs, each dispatched to one of two workers with A = 3."""
    pairs = []
    for i in range(n):
        uid = str(uuid.uuid4())
        workload = {
            "metadata": {"name": f"wl-{i}", "namespace": "team-a", "uid": uid,
                         "annotations": {ANNOTATION_DISPATCHED: "3"}},
            "spec": {"active": True},
            "status": {"clusterName": f"worker-{i % 2}", "conditions": [
                {"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]},
        }  # fmt: skip
        approval = {ANNOTATION_APPROVED_ADMISSION: f"3/{uid}"}
        trainjob = {"metadata": {"name": f"dj-{i}", "namespace": "team-a", "uid": str(uuid.uuid4()),
                                 "resourceVersion": "7", "annotations": approval}}  # fmt: skip
        pairs.append((workload, trainjob))
    return pairs


def manager_round(pairs: list[tuple[dict[str, Any], dict[str, Any]]], clusters: dict[str, Any]) -> list[Any]:
    bodies = []
    for workload, trainjob in pairs:
        want = wanted_claim(workload, trainjob, clusters)
        assert want is not None
        bodies.append(claim_lease(None, want, namespace="dispatch-system", origin="multikueue", now=NOW,
                                  duration=60)[1])  # fmt: skip
    return bodies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    active = {"status": {"conditions": [{"type": "Active", "status": "True"}]}}
    clusters = {"worker-0": active, "worker-1": active}
    pairs = dispatched(args.jobs)
    leases = manager_round(pairs, clusters)
    names = [lease["metadata"]["name"] for lease in leases]
    manager, worker = [], []
    watch = ClaimWatch()
    watch.observe(leases, 0.0)
    for r in range(args.rounds):
        start = time.process_time()
        manager_round(pairs, clusters)
        manager.append(time.process_time() - start)
        renewed = [{**lease, "spec": {**lease["spec"], "renewTime": f"t{r}"}} for lease in leases]
        start = time.process_time()
        watch.observe(renewed, float(r + 1))
        assert all(watch.live(name, float(r + 1)) for name in names)
        worker.append(time.process_time() - start)
    for side, times in (("manager round", manager), ("worker look", worker)):
        print(f"{side}, {args.jobs} jobs: p50 {statistics.median(times) * 1000:.1f} ms CPU, "
              f"max {max(times) * 1000:.1f} ms ({args.rounds} rounds)")  # fmt: skip


if __name__ == "__main__":
    main()
