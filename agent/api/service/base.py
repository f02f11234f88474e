"""The shared shell of the operations: the reads every operation makes (the TrainJob the request names, its
Workload, pods, Nodes, dispatch's AdmissionChecks, the source runtime) and the writes Start and Preflight share
(the TrainJob created after its runtime copy, the copy's ownerReference). ``ServiceBase`` holds the client, the
settings and the clocks; every operation group (start.py, lifecycle.py, status.py, output.py, preflight.py)
derives from it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import Kube, KubeError
from agent.api.models import ObjectRef, RuntimeRef
from agent.api.service.failures import read_failed, runtime_not_yet_seen, write_failed
from agent.api.service.heartbeat import Sighting
from agent.api.service.start_decisions import owner_patch
from agent.api.service.targets import excluded_namespace, needs_labels, own, workload_of
from agent.api.settings import ApiSettings
from agent.domain import pod_owners
from contract.keys import KIND_CLUSTER_TRAINING_RUNTIME, LABEL_WORKLOAD_JOB_UID
from contract.objects import dig
from contract.runtime_requirements import runtime_problems
from contract.trainjob import runtime_copy_owner_reference
from contract.upstream import (
    ADMISSION_CHECKS,
    CLUSTER_TRAINING_RUNTIMES,
    JOBS,
    NAMESPACES,
    NODES,
    PODS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    WORKLOADS,
)

POLL_SECONDS: Final = 0.5
CONFLICT_ATTEMPTS: Final = 5
"""Open, Hold and Release re-read and re-plan this often when the object changed under the write: Trainer's and
Kueue's status writes right after an unsuspend come in a burst that, under load, outlasts three attempts."""
CONFLICT_BACKOFF: Final = 0.2
"""Seconds before the second re-read after a conflict, and that much longer before each next (2 s in all)."""
RUNTIME_CACHE_SECONDS: Final = 10.0
"""How long a TrainJob create is retried while Kueue's or Trainer's webhook has not yet seen its runtime copy."""
DISCARD_PROPAGATION: Final = "Background"
"""A TrainJob Start refuses (or the Preflight probe) never ran: nothing to wait for."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class ServiceBase:
    """The client, the settings and the clocks every operation uses, with the reads and writes they share."""

    kube: Kube
    settings: ApiSettings
    now: Any = _now
    clock: Callable[[], float] = time.monotonic
    """Monotonic: how long this replica has read the same Lease record (``heartbeat``)."""
    # The verdict's (observe_only.py): this replica's sighting of the Lease record.
    _sighting: Sighting | None = field(default=None, init=False, repr=False)

    async def _read(self, path: str, what: str, kube: Kube | None = None) -> dict[str, Any] | None:
        """``kube``: a worker's (Status and Output on a MultiKueue manager); this cluster's when None."""
        try:
            return await (kube or self.kube).get(path)
        except KubeError as exc:
            raise read_failed(exc, what) from None

    async def _list(
        self, path: str, labels: Mapping[str, str] | None, what: str, kube: Kube | None = None
    ) -> list[dict[str, Any]]:
        try:
            return await (kube or self.kube).list(path, labels)
        except KubeError as exc:
            if exc.status == 404:  # the kind is not served (Kueue or JobSet not installed): none of them
                return []
            raise read_failed(exc, what) from None

    async def _owned_pods(
        self,
        trainjob: Mapping[str, Any],
        jobset: Mapping[str, Any] | None,
        selector: Mapping[str, str],
        kube: Kube | None = None,
    ) -> pod_owners.Sorted:
        """The TrainJob's pods matching ``selector``, sorted by the ownership chain (agent/domain/pod_owners.py): a
        pod that merely carries the JobSet's label is reported as foreign, never counted or streamed."""
        ns, name = dig(trainjob, "metadata", "namespace"), dig(trainjob, "metadata", "name")
        labelled = await self._list(PODS.path(ns), selector, f"the pods of {ns}/{name}", kube)
        jobs = {}
        for job_name in pod_owners.job_names(labelled):
            job = await self._read(JOBS.path(ns, job_name), f"Job {ns}/{job_name}", kube)
            if job is not None:
                jobs[job_name] = job
        return pod_owners.sort_pods(trainjob, jobset, labelled, jobs)

    async def _own(self, ref: ObjectRef) -> Mapping[str, Any]:
        trainjob = await self._read(TRAINJOBS.path(ref.namespace, ref.name), f"TrainJob {ref.namespace}/{ref.name}")
        return own(trainjob, ref)

    async def _workload(self, namespace: str, uid: str) -> Mapping[str, Any] | None:
        """The Workload Kueue created for the TrainJob (targets.py ``workload_of``): None when there is none; several
        claiming it raise ``SeveralWorkloads`` (conflict), so Open, Hold, Release and Status write nothing."""
        workloads = await self._list(
            WORKLOADS.path(namespace), {LABEL_WORKLOAD_JOB_UID: uid}, f"the Workloads in {namespace}"
        )
        return workload_of(workloads, uid)

    async def _admission_checks(self) -> list[dict[str, Any]]:
        try:
            return await self.kube.list(ADMISSION_CHECKS.path())
        except KubeError as exc:
            if exc.status == 404:  # Kueue is not installed: there is no check of ours
                return []
            raise read_failed(exc, "the AdmissionChecks") from None

    async def _checks_read(self, names: Sequence[str]) -> dict[str, Mapping[str, Any] | str | None]:
        """Each AdmissionCheck named, from a LIST taken now (the API's role may list them), never one taken
        earlier: the object, None when it is not there, or why the list failed, as agent/domain/multikueue_mode.py
        ``dispatch_mode`` takes them."""
        if not names:
            return {}
        try:
            listed = {str(dig(ac, "metadata", "name")): ac for ac in await self.kube.list(ADMISSION_CHECKS.path())}
        except KubeError as exc:
            return dict.fromkeys(names, exc.describe())
        return {name: listed.get(name) for name in names}

    async def _nodes(self, pods: list[dict[str, Any]], kube: Kube | None = None) -> dict[str, Mapping[str, Any]]:
        nodes: dict[str, Mapping[str, Any]] = {}
        for node_name in sorted({dig(p, "spec", "nodeName") for p in pods} - {None}):
            node = await self._read(NODES.path(name=node_name), f"Node {node_name}", kube)
            if node is not None:
                nodes[node_name] = node
        return nodes

    async def _source_runtime(self, ref: RuntimeRef, namespace: str) -> dict[str, Any]:
        if ref.kind == KIND_CLUSTER_TRAINING_RUNTIME:
            path, where = CLUSTER_TRAINING_RUNTIMES.path(name=ref.name), f"ClusterTrainingRuntime {ref.name}"
        else:
            ns = ref.namespace or namespace
            if ns != namespace:
                # The caller's rights are checked in its own namespace only: reading another namespace's
                # runtime on its behalf would show it what the agent may see and it may not.
                raise ApiError(
                    ErrorKind.INVALID,
                    f"a TrainingRuntime is copied from the TrainJob's own namespace {namespace}, not {ns}; "
                    "use a ClusterTrainingRuntime to share one",
                    field="runtime.namespace",
                )
            path, where = TRAINING_RUNTIMES.path(ns, ref.name), f"TrainingRuntime {ns}/{ref.name}"
        source = await self._read(path, where)
        if source is None:
            raise ApiError(ErrorKind.INVALID, f"{where} does not exist", field="runtime")
        source.setdefault("kind", ref.kind)  # as read, the API server always sets it; kept for the annotation
        problems = runtime_problems(source.get("spec") or {}, allow_rank_restart=self.settings.allow_rank_restart)
        if problems:
            raise ApiError(
                ErrorKind.INVALID,
                f"{where} may run a second execution under the same identity: " + "; ".join(map(str, problems)),
                field="runtime",
            )
        return source

    async def _refuse_excluded(self, namespace: str) -> None:
        """Refuse a namespace out of dispatch's scope (targets.py ``excluded_namespace``), its labels read now when
        the scope has a selector: a namespace relabelled out of scope is refused from that moment. One that is not
        there is refused too (it could be created, unlabelled, before the operation's writes)."""
        scope, labels = self.settings.scope, None
        if needs_labels(scope):
            read = await self._read(NAMESPACES.path(name=namespace), f"namespace {namespace}")
            if read is None:
                raise ApiError(ErrorKind.INVALID, f"namespace {namespace} does not exist", field="namespace")
            labels = dig(read, "metadata", "labels") or {}
        refusal = excluded_namespace(namespace, self.settings.own_namespace, scope, labels)
        if refusal is not None:
            raise refusal

    async def _create_after_copy(self, namespace: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Create a TrainJob right after its runtime copy, riding out the webhooks' cache lag."""
        deadline = time.monotonic() + RUNTIME_CACHE_SECONDS
        while True:
            try:
                return await self.kube.create(TRAINJOBS.path(namespace), body)
            except KubeError as exc:
                if not runtime_not_yet_seen(exc) or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(POLL_SECONDS)

    async def _own_copy(self, copy_read: Mapping[str, Any], trainjob: Mapping[str, Any]) -> None:
        """Add the copy's ownerReference to the TrainJob, so that it goes with it; re-read once on a conflict."""
        owner = runtime_copy_owner_reference(trainjob)
        ns, name = dig(copy_read, "metadata", "namespace"), dig(copy_read, "metadata", "name")
        path = TRAINING_RUNTIMES.path(ns, name)
        for attempt in range(2):
            ops = owner_patch(copy_read, owner)
            if not ops:
                return
            try:
                await self.kube.json_patch(path, ops)
                return
            except KubeError as exc:
                if exc.status not in (409, 422) or attempt:
                    raise write_failed(exc, f"adding the ownerReference to runtime copy {name}") from None
            reread = await self._read(path, f"runtime copy {name}")
            if reread is None or dig(reread, "metadata", "uid") != dig(copy_read, "metadata", "uid"):
                raise ApiError(ErrorKind.CONFLICT, f"runtime copy {ns}/{name} was deleted or replaced during Start")
            copy_read = reread
