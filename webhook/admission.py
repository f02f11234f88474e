"""Decide: the pure core of the webhook. The server decodes a review, fills the lookups, calls these.

A TrainJob create goes: server ``/validate`` handler -> ``validate`` here -> ``rules.creation``. Besides
writes of TrainJobs, TrainingRuntimes and Workloads, two status subresources (``workloads/status``,
``jobsets/status``) and the JobSet's CREATE and DELETE are routed here, for dispatch's objects only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contract.admission import admission_started, unsuspend_ops
from contract.errors import ContractError, Problem
from contract.gates import gates_of, has_dispatch_gate
from contract.keys import ANNOTATION_ADMISSION_FLOOR, ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_ADMISSION_STARTED, GATE
from contract.multicluster import ROLE_WORKER, is_copy, mark_copy_ops, records_only
from contract.names import TrainJobName, parse_name
from contract.objects import add_op, dig
from contract.ownership import is_dispatch, is_kueue_mode, owned_by_dispatch
from contract.patches import foreign_entry_problems
from contract.upstream import JOBSET_GROUP
from webhook.config import Config
from webhook.review import Lookups, Request, Verdict
from webhook.rules.creation import creation_problems, multikueue_copy_problems
from webhook.rules.jobsets import jobset_create_problems, jobset_delete_problems, jobset_status_problems
from webhook.rules.reserved_keys import reserved_key_problems
from webhook.rules.runtime_copy import copy_creation_problems, copy_update_problems
from webhook.rules.updates import (
    approval_problems,
    copy_unsuspend_problems,
    kueue_unsuspend_problems,
    origin_problems,
    unsuspend_problems,
    unsuspends,
    update_problems,
)
from webhook.rules.workloads import workload_status_problems, workload_update_problems

TRAINJOBS: Final = ("trainer.kubeflow.org", "trainjobs")
TRAINING_RUNTIMES: Final = ("trainer.kubeflow.org", "trainingruntimes")
WORKLOADS: Final = ("kueue.x-k8s.io", "workloads")
JOBSETS: Final = (JOBSET_GROUP, "jobsets")
WRITES: Final = ("CREATE", "UPDATE")


def _resource(request: Request) -> tuple[str, str]:
    return request.group, request.resource


def _runtime_ref(request: Request) -> tuple[str, str]:
    name = dig(request.object, "spec", "runtimeRef", "name")
    return request.namespace, name if isinstance(name, str) and name else request.name


def lookups_needed(request: Request, config: Config | None = None) -> list[tuple[str, str]]:
    """(namespace, name) of each TrainingRuntime the rules will read for this request: only for dispatch's
    own create of a dispatch TrainJob. A stranger's is refused without one (``creation.principal``), so a
    stranger cannot make the webhook read the API for each dispatch-looking object it sends."""
    creates_dispatch_trainjob = (
        _resource(request) == TRAINJOBS
        and request.operation == "CREATE"
        and not request.sub_resource
        and is_dispatch(request.object)
        and (config is None or config.dispatch.includes(request.user))
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
    name = request.name or _object_name(request)
    where = f"{request.namespace}/{name}" if request.namespace else name
    return Verdict.deny(
        problems[0].rule,
        f"{DENIAL_PREFIX} this {request.operation} of {request.kind} {where}: " + "; ".join(str(p) for p in problems),
    )


def _object_name(request: Request) -> str:
    """The object's name when the request has none (a create with ``generateName``): what it was given, or
    the prefix it asked for."""
    for obj in (request.object, request.old_object):
        name = dig(obj, "metadata", "name")
        if isinstance(name, str) and name:
            return name
    prefix = dig(request.object, "metadata", "generateName")
    return f"{prefix}<generated>" if isinstance(prefix, str) and prefix else "<unnamed>"


def _principal(request: Request, what: str) -> Problem:
    return Problem("creation.principal", "userInfo.username", request.user.username, f"only dispatch creates {what}")


def validate(request: Request, config: Config, lookups: Lookups) -> Verdict:
    """The validating answer. Other status writes, other deletes and unrelated objects pass untouched."""
    resource = _resource(request)
    old, new = request.old_object, request.object
    stranger = not config.dispatch.includes(request.user)
    # On a worker, the manager's MultiKueue creating its copy of a dispatch TrainJob or Workload: the manager's
    # webhook and policies judged the original; the copy's later writes are judged as a stranger's.
    copy = (
        request.operation == "CREATE"
        and resource in (TRAINJOBS, WORKLOADS)
        and config.multikueue_copy(request.user, new)
    )
    # On a worker, the manager's dispatch agent creating the replica of a runtime copy: judged as dispatch's own
    # create of a runtime copy (the copy's rules), its keys its own.
    replica = (
        request.operation == "CREATE" and resource == TRAINING_RUNTIMES and config.replica_created(request.user, new)
    )
    if request.sub_resource or request.operation not in WRITES:
        return _validate_other(request, config, resource, stranger)
    problems: list[Problem] = []
    warnings: list[str] = []
    exempt: frozenset[str] = frozenset()
    if resource == TRAINJOBS and new is not None:
        if request.operation == "CREATE" and is_dispatch(new) and copy and config.multicluster_role == ROLE_WORKER:
            problems += multikueue_copy_problems(new)
        elif request.operation == "CREATE" and is_dispatch(new) and not copy:
            if stranger:
                problems.append(_principal(request, "dispatch TrainJobs"))
            else:
                found, warnings = creation_problems(
                    new,
                    lookups.runtimes.get(_runtime_ref(request)),
                    allow_spec_prologue=config.allow_spec_prologue,
                    allow_rank_restart=config.allow_rank_restart,
                )
                problems += found + foreign_entry_problems(None, new)
        elif request.operation == "UPDATE" and old is not None and (is_dispatch(old) or is_dispatch(new)):
            problems += unsuspend_problems(old, new)
            if records_only(config.multicluster_role, old, new):
                problems += copy_unsuspend_problems(old, new)
            if config.multicluster_role == ROLE_WORKER:
                problems += origin_problems(old, new)
            problems += update_problems(old, new, dispatch=not stranger)
            problems += foreign_entry_problems(old, new)
            if stranger and not config.kueue.includes(request.user):
                problems += kueue_unsuspend_problems(old, new)
            if not records_only(config.multicluster_role, old, new):
                problems += approval_problems(old, new)
            if unsuspends(old, new):
                # The raise and the record admission writes into every unsuspend, checked by update_problems.
                exempt = frozenset({ANNOTATION_ADMISSION_STARTED, ANNOTATION_ADMISSION_FLOOR})
    elif resource == TRAINING_RUNTIMES and new is not None:
        copy_name = _dispatch_name(new)
        if request.operation == "CREATE" and copy_name is not None:
            if stranger and not replica:
                problems.append(_principal(request, "runtime copies (TrainingRuntimes named dj-<JobID>-s<N>)"))
            else:
                problems += copy_creation_problems(new, copy_name, allow_rank_restart=config.allow_rank_restart)
        elif request.operation == "UPDATE" and old is not None and _dispatch_name(old) is not None:
            problems += copy_update_problems(old, new)
    elif (
        resource == WORKLOADS
        and new is not None
        and old is not None
        and request.operation == "UPDATE"
        and (owned_by_dispatch(old) or owned_by_dispatch(new))
    ):
        problems += workload_update_problems(old, new, dispatch=not stranger, kueue=config.kueue.includes(request.user))
        if config.multicluster_role == ROLE_WORKER:
            problems += origin_problems(old, new)
    elif resource == JOBSETS and request.operation == "CREATE" and new is not None and owned_by_dispatch(new):
        problems += jobset_create_problems(new)  # for everyone: Trainer's recreation is the case it stops
    if (
        resource in (TRAINJOBS, TRAINING_RUNTIMES, WORKLOADS)
        and stranger
        and not (copy and resource != TRAINING_RUNTIMES)
        and not replica
    ):
        # After the rules above, so that a denial leads with the reason that matters most.
        gate_carrier = resource == WORKLOADS and config.kueue.includes(request.user)
        problems += reserved_key_problems(old, new, gate_carrier=gate_carrier, exempt=exempt)
    return _verdict(request, problems, warnings)


def _validate_other(request: Request, config: Config, resource: tuple[str, str], stranger: bool) -> Verdict:
    """The status writes and the delete that decide identity: dispatch's check on its Workloads, J on its
    JobSets. Every other subresource, delete and connect passes."""
    old, new = request.old_object, request.object
    problems: list[Problem] = []
    if resource == WORKLOADS and request.sub_resource == "status" and request.operation == "UPDATE" and new:
        if owned_by_dispatch(old) or owned_by_dispatch(new):
            problems += workload_status_problems(old, new, dispatch=not stranger, checks=config.admission_checks)
    elif resource == JOBSETS and request.sub_resource == "status" and request.operation == "UPDATE" and new:
        if owned_by_dispatch(old) or owned_by_dispatch(new):
            problems += jobset_status_problems(old, new)
    elif resource == JOBSETS and not request.sub_resource and request.operation == "DELETE" and owned_by_dispatch(old):
        allowed = not stranger or config.controllers.includes(request.user)
        problems += jobset_delete_problems(allowed=allowed, username=request.user.username)
    return _verdict(request, problems, [])


def mutate(request: Request, config: Config) -> Verdict:
    """Close a dispatch TrainJob at birth when dispatch created it open; number an execution in the write that
    starts it (``_record_start``); on a worker, mark MultiKueue's copy unverified at its creation. Nothing else is
    ever mutated.

    Kueue mode gets dispatch's gate (Kueue allows the annotation at creation only), plain mode
    ``suspend: true``. Neither changes what the job runs.
    """
    new: Mapping[str, Any] | None = request.object
    if _resource(request) != TRAINJOBS or request.sub_resource or new is None or not is_dispatch(new):
        return Verdict.allow()
    if request.operation == "UPDATE":
        return _record_start(request.old_object, new, config)
    if request.operation == "CREATE" and config.multicluster_role == ROLE_WORKER and is_copy(new):
        # MultiKueue's copy on a worker (by whoever creates it: only MultiKueue may): marked unverified, suspended,
        # until dispatch's agent matches its A to the stamp of its dispatch (contract/multicluster.py
        # ``verify_copy``). The MutatingAdmissionPolicy mark-copy does the same where the API server serves it.
        return Verdict.allow(patch=mark_copy_ops(new))
    if request.operation != "CREATE" or not config.dispatch.includes(request.user):
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


def _record_start(old: Mapping[str, Any] | None, new: Mapping[str, Any], config: Config) -> Verdict:
    """In any client's write that unsuspends a dispatch TrainJob (Kueue's admission, dispatch's Open or
    Release): in Kueue mode raise A when it was not raised since the last start, and record A as
    ``admission-started``
    (contract/admission.py ``unsuspend_ops``); on a MultiKueue worker, the start of MultiKueue's copy only
    records A (contract/multicluster.py ``records_only``). Where the API server serves MutatingAdmissionPolicy
    the chart leaves this to the policy ``record-start``, which decides the same."""
    if not unsuspends(old, new):
        return Verdict.allow()
    try:
        before = admission_started(old)
    except ContractError:
        return Verdict.allow()  # validation refuses it, naming why
    kueue = is_kueue_mode(old) and is_kueue_mode(new)
    only = records_only(config.multicluster_role, old, new)
    return Verdict.allow(patch=unsuspend_ops(new, before, kueue=kueue, records_only=only))
