"""Output: rank 0's log, as the API server streams it (from the worker that runs the job on a MultiKueue
manager); ``rank0``, pure, picks its pod.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import aiohttp

from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import Kube, KubeError
from agent.api.models import OutputRequest
from agent.api.service.workers import WorkersOps
from agent.domain.status import copy_of
from contract.foreign import trainer_job_name
from contract.keys import (
    LABEL_JOB_COMPLETION_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_RESTART_ATTEMPT,
    TRAINER_CONTAINER,
)
from contract.multicluster import managed_by_multikueue
from contract.objects import dig, labels
from contract.ownership import is_kueue_mode
from contract.upstream import JOBSETS, PODS, TRAINJOBS


def rank0(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Rank 0's pod of the latest execution: completion index 0, the highest JobSet restart, the newest."""
    candidates = [p for p in pods if labels(p).get(LABEL_JOB_COMPLETION_INDEX) == "0"]

    def order(pod: Mapping[str, Any]) -> tuple[int, str]:
        attempt = labels(pod).get(LABEL_RESTART_ATTEMPT)
        j = int(attempt) if isinstance(attempt, str) and attempt.isdigit() else -1
        return j, str(dig(pod, "metadata", "creationTimestamp") or "")

    return max(candidates, key=order, default=None)


class OutputOps(WorkersOps):
    """Output."""

    @asynccontextmanager
    async def output(self, req: OutputRequest) -> AsyncIterator[tuple[str, aiohttp.ClientResponse]]:
        """Rank 0's log as the API server streams it: (the pod's name, the response to read from)."""
        trainjob = await self._own(req)
        job = trainer_job_name(trainjob)
        if job is None:
            raise ApiError(ErrorKind.CONFLICT, f"TrainJob {req.namespace}/{req.name} has no dispatch runtime patch")
        selector = {LABEL_JOBSET_NAME: req.name, LABEL_REPLICATED_JOB_NAME: job, LABEL_JOB_COMPLETION_INDEX: "0"}
        owner, remote, where = trainjob, None, ""
        if is_kueue_mode(trainjob) and managed_by_multikueue(trainjob):
            owner, remote, where = await self._copy_on_worker(req, trainjob)
        jobset = await self._read(JOBSETS.path(req.namespace, req.name), f"JobSet {req.namespace}/{req.name}", remote)
        owned = await self._owned_pods(owner, jobset, selector, remote)
        # Only a pod proven the TrainJob's is streamed as its rank 0 (not one whose Job is gone).
        pod = rank0([p for p in owned.ours if dig(p, "metadata", "name") not in owned.unproven])
        if pod is None:
            what = f"rank 0 of TrainJob {req.namespace}/{req.name} has no pod (yet){where}"
            raise ApiError(ErrorKind.NOT_FOUND, what)
        pod_name = str(dig(pod, "metadata", "name"))
        query = [("container", TRAINER_CONTAINER)]
        if req.follow:
            query.append(("follow", "true"))
        if req.tail_lines is not None:
            query.append(("tailLines", str(req.tail_lines)))
        try:
            async with (remote or self.kube).stream(PODS.path(req.namespace, pod_name, "log"), query) as response:
                yield pod_name, response
        except KubeError as exc:
            if exc.status == 400:  # the container is not running yet, or has no log to show
                raise ApiError(ErrorKind.CONFLICT, f"rank 0's pod {pod_name}: {exc.message}") from None
            if exc.status == 404:
                raise ApiError(ErrorKind.NOT_FOUND, f"rank 0's pod {pod_name} is gone") from None
            raise ApiError(ErrorKind.UNAVAILABLE, f"cannot read the log of {pod_name}: {exc.describe()}") from None

    async def _copy_on_worker(
        self, req: OutputRequest, trainjob: Mapping[str, Any]
    ) -> tuple[Mapping[str, Any], Kube, str]:
        """Output on a MultiKueue manager: MultiKueue's copy of the job on the worker that runs it, a client for
        that worker, and where (for the messages). Refused, saying why, when the job is on no worker now or the
        worker cannot be read."""
        ns, name = req.namespace, req.name
        workload = await self._workload(ns, str(dig(trainjob, "metadata", "uid")))
        cluster, remote, why = await self._worker(workload)
        if cluster is None:
            raise ApiError(ErrorKind.NOT_FOUND, f"TrainJob {ns}/{name} runs through MultiKueue and is on no worker now")
        if remote is None:
            raise ApiError(ErrorKind.UNAVAILABLE, f"TrainJob {ns}/{name} runs on worker {cluster}: {why}")
        copy = await self._read(TRAINJOBS.path(ns, name), f"TrainJob {ns}/{name} on worker {cluster}", remote)
        if copy is None or not copy_of(workload, copy):
            raise ApiError(ErrorKind.NOT_FOUND, f"worker {cluster} holds no copy of TrainJob {ns}/{name} (yet)")
        return copy, remote, f" on worker {cluster}"
