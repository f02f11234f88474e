"""The change feed's state (the API's Watch): each dispatch TrainJob's phase, as List computes it, and where in
the watched collections it last changed; what changed after a version a caller holds.

A *position* is how far the feed has read the three collections a phase depends on: the resourceVersions of
the last TrainJob, Workload and AdmissionCheck seen. Resource versions of one resource are comparable
(Kubernetes v1.35+); those of different resources are never compared, so a position is a vector. Every replica
of the agent reads the same three streams, so a version one replica answered means the same on another:

* a job is reported after version ``v`` when the position at which its phase last changed is past ``v`` in any
  of the three (``after``). Every change caused by an event the answering replica had not read at ``v`` is
  past it in that event's collection; a change whose position is nowhere past ``v`` was in the answer at ``v``.
* An answer is the current state, not a history: a job that changed twice is reported once, as it is now, and a
  job may be reported again with the same phase (a replica that read the streams in another order, a
  relist). Callers take each item as "this is how it is now".
* Deletions are remembered (tombstones) for ``TOMBSTONE_SECONDS``; a version older than what the feed still
  remembers (``horizon``: before this replica's first LIST, or before a forgotten tombstone) is expired, and
  the caller starts again from a snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from itertools import takewhile
from typing import Any, Final

from agent.domain.status import phase
from agent.domain.workload import owner_trainjob
from contract.names import is_dispatch_name
from contract.objects import dig
from contract.ownership import is_dispatch, is_kueue_mode

TOMBSTONE_SECONDS: Final = 900.0
"""How long a deleted TrainJob is remembered: a caller that is away longer starts again from a snapshot."""
MAX_TOMBSTONES: Final = 10_000
"""At most this many deletions remembered (a mass delete): the oldest are forgotten first."""
DELETED: Final = "Deleted"
"""The phase reported for a TrainJob that is gone."""

Position = tuple[int, int, int]
"""(TrainJob, Workload, AdmissionCheck) resourceVersions read."""
TRAINJOB, WORKLOAD, CHECK = 0, 1, 2


def after(p: Position, v: Position) -> bool:
    """``p`` is past ``v`` in at least one collection: a change at ``p`` was not read when ``v`` was answered."""
    return any(a > b for a, b in zip(p, v, strict=True))


def encode(v: Position) -> str:
    return "{}.{}.{}".format(*v)


def decode(token: str) -> Position | None:
    """The position a version token names, or None if it is not one of ours."""
    parts = token.split(".")
    if len(parts) != 3 or not all(p.isdigit() and len(p) <= 20 for p in parts):
        return None
    return int(parts[0]), int(parts[1]), int(parts[2])


def rv(obj: Mapping[str, Any]) -> int:
    value = dig(obj, "metadata", "resourceVersion")
    return int(value) if isinstance(value, str) and value.isdigit() else 0


# The fields phase() reads, and no more: a job's record holds these, not the object (a TrainJob is ≈9 KB).
def trim_trainjob(tj: Mapping[str, Any]) -> dict[str, Any]:
    meta = tj.get("metadata") or {}
    keep = ("name", "namespace", "uid", "resourceVersion", "labels", "annotations", "deletionTimestamp")
    return {
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": {"suspend": dig(tj, "spec", "suspend")},
        "status": {"conditions": dig(tj, "status", "conditions") or []},
    }


def trim_workload(wl: Mapping[str, Any]) -> dict[str, Any]:
    meta = wl.get("metadata") or {}
    checks = dig(wl, "status", "admissionChecks") or []
    return {
        "metadata": {k: meta[k] for k in ("name", "uid", "annotations", "ownerReferences") if k in meta},
        "spec": {"active": dig(wl, "spec", "active")},
        "status": {
            "conditions": dig(wl, "status", "conditions") or [],
            "admissionChecks": [
                {"name": c.get("name"), "state": c.get("state")} for c in checks if isinstance(c, dict)
            ],
        },
    }


@dataclass
class Job:
    """One dispatch TrainJob as the feed knows it."""

    trainjob: dict[str, Any]
    """Trimmed (``trim_trainjob``)."""
    at: Position
    """Where its reported state (``reported``) last changed."""
    reported: tuple[str, str | None] | None = None
    """Its phase and deletion timestamp as last computed."""
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The Workloads it controls, trimmed, by uid (more than one: List's ``Unknown``)."""
    deleted_at: float | None = None
    """The feed's clock when it was seen gone (a tombstone), else None."""

    @property
    def namespace(self) -> str:
        return str(dig(self.trainjob, "metadata", "namespace"))

    @property
    def phase(self) -> str:
        return self.reported[0] if self.reported else ""

    @property
    def deletion_timestamp(self) -> str | None:
        value = dig(self.trainjob, "metadata", "deletionTimestamp")
        return value if isinstance(value, str) else None


