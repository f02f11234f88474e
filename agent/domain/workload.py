"""A Kueue Workload as Kueue writes it (kueue.x-k8s.io/v1beta2), read without trusting its shape.

The predicates mirror Kueue's own (pkg/workload): quota reserved is the QuotaReserved condition, and the
gate acts only while quota is reserved and the Workload is neither evicted, finished nor deactivated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contract.keys import KIND_TRAINJOB
from contract.objects import dig
from contract.upstream import KUEUE_API_VERSION, TRAINER_GROUP

QUOTA_RESERVED: Final = "QuotaReserved"
EVICTED: Final = "Evicted"
FINISHED: Final = "Finished"
PENDING: Final = "Pending"
READY: Final = "Ready"
RETRY: Final = "Retry"
"""Kueue evicts a Workload one of whose checks is Retry, and resets its checks to Pending once it is evicted."""
CHECK_MESSAGE_MAX: Final = 32768
"""The CRD's maxLength for an admission check's message."""


def condition_true(workload: object, type_: str) -> bool:
    conditions = dig(workload, "status", "conditions")
    return any(
        isinstance(c, Mapping) and c.get("type") == type_ and c.get("status") == "True"
        for c in (conditions if isinstance(conditions, list) else [])
    )


def check_state(workload: object, check: str) -> Mapping[str, Any] | None:
    """The Workload's state entry for the AdmissionCheck named ``check``."""
    checks = dig(workload, "status", "admissionChecks")
    for entry in checks if isinstance(checks, list) else []:
        if isinstance(entry, Mapping) and entry.get("name") == check:
            return entry
    return None


def waiting_reason(workload: object, check: str) -> str | None:
    """Why the gate must not act on this Workload now, or None when it must.

    A Ready written before quota is reserved would be banked until an admission nobody controls, so the
    gate waits for the reservation: the pod check, the raise and the admission it approves stay in one
    cycle.
    """
    entry = check_state(workload, check)
    if entry is None:
        return f"the Workload does not list the check {check}"
    if entry.get("state") != PENDING:
        return f"the check is {entry.get('state')}, not Pending"
    if not condition_true(workload, QUOTA_RESERVED) or dig(workload, "status", "admission") is None:
        return "quota is not reserved"
    if condition_true(workload, EVICTED):
        return "the Workload is being evicted"
    if condition_true(workload, FINISHED):
        return "the Workload has finished"
    if dig(workload, "spec", "active") is False:
        return "the Workload is deactivated"
    return None


def owner_trainjob(workload: object) -> tuple[str, str] | None:
    """(name, uid) of the TrainJob that controls this Workload, or None when a TrainJob does not own it."""
    refs = dig(workload, "metadata", "ownerReferences")
    for ref in refs if isinstance(refs, list) else []:
        if (
            isinstance(ref, Mapping)
            and ref.get("controller") is True
            and ref.get("kind") == KIND_TRAINJOB
            and str(ref.get("apiVersion", "")).split("/")[0] == TRAINER_GROUP
        ):
            return str(ref.get("name")), str(ref.get("uid"))
    return None


def check_state_apply(workload: Mapping[str, Any], check: str, state: str, message: str, now: str) -> dict[str, Any]:
    """The server-side apply body for ``workloads/status`` that sets our one check entry.

    It carries the resourceVersion as read, so a write after anything else wrote the Workload (Kueue's
    reset of the checks on eviction above all) fails with a conflict instead of landing. (The uid it also
    carries is not checked on a status write, the API server keeps the stored one; the resourceVersion is
    enough, as a recreated object never has the one that was read.) Only our entry is applied;
    ``lastTransitionTime`` moves only when the state changes, and ``retryCount`` (Kueue's) is never written.
    """
    entry = check_state(workload, check) or {}
    moved = entry.get("state") != state or not entry.get("lastTransitionTime")
    if len(message) > CHECK_MESSAGE_MAX:
        message = message[: CHECK_MESSAGE_MAX - 20] + " ... (truncated)"
    return {
        "apiVersion": KUEUE_API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": dig(workload, "metadata", "name"),
            "namespace": dig(workload, "metadata", "namespace"),
            "uid": dig(workload, "metadata", "uid"),
            "resourceVersion": dig(workload, "metadata", "resourceVersion"),
        },
        "status": {
            "admissionChecks": [
                {
                    "name": check,
                    "state": state,
                    "message": message,
                    "lastTransitionTime": now if moved else entry["lastTransitionTime"],
                }
            ]
        },
    }


def keep_our_entries(body: Mapping[str, Any], workload: Mapping[str, Any], ours: frozenset[str]) -> dict[str, Any]:
    """``body`` plus our other checks' entries exactly as read.

    Server-side apply removes the fields a field manager applied before and no longer applies. Several
    AdmissionChecks may share our controllerName, and gate.decide() writes one check per pass: applying
    only that entry would strip the state and message we wrote into another entry of ours (a 422, as both
    are required). Re-applying the others as read changes nothing: the write is preconditioned on that very
    read. Other controllers' entries are never applied.
    """
    written = {e.get("name") for e in dig(body, "status", "admissionChecks") or []}
    entries = dig(workload, "status", "admissionChecks")
    keep = [
        {k: e[k] for k in ("name", "state", "message", "lastTransitionTime") if k in e}
        for e in (entries if isinstance(entries, list) else [])
        if isinstance(e, Mapping) and e.get("name") in ours and e.get("name") not in written
    ]
    if not keep:
        return dict(body)
    status = dict(body["status"])
    status["admissionChecks"] = [*status["admissionChecks"], *keep]
    return {**body, "status": status}
