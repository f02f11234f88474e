"""Decide: the pure core of the webhook. The server decodes a review, fills the lookups, calls these.

A TrainJob create goes: server ``/validate`` handler -> ``validate`` here -> ``rules.creation``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contract.errors import ContractError, Problem
from contract.gates import gates_of, has_dispatch_gate
from contract.keys import ANNOTATION_ADMISSION_GATED_BY, GATE
from contract.names import TrainJobName, parse_name
from contract.objects import add_op, dig
from contract.ownership import is_dispatch, is_kueue_mode
from webhook.config import Config
from webhook.review import Lookups, Request, Verdict
from webhook.rules.creation import creation_problems
from webhook.rules.reserved_keys import reserved_key_problems
from webhook.rules.runtime_copy import copy_creation_problems, copy_update_problems
from webhook.rules.updates import kueue_unsuspend_problems, update_problems

TRAINJOBS: Final = ("trainer.kubeflow.org", "trainjobs")
TRAINING_RUNTIMES: Final = ("trainer.kubeflow.org", "trainingruntimes")
WORKLOADS: Final = ("kueue.x-k8s.io", "workloads")
WRITES: Final = ("CREATE", "UPDATE")


def _resource(request: Request) -> tuple[str, str]:
    return request.group, request.resource


def _runtime_ref(request: Request) -> tuple[str, str]:
    name = dig(request.object, "spec", "runtimeRef", "name")
    return request.namespace, name if isinstance(name, str) and name else request.name


def lookups_needed(request: Request) -> list[tuple[str, str]]:
    """(namespace, name) of each TrainingRuntime the rules will read for this request."""
    creates_dispatch_trainjob = (
        _resource(request) == TRAINJOBS
        and request.operation == "CREATE"
        and not request.sub_resource
        and is_dispatch(request.object)
    )
    return [_runtime_ref(request)] if creates_dispatch_trainjob else []


DENIAL_PREFIX: Final = "dispatch-k8s denied"
"""How every denial of the webhook begins (`dispatch-webhook selftest` recognises it)."""


def _dispatch_name(obj: Mapping[str, Any]) -> TrainJobName | None:
    try:
        return parse_name(dig(obj, "metadata", "name"))
    except ContractError:
        return None


def _verdict(request: Request, problems: list[Problem], warnings: list[str]) -> Verdict:
    if not problems:
        return Verdict.allow(warnings=tuple(warnings))
    where = f"{request.namespace}/{request.name}" if request.namespace else request.name
    return Verdict.deny(
        problems[0].rule,
        f"{DENIAL_PREFIX} this {request.operation} of {request.kind} {where}: " + "; ".join(str(p) for p in problems),
    )


def _principal(request: Request, what: str) -> Problem:
    return Problem("creation.principal", "userInfo.username", request.user.username, f"only dispatch creates {what}")


def validate(request: Request, config: Config, lookups: Lookups) -> Verdict:
    """The validating answer. Status writes, deletes and unrelated objects pass untouched."""
    if request.sub_resource or request.operation not in WRITES:
        return Verdict.allow()
    old, new = request.old_object, request.object
    stranger = not config.dispatch.includes(request.user)
    problems: list[Problem] = []
    warnings: list[str] = []
    resource = _resource(request)
    if resource == TRAINJOBS and new is not None:
        if request.operation == "CREATE" and is_dispatch(new):
            if stranger:
                problems.append(_principal(request, "dispatch TrainJobs"))
            else:
                found, warnings = creation_problems(
                    new,
                    lookups.runtimes.get(_runtime_ref(request)),
                    allow_spec_prologue=config.allow_spec_prologue,
                    allow_rank_restart=config.allow_rank_restart,
                )
                problems += found
        elif request.operation == "UPDATE" and old is not None and (is_dispatch(old) or is_dispatch(new)):
            problems += update_problems(old, new)
            if stranger and not config.kueue.includes(request.user):
                problems += kueue_unsuspend_problems(old, new)
    elif resource == TRAINING_RUNTIMES and new is not None:
        copy_name = _dispatch_name(new)
        if request.operation == "CREATE" and copy_name is not None:
            if stranger:
                problems.append(_principal(request, "runtime copies (TrainingRuntimes named dj-<JobID>-s<N>)"))
            else:
                problems += copy_creation_problems(new, copy_name, allow_rank_restart=config.allow_rank_restart)
        elif request.operation == "UPDATE" and old is not None and _dispatch_name(old) is not None:
            problems += copy_update_problems(old, new)
    if resource in (TRAINJOBS, TRAINING_RUNTIMES, WORKLOADS) and stranger:
        # After the rules above, so that a denial leads with the reason that matters most.
        gate_carrier = resource == WORKLOADS and config.kueue.includes(request.user)
        problems += reserved_key_problems(old, new, gate_carrier=gate_carrier)
    return _verdict(request, problems, warnings)


def mutate(request: Request, config: Config) -> Verdict:
    """Close a dispatch TrainJob at birth when dispatch created it open. Nothing else is ever mutated.

    Kueue mode gets dispatch's gate (Kueue allows the annotation at creation only), plain mode
    ``suspend: true``. Neither changes what the job runs.
    """
    new: Mapping[str, Any] | None = request.object
    if (
        _resource(request) != TRAINJOBS
        or request.operation != "CREATE"
        or request.sub_resource
        or new is None
        or not is_dispatch(new)
        or not config.dispatch.includes(request.user)
    ):
        return Verdict.allow()
    ops: list[dict[str, Any]] = []
    if is_kueue_mode(new):
        if not has_dispatch_gate(new):
            ops.append(
                add_op(
                    new,
                    ("metadata", "annotations", ANNOTATION_ADMISSION_GATED_BY),
                    ",".join([*gates_of(new), GATE]),
                )
            )
    elif dig(new, "spec", "suspend") is not True:
        ops.append(add_op(new, ("spec", "suspend"), True))
    return Verdict.allow(patch=ops)
