"""Status (what the cluster shows of the TrainJob, on a MultiKueue manager with its copy on the worker) and List
(dispatch's TrainJobs in a namespace, a page at a time; listing.py decides).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import KubeError
from agent.api.models import ListRequest, ListResponse, ObjectRef, StatusResponse
from agent.api.service.failures import read_failed
from agent.api.service.listing import list_items, name_prefix
from agent.api.service.targets import not_dispatchs, own
from agent.api.service.workers import WorkersOps, worker_bodies
from agent.domain.kueue_objects import our_checks
from agent.domain.operations import jobset_uid_ops
from agent.domain.status import Status, copy_of, idle_because, on_worker, orphans, status
from agent.multicluster.worker_remains import ceased_when_gone, idle_on_workers
from contract.admission import preconditions
from contract.keys import LABEL_JOBSET_NAME
from contract.multicluster import managed_by_multikueue
from contract.objects import dig
from contract.ownership import is_dispatch, is_kueue_mode
from contract.upstream import JOBSETS, PODS, TRAINING_RUNTIMES, TRAINJOBS, WORKLOADS

log = logging.getLogger(__name__)


class StatusOps(WorkersOps):
    """Status and List."""

    async def status(self, ref: ObjectRef) -> StatusResponse:
        ns, name = ref.namespace, ref.name
        trainjob = await self._read(TRAINJOBS.path(ns, name), f"TrainJob {ns}/{name}")
        if trainjob is not None and not is_dispatch(trainjob):
            raise not_dispatchs(f"TrainJob {ns}/{name}")  # nothing more is read for it
        jobset = await self._read(JOBSETS.path(ns, name), f"JobSet {ns}/{name}")
        runtime_copy = await self._read(TRAINING_RUNTIMES.path(ns, name), f"runtime copy {ns}/{name}")
        if trainjob is None or dig(trainjob, "metadata", "uid") != ref.uid:
            pods = await self._list(PODS.path(ns), {LABEL_JOBSET_NAME: name}, f"the pods of {ns}/{name}")
            left = orphans(trainjob, namespace=ns, jobset=jobset, pods=pods, runtime_copy=runtime_copy)
            try:
                own(trainjob, ref)
            except ApiError as exc:
                if trainjob is not None or self.kube.workers is None:
                    raise ApiError(ErrorKind.NOT_FOUND, exc.message, orphans=list(left)) from None
                # On a MultiKueue manager: gone here, and with it the Workload that said where it went, so every
                # worker is read for what it left (agent/multicluster/worker_remains.py).
                workers = await self._remains(ns, name)
                is_ceased, why = ceased_when_gone(left, workers)
                raise ApiError(ErrorKind.NOT_FOUND, exc.message, orphans=list(left), workers=worker_bodies(workers),
                               ceased=is_ceased, ceased_reason=why) from None  # fmt: skip
        assert trainjob is not None
        owned = await self._owned_pods(trainjob, jobset, {LABEL_JOBSET_NAME: name})
        pods = list(owned.ours)
        kueue = is_kueue_mode(trainjob)
        workload = await self._workload(ns, ref.uid) if kueue else None
        checks = our_checks(await self._admission_checks()) if kueue else []
        nodes = await self._nodes(pods)
        trainjob = await self._record_jobset(trainjob, jobset)
        s = status(
            trainjob=trainjob,
            workload=workload,
            jobset=jobset,
            pods=pods,
            nodes=nodes,
            runtime_copy=runtime_copy,
            checks=checks,
            node_loss_taints=self.settings.node_loss_taints,
            now=self.now(),
        )
        s = replace(s, foreign=(*s.foreign, *(p.report() for p in owned.foreign)))
        deleting = dig(trainjob, "metadata", "deletionTimestamp")
        if kueue and managed_by_multikueue(trainjob):
            # Stopped, ended or held: it starts nothing more by itself, so Ceased is decided over every worker
            # (not only the one it ran on last), as Stop's answer is.
            idle = "it is being deleted" if deleting else idle_because(trainjob, workload)
            if self.kube.workers is not None and idle is not None and (deleting or not s.ceased):
                s = idle_on_workers(s, idle, await self._remains(ns, name))
            s = await self._on_worker(s, ns, name, workload)
        return StatusResponse.of(ref, s).model_copy(update={"deletion_timestamp": deleting})

    async def _on_worker(self, s: Status, ns: str, name: str, workload: Mapping[str, Any] | None) -> Status:
        """Status ``s`` of a job MultiKueue runs, with the pods of its copy on the worker that runs it
        (agent/domain/status.py ``on_worker``), or with why they are not reported."""
        cluster, remote, why = await self._worker(workload)
        if cluster is None or remote is None:
            return replace(s, cluster=cluster, cluster_reason=why)
        try:
            copy = await self._read(TRAINJOBS.path(ns, name), f"TrainJob {ns}/{name} on worker {cluster}", remote)
            if not copy_of(workload, copy):
                missing = "none" if copy is None else "one that is not MultiKueue's copy of this job"
                return replace(s, cluster=cluster, cluster_reason=f"the worker holds {missing} under its name")
            assert copy is not None
            jobset = await self._read(JOBSETS.path(ns, name), f"JobSet {ns}/{name} on worker {cluster}", remote)
            owned = await self._owned_pods(copy, jobset, {LABEL_JOBSET_NAME: name}, remote)
            pods = list(owned.ours)
            nodes = await self._nodes(pods, remote)
        except ApiError as exc:
            return replace(s, cluster=cluster, cluster_reason=f"cannot be read: {exc.message}")
        foreign = [p.report() for p in owned.foreign]
        return on_worker(s, cluster, copy=copy, jobset=jobset, pods=pods, foreign=foreign, nodes=nodes,
                         node_loss_taints=self.settings.node_loss_taints)  # fmt: skip

    async def _record_jobset(self, trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> Mapping[str, Any]:
        """Record the JobSet's UID the first time Status sees it (in plain mode no gate ever does), so that a
        JobSet Trainer recreates later is reported (foreign). Best effort: a write that loses a race is left
        to the next call; the TrainJob as written (or as read) is what Status reports on."""
        ops = jobset_uid_ops(trainjob, jobset)
        if not ops:
            return trainjob
        ns, name = dig(trainjob, "metadata", "namespace"), dig(trainjob, "metadata", "name")
        try:
            return await self.kube.json_patch(TRAINJOBS.path(ns, name), [*preconditions(trainjob), *ops])
        except KubeError as exc:
            log.info("could not record the JobSet UID on TrainJob %s/%s: %s", ns, name, exc.describe())
            return trainjob

    async def list(self, req: ListRequest) -> ListResponse:
        """One page of dispatch's TrainJobs in a namespace, so a supervisor that lost its state can find (and
        Stop) what it started. Pages are the API server's (``limit``, ``continue``): a page lists fewer items
        than ``limit`` when some TrainJobs read are not dispatch's, and may be empty with a token."""
        prefix = name_prefix(req.job_id)
        try:
            page = await self.kube.page(TRAINJOBS.path(req.namespace), limit=req.limit, token=req.continue_)
        except KubeError as exc:
            if exc.status in (400, 410) and req.continue_:
                raise ApiError(
                    ErrorKind.INVALID, f"the continue token is not valid (any more): {exc.describe()}", field="continue"
                ) from None
            raise read_failed(exc, f"the TrainJobs in {req.namespace}") from None
        trainjobs = list(page.get("items") or [])
        kueue = any(is_kueue_mode(tj) for tj in trainjobs)
        where = f"the Workloads in {req.namespace}"
        workloads = await self._list(WORKLOADS.path(req.namespace), None, where) if kueue else []
        checks = our_checks(await self._admission_checks()) if kueue else []
        items = list_items(trainjobs, workloads, checks, prefix)
        return ListResponse(items=items, continue_=dig(page, "metadata", "continue") or None)
