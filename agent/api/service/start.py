"""Start: make sure of the prologue's ConfigMap, create the runtime copy and the TrainJob (or take up what a
retried Start created), own the copy, read the TrainJob back and, in Kueue mode, wait for its Workload; refuse
and discard what does not stand. The pure decisions are start_decisions.py's and agent/domain/start.py's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any

from agent.api.errors import ApiError, ErrorKind, contract
from agent.api.kube import KubeError
from agent.api.models import StartRequest, StartResponse
from agent.api.service.base import DISCARD_PROPAGATION, POLL_SECONDS
from agent.api.service.failures import create_failed
from agent.api.service.start_decisions import copy_problems, existing_problems
from agent.api.service.targets import SeveralWorkloads
from agent.api.service.workers import WorkersOps, worker_bodies
from agent.domain.kueue_objects import our_checks, unchecked
from agent.domain.multikueue_mode import other_checks
from agent.domain.start import (
    NOT_MANAGED,
    earlier_incarnation,
    earlier_incarnation_message,
    multikueue_start_problems,
    prologue_configmap_refusal,
    readback_changes,
    workload_problems,
)
from agent.multicluster.worker_remains import start_refusal
from contract.keys import LABEL_JOBSET_NAME
from contract.multicluster import MULTIKUEUE_MANAGED_BY, managed_by_multikueue
from contract.objects import dig
from contract.ownership import is_kueue_mode
from contract.prologue import PROLOGUE_CONFIGMAP, prologue_configmap
from contract.runtime_requirements import runtime_problems
from contract.trainjob import Submission, build_runtime_copy, build_trainjob
from contract.upstream import CONFIG_MAPS, JOBSETS, PODS, TRAINING_RUNTIMES, TRAINJOBS

log = logging.getLogger(__name__)


class StartOps(WorkersOps):
    """Start, idempotent for a retry."""

    async def start(self, req: StartRequest) -> StartResponse:
        await self._refuse_excluded(req.namespace)
        sub = req.submission(self.settings.site_labels, self.settings.site_annotations)
        name = contract(lambda: sub.name)
        source = await self._source_runtime(req.runtime, req.namespace)
        built = contract(build_trainjob, sub, source["spec"])
        copy_built = contract(build_runtime_copy, sub, source)
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
                    raise create_failed(exc, f"the prologue's {where}", namespace) from None
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
                raise ApiError(ErrorKind(kind), message, orphans=[], workers=worker_bodies(workers))

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
        problems = existing_problems(built, existing)
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
                raise create_failed(exc, f"runtime copy {sub.name}", sub.namespace) from None
        left = await self._read(TRAINING_RUNTIMES.path(sub.namespace, sub.name), f"runtime copy {sub.name}")
        problems = ["it vanished while being read"] if left is None else copy_problems(left, sub)
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
        return left, contract(build_trainjob, sub, spec)

    async def _create_trainjob(self, path_for_name: str, built: Mapping[str, Any]) -> Mapping[str, Any]:
        namespace = built["metadata"]["namespace"]
        try:
            return await self._create_after_copy(namespace, built)
        except KubeError as exc:
            if exc.status != 409:
                raise create_failed(exc, f"TrainJob {built['metadata']['name']}", namespace) from None
        # Created meanwhile by a concurrent Start (or left by one): the same rule as for an existing one.
        existing = await self._read(path_for_name, f"TrainJob {namespace}/{built['metadata']['name']}")
        if existing is None:
            raise ApiError(ErrorKind.CONFLICT, "the TrainJob was created and deleted concurrently; retry")
        return self._take_existing(built, existing)

    async def _wait_for_workload(
        self, namespace: str, uid: str, read: Mapping[str, Any], runtime_spec: Mapping[str, Any]
    ) -> list[str]:
        """Kueue mode: the Workload with the gate and dispatch's check, within timeouts.workload; and one
        that Kueue will not admit past that check. Several Workloads claiming the TrainJob are a problem like
        a missing one: waited on, then the TrainJob is stopped and Start refused, naming them. Once it is
        there, MultiKueue's conditions (agent/domain/start.py ``multikueue_start_problems``)."""
        deadline = time.monotonic() + self.settings.workload_timeout
        listed = await self._admission_checks()
        checks = our_checks(listed)
        while True:
            try:
                workload = await self._workload(namespace, uid)
                problems = workload_problems(workload, checks)
            except SeveralWorkloads as exc:  # not one Workload of its own: waited on, then refused naming them
                workload, problems = None, [exc.message]
            if not problems or time.monotonic() >= deadline:
                why_unchecked = unchecked(workload)
                problems += [f"{NOT_MANAGED}: {why_unchecked}"] if why_unchecked else []
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
