"""The runtime copy on the workers of a MultiKueue manager, decided (docs/multicluster.md, "The runtime copy on
the workers"). Pure functions of the objects as read; agent/multicluster/worker_reads.py reads and writes them.

MultiKueue's copy of a dispatch TrainJob on a worker names the job's runtime copy, which Trainer needs in the same
namespace there, with the same spec (the worker's Kueue builds the Workload's pod sets from it, and a Workload that
differs from the manager's is finished as out of sync). So before every dispatch the manager's gate makes each
worker it may dispatch to hold a *replica*: the runtime copy's name, labels, annotations and spec, plus
``LABEL_REPLICA_OF`` (the manager TrainJob's uid), and the prologue's ConfigMap its pods mount. A worker whose
replica cannot be made, or where something else holds the name, holds the dispatch, named. Once the manager's
TrainJob is gone (or another holds its name), its replicas are deleted (``stale_replicas``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from agent.domain.decide import Blocker
from contract.keys import LABEL_REPLICA_OF
from contract.objects import annotations as annotations_of
from contract.objects import dig, labels


def replica(runtime_copy: Mapping[str, Any], trainjob_uid: str) -> dict[str, Any]:
    """The replica of ``runtime_copy`` (as read on the manager) for the TrainJob ``trainjob_uid``: what the
    worker's TrainJob copy needs of it, and nothing of the manager's object identity (uid, owner, versions)."""
    return {
        "apiVersion": runtime_copy["apiVersion"],
        "kind": runtime_copy["kind"],
        "metadata": {
            "name": dig(runtime_copy, "metadata", "name"),
            "namespace": dig(runtime_copy, "metadata", "namespace"),
            "labels": {**labels(runtime_copy), LABEL_REPLICA_OF: trainjob_uid},
            "annotations": dict(annotations_of(runtime_copy)),
        },
        "spec": copy.deepcopy(dict(runtime_copy.get("spec") or {})),
    }


def unprepared(worker: str, why: str) -> Blocker:
    """A worker not ready for the job (its replica or the prologue's ConfigMap): it holds the dispatch, which
    would fail there."""
    return Blocker("", why, worker, unprepared=True)


def replica_blocker(worker: str, want: Mapping[str, Any], have: Mapping[str, Any] | None) -> Blocker | None:
    """What holds a dispatch in the replica found on ``worker`` (``have``; None: there is none, so it is
    created). None: it is this job's replica, as wanted."""
    if have is None:
        return None
    where = f"TrainingRuntime {dig(want, 'metadata', 'namespace')}/{dig(want, 'metadata', 'name')}"
    if dig(have, "metadata", "deletionTimestamp"):
        return unprepared(worker, f"{where} is being deleted there; the job's replica is made once it is gone")
    uid = labels(want)[LABEL_REPLICA_OF]
    if labels(have).get(LABEL_REPLICA_OF) != uid:
        return unprepared(
            worker,
            f"{where} there is not the replica of this job's runtime copy ({LABEL_REPLICA_OF} is "
            f"{labels(have).get(LABEL_REPLICA_OF)!r}, not {uid!r}); a replica an earlier TrainJob of this name left "
            "is deleted by the manager's agent",
        )
    if have.get("spec") != want.get("spec"):
        # The copy's spec never changes (the webhook), so a replica that differs was made from something else.
        return unprepared(worker, f"{where} there differs from the job's runtime copy: delete it, or fence the worker")
    return None


def stale_replicas(
    replicas: Sequence[Mapping[str, Any]], trainjobs: Mapping[tuple[str, str], Mapping[str, Any] | None]
) -> list[Mapping[str, Any]]:
    """The replicas on a worker to delete: those whose TrainJob on the manager (``trainjobs``, by namespace and
    name, as read after the replicas were listed; None: not found) is gone or is another object. A replica made for
    a TrainJob is made after that TrainJob exists, so one absent when read later was deleted."""
    stale = []
    for r in replicas:
        key = (dig(r, "metadata", "namespace"), dig(r, "metadata", "name"))
        trainjob = trainjobs.get(key)
        if dig(r, "metadata", "deletionTimestamp"):
            continue
        if trainjob is None or dig(trainjob, "metadata", "uid") != labels(r).get(LABEL_REPLICA_OF):
            stale.append(r)
    return stale
