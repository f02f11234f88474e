"""A dispatch TrainJob's Workload (Kueue mode): dispatch's check, dispatch's hold, and its queue.

Kueue admits when every check of the Workload is ``Ready``; dispatch's check goes ``Ready`` only after the
readmission gate raised A, so a ``Ready`` written by anyone else (``patch workloads/status``) would admit an
execution with the last one's A. Kueue adds the check as ``Pending`` and resets it to ``Pending`` on every
eviction, which stays allowed. Kueue copies every check's ``podSetUpdates`` into its runtime-patch entry, so
none may carry a pod key that decides identity. A Workload that dispatch holds (``spec.active: false`` with
its hold annotations) is not reactivated but by dispatch's Release, which removes both at once. In CEL: the policy
``dispatch-k8s-workloads`` (``workloads_policy``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Final

from contract import upstream
from contract.errors import Problem
from contract.keys import HOLD_ANNOTATIONS, LABEL_RESTART_ATTEMPT, PREFIX
from contract.multicluster import ROLE_WORKER
from contract.objects import annotations, dig
from contract.patches import reserved_pod_key
from webhook.cel import is_principal, pod_key_reserved, validating_policy
from webhook.config import Config
from webhook.configurations import NAME, claims, gvr
from webhook.rules.multicluster import origin_kept

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


WORKLOADS: Final = f"{NAME}-workloads"


def workloads_policy(config: Config) -> dict[str, Any]:
    """``dispatch-k8s-workloads``: ``workload_status_problems`` and ``workload_update_problems`` in CEL (but
    ``workload.queue``: the owner policy lets only Kueue, dispatch and the garbage collector update a Workload)."""
    checks = json.dumps(list(config.admission_checks))
    reserved_pod_keys = (
        "u.?labels.orValue({}).all(k, !"
        + pod_key_reserved("k")
        + ") && "
        + ("u.?annotations.orValue({}).all(k, !" + pod_key_reserved("k") + ")")
    )
    return validating_policy(
        WORKLOADS,
        [gvr(upstream.WORKLOADS), gvr(upstream.WORKLOADS, "status")],
        ["UPDATE"],
        {
            "matchConditions": [{"name": "dispatch-objects", "expression": claims("workloads")}],
            "variables": [
                {"name": "dispatch", "expression": is_principal(config.dispatch)},
                {"name": "checks", "expression": "object.?status.?admissionChecks.orValue([])"},
                {"name": "oldChecks", "expression": "oldObject.?status.?admissionChecks.orValue([])"},
            ],
            "validations": [
                {
                    "expression": "variables.dispatch || variables.checks.all(c, !(c.name in "
                    f"{checks}) || c.state != 'Ready' || variables.oldChecks.exists(o, o.name == c.name && "
                    "o.state == 'Ready' && o.?podSetUpdates.orValue([]) == c.?podSetUpdates.orValue([])))",
                    "message": "only dispatch's admission controller sets its check Ready, after raising A",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.checks.all(c, variables.oldChecks.exists(o, o == c) || "
                    f"c.?podSetUpdates.orValue([]).all(u, {reserved_pod_keys}))",
                    "message": f"no check's podSetUpdates may carry pod keys under {PREFIX} or "
                    f"{LABEL_RESTART_ATTEMPT}: Kueue copies them into the pods, over A",
                    "reason": "Forbidden",
                },
                {
                    "expression": "!object.metadata.?annotations.orValue({}).exists(k, k in "
                    f"{json.dumps(list(HOLD_ANNOTATIONS))}) || oldObject.spec.?active.orValue(true) != false || "
                    "object.spec.?active.orValue(true) == false",
                    "message": "dispatch holds this Workload: only Release reactivates it, removing the hold",
                    "reason": "Forbidden",
                },
                *([origin_kept()] if config.multicluster_role == ROLE_WORKER else []),
            ],
        },
    )
