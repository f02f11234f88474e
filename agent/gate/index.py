"""What the Workload watch remembers of each Workload: enough to know what to enqueue, never to decide.

Per Workload its key and a ``Hint`` (the TrainJob that controls it, the names of its due checks, whether Kueue keeps
its quota after an eviction): about 200 bytes (docs/performance.md). Every decision reads the Workload anew
(agent/gate/reconcile.py).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.domain.workload import EVICTED, QUOTA_RESERVED, condition_true, owner_trainjob, waiting_reason
from agent.gate.context import WorkloadKey
from contract.objects import dig


@dataclass(frozen=True, slots=True)
class Hint:
    """What the Workload watch last said about one Workload: enough to know when to enqueue it."""

    trainjob: tuple[str, str] | None
    """(namespace, name) of the TrainJob that controls it."""
    due: frozenset[str]
    """Names of its checks (anyone's) that are Pending with quota reserved and nothing else in the way."""
    kept: bool = False
    """Evicted with its quota still reserved: Kueue waits for its job to stop (on a MultiKueue manager, perhaps
    for a lost worker's copied status: agent/multicluster/lost_quota.py)."""


def hint_of(workload: Mapping[str, Any]) -> Hint:
    entries = dig(workload, "status", "admissionChecks")
    names = [e.get("name") for e in entries if isinstance(e, Mapping)] if isinstance(entries, list) else []
    owner = owner_trainjob(workload)
    namespace = sys.intern(str(dig(workload, "metadata", "namespace")))
    due = frozenset(n for n in names if isinstance(n, str) and waiting_reason(workload, n) is None)
    return Hint(
        trainjob=(namespace, owner[0]) if owner else None,
        due=_due_names.setdefault(due, due) if len(_due_names) < 4096 else due,
        kept=condition_true(workload, EVICTED) and condition_true(workload, QUOTA_RESERVED),
    )


_due_names: dict[frozenset[str], frozenset[str]] = {}
"""One frozenset per distinct set of due check names (a handful: the check names of the cluster), shared by
every Hint, so a Workload costs a pointer for it, not a set."""


def key_of(obj: Mapping[str, Any]) -> WorkloadKey:
    """Namespaces interned: 100,000 Workloads in a few namespaces keep a few strings, not 100,000."""
    return WorkloadKey(sys.intern(str(dig(obj, "metadata", "namespace"))), str(dig(obj, "metadata", "name")))


class WorkloadIndex:
    """Workload key -> Hint, and TrainJob -> Workload key. An optimisation only: it says what to enqueue."""

    def __init__(self) -> None:
        self.hints: dict[WorkloadKey, Hint] = {}
        self.by_trainjob: dict[tuple[str, str], WorkloadKey] = {}

    def put(self, key: WorkloadKey, hint: Hint) -> None:
        old = self.hints.get(key)
        if old is not None and old.trainjob is not None and old.trainjob != hint.trainjob:
            self.by_trainjob.pop(old.trainjob, None)
        self.hints[key] = hint
        if hint.trainjob is not None:
            self.by_trainjob[hint.trainjob] = key

    def remove(self, key: WorkloadKey) -> None:
        hint = self.hints.pop(key, None)
        if hint is not None and hint.trainjob is not None and self.by_trainjob.get(hint.trainjob) == key:
            del self.by_trainjob[hint.trainjob]

    def due(self, key: WorkloadKey, ours: frozenset[str]) -> bool:
        hint = self.hints.get(key)
        return hint is not None and not hint.due.isdisjoint(ours)

    def due_keys(self, ours: frozenset[str]) -> list[WorkloadKey]:
        return [k for k, h in self.hints.items() if not h.due.isdisjoint(ours)]

    def kept_keys(self) -> list[WorkloadKey]:
        return [k for k, h in self.hints.items() if h.kept]
