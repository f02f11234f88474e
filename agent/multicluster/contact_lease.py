"""The contact Lease between the manager's dispatch agent and a worker, decided: the manager's renewal of it, with
a new contact epoch after a gap (``contact_lease``), and what a worker reads off it (``contact_epoch``,
``contact_origin``). Pure functions of the Lease as read (docs/multicluster.md, "Contact with the manager").
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any, Final

from contract.claims import DEFAULT_ORIGIN
from contract.keys import (
    CONTACT_HOLDER,
    LABEL_CLAIM,
    LEASE_MANAGER_CONTACT,
)
from contract.objects import dig, labels, micro_time, parse_rfc3339

NO_CONTACT: Final = (
    f"no renewal of the manager's contact Lease {LEASE_MANAGER_CONTACT} seen here within its duration: the manager's "
    "dispatch agent cannot reach this worker (multicluster.workerCredentials there, multicluster.managerAgent here), "
    "so no copy starts"
)


def contact_epoch(lease: Mapping[str, Any] | None) -> int | None:
    """The contact epoch the Lease ``LEASE_MANAGER_CONTACT`` shows (its ``leaseTransitions``), None without one."""
    if lease is None or dig(lease, "spec", "holderIdentity") != CONTACT_HOLDER:
        return None
    transitions = dig(lease, "spec", "leaseTransitions")
    return transitions if isinstance(transitions, int) and transitions >= 0 else 0


def contact_origin(lease: Mapping[str, Any] | None) -> str | None:
    """The MultiKueue origin of the manager that renews the contact Lease (its ``LABEL_CLAIM``); None: unlabelled."""
    value = labels(lease).get(LABEL_CLAIM)
    return value if isinstance(value, str) else None


def contact_lease(
    lease: Mapping[str, Any] | None, *, namespace: str, now: dt.datetime, duration: int, origin: str = DEFAULT_ORIGIN
) -> tuple[bool, dict[str, Any]]:
    """The manager's renewal of its contact Lease on a worker: ``(create, body)``. A body to update carries the
    Lease's resourceVersion as read (a PUT that fails if anyone wrote it since). When the Lease was last renewed
    more than ``duration`` ago (or is not the manager's), the renewal starts a new contact epoch
    (``leaseTransitions`` + 1): the worker's agent then deletes every copy it let start in an earlier one, which
    outlived a loss of contact however short its own watch of the Lease was. Judged by the manager's clock, which
    wrote the renewTime it compares with; the worker judges the loss itself by its own clock (``ContactWatch``)."""
    stamp = micro_time(now)
    spec = {"holderIdentity": CONTACT_HOLDER, "leaseDurationSeconds": duration, "renewTime": stamp}
    if lease is None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE_MANAGER_CONTACT, "namespace": namespace, "labels": {LABEL_CLAIM: origin}},
            "spec": {**spec, "acquireTime": stamp, "leaseTransitions": 0},
        }
        return True, body
    last = parse_rfc3339(dig(lease, "spec", "renewTime"))
    old = dig(lease, "spec", "leaseDurationSeconds")
    gap = max(duration, old if isinstance(old, int) else 0)
    epoch = contact_epoch(lease)
    if epoch is None or last is None or (now - last).total_seconds() > gap:
        transitions = dig(lease, "spec", "leaseTransitions")
        spec |= {
            "acquireTime": stamp,
            "leaseTransitions": (transitions if isinstance(transitions, int) and transitions >= 0 else 0) + 1,
        }
    meta = lease.get("metadata") or {}
    metadata = {**meta, "labels": {**(meta.get("labels") or {}), LABEL_CLAIM: origin}}
    return False, {**lease, "metadata": metadata, "spec": {**(lease.get("spec") or {}), **spec}}
