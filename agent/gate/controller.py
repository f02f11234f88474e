"""The check's controller: watches feed a work queue of Workload keys; workers run reconcile() while we lead,
each pass with the one ``Pass`` (agent/gate/context.py) built here, and beside them the leader's other concerns,
a runnable each (agent/gate/runnable.py).

Watch-driven, not polling, and stateless where it matters: the in-memory index (agent/gate/index.py: which TrainJob a
Workload belongs to, which Workloads are due; here, which are held on which Nodes) only decides *what to enqueue*; every
decision reads the Workload and what it needs anew (agent/gate/reconcile.py), the Workload, TrainJob and JobSet
from the watches' stores (agent/runtime/caches.py: safe because each write acting on them is preconditioned on the
resourceVersion read), the pods by a consistent LIST.

* Workloads (all namespaces): a Workload whose check of ours is due (Pending, quota reserved, not evicted,
  finished or deactivated) is enqueued on each change.
* AdmissionChecks: which check names are ours (config, so a cache); a new one of ours enqueues the
  Workloads due on it, and gets its Active condition while we lead (agent/gate/active.py).
* Pods with a ``jobset.sigs.k8s.io/jobset-name`` label: a change enqueues its TrainJob's Workload if that
  is due, so a check held on a pod that may still run is looked at again when the pod changes or goes; the pod
  finalizer's releaser (agent/gate/releaser.py) is told too.
* Nodes: a change enqueues the Workloads held on pods bound to that Node (a taint, a heartbeat, deletion), and has
  the releaser look at the pods on it.
* TrainJobs and JobSets (agent/runtime/caches.py): kept in memory for the passes' reads; a change enqueues the
  TrainJob's Workload if due, so an Open, a Hold or a Release that changes only the TrainJob wakes the gate.
  A JobSet's change also has its TrainJob's JobSet UID recorded if it is not yet (agent/gate/jobset_record.py). On a
  MultiKueue worker, a TrainJob's change also has MultiKueue's copy verified if it is marked
  (agent/multicluster/copies.py). The Workload watch keeps the full Workload too, only while a check of ours is due on
  it.

On a MultiKueue manager with worker credentials, the leader also goes round its workers every
``workerRoundSeconds`` (nothing here watches them): the replicas of runtime copies whose TrainJob is gone, and the
Workloads the index marks evicted with their quota kept (agent/gate/worker_round.py).

The watches run on every replica, leader or not: a standby's index and queue are warm when it takes over,
so it starts on every due Workload at once (the queue de-duplicates), and readiness means the same thing on
every replica. Only the leader runs workers and writes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from agent.config import AgentConfig
from agent.constants import ADMISSION_CHECKS, JOBSETS, TRAINJOBS, WORKLOADS
from agent.domain.admission_check import AdmissionCheckCache
from agent.domain.decide import Action
from agent.gate.active import ActiveCondition
from agent.gate.context import Hooks, OurChecks, Pass, WorkloadKey
from agent.gate.index import WorkloadIndex, hint_of, key_of
from agent.gate.jobset_record import JobSetRecorder
from agent.gate.reconcile import Outcome, reconcile
from agent.gate.releaser import FinalizerReleaser
from agent.gate.runnable import Loop, Runnable
from agent.gate.worker_round import WorkerRound
from agent.multicluster.claims import ClaimRenewer
from agent.multicluster.contact import ManagerContact, WorkerContact
from agent.multicluster.copies import CopyVerifier
from agent.multicluster.worker_reads import WorkerClients
from agent.runtime.caches import Reads, StoreHandler, keep_jobset, keep_trainjob
from agent.runtime.kube import Kube
from agent.runtime.leader import LeaderElector
from agent.runtime.metrics import AgentMetrics
from agent.runtime.queue import QueueShutDown, RateLimiter, WorkQueue
from contract.keys import LABEL_JOBSET_NAME
from contract.multicluster import ROLE_WORKER
from contract.objects import dig, labels, parse_rfc3339
from serving import watch
from serving.client import KubeError
from serving.kube import describe_error

log = logging.getLogger(__name__)

WATCHED = (ADMISSION_CHECKS, WORKLOADS, "pods", "nodes")
"""The watches readiness waits for."""
CACHED = (TRAINJOBS, JOBSETS)
"""The watches that only spare a pass its GETs: not waited for (with a ServiceAccount that may not list
them, they never list, and every read is a GET)."""


class Controller:
    def __init__(
        self,
        kube: Kube,
        config: AgentConfig,
        *,
        identity: str,
        metrics: AgentMetrics | None = None,
        hooks: Hooks | None = None,
        workers: WorkerClients | None = None,
    ) -> None:
        self.kube, self.config, self.identity = kube, config, identity
        self.metrics = metrics or AgentMetrics()
        self.workers = workers
        """On a MultiKueue manager, the read-only clients to its workers (``workerKubeconfigs``): guarantee 4."""
        self.queue: WorkQueue[WorkloadKey] = WorkQueue()
        self.limiter: RateLimiter[WorkloadKey] = RateLimiter()
        self.index = WorkloadIndex()
        self.held: dict[WorkloadKey, frozenset[str]] = {}
        """Workloads held because pods may still run -> the Nodes those pods name."""
        self.held_since: dict[WorkloadKey, float] = {}
        """When each of those holds began (Unix seconds), for the metrics and the alert on a long hold."""
        self.metrics.follow_holds(
            lambda: [self.held_since[k] for k in self.held if k in self.held_since] if self.leading else []
        )
        self.checks = AdmissionCheckCache()
        """Our AdmissionChecks, as the watch below has them."""
        self.reads = Reads(kube)
        """The passes' reads of Workloads, TrainJobs and JobSets, from the stores the watches below feed."""
        self.reads.count = self.metrics.reads.inc
        self.active = ActiveCondition(kube, self.checks)
        """Sets our AdmissionChecks Active while we lead (agent/gate/active.py)."""
        self.releaser = FinalizerReleaser(kube, config.node_loss_taints)
        """Removes dispatch's pod finalizer once a pod's processes are proven gone (agent/domain/pod_finalizer.py)."""
        self.recorder = JobSetRecorder(kube, self.reads)
        """Records each TrainJob's JobSet UID when its JobSet is first seen (agent/gate/jobset_record.py)."""
        worker = config.multicluster_role == ROLE_WORKER
        self.contact = WorkerContact(kube, config.lease_namespace) if worker else None
        """On a MultiKueue worker: deletes the copies that outlived a loss of contact with the manager
        (agent/multicluster/contact.py)."""
        self.ctx = Pass(
            kube,
            self.reads,
            OurChecks(kube, self.checks),
            config,
            hooks or Hooks(),
            workers,
            self.contact.admits if self.contact is not None else None,
        )
        """What every pass works with (agent/gate/context.py), built once; on a worker, a copy is admitted only
        in contact with the manager."""
        self.copies = CopyVerifier(kube, self.reads, self.contact) if self.contact is not None else None
        """On a MultiKueue worker: lets MultiKueue's copies start only with their dispatch's A
        (agent/multicluster/copies.py)."""
        self.manager_contact = (
            ManagerContact(workers, config.worker_contact_seconds, kube.fenced_workers) if workers is not None else None
        )
        """On a MultiKueue manager: renews the contact Lease on every worker (agent/multicluster/contact.py)."""
        self.claim_renewer = ClaimRenewer(kube, workers, config.worker_contact_seconds) if workers is not None else None
        """On a MultiKueue manager: renews the claims of the copies it wants running on the workers
        (agent/multicluster/claims.py)."""
        self.runnables = self._runnables()
        """What the leader runs beside its workers, one concern each (agent/gate/runnable.py)."""
        self.synced = {name: asyncio.Event() for name in (*WATCHED, *CACHED)}
        self.elector = LeaderElector(
            kube,
            namespace=config.lease_namespace,
            name=config.lease_name,
            identity=identity,
            on_change=self._leadership,
            duration=config.lease_duration_seconds,
            renew_period=config.renew_period_seconds,
            renew_deadline=config.renew_deadline_seconds,
            retry_period=config.retry_period_seconds,
        )
        self._lead_task: asyncio.Task[None] | None = None
        self._broken: asyncio.Future[None] | None = None
        """Set when the leading task died of a bug: run() then ends with it, and the process exits."""
        self._listed: set[WorkloadKey] = set()
        """The Workloads the Workload LIST in progress has handed over so far (a re-LIST drops the rest)."""
        self._checks_listed: list[Mapping[str, Any]] = []
        self._handlers = self._watch_handlers()
        self._live = {WORKLOADS: self.reads.workloads.on_live, TRAINJOBS: self.reads.trainjobs.on_live,
                      JOBSETS: self.reads.jobsets.on_live}  # fmt: skip

    def _watch_handlers(self) -> dict[str, watch.Handler]:
        """What each watch tells (the handlers below; the releaser, the stores of the passes' reads)."""
        checks = _Handler(self._checks_page, self._check_event, self._checks_listed.clear, self._checks_end)
        return {
            ADMISSION_CHECKS: checks,
            WORKLOADS: _Handler(self._workloads_page, self._workload_event, self._workloads_begin, self._workloads_end),
            "pods": _Handler(self._pods_page, self._pod_event, self.releaser.list_begin, self.releaser.list_end),
            "nodes": _Handler(lambda _: None, self._node_event, on_end=self._nodes_end),
            TRAINJOBS: StoreHandler(self.reads.trainjobs, keep_trainjob, self._trainjob_changed),
            JOBSETS: StoreHandler(self.reads.jobsets, keep_jobset, self._jobset_changed),
        }

    def _runnables(self) -> list[Runnable]:
        """The leader's concerns beside the workers, in the order they start."""
        found: list[Runnable] = [self.active, self.releaser, self.recorder]
        if self.copies is not None:
            found.append(Loop("copy-verification", self.copies.run))
        if self.contact is not None:
            found.append(Loop("manager-contact", self.contact.run))
        if self.manager_contact is not None:
            found.append(Loop("worker-contact", self.manager_contact.run))
        if self.claim_renewer is not None:
            found.append(Loop("claims", self.claim_renewer.run))
        if self.workers is not None:
            round_ = WorkerRound(
                self.kube,
                self.reads,
                self.workers,
                self.index.kept_keys,
                taints=self.config.node_loss_taints,
                seconds=self.config.worker_round_seconds,
            )
            found.append(round_)
        return found

    # -- running ----------------------------------------------------------------------------------

    @property
    def ready(self) -> bool:
        """Every watch has listed once: the controller knows the cluster and can serve."""
        return all(self.synced[name].is_set() for name in WATCHED)

    @property
    def leading(self) -> bool:
        return self.elector.leading

    async def run(self, stop: asyncio.Event) -> None:
        """Watch, elect, and reconcile while leading, until ``stop`` is set; then release the Lease."""
        calls = self.kube.list_functions()
        tasks = [
            asyncio.create_task(
                watch.run(
                    name,
                    self.kube,
                    calls[name],
                    self._handlers[name],
                    self.synced[name],
                    on_restart=lambda why, n=name: self.metrics.watch_restarts.inc(n, why),
                    on_live=self._live.get(name),
                ),
                name=f"watch-{name}",
            )
            for name in (*WATCHED, *CACHED)
        ]
        self._broken = asyncio.get_running_loop().create_future()
        election = asyncio.create_task(self.elector.run(), name="leader-election")
        stopping = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait(
                [*tasks, election, stopping, self._broken], return_when=asyncio.FIRST_COMPLETED
            )
            for task in done:
                if task is not stopping:
                    task.result()  # a watch, the election or the workers ended: a bug, so surface it
        finally:
            # Stop campaigning (so nothing re-acquires the Lease meanwhile), stop acting, give the Lease up,
            # then stop watching. The Active condition is left True on purpose (see agent/domain/admission_check.py).
            election.cancel()
            await asyncio.gather(election, return_exceptions=True)
            await self._stop_leading()
            self.queue.shutdown()
            self.recorder.shutdown()
            if self.copies is not None:
                self.copies.shutdown()
            await self.elector.release()
            for task in [*tasks, stopping]:
                task.cancel()
            await asyncio.gather(*tasks, stopping, return_exceptions=True)

    def _leadership(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if leading and self._lead_task is None:
            if self.contact is not None:
                # Not watched while another replica led: no renewal counts until one is seen while leading.
                self.contact.reset()
            self._lead_task = asyncio.create_task(self._lead(), name="leading")
            self._lead_task.add_done_callback(self._lead_ended)
        elif not leading and self._lead_task is not None:
            # Promptly: cancelling a pass at any point is safe, every write it makes is preconditioned.
            self._lead_task.cancel()
            self._lead_task = None

    def _lead_ended(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None and self._broken is not None and not self._broken.done():
            log.error("the workers died: %s", describe_error(exc))
            self._broken.set_exception(exc)

    async def _stop_leading(self) -> None:
        task, self._lead_task = self._lead_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)  # a failure was surfaced by _lead_ended

    async def _lead(self) -> None:
        """While leading: once every watch has listed, the runnables and the workers."""
        await asyncio.gather(*(self.synced[name].wait() for name in WATCHED))
        log.info("serving the readmission gate with %d worker(s)", self.config.workers)
        async with asyncio.TaskGroup() as group:
            for runnable in self.runnables:
                group.create_task(runnable.run(), name=runnable.name)
            for i in range(self.config.workers):
                group.create_task(self._work(), name=f"worker-{i}")

    # -- workers ----------------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except QueueShutDown:
                return
            self.metrics.queue_depth.set(len(self.queue))
            started = time.perf_counter()
            try:
                outcome = await reconcile(self.ctx, key)
            except asyncio.CancelledError:
                # Leadership lost mid-pass: the key goes back, for whoever leads next.
                self.queue.done(key)
                self.queue.add(key)
                raise
            except Exception as exc:
                self.queue.done(key)
                log.warning("%s: pass failed: %s", key, describe_error(exc), exc_info=not isinstance(exc, KubeError))
                self.metrics.errors.inc(type(exc).__name__)
                self.metrics.reconcile_seconds.observe(time.perf_counter() - started, "error")
                self.queue.add_after(key, self.limiter.when(key))
                continue
            self.queue.done(key)
            self._observe(key, outcome, time.perf_counter() - started)
            if outcome.requeue:
                self.queue.add_after(key, self.limiter.when(key))
            else:
                self.limiter.forget(key)
                if outcome.more:
                    self.queue.add(key)

    def _observe(self, key: WorkloadKey, outcome: Outcome, seconds: float) -> None:
        m = self.metrics
        result = outcome.action.value if outcome.action is not None else "none"
        m.reconcile_seconds.observe(seconds, result)
        if outcome.action is not None:
            m.decisions.inc(outcome.action.value)
        if outcome.conflict is not None:
            m.conflicts.inc(outcome.conflict)
        if outcome.foreign_reported:
            m.foreign.inc(amount=outcome.foreign_reported)
        if outcome.ready and outcome.quota_reserved_at:
            reserved = parse_rfc3339(outcome.quota_reserved_at)
            if reserved is not None:
                m.reserved_to_ready.observe(max(0.0, time.time() - reserved.timestamp()))
        if outcome.action is Action.HOLD and outcome.held_nodes is not None:
            self.held[key] = outcome.held_nodes
            self.held_since.setdefault(key, time.time())
        elif outcome.action is not None:
            self._unhold(key)

    # -- watch handlers: they only enqueue ----------------------------------------------------------

    def _checks_page(self, items: list[Mapping[str, Any]]) -> None:
        self._checks_listed.extend(items)  # a handful of objects: kept until the list ends

    def _checks_end(self) -> None:
        changed = self.checks.replace(self._checks_listed)
        self._checks_listed.clear()
        if changed:
            self._checks_changed()

    def _check_event(self, kind: str, ac: Mapping[str, Any]) -> None:
        if self.checks.event(kind, ac):
            self._checks_changed()

    def _checks_changed(self) -> None:
        self.active.changed()
        for key in self.index.due_keys(self.checks.ours()):
            # Held as "not due" under the old check names, perhaps: that pass reads it afresh.
            self.reads.workloads.discard((key.namespace, key.name))
            self.queue.add(key)

    def _workloads_page(self, items: list[Mapping[str, Any]]) -> None:
        for wl in items:
            self._listed.add(key_of(wl))
            self._workload_event("ADDED", wl)

    def _workloads_begin(self) -> None:
        self._listed.clear()
        self.reads.workloads.begin()

    def _workloads_end(self) -> None:
        for key in set(self.index.hints) - self._listed:
            self._workload_event("DELETED", {"metadata": {"namespace": key.namespace, "name": key.name}})
        self._listed.clear()
        self.reads.workloads.end()  # and what the LIST did not hand over is dropped from memory

    def _workload_event(self, kind: str, wl: Mapping[str, Any]) -> None:
        key = key_of(wl)
        if self.claim_renewer is not None:
            worker = dig(wl, "status", "clusterName") if kind != "DELETED" else None
            self.claim_renewer.saw(key, worker if isinstance(worker, str) and worker else None)
        if kind == "DELETED":
            self.index.remove(key)
            self.reads.workloads.delete(wl)
            self._unhold(key)
            return
        self.index.put(key, hint_of(wl))
        if self.index.due(key, self.checks.ours()):
            # Kept whole only while a check of ours is due: the pass about to run reads it from memory.
            self.reads.workloads.put(wl)
            self.queue.add(key)
        else:
            self.reads.workloads.mark(wl)  # its uid only, if held: a pass woken meanwhile needs no GET
            self._unhold(key)  # no longer Pending-and-reserved: not held any more

    def _unhold(self, key: WorkloadKey) -> None:
        self.held.pop(key, None)
        self.held_since.pop(key, None)

    def _pods_page(self, items: list[Mapping[str, Any]]) -> None:
        self.releaser.listed(items)
        for pod in items:
            self._enqueue_for_pod(pod)

    def _pod_event(self, kind: str, pod: Mapping[str, Any]) -> None:
        self.releaser.pod_event(kind, pod)
        self._enqueue_for_pod(pod)

    def _enqueue_for_pod(self, pod: Mapping[str, Any]) -> None:
        jobset = labels(pod).get(LABEL_JOBSET_NAME)
        key = self.index.by_trainjob.get((str(dig(pod, "metadata", "namespace")), str(jobset)))
        if key is not None and self.index.due(key, self.checks.ours()):
            self.queue.add(key)

    def _trainjob_changed(self, obj: Mapping[str, Any]) -> None:
        self._enqueue_for_trainjob(obj)
        if self.copies is not None:
            self.copies.trainjob_changed(obj)

    def _enqueue_for_trainjob(self, obj: Mapping[str, Any]) -> None:
        """A TrainJob, or a JobSet (named after its TrainJob), changed: its Workload, if due."""
        key = self.index.by_trainjob.get((str(dig(obj, "metadata", "namespace")), str(dig(obj, "metadata", "name"))))
        if key is not None and self.index.due(key, self.checks.ours()):
            self.queue.add(key)

    def _jobset_changed(self, jobset: Mapping[str, Any]) -> None:
        self._enqueue_for_trainjob(jobset)
        self.recorder.jobset_changed(jobset)

    def _nodes_end(self) -> None:
        self.releaser.all_nodes_changed()
        for key in list(self.held):
            self.queue.add(key)

    def _node_event(self, kind: str, node: Mapping[str, Any]) -> None:
        name = dig(node, "metadata", "name")
        self.releaser.node_event(name)
        for key, nodes in list(self.held.items()):
            if name in nodes:
                self.queue.add(key)


def _nothing() -> None:
    pass


@dataclass(frozen=True)
class _Handler:
    on_page: Callable[[list[Mapping[str, Any]]], None]
    on_event: Callable[[str, Mapping[str, Any]], None]
    on_begin: Callable[[], None] = _nothing
    on_end: Callable[[], None] = _nothing

    def begin(self) -> None:
        self.on_begin()

    def page(self, items: list[Mapping[str, Any]]) -> None:
        self.on_page(items)

    def end(self) -> None:
        self.on_end()

    def event(self, kind: str, obj: Mapping[str, Any]) -> None:
        self.on_event(kind, obj)
