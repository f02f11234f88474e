"""The claim: a MultiKueue worker runs a copy only while the manager currently wants it there
(docs/multicluster.md, "The claim").

The manager's agent asserts, on each worker, which copy of each job it wants running there now: a Lease
``dispatch-claim-<manager Workload uid>`` whose ``holderIdentity`` is the gate's approval ``<A>/<Workload uid>``
that the copy carries. It renews the claim only while that is true by the manager's own objects: the Workload
admitted, its ``status.clusterName`` naming the worker, that worker's MultiKueueCluster Active (Kueue can reach
it, so it can also stop the copy) and not fenced, no hold of dispatch's in force. The worker's agent lets a copy
start, and keeps it running, only under a claim for exactly that copy that it saw renewed within the claim's
duration, by its own clock. So whatever breaks (Kueue cut off from the worker, a fence, the worker dropped from
the MultiKueueConfig, a Stop, an eviction) the copy is stopped by the party that can see it, within the duration.

Pure functions of the objects as read; agent/multicluster/claims.py reads and writes them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from contract.admission import preconditions
from contract.keys import (
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_CLAIM_JOB,
    ANNOTATION_DISPATCHED,
    ANNOTATION_DISPATCHED_TO,
    CLAIM_PREFIX,
    HOLD_ANNOTATIONS,
    LABEL_CLAIM,
)
from contract.objects import add_op, dig, labels, micro_time, parse_rfc3339, pointer
from contract.objects import annotations as annotations_of

DEFAULT_ORIGIN: Final = "multikueue"
"""Kueue's default ``multiKueue.origin``: the value of the origin label on the remote objects a manager makes."""


def claim_name(workload_uid: str) -> str:
    """The claim Lease of the manager's Workload ``workload_uid`` (a uid is a valid Lease name's tail)."""
    return f"{CLAIM_PREFIX}{workload_uid}"


def copy_claim(copy: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """The claim a worker's copy needs: ``(claim name, approval)`` from the gate's approval it carries (MultiKueue
    copies the manager TrainJob's annotations); None when it carries none (it never starts)."""
    value = annotations_of(copy).get(ANNOTATION_APPROVED_ADMISSION)
    if not isinstance(value, str):
        return None
    a, _, uid = value.partition("/")
    if not a or not uid:
        return None
    return claim_name(uid), value


def claimed(lease: Mapping[str, Any] | None) -> str | None:
    """The approval a claim Lease names (its ``holderIdentity``); None for no claim."""
    holder = dig(lease, "spec", "holderIdentity")
    return holder if isinstance(holder, str) and holder else None


def _true(obj: Mapping[str, Any] | None, condition: str) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") == condition and c.get("status") == "True"
        for c in dig(obj, "status", "conditions") or []
    )


def cluster_active(cluster: Mapping[str, Any] | None) -> bool:
    """A MultiKueueCluster Kueue is connected to (its ``Active`` condition True): Kueue can stop a copy there."""
    return _true(cluster, "Active")


def dispatched_worker(workload: Mapping[str, Any] | None) -> str | None:
    """The worker the manager's Workload is dispatched to now: its ``status.clusterName`` while it is admitted,
    not evicted, not finished and active; None otherwise."""
    worker = dig(workload, "status", "clusterName")
    if not isinstance(worker, str) or not worker:
        return None
    if dig(workload, "spec", "active") is False or dig(workload, "metadata", "deletionTimestamp"):
        return None
    if not _true(workload, "QuotaReserved") or _true(workload, "Evicted") or _true(workload, "Finished"):
        return None
    return worker


@dataclass(frozen=True)
class Want:
    """A claim the manager's agent renews: on ``worker``, the Lease ``name`` naming ``approval``."""

    worker: str
    name: str
    approval: str
    job: str
    """``<namespace>/<name>`` of the job."""


