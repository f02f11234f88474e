"""On a MultiKueue manager with worker credentials, the leader's round over its workers every ``workerRoundSeconds``
(nothing on the manager watches the workers, so it is a round): the replicas of runtime copies whose TrainJob is gone
go, and each Workload Kueue evicted but keeps the quota of gets it released once nothing of its job may run on a
worker (agent/multicluster/lost_quota.py; the reads and writes are agent/multicluster/worker_pass.py's).

A runnable of the leader's (agent/gate/runnable.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence

from agent.gate.context import WorkloadKey
from agent.multicluster.worker_pass import release_kept_quota, sweep_replicas
from agent.multicluster.worker_reads import WorkerClients
from agent.runtime.caches import Reads
from agent.runtime.kube import Kube
from serving.kube import describe_error

log = logging.getLogger(__name__)


class WorkerRound:
    name = "worker-round"

    def __init__(
        self,
        kube: Kube,
        reads: Reads,
        workers: WorkerClients,
        kept: Callable[[], list[WorkloadKey]],
        *,
        taints: Sequence[str],
        seconds: float,
    ) -> None:
        self.kube, self.reads, self.workers = kube, reads, workers
        self.kept = kept
        """The Workloads the controller's index marks evicted with their quota kept (agent/gate/index.py)."""
        self.taints, self.seconds = tuple(taints), seconds

    async def run(self) -> None:
        while True:
            try:
                await sweep_replicas(self.reads, self.workers)
            except Exception as exc:  # a failed round is the next round's to finish; the leader's tasks go on
                log.warning("the sweep of the workers' replicas stopped: %s", describe_error(exc))
            for key in self.kept():
                try:
                    await release_kept_quota(self.kube, self.reads, self.workers, key.namespace, key.name, self.taints)
                except Exception as exc:  # one Workload's failure never stops the round
                    log.warning("Workload %s: its kept quota was not looked at: %s", key, describe_error(exc))
            await asyncio.sleep(self.seconds)
