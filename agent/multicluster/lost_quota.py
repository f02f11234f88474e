"""A lost worker's quota on a MultiKueue manager, decided (docs/multicluster.md, "A lost worker's quota"). Pure
functions of the objects as read; agent/multicluster/worker_pass.py reads them and writes the release.

Kueue evicts a Workload on the manager when its worker is lost (MultiKueue's check goes to Retry once the worker
has been unreachable for ``workerLostTimeout``) or when a Hold evicts it; it suspends the TrainJob and releases the
quota only once the TrainJob is no longer active: no Job in its ``status.jobsStatus`` active. On a manager that
status is MultiKueue's copy of the worker's, and a lost worker's is never copied again: the quota stays reserved,
the Workload is never requeued, and the job never moves. So dispatch's agent clears those active counts once its
own look at every worker (guarantee 4) finds nothing of the job that may still run on any unfenced worker.

The release is liveness only: it lets Kueue requeue the job; the next dispatch is still the gate's, which looks at
every worker again before its Ready, and raises A by K.

MultiKueue-ness is the TrainJob's own ``spec.managedBy`` (immutable, set by Kueue), and the checks whose workers the
look covers are identified by fresh reads of every check the Workload lists, as the gate identifies them
(agent/domain/decide.py ``dispatch_mode``), never by the AdmissionCheck watch cache: a cache that misses a MultiKueue
check (just made, or deleted and made again) would leave its workers unread, and the release would find nothing to wait
for. A check that cannot be identified keeps the quota.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.domain.multikueue_mode import dispatch_mode
from agent.domain.workload import EVICTED, FINISHED, QUOTA_RESERVED, condition_true, owner_trainjob
from contract.admission import preconditions
from contract.multicluster import managed_by_multikueue
from contract.objects import dig
from contract.ownership import is_dispatch


def kept_active(workload: Mapping[str, Any] | None, trainjob: Mapping[str, Any] | None) -> int:
    """How many active Jobs the copied status of ``trainjob`` shows while Kueue, having evicted ``workload``,
    keeps its quota for them: 0 when there is nothing to release (not a dispatch TrainJob MultiKueue manages, not
    the Workload's owner, not evicted with its quota reserved, not suspended yet, finished, or none active)."""
    if workload is None or trainjob is None or not is_dispatch(trainjob) or not managed_by_multikueue(trainjob):
        return 0
    owner = owner_trainjob(workload)
    if owner is None or owner[1] != dig(trainjob, "metadata", "uid"):
        return 0
    if not (condition_true(workload, EVICTED) and condition_true(workload, QUOTA_RESERVED)):
        return 0
    if condition_true(workload, FINISHED) or dig(trainjob, "spec", "suspend") is not True:
        return 0  # Kueue has not stopped the job yet: its own eviction comes first
    return sum(_active(entry) for entry in _jobs_status(trainjob))


def checks_to_look_at(
    trainjob: Mapping[str, Any], found: Mapping[str, Mapping[str, Any] | str | None]
) -> tuple[tuple[str, ...], str | None]:
    """The MultiKueue checks whose workers the release must look at, and why the quota stays whatever the workers
    show (None: nothing in the mode keeps it). ``found``: every check the Workload lists, as read fresh (the
    AdmissionCheck, None when it is not there, or why it could not be read), as ``dispatch_mode`` takes them."""
    mode = dispatch_mode(trainjob, found)
    return mode.checks, mode.problem


def release_patch(trainjob: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch of ``trainjob``'s status subresource that sets every active count to 0, preconditioned on
    the TrainJob as read (a status MultiKueue copied since is not overwritten: 409)."""
    ops = preconditions(trainjob)
    for i, entry in enumerate(_jobs_status(trainjob)):
        if _active(entry):
            ops.append({"op": "replace", "path": f"/status/jobsStatus/{i}/active", "value": 0})
    return ops


def kept_message(active: int, waiting: str) -> str:
    """The Event while the quota is kept: why, and what dispatch waits for (``waiting``: the gate's hold)."""
    return (
        f"Kueue evicted the job but keeps its quota: the status MultiKueue copied from a worker shows {active} active "
        f"Job(s). dispatch releases it once no execution of the job may still run on any worker; {waiting}"
    )


def released_message(active: int) -> str:
    return (
        f"no execution of the job may still run on any worker not fenced: cleared the {active} active Job(s) "
        "MultiKueue had copied from a worker, so that Kueue releases the job's quota and queues it again"
    )


def _jobs_status(trainjob: Mapping[str, Any]) -> list[Any]:
    found = dig(trainjob, "status", "jobsStatus")
    return found if isinstance(found, list) else []


def _active(entry: object) -> int:
    value = dig(entry, "active")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0