def wanted_claim(
    workload: Mapping[str, Any],
    trainjob: Mapping[str, Any] | None,
    clusters: Mapping[str, Mapping[str, Any]],
    *,
    fenced: Iterable[str] = (),
) -> Want | None:
    """The claim the manager wants for ``workload`` now, or None. ``trainjob``: its owner as read (a dispatch
    TrainJob MultiKueue manages, checked by the caller); ``clusters``: the MultiKueueClusters by name; ``fenced``:
    the fenced ones. Wanted only while every one of these holds: the Workload is dispatched to a worker
    (``dispatched_worker``), whose MultiKueueCluster is Active and not fenced; no hold of dispatch's is on the
    TrainJob or the Workload; the TrainJob carries the gate's approval of this Workload, whose A is the stamp
    the gate wrote on it for this dispatch."""
    worker = dispatched_worker(workload)
    if worker is None or worker in set(fenced) or not cluster_active(clusters.get(worker)):
        return None
    if any(k in annotations_of(o) for o in (trainjob, workload) for k in HOLD_ANNOTATIONS):
        return None
    approval = annotations_of(trainjob).get(ANNOTATION_APPROVED_ADMISSION)
    uid = str(dig(workload, "metadata", "uid") or "")
    if not isinstance(approval, str) or not uid:
        return None
    a, _, approved_uid = approval.partition("/")
    if approved_uid != uid or annotations_of(workload).get(ANNOTATION_DISPATCHED) != a:
        return None
    job = f"{dig(trainjob, 'metadata', 'namespace')}/{dig(trainjob, 'metadata', 'name')}"
    return Want(worker, claim_name(uid), approval, job)


def claim_lease(
    existing: Mapping[str, Any] | None, want: Want, *, namespace: str, origin: str, now: dt.datetime, duration: int
) -> tuple[bool, dict[str, Any]]:
    """The manager's renewal of the claim ``want``: ``(create, body)``; a body to update carries the Lease's
    resourceVersion as read (a PUT that fails if anyone wrote it since). A claim that named an earlier dispatch
    of the same Workload is turned to this one: the worker sees the change, and the old copy's approval no
    longer matches."""
    stamp = micro_time(now)
    spec = {"holderIdentity": want.approval, "leaseDurationSeconds": duration, "renewTime": stamp}
    meta = {"labels": {LABEL_CLAIM: origin}, "annotations": {ANNOTATION_CLAIM_JOB: want.job}}
    if existing is None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": want.name, "namespace": namespace, **meta},
            "spec": {**spec, "acquireTime": stamp},
        }
        return True, body
    old = existing.get("metadata") or {}
    metadata = {
        **old,
        "labels": {**(old.get("labels") or {}), **meta["labels"]},
        "annotations": {**(old.get("annotations") or {}), **meta["annotations"]},
    }
    return False, {**existing, "metadata": metadata, "spec": {**(existing.get("spec") or {}), **spec}}


def fresh_by_manager(lease: Mapping[str, Any] | None, now: dt.datetime) -> bool:
    """The claim may still be live on its worker, by the clock of the manager that wrote its renewTime: renewed
    within its duration (an unreadable one counts as fresh)."""
    if lease is None:
        return False
    renewed = parse_rfc3339(dig(lease, "spec", "renewTime"))
    duration = dig(lease, "spec", "leaseDurationSeconds")
    if renewed is None or not isinstance(duration, int):
        return True
    return (now - renewed).total_seconds() < duration


# -- The record of where a job went ---------------------------------------------------------------


def dispatched_to(trainjob: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The workers the record on the manager's TrainJob lists (``ANNOTATION_DISPATCHED_TO``)."""
    value = annotations_of(trainjob).get(ANNOTATION_DISPATCHED_TO)
    if not isinstance(value, str):
        return ()
    return tuple(sorted({w.strip() for w in value.split(",") if w.strip()}))


def record_ops(trainjob: Mapping[str, Any], workers: Iterable[str]) -> list[dict[str, Any]]:
    """The JSON Patch that makes the record list exactly ``workers``, preconditioned on the TrainJob as read;
    empty when it already does."""
    want = tuple(sorted(set(workers)))
    if want == dispatched_to(trainjob) and (want or ANNOTATION_DISPATCHED_TO not in annotations_of(trainjob)):
        return []
    if not want:
        path = pointer("metadata", "annotations", ANNOTATION_DISPATCHED_TO)
        return [*preconditions(trainjob), {"op": "remove", "path": path}]
    return [
        *preconditions(trainjob),
        add_op(trainjob, ("metadata", "annotations", ANNOTATION_DISPATCHED_TO), ",".join(want)),
    ]


def origin_of(lease: Mapping[str, Any] | None) -> str | None:
    value = labels(lease).get(LABEL_CLAIM)
    return value if isinstance(value, str) else None
