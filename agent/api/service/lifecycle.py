"""Open, Hold, Release and Stop: read, plan with the functional core (agent/domain/operations.py), send the
plan's writes preconditioned on the read, and re-plan from a fresh read on a conflict; Stop deletes the TrainJob
in the foreground (``STOP_PROPAGATION``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from ulid import ULID

from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import KubeError
from agent.api.models import HoldRequest, ObjectRef, OpenResponse, OutcomeResponse, WorkerRemainsModel
from agent.api.service.base import CONFLICT_ATTEMPTS, CONFLICT_BACKOFF
from agent.api.service.failures import refused, write_failed
from agent.api.service.lifecycle_decisions import after_own_write, hold_of
from agent.api.service.targets import own
from agent.api.service.workers import WorkersOps
from agent.domain.decide import Blocker
from agent.domain.kueue_objects import our_checks
from agent.domain.node_loss import assess
from agent.domain.operations import Plan, Refused, Target, plan_hold, plan_open, plan_release
from contract.admission import admission_started
from contract.keys import LABEL_JOBSET_NAME
from contract.multicluster import managed_by_multikueue
from contract.objects import dig
from contract.ownership import is_kueue_mode
from contract.upstream import JOBSETS, TRAINJOBS, WORKLOADS

STOP_PROPAGATION: Final = "Foreground"
"""Stop deletes in the foreground: the TrainJob stays readable (with a deletionTimestamp) until every
dependent that blocks its deletion — JobSet, Jobs, pods — is gone, so Status keeps reporting each pod's
verdict and Ceased while the job stops, instead of leaving anonymous orphans. The runtime copy
(``blockOwnerDeletion: false``) is deleted by the garbage collector too, without holding the TrainJob."""


@dataclass(frozen=True)
class Seen:
    """What Open, Hold and Release plan from: the TrainJob, and (as the operation needs them) its Workload,
    its JobSet, and the pods of a previous execution that may still run."""

    trainjob: Mapping[str, Any]
    workload: Mapping[str, Any] | None = None
    jobset: Mapping[str, Any] | None = None
    blockers: tuple[Blocker, ...] | None = None
    """The pods of a previous execution that may still run; None when they were not looked at."""


Planner = Callable[["Seen"], Plan]


class LifecycleOps(WorkersOps):
    """Open, Hold, Release and Stop."""

    async def open(self, ref: ObjectRef) -> OpenResponse:
        plan = await self._plan_and_apply(
            ref,
            lambda s: plan_open(s.trainjob, jobset=s.jobset, blockers=s.blockers, workload=s.workload),
            unsuspends=True,
            first_approval=True,
        )
        return OpenResponse(outcome=plan.outcome, held_by=list(plan.held_by), a=plan.new_a)

    async def hold(self, req: HoldRequest) -> OutcomeResponse:
        hold = hold_of(instance=str(ULID()), now=self.now(), who=req.who, reason=req.reason, until=req.until)
        # dispatch's checks: on a MultiKueue manager Hold sets them Retry (agent/domain/operations.py says why).
        checks = our_checks(await self._admission_checks())
        plan = await self._plan_and_apply(req, lambda s: plan_hold(s.trainjob, s.workload, hold, checks=checks))
        return OutcomeResponse(outcome=plan.outcome, a=plan.new_a)

    async def release(self, ref: ObjectRef) -> OutcomeResponse:
        plan = await self._plan_and_apply(
            ref,
            lambda s: plan_release(s.trainjob, s.workload, jobset=s.jobset, blockers=s.blockers or ()),
            unsuspends=True,
        )
        return OutcomeResponse(outcome=plan.outcome, a=plan.new_a)

    async def stop(self, ref: ObjectRef) -> OutcomeResponse:
        """Delete the TrainJob if it is still the one with the UID; gone already is success (idempotent)."""
        path = TRAINJOBS.path(ref.namespace, ref.name)
        current = await self._read(path, f"TrainJob {ref.namespace}/{ref.name}")
        if current is None:
            return await self._stopped(ref, "already gone", None)
        own(current, ref)  # dispatch's, and the supervisor's (the uid); the delete pins that uid again
        try:
            deleted = await self.kube.delete(path, uid=ref.uid, propagation=STOP_PROPAGATION)
        except KubeError as exc:
            if exc.status == 409:
                raise ApiError(
                    ErrorKind.CONFLICT,
                    f"TrainJob {ref.namespace}/{ref.name} is a different object of the same name ({exc.message})",
                ) from None
            raise write_failed(exc, f"TrainJob {ref.namespace}/{ref.name}") from None
        return await self._stopped(ref, "stopping" if deleted else "already gone", current)

    async def _plan_and_apply(
        self, ref: ObjectRef, planner: Planner, *, unsuspends: bool = False, first_approval: bool = False
    ) -> Plan:
        """Read, plan with the core, send the plan's writes in order; on a resourceVersion conflict, all of it
        again from a fresh read (a write already sent is then read as done, and not planned again).

        Why retry here rather than answer conflict: Trainer and Kueue write the TrainJob and the Workload
        (status, conditions) all the time, so a write preconditioned on a read a moment old often loses the
        race right after Start or an admission. Re-planning from a new read is exactly what the supervisor
        would do on a conflict, and the precondition still guarantees that nothing is written from a stale
        read. A different UID is never retried: the read refuses it.

        ``unsuspends``: the operation may unsuspend a TrainJob (Open, Release), so it is refused in a namespace out
        of dispatch's scope (``_refuse_excluded``), and in plain mode the pods of a previous execution are read
        after the TrainJob (a pod seen gone here stays gone: the TrainJob is suspended as read, and the write is
        preconditioned on that read). ``first_approval`` (Open): in Kueue mode too, for a job that never started,
        so that Open may carry the gate's approval of its first execution (agent/domain/operations.py
        ``first_approval``).
        """
        for attempt in range(CONFLICT_ATTEMPTS):
            if attempt:  # the writer that won is often mid-burst (status after a suspend): let it settle
                await asyncio.sleep(CONFLICT_BACKOFF * attempt)
            trainjob = await self._own(ref)
            if unsuspends and not attempt:
                # An execution must never start unpoliced: the namespace's scope as it is now, not at Start.
                await self._refuse_excluded(ref.namespace)
            kueue = is_kueue_mode(trainjob)
            workload = await self._workload(ref.namespace, ref.uid) if kueue else None
            jobset = await self._read(JOBSETS.path(ref.namespace, ref.name), f"JobSet {ref.namespace}/{ref.name}")
            looks = unsuspends and (not kueue or (first_approval and admission_started(trainjob) is None))
            blockers = await self._blockers(trainjob, jobset) if looks else None
            try:
                plan = planner(Seen(trainjob, workload, jobset, blockers))
            except Refused as exc:
                raise refused(exc) from None
            if await self._apply(plan, trainjob, workload):
                return plan
        raise ApiError(
            ErrorKind.CONFLICT,
            f"TrainJob {ref.namespace}/{ref.name} (or its Workload) changed under each of {CONFLICT_ATTEMPTS} writes; "
            "re-read and retry",
        )

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
                    resource.path(ns, name, status), after_own_write(write.patch, versions.get(resource))
                )
                versions[resource] = str(dig(written, "metadata", "resourceVersion"))
            except KubeError as exc:
                if exc.status == 409 and not exc.webhook_denial:
                    return False
                raise write_failed(exc, f"{write.target.value} {ns}/{name}") from None
        return True

    async def _blockers(self, trainjob: Mapping[str, Any], jobset: Mapping[str, Any] | None) -> tuple[Blocker, ...]:
        """The TrainJob's pods that may still run (the node-loss classification), each with why; sorted by the
        ownership chain as the gate sorts them (a stranger's pod carrying the label is not waited on). Called
        only for a suspended TrainJob about to be unsuspended, so each of them is of a previous execution."""
        owned = await self._owned_pods(trainjob, jobset, {LABEL_JOBSET_NAME: str(dig(trainjob, "metadata", "name"))})
        pods = list(owned.ours)
        assessment = assess(pods, await self._nodes(pods), self.settings.node_loss_taints)
        return tuple(Blocker(pod, f"{c.verdict.value}: {c.reason}") for pod, c in assessment.may_still_run)

    async def _stopped(self, ref: ObjectRef, outcome: str, trainjob: Mapping[str, Any] | None) -> OutcomeResponse:
        """Stop's answer; on a MultiKueue manager, with what of the job is still on each worker: the manager's
        TrainJob holds no pods and goes at once, while MultiKueue deletes a worker's copy only when it can reach
        that worker, and without waiting for its pods (docs/multicluster.md, "Stop across clusters")."""
        if self.kube.workers is None or (trainjob is not None and not managed_by_multikueue(trainjob)):
            return OutcomeResponse(outcome=outcome)
        workers = await self._remains(ref.namespace, ref.name)
        return OutcomeResponse(outcome=outcome, workers=[WorkerRemainsModel.of(w) for w in workers])