UNKNOWN: Final = "Unknown"
"""List's phase of a Kueue-mode TrainJob that several Workloads claim."""


def job_phase(job: Job, checks: Iterable[str]) -> str:
    if job.deleted_at is not None:
        return DELETED
    if not is_kueue_mode(job.trainjob):
        return phase(job.trainjob, None, checks)
    claiming = list(job.workloads.values())
    return UNKNOWN if len(claiming) > 1 else phase(job.trainjob, claiming[0] if claiming else None, checks)


@dataclass
class Feed:
    """The state: dispatch's TrainJobs by uid, the Workloads seen before their TrainJob, our checks' names."""

    jobs: dict[str, Job] = field(default_factory=dict)
    changed: dict[str, dict[str, Job]] = field(default_factory=dict)
    """Each namespace's jobs by uid, in the order of their last change: positions only grow, so the jobs changed
    after a version are a tail of it, and an answer costs what changed, not the namespace's size."""
    orphan_workloads: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    """Workloads of a dispatch-named TrainJob not seen yet, by that TrainJob's uid, then by Workload uid."""
    workload_owner: dict[str, str] = field(default_factory=dict)
    """Workload uid -> TrainJob uid, for each Workload kept."""
    checks: tuple[str, ...] = ()
    position: Position = (0, 0, 0)
    horizon: int = 0
    """No version whose TrainJob part is below this can be answered: deletions before it are not known."""

    # -- reading the streams -------------------------------------------------------------------------------

    def advance(self, which: int, obj: Mapping[str, Any]) -> None:
        at = rv(obj)
        if at > self.position[which]:
            pos = list(self.position)
            pos[which] = at
            self.position = (pos[0], pos[1], pos[2])

    def trainjob(self, tj: Mapping[str, Any]) -> bool:
        """An ADDED or MODIFIED TrainJob (or one listed); True when a job's reported state changed."""
        self.advance(TRAINJOB, tj)
        uid = str(dig(tj, "metadata", "uid") or "")
        if not uid or not is_dispatch(tj):
            return False
        job = self.jobs.get(uid)
        if job is None:
            job = Job(trim_trainjob(tj), self.position, workloads=self.orphan_workloads.pop(uid, {}))
            self.jobs[uid] = job
            self.changed.setdefault(job.namespace, {})[uid] = job
        elif rv(tj) < rv(job.trainjob):
            return False  # an older copy than the one held
        else:
            job.trainjob = trim_trainjob(tj)
            job.deleted_at = None
        return self._recompute(job)

    def trainjob_gone(self, tj: Mapping[str, Any], now: float) -> bool:
        """A DELETED TrainJob (or one a new LIST lacks): remembered as a tombstone."""
        self.advance(TRAINJOB, tj)
        job = self.jobs.get(str(dig(tj, "metadata", "uid") or ""))
        if job is None or job.deleted_at is not None:
            return False
        job.deleted_at = now
        for wl_uid in job.workloads:
            self.workload_owner.pop(wl_uid, None)
        job.workloads = {}
        return self._recompute(job)

    def workload(self, wl: Mapping[str, Any]) -> bool:
        self.advance(WORKLOAD, wl)
        wl_uid = str(dig(wl, "metadata", "uid") or "")
        owner = owner_trainjob(wl)
        if not wl_uid or owner is None:
            return False
        owner_name, owner_uid = owner
        job = self.jobs.get(owner_uid)
        if job is None:
            if is_dispatch_name(owner_name):  # its TrainJob's event may come later
                self.orphan_workloads.setdefault(owner_uid, {})[wl_uid] = trim_workload(wl)
                self.workload_owner[wl_uid] = owner_uid
            return False
        if job.deleted_at is not None:
            return False
        job.workloads[wl_uid] = trim_workload(wl)
        self.workload_owner[wl_uid] = owner_uid
        return self._recompute(job)

    def workload_gone(self, wl: Mapping[str, Any]) -> bool:
        self.advance(WORKLOAD, wl)
        wl_uid = str(dig(wl, "metadata", "uid") or "")
        owner_uid = self.workload_owner.pop(wl_uid, None)
        if owner_uid is None:
            return False
        waiting = self.orphan_workloads.get(owner_uid)
        if waiting is not None:
            waiting.pop(wl_uid, None)
            if not waiting:
                del self.orphan_workloads[owner_uid]
        job = self.jobs.get(owner_uid)
        if job is None or job.workloads.pop(wl_uid, None) is None:
            return False
        return self._recompute(job)

    def admission_checks(self, names: Iterable[str], at: Mapping[str, Any]) -> bool:
        """Our checks' names changed (``at``: the AdmissionCheck event that says so): every Kueue-mode phase is
        computed again."""
        self.advance(CHECK, at)
        checks = tuple(sorted(names))
        if checks == self.checks:
            return False
        self.checks = checks
        changed = False
        for job in self.jobs.values():
            if is_kueue_mode(job.trainjob):
                changed = self._recompute(job) or changed
        return changed

    def relisted(self, which: int, seen: set[str], now: float) -> bool:
        """A LIST of ``which`` (TRAINJOB or WORKLOAD) ended: what it did not list is gone."""
        changed = False
        if which == TRAINJOB:
            for uid, job in list(self.jobs.items()):
                if uid not in seen and job.deleted_at is None:
                    changed = self.trainjob_gone(job.trainjob, now) or changed
        else:
            for wl_uid in [u for u in self.workload_owner if u not in seen]:
                changed = self.workload_gone({"metadata": {"uid": wl_uid}}) or changed
        return changed

    def listed(self, which: int, resource_version: str) -> None:
        """A LIST of ``which`` was read whole as of ``resource_version``: the position moves to it, and, for the
        TrainJobs, no version before it can be answered (a deletion before it left no event here)."""
        self.advance(which, {"metadata": {"resourceVersion": resource_version}})
        if which == TRAINJOB:
            self.horizon = max(self.horizon, self.position[TRAINJOB])

    def forget(self, now: float) -> None:
        """Drop tombstones older than TOMBSTONE_SECONDS, and the oldest beyond MAX_TOMBSTONES; a version from
        before a dropped one can no longer be answered (``horizon``)."""
        gone = sorted((j.deleted_at, uid) for uid, j in self.jobs.items() if j.deleted_at is not None)
        excess = len(gone) - MAX_TOMBSTONES
        for i, (when, uid) in enumerate(gone):
            if when > now - TOMBSTONE_SECONDS and i >= excess:
                break
            job = self.jobs.pop(uid)
            self.horizon = max(self.horizon, job.at[TRAINJOB])
            in_namespace = self.changed[job.namespace]
            del in_namespace[uid]
            if not in_namespace:
                del self.changed[job.namespace]

    def _recompute(self, job: Job) -> bool:
        now = (job_phase(job, self.checks), job.deletion_timestamp)
        if now == job.reported:
            return False
        job.reported = now
        job.at = self.position
        order = self.changed[job.namespace]
        uid = str(dig(job.trainjob, "metadata", "uid"))
        order[uid] = order.pop(uid)  # to the end: the latest change
        return True

    # -- answering ----------------------------------------------------------------------------------------

    def expired(self, v: Position) -> bool:
        return v[TRAINJOB] < self.horizon

    def since(self, namespace: str, v: Position | None) -> list[Job]:
        """The jobs of ``namespace`` whose state changed after ``v`` (every one that exists, for None: a
        snapshot, without tombstones), by name."""
        order = self.changed.get(namespace, {})
        if v is None:
            found = [j for j in order.values() if j.deleted_at is None]
        else:
            found = list(takewhile(lambda j: after(j.at, v), reversed(order.values())))
        return sorted(found, key=lambda j: str(dig(j.trainjob, "metadata", "name")))
