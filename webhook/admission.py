"""Decide: the pure core of the webhook. The server decodes a review, fills the lookups, calls these.

``validate`` routes by a table, as Kubernetes' NodeRestriction does: (group/resource, subresource, operation) ->
the handler of that write, which calls the concerns' rules (``webhook.rules``). A TrainJob create goes: server
``/validate`` handler -> ``validate`` -> ``_trainjob_create`` -> ``rules.creation``. Besides writes of
TrainJobs, TrainingRuntimes and Workloads, two status subresources (``workloads/status``, ``jobsets/status``)
and the JobSet's CREATE and DELETE are routed, for dispatch's objects only; every other write passes untouched.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from contract import upstream
from contract.errors import ContractError, Problem
from contract.gates import gates_of, has_dispatch_gate
from contract.keys import ANNOTATION_ADMISSION_FLOOR, ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_ADMISSION_STARTED, GATE
from contract.multicluster import ROLE_WORKER, is_copy, mark_copy_ops, records_only
from contract.names import TrainJobName, parse_name
from contract.objects import add_op, dig
from contract.ownership import is_dispatch, is_kueue_mode, owned_by_dispatch
from contract.patches import foreign_entry_problems
from webhook.config import Config
from webhook.review import Lookups, Request, Verdict
from webhook.rules.common import unsuspends
from webhook.rules.creation import creation_problems
from webhook.rules.identity import update_problems
from webhook.rules.jobsets import jobset_create_problems, jobset_delete_problems, jobset_status_problems
from webhook.rules.multicluster import copy_unsuspend_problems, multikueue_copy_problems, origin_problems
from webhook.rules.record_start import record_start_patch
from webhook.rules.reserved_keys import reserved_key_problems
from webhook.rules.runtime_copy import copy_creation_problems, copy_update_problems
from webhook.rules.unsuspend import approval_problems, kueue_unsuspend_problems, unsuspend_problems
from webhook.rules.workloads import workload_status_problems, workload_update_problems

GroupResource = tuple[str, str]


def _group_resource(resource: upstream.Resource) -> GroupResource:
    return resource.group, resource.plural


TRAINJOBS: Final = _group_resource(upstream.TRAINJOBS)
TRAINING_RUNTIMES: Final = _group_resource(upstream.TRAINING_RUNTIMES)
WORKLOADS: Final = _group_resource(upstream.WORKLOADS)
JOBSETS: Final = _group_resource(upstream.JOBSETS)
RESERVED_KEYS_ON: Final = (TRAINJOBS, TRAINING_RUNTIMES, WORKLOADS)
"""The resources whose dispatch keys a stranger's create or update may not touch (``rules.reserved_keys``)."""


def _resource(request: Request) -> GroupResource:
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


@dataclass(frozen=True)
class Writer:
    """Who makes the write, as the rules ask it."""

    stranger: bool
    """Not one of dispatch's principals."""
    copy: bool
    """On a worker, the manager's MultiKueue creating its copy of a dispatch TrainJob or Workload: the manager's
    webhook and policies judged the original; the copy's later writes are judged as a stranger's."""
    replica: bool
    """On a worker, the manager's dispatch agent creating the replica of a runtime copy: judged as dispatch's own
    create of a runtime copy (the copy's rules), its keys its own."""

    @classmethod
    def of(cls, request: Request, config: Config) -> Writer:
        resource, new = _resource(request), request.object
        creates = request.operation == "CREATE"
        return cls(
            stranger=not config.dispatch.includes(request.user),
            copy=creates and resource in (TRAINJOBS, WORKLOADS) and config.multikueue_copy(request.user, new),
            replica=creates and resource == TRAINING_RUNTIMES and config.replica_created(request.user, new),
        )


@dataclass
class Decision:
    """What a handler found: the problems (the most important first), warnings, and the annotations another rule
    judged in this write (exempt from ``rules.reserved_keys``)."""

    problems: list[Problem] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    exempt: frozenset[str] = frozenset()


Handler = Callable[[Request, Config, Lookups, Writer], Decision]


