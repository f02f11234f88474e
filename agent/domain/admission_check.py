"""Our AdmissionChecks: which exist (a cache fed by their watch), and their ``Active`` condition.

Kueue leaves every ClusterQueue that references a check inactive (no new quota reservations) until the
check's controller sets ``Active=True``. We set it once we serve as leader, and never set it False: on our
way down, Kueue would then stop the queue, where the spec wants jobs to wait at the Pending check instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agent.constants import ACTIVE_MESSAGE, ACTIVE_REASON, CONDITION_ACTIVE
from contract.keys import ADMISSION_CHECK_CONTROLLER
from contract.objects import dig


def is_ours(ac: object) -> bool:
    controller: object = dig(ac, "spec", "controllerName")
    return controller == ADMISSION_CHECK_CONTROLLER


def active_condition(ac: object) -> Mapping[str, Any] | None:
    conditions = dig(ac, "status", "conditions")
    for c in conditions if isinstance(conditions, list) else []:
        if isinstance(c, Mapping) and c.get("type") == CONDITION_ACTIVE:
            return c
    return None


def active_patch(ac: Mapping[str, Any], now: str) -> list[dict[str, Any]] | None:
    """The JSON Patch for ``admissionchecks/{name}/status`` that sets Active=True, or None when the condition
    already says so for the current generation.

    No resourceVersion: Kueue's own finalizer updates would make it fail spuriously, and setting True is
    idempotent. Instead ``test`` ops pin what matters: the uid (not an AdmissionCheck recreated under the same
    name), the controllerName (never someone else's check), and the position of the condition replaced, so
    others' conditions are left alone. (A uid in a server-side apply or merge patch body would not do: on the
    status subresource of a custom resource the API server keeps the stored metadata and ignores the body's.)
    """
    generation = dig(ac, "metadata", "generation")
    current = active_condition(ac) or {}
    if (
        current.get("status") == "True"
        and current.get("observedGeneration") == generation
        and current.get("reason") == ACTIVE_REASON
        and current.get("message") == ACTIVE_MESSAGE
    ):
        return None
    since = current.get("lastTransitionTime") if current.get("status") == "True" else None
    condition: dict[str, Any] = {
        "type": CONDITION_ACTIVE,
        "status": "True",
        "reason": ACTIVE_REASON,
        "message": ACTIVE_MESSAGE,
        "lastTransitionTime": since or now,
    }
    if isinstance(generation, int):
        condition["observedGeneration"] = generation
    ops: list[dict[str, Any]] = [
        {"op": "test", "path": "/metadata/uid", "value": dig(ac, "metadata", "uid")},
        {"op": "test", "path": "/spec/controllerName", "value": ADMISSION_CHECK_CONTROLLER},
    ]
    conditions = dig(ac, "status", "conditions")
    if not isinstance(dig(ac, "status"), Mapping):
        ops.append({"op": "add", "path": "/status", "value": {"conditions": [condition]}})
    elif not isinstance(conditions, list):
        ops.append({"op": "add", "path": "/status/conditions", "value": [condition]})
    else:
        at = next(
            (i for i, c in enumerate(conditions) if isinstance(c, Mapping) and c.get("type") == CONDITION_ACTIVE), None
        )
        if at is None:
            ops.append({"op": "add", "path": "/status/conditions/-", "value": condition})
        else:
            ops.append({"op": "test", "path": f"/status/conditions/{at}/type", "value": CONDITION_ACTIVE})
            ops.append({"op": "replace", "path": f"/status/conditions/{at}", "value": condition})
    return ops


class AdmissionCheckCache:
    """Every AdmissionCheck with our controllerName, as last seen by the watch. Config, so a cache is enough:
    a decision still re-reads the Workload, and a check name only says which entry of it is ours."""

    def __init__(self) -> None:
        self._ours: dict[str, Mapping[str, Any]] = {}
        self.synced = False

    def ours(self) -> frozenset[str]:
        return frozenset(self._ours)

    def objects(self) -> list[Mapping[str, Any]]:
        return list(self._ours.values())

    def replace(self, items: Iterable[Mapping[str, Any]]) -> set[str]:
        """Replaces the cache with a full list; returns the names that are new or changed."""
        items = list(items)
        fresh = {dig(ac, "metadata", "name"): ac for ac in items if is_ours(ac)}
        changed = {n for n, ac in fresh.items() if self._ours.get(n) != ac}
        self._ours = fresh
        self.synced = True
        return changed

    def event(self, kind: str, ac: Mapping[str, Any]) -> bool:
        """Applies one watch event; True when one of ours is new or changed (a controllerName never changes:
        it is immutable)."""
        name = dig(ac, "metadata", "name")
        if kind == "DELETED" or not is_ours(ac):
            self._ours.pop(name, None)
            return False
        changed = self._ours.get(name) != ac
        self._ours[name] = ac
        return changed
