"""What one pass of the gate (agent/gate/reconcile.py) works with, handed to it whole: ``Pass``.

The controller builds one ``Pass`` when it starts, its reads fed by its watches and its check names by its
AdmissionCheck watch; ``Pass.fresh`` builds one whose every read is a GET and whose check names are LISTed on each
pass (a pass run on its own: the tests, a tool).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from agent.domain.admission_check import AdmissionCheckCache
from agent.multicluster.worker_reads import WorkerClients
from agent.runtime.caches import Reads
from agent.runtime.kube import Kube
from contract.multicluster import Role


@dataclass(frozen=True, order=True, slots=True)
class WorkloadKey:
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class Settings(Protocol):
    """What a pass needs from the configuration (agent.config.AgentConfig has it)."""

    @property
    def node_loss_taints(self) -> Sequence[str]: ...

    @property
    def multicluster_role(self) -> Role: ...

    @property
    def scope_reads_labels(self) -> bool: ...

    def scope_problem(self, namespace: str, labels: Mapping[str, str] | None) -> str | None: ...


Hook = Callable[[Mapping[str, Any]], Awaitable[None]]


@dataclass(frozen=True)
class Hooks:
    """Test seams only: the stalled-leader and crash tests act between the steps of a pass."""

    after_read: Hook | None = None
    """Called with the Workload as read in step a, before anything else is read or written."""
    after_record: Hook | None = None
    """Called with the TrainJob as read, once the JobSet UID record landed, before the check is written."""


class OurChecks:
    """The names of our AdmissionChecks (their controllerName is ours): the AdmissionCheck watch's cache once it has
    listed, else a LIST on each call (``cache`` None: a pass run without the controller)."""

    def __init__(self, kube: Kube, cache: AdmissionCheckCache | None = None) -> None:
        self._kube, self._cache = kube, cache

    async def names(self) -> frozenset[str]:
        if self._cache is not None and self._cache.synced:
            return self._cache.ours()
        return await self._kube.our_checks()


@dataclass(frozen=True, slots=True)
class Pass:
    """Everything a pass reads from and writes through; nothing in it changes from one pass to the next."""

    kube: Kube
    """The API: the pods (a shared consistent LIST), Jobs, Nodes and checks read fresh, every write, the Events."""
    reads: Reads
    """The Workload, TrainJob and JobSet: from the watch-fed stores while they are live, else GETs
    (agent/runtime/caches.py)."""
    checks: OurChecks
    settings: Settings
    hooks: Hooks = Hooks()
    workers: WorkerClients | None = None
    """On a MultiKueue manager, the read-only clients to its workers (``workerKubeconfigs``): guarantee 4."""
    contact: Callable[[], bool] | None = None
    """On a MultiKueue worker, whether a copy may be admitted now: a recent renewal of the manager's contact Lease
    seen (agent/multicluster/contact.py ``WorkerContact.admits``)."""

    @classmethod
    def fresh(
        cls,
        kube: Kube,
        settings: Settings,
        hooks: Hooks | None = None,
        *,
        workers: WorkerClients | None = None,
        contact: Callable[[], bool] | None = None,
    ) -> Pass:
        """A pass of its own: its stores never go live, so every read is a GET, and our check names a LIST."""
        return cls(kube, Reads(kube), OurChecks(kube), settings, hooks or Hooks(), workers, contact)

    def in_contact(self) -> bool:
        """Whether a copy may be admitted on this worker now: the manager's contact seen (a pass with no contact
        watch, off a worker or run on its own, judges nothing here; the copy's start still needs it)."""
        return self.contact is None or self.contact()
