"""On a MultiKueue manager, the API's reads of the workers: what of a job each worker holds (Start, Stop and
Status after Stop; agent/multicluster/worker_remains.py decides) and a client for the worker that runs a job
(Status, Output).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from agent.api.errors import ApiError
from agent.api.kube import Kube
from agent.api.models import WorkerRemainsModel
from agent.api.service.base import ServiceBase
from agent.multicluster.worker_remains import Remains, plan_remains, planned, remains, unread
from contract.objects import dig
from contract.upstream import MULTIKUEUE_CLUSTERS
from serving.kube import describe_error

log = logging.getLogger(__name__)


def worker_bodies(workers: list[Remains]) -> list[dict[str, Any]]:
    """What is left on each worker, as an error body carries it."""
    return [WorkerRemainsModel.of(w).model_dump(by_alias=True) for w in workers]


class WorkersOps(ServiceBase):
    """The reads of the workers on a MultiKueue manager."""

    async def _worker(self, workload: Mapping[str, Any] | None) -> tuple[str | None, Kube | None, str]:
        """On a MultiKueue manager: the worker MultiKueue runs the job on (its Workload's ``status.clusterName``;
        None: not dispatched now), a client of the API's for it with the agent's credential, or why there is
        none."""
        cluster = dig(workload, "status", "clusterName")
        if not isinstance(cluster, str) or not cluster:
            return None, None, ""
        workers = self.kube.workers
        if workers is None or cluster not in workers.names:
            return cluster, None, "the agent has no credential to read it (workerKubeconfigs)"
        try:
            api = await workers.client(cluster)
        except Exception as exc:  # an unreadable credential: reported, Status still answers
            return cluster, None, f"cannot be read: {describe_error(exc)}"
        return cluster, Kube(api, timeout=self.kube.timeout), ""

    async def _remains(self, ns: str, name: str) -> list[Remains]:
        """On a MultiKueue manager: what of the job ``ns/name`` is on each worker (agent/multicluster/worker_remains.py
        decides): every worker the agent has a credential for or a MultiKueueCluster names, read with the agent's own
        credential. A worker that cannot be read is reported so, never as empty (unless fenced). The
        MultiKueueClusters unreadable: every worker with a credential is read, none taken as fenced."""
        workers = self.kube.workers
        assert workers is not None
        try:
            clusters = await self._list(MULTIKUEUE_CLUSTERS.path(), None, "the MultiKueueClusters")
        except ApiError as exc:
            log.info("Stop/Status/Start of %s/%s: the fences are not known: %s", ns, name, exc.message)
            clusters = []
        plan = plan_remains(workers.names, clusters)

        async def read(worker: str) -> Remains:
            try:  # the gate's own look at a worker: the copy, its JobSet, the Jobs, the pods, their Jobs and Nodes
                look = await workers.look(worker, ns, name)
            except Exception as exc:  # an unreadable worker or credential: reported, the answer still comes
                return unread(worker, f"cannot be read: {describe_error(exc)}", plan)
            return remains(worker, ns, name, look, self.settings.node_loss_taints)

        found = await asyncio.gather(*(read(w) for w in plan.read))
        return sorted([*planned(plan), *found], key=lambda r: r.cluster)
