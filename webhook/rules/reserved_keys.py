"""Reserved keys: only dispatch writes labels and annotations under dispatch.phpboyscout.uk/, and only
dispatch adds or removes dispatch's gate in ``kueue.x-k8s.io/admission-gated-by`` (removing it would open a
job behind dispatch's back). Kueue's controller copies the gate from a TrainJob to its Workload, so on
Workloads Kueue may carry it both ways. The webhook's ``reserved_key_problems``; in CEL the policy
``dispatch-k8s-reserved-keys`` (``reserved_keys_policy``), which leaves the record of A at an unsuspend to
``identity`` and ``unsuspend``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contract import upstream
from contract.errors import Problem
from contract.gates import gates_of
from contract.keys import (
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    GATE,
    PREFIX,
)
from contract.multicluster import ROLE_WORKER
from contract.objects import annotations, labels
from webhook.cel import is_principal, lists_gate, metadata_map, q, validating_policy
from webhook.config import Config
from webhook.configurations import NAME, UNSUSPENDS, gvr
from webhook.rules.multicluster import copy_created_marked, multikueue_copy_created, replica_created

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


RESERVED_KEYS: Final = f"{NAME}-reserved-keys"


def _unchanged_reserved(old: str, new: str, skip: str = "false") -> str:
    """``skip``: CEL over ``k``, keys another policy checks."""
    p = q(PREFIX)
    return (
        f"{new}.all(k, !k.startsWith({p}) || ({skip}) || (k in {old} && {old}[k] == {new}[k])) && "
        f"{old}.all(k, !k.startsWith({p}) || ({skip}) || k in {new})"
    )


def reserved_keys_policy(config: Config) -> dict[str, Any]:
    """``dispatch-k8s-reserved-keys``: ``reserved_key_problems`` in CEL; in role worker also MultiKueue's copy
    created marked (``copy_created_marked``)."""
    return validating_policy(
        RESERVED_KEYS,
        [gvr(upstream.TRAINJOBS), gvr(upstream.TRAINING_RUNTIMES), gvr(upstream.WORKLOADS)],
        ["CREATE", "UPDATE"],
        {
            "variables": [
                {
                    "name": "dispatch",
                    "expression": f"{is_principal(config.dispatch)} || {multikueue_copy_created(config)} || "
                    f"{replica_created(config)}",
                },
                {"name": "oldLabels", "expression": metadata_map("oldObject", "labels")},
                {"name": "newLabels", "expression": metadata_map("object", "labels")},
                {"name": "oldAnnotations", "expression": metadata_map("oldObject", "annotations")},
                {"name": "newAnnotations", "expression": metadata_map("object", "annotations")},
                *(
                    [{"name": "copyCreated", "expression": multikueue_copy_created(config)}]
                    if config.multicluster_role == ROLE_WORKER
                    else []
                ),
            ],
            "validations": [
                {
                    "expression": "variables.dispatch || ("
                    + _unchanged_reserved("variables.oldLabels", "variables.newLabels")
                    + ")",
                    "message": f"only dispatch adds, changes or removes labels under {PREFIX}",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.dispatch || ("
                    + _unchanged_reserved(
                        "variables.oldAnnotations",
                        "variables.newAnnotations",
                        f"request.resource.resource == 'trainjobs' && (k == {q(ANNOTATION_ADMISSION_STARTED)} || "
                        f"(k == {q(ANNOTATION_ADMISSION_FLOOR)} && request.operation == 'UPDATE' && ({UNSUSPENDS})))",
                    )
                    + ")",
                    "message": f"only dispatch adds, changes or removes annotations under {PREFIX}",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"variables.dispatch || request.resource.resource != 'trainjobs' || "
                    f"({lists_gate('oldObject')}) == ({lists_gate('object')})",
                    "message": f"only dispatch adds or removes its gate {GATE} in {ANNOTATION_ADMISSION_GATED_BY}",
                    "reason": "Forbidden",
                },
                *([copy_created_marked()] if config.multicluster_role == ROLE_WORKER else []),
            ],
        },
    )
