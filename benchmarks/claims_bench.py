"""The claims' own cost per round (docs/multicluster.md, "The claim"), for N jobs dispatched at once.

    .venv/bin/python -m benchmarks.claims_bench [--jobs 1000] [--rounds 20]
    (from the repository root)

On the manager, one round decides every claim from the objects as read: ``wanted_claim`` for each dispatched
Workload and its TrainJob, then ``claim_lease`` for each claim it renews. On a worker, one look judges every claim
by the agent's clock (``ClaimWatch.observe``, then ``live`` for each copy). This measures that pure work, in CPU
time per round, on the objects the API returns (built here in their shape).

    .venv/bin/python -m benchmarks.claims_bench --requests [--jobs 1000]

counts instead the requests one round of ``ClaimRenewer`` makes, by kind, on the manager and on each worker: the
agent's own round run against doubles of the manager's API and of the workers' (``Api``, ``Workers``) that answer
from memory and count each call it makes, one call being one request. The first round (claims created, workers
recorded on the TrainJobs), then a steady one (claims renewed).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import statistics
import time
import uuid
from collections import Counter
from typing import Any

from ulid import ULID

from agent.constants import TRAINJOBS, WORKLOADS
from agent.multicluster.claims import ClaimRenewer, ClaimWatch
from contract.claims import claim_lease, wanted_claim
from contract.keys import (
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_DISPATCHED,
    ANNOTATION_DISPATCHED_TO,
    LABEL_JOB_ID,
    LABEL_WORKLOAD_JOB_UID,
)
from contract.multicluster import MULTIKUEUE_MANAGED_BY

NOW = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)


def dispatched(n: int) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """``n`` (Workload, TrainJob) pairs as the API returns them, each dispatched to one of two workers with A = 3:
    a dispatch TrainJob MultiKueue manages, and the Workload Kueue made for it."""
    pairs = []
    for i in range(n):
        uid, tj_uid, name = str(uuid.uuid4()), str(uuid.uuid4()), f"dj-{str(ULID()).lower()}-s1"
        owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name, "uid": tj_uid,
                 "controller": True}  # fmt: skip
        workload = {
            "metadata": {"name": f"trainjob-{name}-{i:05x}", "namespace": "team-a", "uid": uid,
                         "labels": {LABEL_WORKLOAD_JOB_UID: tj_uid}, "ownerReferences": [owner],
                         "annotations": {ANNOTATION_DISPATCHED: "3"}},
            "spec": {"active": True},
            "status": {"clusterName": f"worker-{i % 2}", "conditions": [
                {"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}]},
        }  # fmt: skip
        trainjob = {"metadata": {"name": name, "namespace": "team-a", "uid": tj_uid, "resourceVersion": "7",
                                 "labels": {LABEL_JOB_ID: name[3:-3]},
                                 "annotations": {ANNOTATION_APPROVED_ADMISSION: f"3/{uid}"}},
                    "spec": {"managedBy": MULTIKUEUE_MANAGED_BY}}  # fmt: skip
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


class Api:
    """The manager's API as the claims round reads and writes it (agent/runtime/kube.py), from memory: every TrainJob
    and Workload of the cluster, of which ``dispatched`` are dispatch's, dispatched; each call counted as a request."""

    def __init__(self, pairs: list[tuple[dict[str, Any], dict[str, Any]]], others: int) -> None:
        self.counts: Counter[str] = Counter()
        self.items: Counter[str] = Counter()
        """The objects the LISTs returned, by collection."""
        self.trainjobs = [tj for _, tj in pairs]
        self.workloads = [wl for wl, _ in pairs] + [
            {"metadata": {"name": f"other-{i}", "namespace": "team-b", "uid": str(uuid.uuid4()),
                          "labels": {LABEL_WORKLOAD_JOB_UID: str(uuid.uuid4())}}}
            for i in range(others)
        ]  # fmt: skip
        active = {"status": {"conditions": [{"type": "Active", "status": "True"}]}}
        self.clusters = [{"metadata": {"name": f"worker-{i}"}, **active} for i in range(2)]

    async def list_multikueue_clusters(self) -> list[dict[str, Any]]:
        self.counts["LIST multikueueclusters"] += 1
        return self.clusters

    def list_functions(self) -> dict[str, Any]:
        return {TRAINJOBS: TRAINJOBS, WORKLOADS: WORKLOADS}

    async def list_page(self, call: str, label_selector: str = "") -> dict[str, Any]:
        self.counts[f"LIST {call}"] += 1
        items = [o for o in (self.trainjobs if call == TRAINJOBS else self.workloads) if _selected(o, label_selector)]
        self.items[call] += len(items)
        return {"items": items}

    async def get_trainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.counts["GET trainjobs"] += 1
        return next((tj for tj in self.trainjobs if tj["metadata"]["name"] == name), None)

    async def patch_trainjob(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        self.counts["PATCH trainjobs"] += 1
        trainjob = next(tj for tj in self.trainjobs if tj["metadata"]["name"] == name)
        value = next(op["value"] for op in ops if op["path"].endswith("dispatched-to"))
        trainjob["metadata"]["annotations"] = {**trainjob["metadata"]["annotations"],
                                               ANNOTATION_DISPATCHED_TO: value}  # fmt: skip
        return trainjob


def _selected(obj: dict[str, Any], selector: str) -> bool:
    """The two selectors the round uses: a label's presence, and ``<label> in (<values>)``."""
    labels = obj["metadata"].get("labels") or {}
    if " in (" not in selector:
        return not selector or selector in labels
    key, _, values = selector.partition(" in (")
    return labels.get(key) in values.rstrip(")").split(",")


class Workers:
    """The workers' APIs as the claims round writes them (agent/multicluster/worker_reads.py), from memory; counted by
    worker."""

    origin = "multikueue"

    def __init__(self, names: list[str]) -> None:
        self.names = frozenset(names)
        self.counts: dict[str, Counter[str]] = {n: Counter() for n in names}
        self.leases: dict[str, dict[str, dict[str, Any]]] = {n: {} for n in names}

    async def claims(self, worker: str, origin: str) -> list[dict[str, Any]]:
        self.counts[worker]["LIST leases"] += 1
        return list(self.leases[worker].values())

    async def renew_claim(self, worker: str, have: Any, want: Any, origin: str, now: Any, duration: int) -> None:
        create, body = claim_lease(have, want, namespace="dispatch-system", origin=origin, now=now, duration=duration)
        self.counts[worker]["POST leases" if create else "PUT leases"] += 1
        self.leases[worker][want.name] = body

    async def delete_claim(self, worker: str, lease: dict[str, Any]) -> None:
        self.counts[worker]["DELETE leases"] += 1
        self.leases[worker].pop(lease["metadata"]["name"], None)


def count_requests(jobs: int, others: int) -> None:
    """The requests of a first round and of a steady one, for ``jobs`` dispatched jobs among ``others`` Workloads
    that are not dispatch's."""
    pairs = dispatched(jobs)
    api, workers = Api(pairs, others), Workers(["worker-0", "worker-1"])
    renewer = ClaimRenewer(api, workers, 60)  # type: ignore[arg-type]
    for which in ("first round", "steady round"):
        api.counts.clear()
        api.items.clear()
        for c in workers.counts.values():
            c.clear()
        asyncio.run(renewer.round())
        manager = ", ".join(f"{k} {v}" for k, v in sorted(api.counts.items()))
        manager += f" (objects listed: {', '.join(f'{k} {v}' for k, v in sorted(api.items.items()))})"
        each = ", ".join(f"{k} {v}" for k, v in sorted(workers.counts["worker-0"].items()))
        print(f"{jobs} jobs ({others} other Workloads), {which}: manager: {manager}; worker-0: {each}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--requests", action="store_true", help="count the requests of a round instead")
    parser.add_argument("--others", type=int, default=0, help="Workloads that are not dispatch's (--requests)")
    args = parser.parse_args()
    if args.requests:
        count_requests(args.jobs, args.others)
        return
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
