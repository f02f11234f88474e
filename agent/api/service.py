"""The operations, as the imperative shell: read, decide with the pure core, write, answer.

Every write goes through ``Kube`` with dispatch's field manager; every update after creation is a JSON
Patch preconditioned on the uid and resourceVersion read (the core writes the ``test``/``replace`` ops).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Any, Final

import aiohttp
from ulid import ULID

from agent.api import decisions as d
from agent.api import principals
from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import Kube, KubeError
from agent.api.models import (
    Capabilities,
    HoldRequest,
    ListRequest,
    ListResponse,
    ObjectRef,
    OpenResponse,
    OutcomeResponse,
    OutputRequest,
    PreflightRequest,
    RuntimeRef,
    StartRequest,
    StartResponse,
    StatusResponse,
    WorkerRemainsModel,
)
from agent.api.settings import ApiSettings
from agent.domain import pod_owners
from agent.domain.decide import Blocker, Mode, dispatch_mode, other_checks
from agent.domain.node_loss import assess
from agent.domain.operations import Plan, Refused, Target, jobset_uid_ops, plan_hold, plan_open, plan_release
from agent.domain.start import (
    NOT_MANAGED,
    earlier_incarnation,
    earlier_incarnation_message,
    multikueue_start_problems,
    multikueue_unproven,
    prologue_configmap_refusal,
    readback_changes,
    workload_problems,
)
from agent.domain.status import Status, copy_of, idle_because, on_worker, orphans, status
from agent.multicluster import kueue_config
from agent.multicluster.worker_proof import all_proven, fenced_apart, proof_problems, worker_lines
from agent.multicluster.worker_remains import (
    Remains,
    ceased_when_gone,
    idle_on_workers,
    plan_remains,
    planned,
    remains,
    start_refusal,
    unread,
)
from agent.multicluster.workers import plan_workers
from contract.admission import admission_started, approval_ops, preconditions, start_count
from contract.foreign import trainer_job_name
from contract.keys import (
    KIND_CLUSTER_TRAINING_RUNTIME,
    LABEL_JOB_COMPLETION_INDEX,
    LABEL_JOBSET_NAME,
    LABEL_QUEUE_NAME,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_WORKLOAD_JOB_UID,
    PROBE_IMAGE,
    TRAINER_CONTAINER,
)
from contract.multicluster import (
    MULTIKUEUE_MANAGED_BY,
    listed_multikueue_checks,
    managed_by_multikueue,
    multikueue_config_of,
)
from contract.objects import dig, labels
from contract.ownership import is_dispatch, is_kueue_mode
from contract.prologue import PROLOGUE_CONFIGMAP, prologue_configmap
from contract.runtime_requirements import runtime_problems
from contract.trainjob import Submission, build_runtime_copy, build_trainjob, runtime_copy_owner_reference
from contract.upstream import (
    ADMISSION_CHECKS,
    CLUSTER_TRAINING_RUNTIMES,
    CONFIG_MAPS,
    JOBS,
    JOBSETS,
    LEASES,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    NAMESPACES,
    NODES,
    PODS,
    SERVICE_ACCOUNTS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
    WORKLOADS,
)
from serving.kube import describe_error

POLL_SECONDS: Final = 0.5
CONFLICT_ATTEMPTS: Final = 3
"""Open, Hold and Release re-read and re-plan this often when the object changed under the write."""
CONFLICT_BACKOFF: Final = 0.2
"""Seconds before the second re-read after a conflict (twice that before the third)."""
RUNTIME_CACHE_SECONDS: Final = 10.0
"""How long a TrainJob create is retried while Kueue's or Trainer's webhook has not yet seen its runtime copy."""
Planner = Callable[["Seen"], Plan]
STOP_PROPAGATION: Final = "Foreground"
"""Stop deletes in the foreground: the TrainJob stays readable (with a deletionTimestamp) until every
dependent that blocks its deletion — JobSet, Jobs, pods — is gone, so Status keeps reporting each pod's
verdict and Ceased while the job stops, instead of leaving anonymous orphans. The runtime copy
(``blockOwnerDeletion: false``) is deleted by the garbage collector too, without holding the TrainJob."""
DISCARD_PROPAGATION: Final = "Background"
"""A TrainJob Start refuses (or the Preflight probe) never ran: nothing to wait for."""

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Seen:
    """What Open, Hold and Release plan from: the TrainJob, and (as the operation needs them) its Workload,
    its JobSet, and the pods of a previous execution that may still run."""

    trainjob: Mapping[str, Any]
    workload: Mapping[str, Any] | None = None
    jobset: Mapping[str, Any] | None = None
    blockers: tuple[Blocker, ...] = ()


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _worker_bodies(workers: list[Remains]) -> list[dict[str, Any]]:
    """What is left on each worker, as an error body carries it."""
    return [WorkerRemainsModel.of(w).model_dump(by_alias=True) for w in workers]


@dataclass
class Service:
    kube: Kube
    settings: ApiSettings
    now: Any = _now
    clock: Callable[[], float] = time.monotonic
    """Monotonic: how long this replica has read the same Lease record (``d.heartbeat``)."""
    _sighting: d.Sighting | None = field(default=None, init=False, repr=False)

    # -- shared reads ------------------------------------------------------------------------------

    async def _read(self, path: str, what: str, kube: Kube | None = None) -> dict[str, Any] | None:
        """``kube``: a worker's (Status and Output on a MultiKueue manager); this cluster's when None."""
        try:
            return await (kube or self.kube).get(path)
        except KubeError as exc:
            raise d.read_failed(exc, what) from None

    async def _list(
        self, path: str, labels: Mapping[str, str] | None, what: str, kube: Kube | None = None
    ) -> list[dict[str, Any]]:
        try:
            return await (kube or self.kube).list(path, labels)
        except KubeError as exc:
            if exc.status == 404:  # the kind is not served (Kueue or JobSet not installed): none of them
                return []
            raise d.read_failed(exc, what) from None

    async def _owned_pods(
        self,
        trainjob: Mapping[str, Any],
        jobset: Mapping[str, Any] | None,
        selector: Mapping[str, str],
        kube: Kube | None = None,
    ) -> pod_owners.Sorted:
        """The TrainJob's pods matching ``selector``, sorted by the ownership chain (agent/pod_owners.py): a
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
        return d.own(trainjob, ref)

    async def _workload(self, namespace: str, uid: str) -> Mapping[str, Any] | None:
        """The Workload Kueue created for the TrainJob (decisions.workload_of): None when there is none; several
        claiming it raise ``SeveralWorkloads`` (conflict), so Open, Hold, Release and Status write nothing."""
        workloads = await self._list(
            WORKLOADS.path(namespace), {LABEL_WORKLOAD_JOB_UID: uid}, f"the Workloads in {namespace}"
        )
        return d.workload_of(workloads, uid)

    async def _admission_checks(self) -> list[dict[str, Any]]:
        try:
            return await self.kube.list(ADMISSION_CHECKS.path())
        except KubeError as exc:
            if exc.status == 404:  # Kueue is not installed: there is no check of ours
                return []
            raise d.read_failed(exc, "the AdmissionChecks") from None

    async def _checks_read(self, names: Sequence[str]) -> dict[str, Mapping[str, Any] | str | None]:
        """Each AdmissionCheck named, from a LIST taken now (the API's role may list them), never one taken
        earlier: the object, None when it is not there, or why the list failed, as agent/domain/decide.py
        ``dispatch_mode`` takes them."""
        if not names:
            return {}
        try:
            listed = {str(dig(ac, "metadata", "name")): ac for ac in await self.kube.list(ADMISSION_CHECKS.path())}
        except KubeError as exc:
            return dict.fromkeys(names, exc.describe())
        return {name: listed.get(name) for name in names}

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

    # -- Start -------------------------------------------------------------------------------------

    def _refuse_excluded(self, namespace: str) -> None:
        refusal = d.excluded_namespace(namespace, self.settings.own_namespace)
        if refusal is not None:
            raise refusal

    async def start(self, req: StartRequest) -> StartResponse:
        self._refuse_excluded(req.namespace)
        sub = req.submission(self.settings.site_labels, self.settings.site_annotations)
        name = d.contract(lambda: sub.name)
        source = await self._source_runtime(req.runtime, req.namespace)
        built = d.contract(build_trainjob, sub, source["spec"])
        copy_built = d.contract(build_runtime_copy, sub, source)
        await self._ensure_prologue(sub.namespace)
        tj_path = TRAINJOBS.path(sub.namespace, name)
        existing = await self._read(tj_path, f"TrainJob {sub.namespace}/{name}")
        if existing is not None:
            trainjob = self._take_existing(built, existing)
            copy_read = await self._read(TRAINING_RUNTIMES.path(sub.namespace, name), f"runtime copy {name}")
            if copy_read is None:
                raise ApiError(
                    ErrorKind.CONFLICT, f"TrainJob {sub.namespace}/{name} exists but its runtime copy does not"
                )
        else:
            await self._refuse_earlier_incarnation(sub.namespace, name)
            copy_read, built = await self._create_copy(sub, copy_built, built)
            trainjob = await self._create_trainjob(tj_path, built)
        uid = str(dig(trainjob, "metadata", "uid"))
        await self._own_copy(copy_read, trainjob)
        refusal = await self._verify(tj_path, built, uid, copy_read.get("spec") or {})
        if refusal is not None:
            await self._discard(sub.namespace, name, uid, copy_read)
            raise refusal
        return StartResponse(namespace=sub.namespace, name=name, uid=uid)

    async def _ensure_prologue(self, namespace: str) -> None:
        """The prologue's ConfigMap in ``namespace``, which every trainer pod mounts (a pod without it does not
        start): read, and created when missing. Read first: after a namespace's first job it is there, and a
        GET costs the API server less than a create answered 409 after admission. On a 409 (a concurrent Start)
        it is read again; one that is not exactly dispatch's refuses Start before anything is written."""
        path = CONFIG_MAPS.path(namespace, PROLOGUE_CONFIGMAP)
        where = f"ConfigMap {namespace}/{PROLOGUE_CONFIGMAP}"
        read = await self._read(path, where)
        if read is None:
            try:
                await self.kube.create(CONFIG_MAPS.path(namespace), prologue_configmap(namespace))
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise d.create_failed(exc, f"the prologue's {where}", namespace) from None
            read = await self._read(path, where)
        refusal = prologue_configmap_refusal(namespace, read)
        if refusal is not None:
            raise ApiError(ErrorKind.CONFLICT, refusal)

    async def _refuse_earlier_incarnation(self, namespace: str, name: str) -> None:
        """Refuse (``conflict``, with the orphans) a name an earlier TrainJob left something under. Read parents
        before children: nothing creates a child of the name once its parent was seen gone (the TrainJob was
        read gone first), so a look that finds nothing stays true until the create."""
        jobset = await self._read(JOBSETS.path(namespace, name), f"JobSet {namespace}/{name}")
        pods = await self._list(PODS.path(namespace), {LABEL_JOBSET_NAME: name}, f"the pods of {namespace}/{name}")
        runtime_copy = await self._read(TRAINING_RUNTIMES.path(namespace, name), f"runtime copy {namespace}/{name}")
        left = earlier_incarnation(namespace, name, jobset=jobset, pods=pods, runtime_copy=runtime_copy)
        if left:
            raise ApiError(ErrorKind.CONFLICT, earlier_incarnation_message(namespace, name, left), orphans=list(left))
        if self.kube.workers is not None:
            # On a MultiKueue manager an earlier TrainJob of the name ran as MultiKueue's copy on a worker, and what
            # it left there is not in this API (agent/multicluster/worker_remains.py).
            workers = await self._remains(namespace, name)
            refusal = start_refusal(namespace, name, workers)
            if refusal is not None:
                kind, message = refusal
                raise ApiError(ErrorKind(kind), message, orphans=[], workers=_worker_bodies(workers))

    async def _verify(
        self, path: str, built: Mapping[str, Any], uid: str, runtime_spec: Mapping[str, Any]
    ) -> ApiError | None:
        """Why Start must stop the TrainJob it created: changed since written, or (Kueue mode) not managed by
        Kueue as dispatch needs, or (MultiKueue) not numberable as dispatch needs (``runtime_spec``: the runtime
        copy's). None when it may stand. A failure to read is raised, not a refusal: the object may be fine,
        and a retried Start takes it up again."""
        where = f"TrainJob {built['metadata']['namespace']}/{built['metadata']['name']}"
        read = await self._read(path, where)
        if read is None or dig(read, "metadata", "uid") != uid:
            raise ApiError(ErrorKind.CONFLICT, f"{where} was deleted or replaced during Start")
        changes = readback_changes(built, read)
        if changes:
            return ApiError(
                ErrorKind.CONFLICT, f"{where} changed after creation, so it was stopped: " + "; ".join(changes)
            )
        if is_kueue_mode(read):
            problems = await self._wait_for_workload(built["metadata"]["namespace"], uid, read, runtime_spec)
            if problems:
                return ApiError(ErrorKind.REJECTED, "; ".join(problems) + f"; {where} was stopped")
        elif managed_by_multikueue(read):
            return ApiError(ErrorKind.CONFLICT, f"{where} changed after creation, so it was stopped: spec.managedBy "
                            f"is {MULTIKUEUE_MANAGED_BY!r} on a TrainJob without a queue")  # fmt: skip
        return None

    def _take_existing(self, built: Mapping[str, Any], existing: Mapping[str, Any]) -> Mapping[str, Any]:
        problems = d.existing_problems(built, existing)
        if problems:
            where = f"{dig(existing, 'metadata', 'namespace')}/{dig(existing, 'metadata', 'name')}"
            raise ApiError(
                ErrorKind.CONFLICT,
                f"TrainJob {where} exists and is not the one this request creates, as created: " + "; ".join(problems),
            )
        return existing

    async def _create_copy(
        self, sub: Submission, copy_built: Mapping[str, Any], built: dict[str, Any]
    ) -> tuple[Mapping[str, Any], dict[str, Any]]:
        """The runtime copy, created; or one an interrupted Start left, and the TrainJob built against it."""
        path = TRAINING_RUNTIMES.path(sub.namespace)
        try:
            return await self.kube.create(path, copy_built), built
        except KubeError as exc:
            if exc.status != 409:
                raise d.create_failed(exc, f"runtime copy {sub.name}", sub.namespace) from None
        left = await self._read(TRAINING_RUNTIMES.path(sub.namespace, sub.name), f"runtime copy {sub.name}")
        problems = ["it vanished while being read"] if left is None else d.copy_problems(left, sub)
        if problems:
            raise ApiError(
                ErrorKind.CONFLICT,
                f"a TrainingRuntime {sub.namespace}/{sub.name} exists and cannot be this job's runtime copy: "
                + "; ".join(problems),
            )
        assert left is not None
        spec = left.get("spec") or {}
        problems_found = runtime_problems(spec, allow_rank_restart=self.settings.allow_rank_restart)
        if problems_found:
            raise ApiError(
                ErrorKind.CONFLICT,
                f"the runtime copy {sub.name} left by an earlier Start fails the runtime requirements: "
                + "; ".join(map(str, problems_found)),
            )
        return left, d.contract(build_trainjob, sub, spec)

    async def _create_after_copy(self, namespace: str, body: Mapping[str, Any]) -> Mapping[str, Any]:
        """Create a TrainJob right after its runtime copy, riding out the webhooks' cache lag."""
        deadline = time.monotonic() + RUNTIME_CACHE_SECONDS
        while True:
            try:
                return await self.kube.create(TRAINJOBS.path(namespace), body)
            except KubeError as exc:
                if not d.runtime_not_yet_seen(exc) or time.monotonic() >= deadline:
                    raise
            await asyncio.sleep(POLL_SECONDS)

    async def _create_trainjob(self, path_for_name: str, built: Mapping[str, Any]) -> Mapping[str, Any]:
        namespace = built["metadata"]["namespace"]
        try:
            return await self._create_after_copy(namespace, built)
        except KubeError as exc:
            if exc.status != 409:
                raise d.create_failed(exc, f"TrainJob {built['metadata']['name']}", namespace) from None
        # Created meanwhile by a concurrent Start (or left by one): the same rule as for an existing one.
        existing = await self._read(path_for_name, f"TrainJob {namespace}/{built['metadata']['name']}")
        if existing is None:
            raise ApiError(ErrorKind.CONFLICT, "the TrainJob was created and deleted concurrently; retry")
        return self._take_existing(built, existing)

    async def _own_copy(self, copy_read: Mapping[str, Any], trainjob: Mapping[str, Any]) -> None:
        """Add the copy's ownerReference to the TrainJob, so that it goes with it; re-read once on a conflict."""
        owner = runtime_copy_owner_reference(trainjob)
        ns, name = dig(copy_read, "metadata", "namespace"), dig(copy_read, "metadata", "name")
        path = TRAINING_RUNTIMES.path(ns, name)
        for attempt in range(2):
            ops = d.owner_patch(copy_read, owner)
            if not ops:
                return
            try:
                await self.kube.json_patch(path, ops)
                return
            except KubeError as exc:
                if exc.status not in (409, 422) or attempt:
                    raise d.write_failed(exc, f"adding the ownerReference to runtime copy {name}") from None
            reread = await self._read(path, f"runtime copy {name}")
            if reread is None or dig(reread, "metadata", "uid") != dig(copy_read, "metadata", "uid"):
                raise ApiError(ErrorKind.CONFLICT, f"runtime copy {ns}/{name} was deleted or replaced during Start")
            copy_read = reread

    async def _wait_for_workload(
        self, namespace: str, uid: str, read: Mapping[str, Any], runtime_spec: Mapping[str, Any]
    ) -> list[str]:
        """Kueue mode: the Workload with the gate and dispatch's check, within timeouts.workload; and one
        that Kueue will not admit past that check. Several Workloads claiming the TrainJob are a problem like
        a missing one: waited on, then the TrainJob is stopped and Start refused, naming them. Once it is
        there, MultiKueue's conditions (agent/domain/start.py ``multikueue_start_problems``)."""
        deadline = time.monotonic() + self.settings.workload_timeout
        listed = await self._admission_checks()
        checks = d.our_checks(listed)
        while True:
            try:
                workload = await self._workload(namespace, uid)
                problems = workload_problems(workload, checks)
            except d.SeveralWorkloads as exc:  # not one Workload of its own: waited on, then refused naming them
                workload, problems = None, [exc.message]
            if not problems or time.monotonic() >= deadline:
                unchecked = d.unchecked(workload)
                problems += [f"{NOT_MANAGED}: {unchecked}"] if unchecked else []
                if problems:
                    return problems
                found = await self._checks_read(other_checks(workload, checks))
                return multikueue_start_problems(read, found, runtime_spec, min_dispatches=self.settings.min_dispatches)
            await asyncio.sleep(POLL_SECONDS)

    async def _discard(self, namespace: str, name: str, uid: str, copy_read: Mapping[str, Any]) -> None:
        """Stop a TrainJob Start refuses, and its copy (which may not be owned yet). Shielded: a caller that
        goes away must not leave it behind."""

        async def discard() -> None:
            try:
                await self.kube.delete(TRAINJOBS.path(namespace, name), uid=uid, propagation=DISCARD_PROPAGATION)
                copy_uid = dig(copy_read, "metadata", "uid")
                if copy_uid:
                    await self.kube.delete(
                        TRAINING_RUNTIMES.path(namespace, name), uid=copy_uid, propagation=DISCARD_PROPAGATION
                    )
            except KubeError as exc:
                log.error("could not stop the refused TrainJob %s/%s (uid %s): %s", namespace, name, uid, exc)

        await asyncio.shield(discard())

    # -- Open, Hold, Release -------------------------------------------------------------------------

    async def _apply(self, plan: Plan, trainjob: Mapping[str, Any], workload: Mapping[str, Any] | None) -> bool:
        """Send the plan's writes in order; False when an object changed since it was read (409: re-read,
        re-plan; what was written before is then read as done, and not planned again)."""
        versions: dict[Any, str] = {}  # the resourceVersion each object's last write left
        for write in plan.writes:
            target = trainjob if write.target is Target.TRAINJOB else workload
            assert target is not None  # the core plans a Workload write only with a Workload
            resource = TRAINJOBS if write.target is Target.TRAINJOB else WORKLOADS
            status = "status" if write.target is Target.WORKLOAD_STATUS else None
            ns, name = dig(target, "metadata", "namespace"), dig(target, "metadata", "name")
            try:
                written = await self.kube.json_patch(
                    resource.path(ns, name, status), d.after_own_write(write.patch, versions.get(resource))
                )
                versions[resource] = str(dig(written, "metadata", "resourceVersion"))
            except KubeError as exc:
                if exc.status == 409 and not exc.webhook_denial:
                    return False
                raise d.write_failed(exc, f"{write.target.value} {ns}/{name}") from None
        return True

    async def _blockers(self, trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> tuple[Blocker, ...]:
        """The TrainJob's pods that may still run (the node-loss classification), each with why; sorted by the
        ownership chain as the gate sorts them (a stranger's pod carrying the label is not waited on). Called
        only for a suspended TrainJob about to be unsuspended, so each of them is of a previous execution."""
        owned = await self._owned_pods(trainjob, jobset, {LABEL_JOBSET_NAME: str(dig(trainjob, "metadata", "name"))})
        pods = list(owned.ours)
        assessment = assess(pods, await self._nodes(pods), self.settings.node_loss_taints)
        return tuple(Blocker(pod, f"{c.verdict.value}: {c.reason}") for pod, c in assessment.may_still_run)

    async def _nodes(self, pods: list[dict[str, Any]], kube: Kube | None = None) -> dict[str, Mapping[str, Any]]:
        nodes: dict[str, Mapping[str, Any]] = {}
        for node_name in sorted({dig(p, "spec", "nodeName") for p in pods} - {None}):
            node = await self._read(NODES.path(name=node_name), f"Node {node_name}", kube)
            if node is not None:
                nodes[node_name] = node
        return nodes

    async def _plan_and_apply(self, ref: ObjectRef, planner: Planner, *, unsuspends: bool = False) -> Plan:
        """Read, plan with the core, send the plan's writes in order; on a resourceVersion conflict, all of it
        again from a fresh read (a write already sent is then read as done, and not planned again).

        Why retry here rather than answer conflict: Trainer and Kueue write the TrainJob and the Workload
        (status, conditions) all the time, so a write preconditioned on a read a moment old often loses the
        race right after Start or an admission. Re-planning from a new read is exactly what the supervisor
        would do on a conflict, and the precondition still guarantees that nothing is written from a stale
        read. A different UID is never retried: the read refuses it.

        ``unsuspends``: the operation may unsuspend a plain-mode TrainJob (Open, Release), so the pods of a
        previous execution are read after the TrainJob (a pod seen gone here stays gone: the TrainJob is
        suspended as read, and the write is preconditioned on that read).
        """
        for attempt in range(CONFLICT_ATTEMPTS):
            if attempt:  # the writer that won is often mid-burst (status after a suspend): let it settle
                await asyncio.sleep(CONFLICT_BACKOFF * attempt)
            trainjob = await self._own(ref)
            kueue = is_kueue_mode(trainjob)
            workload = await self._workload(ref.namespace, ref.uid) if kueue else None
            jobset = await self._read(JOBSETS.path(ref.namespace, ref.name), f"JobSet {ref.namespace}/{ref.name}")
            blockers = await self._blockers(trainjob, jobset) if unsuspends and not kueue else ()
            try:
                plan = planner(Seen(trainjob, workload, jobset, blockers))
            except Refused as exc:
                raise d.refused(exc) from None
            if await self._apply(plan, trainjob, workload):
                return plan
        raise ApiError(
            ErrorKind.CONFLICT,
            f"TrainJob {ref.namespace}/{ref.name} (or its Workload) changed under each of {CONFLICT_ATTEMPTS} writes; "
            "re-read and retry",
        )

    async def open(self, ref: ObjectRef) -> OpenResponse:
        plan = await self._plan_and_apply(
            ref,
            lambda s: plan_open(s.trainjob, jobset=s.jobset, blockers=s.blockers, workload=s.workload),
            unsuspends=True,
        )
        return OpenResponse(outcome=plan.outcome, held_by=list(plan.held_by), a=plan.new_a)

    async def hold(self, req: HoldRequest) -> OutcomeResponse:
        hold = d.hold_of(instance=str(ULID()), now=self.now(), who=req.who, reason=req.reason, until=req.until)
        # dispatch's checks: on a MultiKueue manager Hold sets them Retry (agent/domain/operations.py says why).
        checks = d.our_checks(await self._admission_checks())
        plan = await self._plan_and_apply(req, lambda s: plan_hold(s.trainjob, s.workload, hold, checks=checks))
        return OutcomeResponse(outcome=plan.outcome, a=plan.new_a)

    async def release(self, ref: ObjectRef) -> OutcomeResponse:
        plan = await self._plan_and_apply(
            ref,
            lambda s: plan_release(s.trainjob, s.workload, jobset=s.jobset, blockers=s.blockers),
            unsuspends=True,
        )
        return OutcomeResponse(outcome=plan.outcome, a=plan.new_a)

    # -- Stop ----------------------------------------------------------------------------------------

    async def stop(self, ref: ObjectRef) -> OutcomeResponse:
        """Delete the TrainJob if it is still the one with the UID; gone already is success (idempotent)."""
        path = TRAINJOBS.path(ref.namespace, ref.name)
        current = await self._read(path, f"TrainJob {ref.namespace}/{ref.name}")
        if current is None:
            return await self._stopped(ref, "already gone", None)
        d.own(current, ref)  # dispatch's, and the supervisor's (the uid); the delete pins that uid again
        try:
            deleted = await self.kube.delete(path, uid=ref.uid, propagation=STOP_PROPAGATION)
        except KubeError as exc:
            if exc.status == 409:
                raise ApiError(
                    ErrorKind.CONFLICT,
                    f"TrainJob {ref.namespace}/{ref.name} is a different object of the same name ({exc.message})",
                ) from None
            raise d.write_failed(exc, f"TrainJob {ref.namespace}/{ref.name}") from None
        return await self._stopped(ref, "stopping" if deleted else "already gone", current)

    async def _stopped(self, ref: ObjectRef, outcome: str, trainjob: Mapping[str, Any] | None) -> OutcomeResponse:
        """Stop's answer; on a MultiKueue manager, with what of the job is still on each worker: the manager's
        TrainJob holds no pods and goes at once, while MultiKueue deletes a worker's copy only when it can reach
        that worker, and without waiting for its pods (docs/multicluster.md, "Stop across clusters")."""
        if self.kube.workers is None or (trainjob is not None and not managed_by_multikueue(trainjob)):
            return OutcomeResponse(outcome=outcome)
        workers = await self._remains(ref.namespace, ref.name)
        return OutcomeResponse(outcome=outcome, workers=[WorkerRemainsModel.of(w) for w in workers])

    # -- Status --------------------------------------------------------------------------------------

    async def status(self, ref: ObjectRef) -> StatusResponse:
        ns, name = ref.namespace, ref.name
        trainjob = await self._read(TRAINJOBS.path(ns, name), f"TrainJob {ns}/{name}")
        if trainjob is not None and not is_dispatch(trainjob):
            raise d.not_dispatchs(f"TrainJob {ns}/{name}")  # nothing more is read for it
        jobset = await self._read(JOBSETS.path(ns, name), f"JobSet {ns}/{name}")
        runtime_copy = await self._read(TRAINING_RUNTIMES.path(ns, name), f"runtime copy {ns}/{name}")
        if trainjob is None or dig(trainjob, "metadata", "uid") != ref.uid:
            pods = await self._list(PODS.path(ns), {LABEL_JOBSET_NAME: name}, f"the pods of {ns}/{name}")
            left = orphans(trainjob, namespace=ns, jobset=jobset, pods=pods, runtime_copy=runtime_copy)
            try:
                d.own(trainjob, ref)
            except ApiError as exc:
                if trainjob is not None or self.kube.workers is None:
                    raise ApiError(ErrorKind.NOT_FOUND, exc.message, orphans=list(left)) from None
                # On a MultiKueue manager: gone here, and with it the Workload that said where it went, so every
                # worker is read for what it left (agent/multicluster/worker_remains.py).
                workers = await self._remains(ns, name)
                is_ceased, why = ceased_when_gone(left, workers)
                raise ApiError(ErrorKind.NOT_FOUND, exc.message, orphans=list(left), workers=_worker_bodies(workers),
                               ceased=is_ceased, ceased_reason=why) from None  # fmt: skip
        assert trainjob is not None
        owned = await self._owned_pods(trainjob, jobset, {LABEL_JOBSET_NAME: name})
        pods = list(owned.ours)
        kueue = is_kueue_mode(trainjob)
        workload = await self._workload(ns, ref.uid) if kueue else None
        checks = d.our_checks(await self._admission_checks()) if kueue else []
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

    # -- List ----------------------------------------------------------------------------------------

    async def list(self, req: ListRequest) -> ListResponse:
        """One page of dispatch's TrainJobs in a namespace, so a supervisor that lost its state can find (and
        Stop) what it started. Pages are the API server's (``limit``, ``continue``): a page lists fewer items
        than ``limit`` when some TrainJobs read are not dispatch's, and may be empty with a token."""
        prefix = d.name_prefix(req.job_id)
        try:
            page = await self.kube.page(TRAINJOBS.path(req.namespace), limit=req.limit, token=req.continue_)
        except KubeError as exc:
            if exc.status in (400, 410) and req.continue_:
                raise ApiError(
                    ErrorKind.INVALID, f"the continue token is not valid (any more): {exc.describe()}", field="continue"
                ) from None
            raise d.read_failed(exc, f"the TrainJobs in {req.namespace}") from None
        trainjobs = list(page.get("items") or [])
        kueue = any(is_kueue_mode(tj) for tj in trainjobs)
        where = f"the Workloads in {req.namespace}"
        workloads = await self._list(WORKLOADS.path(req.namespace), None, where) if kueue else []
        checks = d.our_checks(await self._admission_checks()) if kueue else []
        items = d.list_items(trainjobs, workloads, checks, prefix)
        return ListResponse(items=items, continue_=dig(page, "metadata", "continue") or None)

    # -- Output --------------------------------------------------------------------------------------

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
        pod = d.rank0([p for p in owned.ours if dig(p, "metadata", "name") not in owned.unproven])
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

    # -- Preflight -----------------------------------------------------------------------------------

    # The verdict is cluster state, one annotation per mode on the readmission controller's Lease, so that every
    # replica behind the Service answers alike (a Preflight reaches one of them), and a restart forgets nothing.
    # Kueue mode's holds only while that Lease is renewed: the controller runs in the agent's leader.

    @property
    def _lease_path(self) -> str:
        return LEASES.path(self.settings.lease_namespace, self.settings.lease_name)

    @property
    def _lease_where(self) -> str:
        return f"{self.settings.lease_namespace}/{self.settings.lease_name}"

    def _beat(self, lease: Mapping[str, Any] | None) -> d.Heartbeat:
        """The readmission controller's heartbeat from this read of its Lease (this replica's sighting kept)."""
        self._sighting = d.sighted(self._sighting, lease, self.clock())
        return d.heartbeat(lease, self._sighting, now=self.now(), clock=self.clock(), where=self._lease_where)

    async def capabilities(self) -> Capabilities:
        """The report in force for the mode whose Preflight ran last, whichever replica ran it (in Kueue mode
        only while the controller's Lease is renewed); before any, what ``requirePreflight`` says."""
        lease = await self._read(self._lease_path, f"Lease {self._lease_where}")
        kueue = d.latest_mode(lease)
        if kueue is None:
            return d.no_verdict(self.settings.require_preflight)
        verdict = d.verdict_of(lease, kueue)
        return d.in_force(verdict, self._beat(lease), kueue=kueue, require_preflight=self.settings.require_preflight)

    async def _mode_of(self, req: Any) -> bool | None:
        """The mode a call that may let something run acts in (True: Kueue): Start's request says; Open and
        Release act on the TrainJob's. None when there is no dispatch TrainJob of that uid: the operation
        itself then answers (not found, not dispatch's, another object), and nothing about it is revealed."""
        if isinstance(req, StartRequest):
            return req.kueue is not None
        if not isinstance(req, ObjectRef):
            return None
        trainjob = await self._read(TRAINJOBS.path(req.namespace, req.name), f"TrainJob {req.namespace}/{req.name}")
        if not is_dispatch(trainjob) or dig(trainjob, "metadata", "uid") != req.uid:
            return None
        return is_kueue_mode(trainjob)

    async def refuse_if_observe_only(self, req: Any) -> None:
        """Refuse a call that may let something run while its mode is observe-only: the mode's last verdict
        failed (or none passed, with ``requirePreflight``), or, in Kueue mode, the readmission controller's
        Lease is not being renewed."""
        lease = await self._read(self._lease_path, f"Lease {self._lease_where}")
        beat, strict = self._beat(lease), self.settings.require_preflight
        why = {k: d.refusal(d.verdict_of(lease, k), beat, kueue=k, require_preflight=strict) for k in (True, False)}
        if not any(why.values()):
            return  # the usual case: no mode is observe-only, so the call's mode need not be read
        kueue = await self._mode_of(req)
        if kueue is not None and why[kueue] is not None:
            raise ApiError(ErrorKind.OBSERVE_ONLY, why[kueue])

    async def _record(self, report: Capabilities, kueue: bool) -> None:
        """Write the verdict onto the Lease: a PUT carrying the resourceVersion read (so neither this write nor
        the leader's renewal, which writes the Lease as it read it, loses the other's), or a create when there
        is no Lease yet (the leader then takes it over). Re-read and retried on a conflict."""
        text = d.verdict_text(report, d.rfc3339(self.now()))
        ns, name, where = self.settings.lease_namespace, self.settings.lease_name, self._lease_where
        for _ in range(CONFLICT_ATTEMPTS):
            lease = await self._read(self._lease_path, f"Lease {where}")
            try:
                if lease is None:
                    await self.kube.create(LEASES.path(ns), d.lease_with_verdict(None, text, ns, name, kueue))
                else:
                    await self.kube.replace(self._lease_path, d.lease_with_verdict(lease, text, ns, name, kueue))
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise ApiError(
                        ErrorKind.UNAVAILABLE,
                        f"the Preflight's verdict could not be recorded on the Lease {where}, so the replicas "
                        f"would not share it: {exc.describe()}",
                    ) from None
        raise ApiError(ErrorKind.UNAVAILABLE, f"the Lease {where} changed under each write of the verdict; retry")

    async def _heartbeat(self, first: Mapping[str, Any] | None, since: float) -> d.LeaseState:
        """Is the readmission controller alive? Judged by watching its Lease change, by this agent's own
        monotonic clock, never by comparing the renewTime another machine wrote with this one's wall clock:
        alive once the record changes while watched; dead when it is released (no holder), absent, or has not
        changed for its leaseDurationSeconds of watching."""
        while True:
            last = await self._read(self._lease_path, f"Lease {self._lease_where}")
            if first is None and last is not None:
                first, since = last, time.monotonic()
            state = d.lease_state(first, last, time.monotonic() - since, self._lease_where)
            if state.settled:
                return state
            await asyncio.sleep(POLL_SECONDS)

    async def preflight(self, req: PreflightRequest) -> Capabilities:
        self._refuse_excluded(req.namespace)
        kueue = req.kueue is not None
        try:
            versions = d.api_versions(await self.kube.discovery())
        except KubeError as exc:
            raise d.read_failed(exc, "the API groups") from None
        source = await self._source_runtime(req.runtime, req.namespace)
        admission_checks = await self._admission_checks() if kueue else []
        checks = d.our_checks(admission_checks)
        try:
            trainer_problems = d.trainjob_schema_problems(await self.kube.openapi_v3(f"{TRAINJOBS.group}/v1alpha1"))
        except KubeError as exc:
            raise d.read_failed(exc, "the served TrainJob schema (/openapi/v3)") from None
        try:
            records = await self.kube.serves("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy")
        except KubeError as exc:
            raise d.read_failed(exc, "the admission API (/apis/admissionregistration.k8s.io/v1)") from None
        owners = await self._principal_problems()
        first = await self._read(self._lease_path, f"Lease {self._lease_where}")
        watching = time.monotonic()
        probe = await self._probe(req, source, checks)
        lease = await self._heartbeat(first, watching) if kueue else d.not_watched(first)
        report = d.capabilities(
            kueue=kueue,
            probe=probe,
            lease=lease,
            versions=versions,
            checks=checks,
            active_checks=d.active(admission_checks, checks),
            trainer_problems=[*trainer_problems, *(owners or [])],
            records_in_process=records,
            owners_proven=owners is not None,
            owner_notes=principals.principal_notes(self.settings.owners) if self.settings.owners else (),
        )
        await self._record(report, kueue)
        if report.observe_only:
            log.warning("Preflight failed, observe-only: %s", report.observe_only_reason)
        return report

    async def _principal_problems(self) -> list[str] | None:
        """Why a principal the owner policies name is not proven the component's (agent/api/principals.py decides
        from what is read here); None when the agent was not given them (``api.owners``)."""
        owners = self.settings.owners
        if owners is None:
            return None
        want = principals.wanted(owners)
        # Lists, not generators: an await inside a generator expression makes it an async one.
        namespaces = frozenset(
            [ns for ns in want.namespaces if await self._read(NAMESPACES.path(name=ns), f"namespace {ns}") is not None]
        )
        accounts = frozenset(
            [
                (ns, name)
                for ns, name in want.service_accounts
                if ns in namespaces
                and await self._read(SERVICE_ACCOUNTS.path(ns, name), f"ServiceAccount {ns}/{name}") is not None
            ]
        )
        pods = [
            pod
            for ns in sorted(want.pod_namespaces & namespaces)
            for pod in await self._list(PODS.path(ns), None, f"the pods of {ns}")
        ]
        seen = principals.Seen(namespaces, accounts, principals.running_as(pods))
        return principals.principal_problems(owners, seen)

    async def _probe(
        self,
        req: PreflightRequest,
        source: Mapping[str, Any],
        checks: list[str],
    ) -> d.ProbeResult:
        sub = Submission(
            job_id=str(ULID()),
            n=0,
            g=0,
            attempt=0,
            namespace=req.namespace,
            image=PROBE_IMAGE,
            command=["dispatch-preflight-probe"],
            queue=req.kueue.local_queue if req.kueue else None,
            priority_class=req.kueue.priority_class if req.kueue else None,
            site_labels=self.settings.site_labels,
            site_annotations=self.settings.site_annotations,
        )
        seconds = self.settings.probe_seconds
        probe = d.contract(d.probe_trainjob, sub, source["spec"])
        copy_built = d.contract(build_runtime_copy, sub, source)
        copy_read: Mapping[str, Any] | None = None
        trainjob: Mapping[str, Any] | None = None
        try:
            try:
                copy_read = await self.kube.create(TRAINING_RUNTIMES.path(req.namespace), copy_built)
                trainjob = await self._create_after_copy(req.namespace, probe)
            except KubeError as exc:
                raise d.create_failed(exc, "the probe", req.namespace) from None
            await self._own_copy(copy_read, trainjob)
            refusal = unnumbered = unapproved = None
            if req.kueue:
                unnumbered, unapproved = await self._try_admission(req.namespace, trainjob)
            else:
                refusal = await self._try_open(req.namespace, trainjob)
            result = await self._watch_probe(req.namespace, trainjob, checks, seconds)
            return replace(result, open_refused=refusal, unnumbered=unnumbered, unapproved=unapproved)
        except ApiError as exc:
            if exc.kind is ErrorKind.INVALID:
                raise
            return d.ProbeResult(seconds, error=exc.message)
        finally:
            await asyncio.shield(self._remove_probe(req.namespace, sub.name, trainjob, copy_read))

    async def _try_open(self, namespace: str, trainjob: Mapping[str, Any]) -> str | None:
        """Plain mode: send Open's own write for the probe (raise A, unsuspend, the opened mark, in one update)
        as a dry run (``dryRun=All``: the webhooks judge it, nothing is stored). Trainer v2.2.0's webhook refuses
        a runtime patch change unless the TrainJob is suspended after the update; only v2.2.1 accepts the atomic
        unsuspend, so below it Open and Release could never raise A. The refusal, or None when it is accepted."""
        return await self._dry_run(namespace, trainjob, lambda read: plan_open(read).patch, lambda _: None)

    async def _try_admission(self, namespace: str, trainjob: Mapping[str, Any]) -> tuple[str | None, str | None]:
        """Kueue mode: send the probe opened and unsuspended in one update, as a dry run (``dryRun=All``: every
        admission step runs, nothing is stored, and Kueue never admits the probe): the shape of Kueue's admission
        after Open. dispatch's admission must number it in the write (A raised from 0 to 1 and recorded as
        ``admission-started``: the MutatingAdmissionPolicy ``record-start``, or the mutating webhook), and
        Trainer must accept A changing in it. The same start without the gate's approval must be refused (the
        unsuspend policy, or the webhook's ``update.approval``). Why each fails (not numbered, not refused), or None."""

        def opened_and_started(read: Mapping[str, Any], approved: bool = True) -> list[dict[str, Any]]:
            # With the gate's approval of the A it starts with, as after the gate's Ready; without it, as a queue
            # that admits without dispatch's check would start it, which must be refused.
            a = start_count(read, admission_started(read))[0]
            approve = approval_ops(read, a, d.PROBE_APPROVAL) if approved else []
            return [*plan_open(read).patch, *approve, {"op": "replace", "path": "/spec/suspend", "value": False}]

        unnumbered = await self._dry_run(namespace, trainjob, opened_and_started, d.unnumbered)
        if unnumbered is not None:
            return unnumbered, None
        accepted = await self._dry_run(
            namespace, trainjob, lambda read: opened_and_started(read, approved=False), lambda _: d.UNAPPROVED_START
        )
        return None, accepted if accepted == d.UNAPPROVED_START else None

    async def _dry_run(
        self,
        namespace: str,
        trainjob: Mapping[str, Any],
        ops_for: Callable[[Mapping[str, Any]], list[dict[str, Any]]],
        judge: Callable[[Mapping[str, Any]], str | None],
    ) -> str | None:
        """One write on the probe as a dry run, on a fresh read (again after a conflict that is not a webhook's):
        the refusal, or what ``judge`` finds wrong in the API server's answer, or None."""
        name = str(dig(trainjob, "metadata", "name"))
        for _ in range(CONFLICT_ATTEMPTS):
            read = await self._read(TRAINJOBS.path(namespace, name), f"the probe {name}")
            if read is None:
                return f"the probe {namespace}/{name} vanished"
            try:
                answer = await self.kube.json_patch(TRAINJOBS.path(namespace, name), ops_for(read), dry_run=True)
            except Refused as exc:
                return exc.message
            except KubeError as exc:
                if exc.status == 409 and not exc.webhook_denial:
                    continue
                return exc.describe()
            return judge(answer)
        return None

    async def _watch_probe(
        self,
        namespace: str,
        trainjob: Mapping[str, Any],
        checks: list[str],
        seconds: float,
    ) -> d.ProbeResult:
        """Watch the closed probe: no pod may appear, it may not be unsuspended, its Workload not admitted.

        Polled, not watched: what is looked for (a pod, a condition) stays once it is there, and the last
        look is taken at the deadline."""
        name, uid = str(dig(trainjob, "metadata", "name")), str(dig(trainjob, "metadata", "uid"))
        kueue = is_kueue_mode(trainjob)
        deadline = time.monotonic() + seconds
        while True:
            current = await self._read(TRAINJOBS.path(namespace, name), f"the probe {name}")
            if current is None or dig(current, "metadata", "uid") != uid:
                return d.ProbeResult(seconds, error=f"the probe {namespace}/{name} was deleted while watched")
            pods = await self._list(PODS.path(namespace), {LABEL_JOBSET_NAME: name}, "the probe's pods")
            workload = await self._workload(namespace, uid) if kueue else None
            leaks = d.probe_leaks(current, workload, pods)
            if leaks:
                return d.ProbeResult(seconds, leaks=tuple(leaks))
            if time.monotonic() >= deadline:
                problems = workload_problems(workload, checks) if kueue else []
                unchecked = d.unchecked(workload) if kueue else None
                if unchecked:
                    problems.append(f"for jobs of this runtime, {unchecked}")
                unproven = None
                # MultiKueue sends the probe away when it manages it (spec.managedBy, set by Kueue); its checks are
                # identified by fresh reads of every check the Workload lists, and one that cannot be is a problem
                # (agent/domain/decide.py ``dispatch_mode``, as the gate decides it).
                found = await self._checks_read(other_checks(workload, checks)) if kueue else {}
                mode = dispatch_mode(current, found) if kueue else Mode(False)
                if mode.problem is not None:
                    problems.append(f"for jobs of this runtime, {mode.problem}")
                sent_away = mode.multikueue
                multikueue = {n: ac for n, ac in found.items() if n in mode.checks and isinstance(ac, Mapping)}
                if sent_away:
                    queue = str(labels(current).get(LABEL_QUEUE_NAME) or "")
                    workers, proven = await self._prove_workers(namespace, queue, workload, multikueue)
                    unproven = multikueue_unproven(workload, multikueue, workers, proven=proven)
                if unproven:
                    problems.append(unproven)
                if sent_away and (too_late := await self._contact_problem()):
                    problems.append(too_late)
                # Through MultiKueue the job's JobSet is made on a worker, never here (a manager runs nothing), so
                # the probe's JobSet proves nothing of Trainer's principal: the workers' owner policies police it.
                owners = [] if sent_away else d.owner_problems(*await self._probe_children(namespace, name), seconds)
                return d.ProbeResult(seconds, workload_problems=tuple(problems), owner_problems=tuple(owners))
            await asyncio.sleep(POLL_SECONDS)

    async def _contact_problem(self) -> str | None:
        """On a MultiKueue manager: why the contact Lease's duration is not proven below Kueue's workerLostTimeout,
        read from Kueue's ConfigMap (agent/kueue_config.py decides); None when it is."""
        ref, contact = self.settings.kueue_config, self.settings.worker_contact_seconds
        where = f"{ref.namespace}/{ref.name}"
        try:
            configmap = await self.kube.get(CONFIG_MAPS.path(ref.namespace, ref.name))
        except KubeError as exc:
            return kueue_config.unreadable(where, ref.key, contact, exc.describe())
        return kueue_config.contact_problem(configmap, where=where, key=ref.key, contact_seconds=contact)

    async def _prove_workers(
        self, namespace: str, queue: str, workload: Mapping[str, Any], multikueue: Mapping[str, Mapping[str, Any]]
    ) -> tuple[list[str], bool]:
        """Preflight's proof of each worker the manager's gate would read for a job of this queue
        (agent/multicluster/workers.py ``plan_workers``; agent/multicluster/worker_proof.py decides), one line each, and
        whether every one is proven. A worker that cannot be read is named with why, never an error of Preflight's."""
        # ``multikueue``: the MultiKueue checks the probe's Workload lists, as read at the end of its watch.
        named = {n: multikueue.get(n) for n in listed_multikueue_checks(workload, multikueue)}
        config_names = sorted({c for ac in named.values() if (c := multikueue_config_of(ac)) is not None})
        configs = {c: await self._read(MULTIKUEUE_CONFIGS.path(name=c), f"MultiKueueConfig {c}") for c in config_names}
        clusters = await self._list(MULTIKUEUE_CLUSTERS.path(), None, "the MultiKueueClusters")
        workers = self.kube.workers
        plan = fenced_apart(plan_workers(named, configs, clusters, workers.names if workers is not None else ()))
        proven: dict[str, list[str]] = {}
        for worker in plan.read:
            assert workers is not None  # plan_workers reads only workers with a credential
            try:
                proof = await workers.prove(worker, namespace, queue)
                proven[worker] = proof_problems(namespace, queue, proof, dt.datetime.now(dt.UTC), workers.origin)
            except Exception as exc:  # a worker that cannot be read is not proven, and Preflight still answers
                proven[worker] = [f"cannot be read: {describe_error(exc)}"]
        return worker_lines(plan, proven), all_proven(plan, proven)

    async def _probe_children(
        self, namespace: str, name: str
    ) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        """The probe's JobSet (Trainer names it as the TrainJob) and its first Job (JobSet names it
        ``<jobset>-<replicated job>-0``), or None for each that is not there."""
        jobset = await self._read(JOBSETS.path(namespace, name), f"the probe's JobSet {name}")
        first = dig(jobset, "spec", "replicatedJobs", 0, "name")
        if jobset is None or not isinstance(first, str):
            return jobset, None
        return jobset, await self._read(JOBS.path(namespace, f"{name}-{first}-0"), f"the probe's Job {name}-{first}-0")

    async def _remove_probe(
        self,
        namespace: str,
        name: str,
        trainjob: Mapping[str, Any] | None,
        copy_read: Mapping[str, Any] | None,
    ) -> None:
        for resource, obj in ((TRAINJOBS, trainjob), (TRAINING_RUNTIMES, copy_read)):
            uid = dig(obj, "metadata", "uid")
            if not uid:
                continue
            try:
                await self.kube.delete(resource.path(namespace, name), uid=uid, propagation=DISCARD_PROPAGATION)
            except KubeError as exc:
                log.error("could not remove the Preflight probe's %s %s/%s: %s", resource.plural, namespace, name, exc)
