"""Reserved keys: only dispatch writes labels and annotations under dispatch.phpboyscout.uk/, and only
dispatch adds or removes dispatch's gate in ``kueue.x-k8s.io/admission-gated-by`` (removing it would open a
job behind dispatch's back). Kueue's controller copies the gate from a TrainJob to its Workload, so on
Workloads Kueue may carry it both ways.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.errors import Problem
from contract.gates import gates_of
from contract.keys import GATE, PREFIX
from contract.objects import annotations, labels

ACCEPTED = f"only dispatch adds, changes or removes keys under {PREFIX}"


def _reserved(keys: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in keys.items() if isinstance(k, str) and k.startswith(PREFIX)}


def reserved_key_problems(
    old: Mapping[str, Any] | None,
    new: Mapping[str, Any] | None,
    *,
    gate_carrier: bool = False,
    exempt: frozenset[str] = frozenset(),
) -> list[Problem]:
    """What a stranger's write changes of dispatch's keys. ``gate_carrier``: may move dispatch's gate;
    ``exempt``: annotations another rule checks for this write (the record of A in an unsuspend)."""
    problems = []
    for where, read in (("labels", labels), ("annotations", annotations)):
        before, after = _reserved(read(old)), _reserved(read(new))
        for key in sorted(before.keys() | after.keys()):
            if before.get(key) != after.get(key) and not (where == "annotations" and key in exempt):
                seen = f"{before.get(key)!r} -> {after.get(key)!r}" if old is not None else after.get(key)
                problems.append(Problem("reserved-keys", f"metadata.{where}[{key}]", seen, ACCEPTED))
    had, has = GATE in gates_of(old), GATE in gates_of(new)
    if had != has and not gate_carrier:
        problems.append(
            Problem(
                "reserved-keys.gate",
                "metadata.annotations[kueue.x-k8s.io/admission-gated-by]",
                ("removed " if had else "added ") + GATE,
                "only dispatch adds or removes its gate; another party may add and remove gates of its own",
            )
        )
    return problems
