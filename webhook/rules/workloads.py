"""A dispatch TrainJob's Workload (Kueue mode): dispatch's check, dispatch's hold, and its queue.

Kueue admits when every check of the Workload is ``Ready``; dispatch's check goes ``Ready`` only after the
readmission gate raised A, so a ``Ready`` written by anyone else (``patch workloads/status``) would admit an
execution with the last one's A. Kueue adds the check as ``Pending`` and resets it to ``Pending`` on every
eviction, which stays allowed. Kueue copies every check's ``podSetUpdates`` into its runtime-patch entry, so
none may carry a pod key that decides identity. A Workload that dispatch holds (``spec.active: false`` with
its hold annotations) is not reactivated but by dispatch's Release, which removes both at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.errors import Problem
from contract.keys import HOLD_ANNOTATIONS, PREFIX
from contract.objects import annotations, dig
from contract.patches import reserved_pod_key

READY = "Ready"


def _checks(obj: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    entries = dig(obj, "status", "admissionChecks")
    return {
        e["name"]: e
        for e in (entries if isinstance(entries, list) else [])
        if isinstance(e, Mapping) and isinstance(e.get("name"), str)
    }


def workload_update_problems(
    old: Mapping[str, Any], new: Mapping[str, Any], *, dispatch: bool, kueue: bool
) -> list[Problem]:
    problems = []
    held = sorted(k for k in HOLD_ANNOTATIONS if k in annotations(new))
    if held and dig(old, "spec", "active") is False and dig(new, "spec", "active") is not False:
        problems.append(
            Problem(
                "workload.hold",
                "spec.active",
                f"false -> {dig(new, 'spec', 'active')} with {held[0]} kept",
                "dispatch holds this Workload: only Release reactivates it, removing the hold annotations",
            )
        )
    before, after = dig(old, "spec", "queueName"), dig(new, "spec", "queueName")
    if before != after and not (dispatch or kueue):
        problems.append(
            Problem(
                "workload.queue",
                "spec.queueName",
                f"{before} -> {after}",
                "the queue of a dispatch job is chosen at Start; another queue may admit without dispatch's check",
            )
        )
    return problems


def workload_status_problems(
    old: Mapping[str, Any] | None, new: Mapping[str, Any], *, dispatch: bool, checks: tuple[str, ...]
) -> list[Problem]:
    """``checks``: the names of dispatch's AdmissionChecks (the objects whose controller is dispatch's)."""
    problems = []
    before, after = _checks(old), _checks(new)
    for name, entry in after.items():
        previous = before.get(name)
        if name in checks and entry.get("state") == READY and not dispatch:
            was = (previous or {}).get("state")
            if was != READY or (previous or {}).get("podSetUpdates") != entry.get("podSetUpdates"):
                problems.append(
                    Problem(
                        "workload-status.check",
                        f"status.admissionChecks[{name}]",
                        f"{was} -> {READY}" if was != READY else "podSetUpdates changed",
                        "only dispatch's admission controller sets its check Ready, after raising A; "
                        "Kueue and others may reset it to Pending",
                    )
                )
        if entry == previous:
            continue
        updates = entry.get("podSetUpdates")
        for update in updates if isinstance(updates, list) else []:
            for part in ("labels", "annotations"):
                keys = dig(update, part)
                bad = sorted(k for k in (keys if isinstance(keys, Mapping) else {}) if reserved_pod_key(k))
                if bad:
                    problems.append(
                        Problem(
                            "workload-status.pod-set-updates",
                            f"status.admissionChecks[{name}].podSetUpdates[{dig(update, 'name')}].{part}",
                            bad,
                            f"no pod keys under {PREFIX} or J's label: Kueue copies them into the pods, over A",
                        )
                    )
    return problems