def _trainjob_create(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    new = request.object
    if new is None or not is_dispatch(new):
        return Decision()
    if writer.copy:
        # MultiKueue's copy: only on a worker is it a copy's create, judged by its own rule.
        return Decision(multikueue_copy_problems(new) if config.multicluster_role == ROLE_WORKER else [])
    if writer.stranger:
        return Decision([_principal(request, "dispatch TrainJobs")])
    found, warnings = creation_problems(
        new,
        lookups.runtimes.get(_runtime_ref(request)),
        allow_spec_prologue=config.allow_spec_prologue,
        allow_rank_restart=config.allow_rank_restart,
    )
    return Decision(found + foreign_entry_problems(None, new), warnings)


def _trainjob_update(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    old, new = request.old_object, request.object
    if new is None or old is None or not (is_dispatch(old) or is_dispatch(new)):
        return Decision()
    role = config.multicluster_role
    problems = unsuspend_problems(old, new)
    if records_only(role, old, new):
        problems += copy_unsuspend_problems(old, new)
    if role == ROLE_WORKER:
        problems += origin_problems(old, new)
    problems += update_problems(old, new, dispatch=not writer.stranger)
    problems += foreign_entry_problems(old, new)
    if writer.stranger and not config.kueue.includes(request.user):
        problems += kueue_unsuspend_problems(old, new)
    if not records_only(role, old, new):
        problems += approval_problems(old, new)
    # The raise and the record admission writes into every unsuspend, checked by update_problems.
    exempt = {ANNOTATION_ADMISSION_STARTED, ANNOTATION_ADMISSION_FLOOR} if unsuspends(old, new) else set()
    return Decision(problems, exempt=frozenset(exempt))


def _runtime_create(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    new = request.object
    copy_name = None if new is None else _dispatch_name(new)
    if new is None or copy_name is None:
        return Decision()
    if writer.stranger and not writer.replica:
        return Decision([_principal(request, "runtime copies (TrainingRuntimes named dj-<JobID>-s<N>)")])
    return Decision(copy_creation_problems(new, copy_name, allow_rank_restart=config.allow_rank_restart))


def _runtime_update(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    old, new = request.old_object, request.object
    if new is None or old is None or _dispatch_name(old) is None:
        return Decision()
    return Decision(copy_update_problems(old, new))


def _workload_update(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    old, new = request.old_object, request.object
    if new is None or old is None or not (owned_by_dispatch(old) or owned_by_dispatch(new)):
        return Decision()
    kueue = config.kueue.includes(request.user)
    problems = workload_update_problems(old, new, dispatch=not writer.stranger, kueue=kueue)
    if config.multicluster_role == ROLE_WORKER:
        problems += origin_problems(old, new)
    return Decision(problems)


def _workload_status(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    old, new = request.old_object, request.object
    if not new or not (owned_by_dispatch(old) or owned_by_dispatch(new)):
        return Decision()
    return Decision(workload_status_problems(old, new, dispatch=not writer.stranger, checks=config.admission_checks))


def _jobset_create(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    new = request.object
    if new is None or not owned_by_dispatch(new):
        return Decision()
    return Decision(jobset_create_problems(new))  # for everyone: Trainer's recreation is the case it stops


def _jobset_status(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    old, new = request.old_object, request.object
    if not new or not (owned_by_dispatch(old) or owned_by_dispatch(new)):
        return Decision()
    return Decision(jobset_status_problems(old, new))


def _jobset_delete(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    if not owned_by_dispatch(request.old_object):
        return Decision()
    allowed = not writer.stranger or config.controllers.includes(request.user)
    return Decision(jobset_delete_problems(allowed=allowed, username=request.user.username))


def _no_rule(request: Request, config: Config, lookups: Lookups, writer: Writer) -> Decision:
    """A write only the reserved keys judge (a Workload's create)."""
    return Decision()


ROUTES: Final[dict[tuple[GroupResource, str, str], Handler]] = {
    (TRAINJOBS, "", "CREATE"): _trainjob_create,
    (TRAINJOBS, "", "UPDATE"): _trainjob_update,
    (TRAINING_RUNTIMES, "", "CREATE"): _runtime_create,
    (TRAINING_RUNTIMES, "", "UPDATE"): _runtime_update,
    (WORKLOADS, "", "CREATE"): _no_rule,
    (WORKLOADS, "", "UPDATE"): _workload_update,
    (WORKLOADS, "status", "UPDATE"): _workload_status,
    (JOBSETS, "", "CREATE"): _jobset_create,
    (JOBSETS, "", "DELETE"): _jobset_delete,
    (JOBSETS, "status", "UPDATE"): _jobset_status,
}
"""(group/resource, subresource, operation) -> its handler; every write not here passes untouched."""


def validate(request: Request, config: Config, lookups: Lookups) -> Verdict:
    """The validating answer: the route's rules, then, for a stranger's create or update of a TrainJob,
    TrainingRuntime or Workload, the reserved keys."""
    resource = _resource(request)
    handler = ROUTES.get((resource, request.sub_resource, request.operation))
    if handler is None:
        return _verdict(request, [], [])
    writer = Writer.of(request, config)
    decision = handler(request, config, lookups, writer)
    if (
        resource in RESERVED_KEYS_ON
        and not request.sub_resource
        and writer.stranger
        and not (writer.copy and resource != TRAINING_RUNTIMES)
        and not writer.replica
    ):
        # After the rules above, so that a denial leads with the reason that matters most.
        gate_carrier = resource == WORKLOADS and config.kueue.includes(request.user)
        decision.problems += reserved_key_problems(
            request.old_object, request.object, gate_carrier=gate_carrier, exempt=decision.exempt
        )
    return _verdict(request, decision.problems, decision.warnings)


def mutate(request: Request, config: Config) -> Verdict:
    """Close a dispatch TrainJob at birth when dispatch created it open; number an execution in the write that
    starts it (``rules.record_start``); on a worker, mark MultiKueue's copy unverified at its creation. Nothing
    else is ever mutated.

    Kueue mode gets dispatch's gate (Kueue allows the annotation at creation only), plain mode
    ``suspend: true``. Neither changes what the job runs.
    """
    new: Mapping[str, Any] | None = request.object
    if _resource(request) != TRAINJOBS or request.sub_resource or new is None or not is_dispatch(new):
        return Verdict.allow()
    if request.operation == "UPDATE":
        return Verdict.allow(patch=record_start_patch(request.old_object, new, config.multicluster_role))
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
