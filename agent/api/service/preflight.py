"""Preflight: read what the gates need (API versions, the served TrainJob schema, dispatch's AdmissionChecks, the
owners' principals), create a closed probe TrainJob and watch it, dry-run Open's and the admission's writes on it,
prove the workers on a MultiKueue manager, always remove the probe, and record the verdict (observe_only.py).
The pure decisions are probe.py's and capabilities.py's.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from ulid import ULID

from agent.api import principals
from agent.api.errors import ApiError, ErrorKind, contract
from agent.api.kube import KubeError
from agent.api.models import Capabilities, PreflightRequest
from agent.api.service.base import CONFLICT_ATTEMPTS, DISCARD_PROPAGATION, POLL_SECONDS
from agent.api.service.capabilities import capabilities
from agent.api.service.failures import create_failed, read_failed
from agent.api.service.heartbeat import not_watched
from agent.api.service.observe_only import ObserveOnlyOps
from agent.api.service.probe import (
    PROBE_APPROVAL,
    UNAPPROVED_START,
    ProbeResult,
    api_versions,
    owner_problems,
    probe_leaks,
    probe_trainjob,
    trainjob_schema_problems,
    unnumbered,
)
from agent.domain.kueue_objects import active, our_checks, unchecked
from agent.domain.multikueue_mode import Mode, dispatch_mode, other_checks
from agent.domain.operations import Refused, plan_open
from agent.domain.start import multikueue_unproven, workload_problems
from agent.multicluster import kueue_config
from agent.multicluster.worker_proof import all_proven, fenced_apart, proof_problems, worker_lines
from agent.multicluster.workers import plan_workers
from contract.admission import admission_started, approval_ops, start_count
from contract.keys import LABEL_JOBSET_NAME, LABEL_QUEUE_NAME, PROBE_IMAGE
from contract.multicluster import listed_multikueue_checks, multikueue_config_of
from contract.objects import dig, labels
from contract.ownership import is_kueue_mode
from contract.trainjob import Submission, build_runtime_copy
from contract.upstream import (
    CONFIG_MAPS,
    JOBS,
    JOBSETS,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    NAMESPACES,
    PODS,
    SERVICE_ACCOUNTS,
    TRAINING_RUNTIMES,
    TRAINJOBS,
)
from serving.kube import describe_error

log = logging.getLogger(__name__)


class PreflightOps(ObserveOnlyOps):
    """Preflight, with its probe."""

    async def preflight(self, req: PreflightRequest) -> Capabilities:
        await self._refuse_excluded(req.namespace)
        kueue = req.kueue is not None
        try:
            versions = api_versions(await self.kube.discovery())
        except KubeError as exc:
            raise read_failed(exc, "the API groups") from None
        source = await self._source_runtime(req.runtime, req.namespace)
        admission_checks = await self._admission_checks() if kueue else []
        checks = our_checks(admission_checks)
        try:
            trainer_problems = trainjob_schema_problems(
                await self.kube.openapi_v3(f"{TRAINJOBS.group}/{TRAINJOBS.version}")
            )
        except KubeError as exc:
            raise read_failed(exc, "the served TrainJob schema (/openapi/v3)") from None
        try:
            records = await self.kube.serves("admissionregistration.k8s.io/v1", "MutatingAdmissionPolicy")
        except KubeError as exc:
            raise read_failed(exc, "the admission API (/apis/admissionregistration.k8s.io/v1)") from None
        owners = await self._principal_problems()
        first = await self._read(self._lease_path, f"Lease {self._lease_where}")
        watching = time.monotonic()
        probe = await self._probe(req, source, checks)
        lease = await self._heartbeat(first, watching) if kueue else not_watched(first)
        report = capabilities(
            kueue=kueue,
            probe=probe,
            lease=lease,
            versions=versions,
            checks=checks,
            active_checks=active(admission_checks, checks),
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
    ) -> ProbeResult:
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
        probe = contract(probe_trainjob, sub, source["spec"])
        copy_built = contract(build_runtime_copy, sub, source)
        copy_read: Mapping[str, Any] | None = None
        trainjob: Mapping[str, Any] | None = None
        try:
            try:
                copy_read = await self.kube.create(TRAINING_RUNTIMES.path(req.namespace), copy_built)
                trainjob = await self._create_after_copy(req.namespace, probe)
            except KubeError as exc:
                raise create_failed(exc, "the probe", req.namespace) from None
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
            return ProbeResult(seconds, error=exc.message)
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
            approve = approval_ops(read, a, PROBE_APPROVAL) if approved else []
            return [*plan_open(read).patch, *approve, {"op": "replace", "path": "/spec/suspend", "value": False}]

        not_numbered = await self._dry_run(namespace, trainjob, opened_and_started, unnumbered)
        if not_numbered is not None:
            return not_numbered, None
        accepted = await self._dry_run(
            namespace, trainjob, lambda read: opened_and_started(read, approved=False), lambda _: UNAPPROVED_START
        )
        return None, accepted if accepted == UNAPPROVED_START else None

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
    ) -> ProbeResult:
        """Watch the closed probe: no pod may appear, it may not be unsuspended, its Workload not admitted.

        Polled, not watched: what is looked for (a pod, a condition) stays once it is there, and the last
        look is taken at the deadline."""
        name, uid = str(dig(trainjob, "metadata", "name")), str(dig(trainjob, "metadata", "uid"))
        kueue = is_kueue_mode(trainjob)
        deadline = time.monotonic() + seconds
        while True:
            current = await self._read(TRAINJOBS.path(namespace, name), f"the probe {name}")
            if current is None or dig(current, "metadata", "uid") != uid:
                return ProbeResult(seconds, error=f"the probe {namespace}/{name} was deleted while watched")
            pods = await self._list(PODS.path(namespace), {LABEL_JOBSET_NAME: name}, "the probe's pods")
            workload = await self._workload(namespace, uid) if kueue else None
            leaks = probe_leaks(current, workload, pods)
            if leaks:
                return ProbeResult(seconds, leaks=tuple(leaks))
            if time.monotonic() >= deadline:
                problems = workload_problems(workload, checks) if kueue else []
                why_unchecked = unchecked(workload) if kueue else None
                if why_unchecked:
                    problems.append(f"for jobs of this runtime, {why_unchecked}")
                unproven = None
                # MultiKueue sends the probe away when it manages it (spec.managedBy, set by Kueue); its checks are
                # identified by fresh reads of every check the Workload lists, and one that cannot be is a problem
                # (agent/domain/multikueue_mode.py ``dispatch_mode``, as the gate decides it).
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
                owners = [] if sent_away else owner_problems(*await self._probe_children(namespace, name), seconds)
                return ProbeResult(seconds, workload_problems=tuple(problems), owner_problems=tuple(owners))
            await asyncio.sleep(POLL_SECONDS)

    async def _contact_problem(self) -> str | None:
        """On a MultiKueue manager: why the contact Lease's duration is not proven below Kueue's workerLostTimeout,
        read from Kueue's ConfigMap (agent/multicluster/kueue_config.py decides); None when it is."""
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
