"""MultiKueue (docs/multicluster.md): what holds on a worker of MultiKueue's copies, and the policies of the manager
and of the manager's agent on a worker. Each Python check beside its CEL twin.

* a copy is created suspended and marked ``unverified`` (``multikueue_copy_problems``; CEL ``copy_created_marked``,
  and the MutatingAdmissionPolicy ``dispatch-k8s-mark-copy`` that adds both);
* its start records A and raises neither A nor the floor, and waits for the mark's removal
  (``copy_unsuspend_problems``; CEL ``copy_records_only``, ``copy_verified``);
* its origin label never changes (``origin_problems``; CEL ``origin_kept``);
* role manager runs nothing (``dispatch-k8s-manager-runs-nothing``); role worker confines the manager's agent
  (``dispatch-k8s-manager-agent``, ``dispatch-k8s-manager-contact``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contract.admission import admission_count, admission_floor
from contract.errors import Problem
from contract.keys import (
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_UNVERIFIED,
    CLAIM_PREFIX,
    LABEL_REPLICA_OF,
    LEASE_MANAGER_CONTACT,
    UNVERIFIED_TRUE,
)
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL, unverified
from contract.objects import annotations, dig
from contract.prologue import PROLOGUE_CONFIGMAP
from contract.upstream import COORDINATION_GROUP, TRAINER_GROUP
from webhook import owners
from webhook.cel import (
    annotation,
    binding,
    dispatch_a,
    is_multikueue_copy,
    is_principal,
    json_patch,
    json_patch_add,
    q,
    trainjob_mutation,
    validating_policy,
)
from webhook.config import Config, Principals
from webhook.configurations import NAME, claims
from webhook.rules.common import A_FIELD, count_or_error, unsuspends


def multikueue_copy_problems(trainjob: Mapping[str, Any]) -> list[Problem]:
    """On a worker, MultiKueue's copy of a dispatch TrainJob is created marked unverified and suspended (dispatch's
    mutating webhook adds both: contract/multicluster.py ``mark_copy_ops``), so that it starts only once dispatch's
    agent there has matched its A to its dispatch's stamp. Refused otherwise: without the mutation it could start
    with an earlier dispatch's A (docs/multicluster.md, "The stale copy")."""
    problems = []
    if not unverified(trainjob):
        problems.append(
            Problem(
                "creation.multikueue-copy",
                f"metadata.annotations[{ANNOTATION_UNVERIFIED}]",
                None,
                "set at creation by dispatch's mutating webhook: the copy starts once dispatch's agent verified its A",
            )
        )
    if dig(trainjob, "spec", "suspend") is not True:
        problems.append(
            Problem(
                "creation.multikueue-copy",
                "spec.suspend",
                dig(trainjob, "spec", "suspend"),
                "a copy is created suspended",
            )
        )
    return problems


def copy_unsuspend_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    """On a MultiKueue worker, the start of MultiKueue's copy (contract/multicluster.py ``records_only``): the
    manager numbered this dispatch, so the write that starts the copy records A and raises neither A nor the
    floor. A second start of the same copy (A already recorded as started) is refused by ``unsuspend_problems``,
    as A is not above the record: the copy was evicted here and goes back through the manager, which sends it
    again with a new A (docs/multicluster.md, guarantee 3). And it does not start while dispatch's mark
    ``unverified`` is on it (docs/multicluster.md, "The stale copy")."""
    if not unsuspends(old, new):
        return []
    problems = []
    if unverified(new):
        problems.append(
            Problem(
                "update.unverified",
                f"metadata.annotations[{ANNOTATION_UNVERIFIED}]",
                annotations(new).get(ANNOTATION_UNVERIFIED),
                "MultiKueue's copy starts once dispatch's agent on this worker has matched its A to the stamp of its "
                "dispatch on the remote Workload and removed the mark (a copy made from a stale view of the "
                "manager's TrainJob would repeat an earlier dispatch's A)",
            )
        )
    before = (count_or_error(admission_count, old), count_or_error(admission_floor, old))
    after = (count_or_error(admission_count, new), count_or_error(admission_floor, new))
    if before == after:
        return problems
    return [
        *problems,
        Problem(
            "update.unsuspend",
            A_FIELD,
            f"A {before[0]} -> {after[0]}, floor {before[1]} -> {after[1]}",
            "on a MultiKueue worker the start of MultiKueue's copy records A and never raises it: the manager "
            "numbers each dispatch, and a copy started here before goes back through the manager",
        ),
    ]


def origin_problems(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[Problem]:
    """On a MultiKueue worker, MultiKueue's origin label on a dispatch TrainJob or Workload never changes: it is
    what makes the start of a copy record A without raising it, and the worker's gate approve a copy's first
    admission only (docs/multicluster.md, guarantee 3). Removed, a restart would be numbered here."""
    before = dig(old, "metadata", "labels", MULTIKUEUE_ORIGIN_LABEL)
    after = dig(new, "metadata", "labels", MULTIKUEUE_ORIGIN_LABEL)
    if old is None or new is None or before == after:
        return []
    return [
        Problem(
            "update.origin",
            f"metadata.labels[{MULTIKUEUE_ORIGIN_LABEL}]",
            f"{before} -> {after}",
            "on a MultiKueue worker MultiKueue's origin label is set at create and never changes: it says the "
            "manager numbered this copy",
        )
    ]


def origin_kept() -> dict[str, Any]:
    """Role worker, in the identity and workloads policies: MultiKueue's origin label on a dispatch TrainJob or
    Workload never changes (``origin_problems``)."""
    label = f"metadata.?labels[?{q(MULTIKUEUE_ORIGIN_LABEL)}].orValue('')"
    return {
        "expression": f"oldObject.{label} == object.{label}",
        "message": f"on a MultiKueue worker MultiKueue's origin label {MULTIKUEUE_ORIGIN_LABEL} is set at create and "
        "never changes: it says the manager numbered this copy",
        "reason": "Forbidden",
    }


def copy_records_only() -> dict[str, Any]:
    """Role worker, in the unsuspend policy: the start of MultiKueue's copy (its origin label on the old object or
    the new) records A and raises neither A nor the floor (``copy_unsuspend_problems``).
    With the rule above (A above the A recorded at the previous start) a second start of the same copy is
    refused: it goes back through the manager, which numbers a new dispatch (docs/multicluster.md, guarantee 3)."""
    return {
        "expression": f"!({is_multikueue_copy('oldObject')} || {is_multikueue_copy('object')}) || "
        f"({dispatch_a('oldObject')} == variables.a && {annotation('oldObject', ANNOTATION_ADMISSION_FLOOR)} == "
        f"{annotation('object', ANNOTATION_ADMISSION_FLOOR)})",
        "message": "on a MultiKueue worker the start of MultiKueue's copy records A and never raises it: the manager "
        "numbers each dispatch, and a copy started here before goes back through the manager",
        "reason": "Forbidden",
    }


def _unverified(obj: str) -> str:
    return f"{obj}.metadata.?annotations[?{q(ANNOTATION_UNVERIFIED)}].hasValue()"


def copy_created_marked() -> dict[str, Any]:
    """Role worker, in the reserved-keys policy: MultiKueue's copy of a dispatch TrainJob is created marked
    unverified and suspended (dispatch's mutating webhook adds both; ``multikueue_copy_problems``), so it starts
    only once dispatch's agent matched its A to its dispatch's stamp."""
    return {
        "expression": "!(variables.copyCreated && request.resource.resource == 'trainjobs') || "
        f"({_unverified('object')} && object.?spec.?suspend.orValue(false) == true)",
        "message": f"on a MultiKueue worker MultiKueue's copy is created suspended and marked {ANNOTATION_UNVERIFIED} "
        "(dispatch's mutating webhook adds both): it starts once dispatch's agent verified its A",
        "reason": "Forbidden",
    }


def copy_verified() -> dict[str, Any]:
    """Role worker, in the unsuspend policy: MultiKueue's copy does not start while dispatch's mark ``unverified`` is
    on it (``copy_unsuspend_problems``; docs/multicluster.md, "The stale copy")."""
    return {
        "expression": f"!({is_multikueue_copy('oldObject')} || {is_multikueue_copy('object')}) || "
        f"!{_unverified('object')}",
        "message": f"MultiKueue's copy starts once dispatch's agent on this worker has matched its A to the stamp of "
        f"its dispatch on the remote Workload and removed {ANNOTATION_UNVERIFIED}",
        "reason": "Forbidden",
    }


def multikueue_copy_created(config: Config) -> str:
    """CEL: on a worker, the manager's MultiKueue creating its copy of a dispatch TrainJob or Workload (its origin
    label on it). The copy carries the manager's object's keys as dispatch and the manager's policies left
    them, A, the floor and admission-started included; any later change of them is refused as to a stranger."""
    principal = is_principal(config.principals(owners.MULTIKUEUE))
    return (
        f"(request.operation == 'CREATE' && request.resource.resource in ['trainjobs', 'workloads'] && "
        f"({principal}) && object.metadata.?labels[?{q(MULTIKUEUE_ORIGIN_LABEL)}].orValue('') != '')"
    )


def replica_created(config: Config) -> str:
    """CEL: on a worker, the manager's dispatch agent creating the replica of a runtime copy (its
    ``LABEL_REPLICA_OF`` on it). The replica carries the copy's keys as dispatch made them on the manager."""
    principal = is_principal(config.principals(owners.MANAGER_AGENT))
    return (
        f"(request.operation == 'CREATE' && request.resource.resource == 'trainingruntimes' && ({principal}) && "
        f"object.metadata.?labels[?{q(LABEL_REPLICA_OF)}].orValue('') != '')"
    )


MARK_COPY: Final = f"{NAME}-mark-copy"


def mark_copy_policy(namespace: str) -> list[dict[str, Any]]:
    """Role worker: the MutatingAdmissionPolicy that marks MultiKueue's copy of a dispatch TrainJob (its origin label)
    ``unverified`` and suspended at its creation, in-process (contract/multicluster.py ``mark_copy_ops``; the webhook
    does the same where the API server serves no MutatingAdmissionPolicy). The copy then starts only once dispatch's
    agent on the worker has matched its A to the stamp of its dispatch and removed the mark (docs/multicluster.md,
    "The stale copy"); the reserved-keys policy refuses MultiKueue's copy created without the mark."""
    mark = json_patch_add("object", "''", ("metadata", "annotations"), ANNOTATION_UNVERIFIED, q(UNVERIFIED_TRUE))
    suspend = json_patch("add", "'/spec/suspend'", "true")
    conditions = [
        {"name": "dispatch-objects", "expression": claims("trainjobs")},
        {"name": "multikueue-copy", "expression": is_multikueue_copy("object")},
    ]
    expression = (
        f"({_unverified('object')} ? [] : [{mark}]) + (object.?spec.?suspend.orValue(false) == true ? [] : [{suspend}])"
    )
    mutations = [{"patchType": "JSONPatch", "jsonPatch": {"expression": expression}}]
    return trainjob_mutation(MARK_COPY, namespace, "CREATE", conditions, {"mutations": mutations})


MANAGER_AGENT_POLICY: Final = f"{NAME}-manager-agent"

MANAGER_AGENT_MESSAGE: Final = (
    "the manager's dispatch agent (multicluster.managerAgent) creates and deletes here only the replicas of "
    f"dispatch's runtime copies (TrainingRuntimes named dj-<JobID>-s<N>, labelled {LABEL_REPLICA_OF}), creates "
    f"only the prologue's ConfigMap {PROLOGUE_CONFIGMAP}, creates and renews only its contact Lease "
    f"{LEASE_MANAGER_CONTACT}, and creates, renews and deletes only its claims ({CLAIM_PREFIX}<Workload uid>); it "
    "updates nothing else"
)


def manager_agent_policy(config: Config) -> dict[str, Any]:
    """Role worker: every write of the manager's dispatch agent here is a create or delete of a replica, or the
    create of the prologue's ConfigMap. Default deny: its RBAC cannot restrict a create by name, so the policy
    does. The owner policies then bind what it writes, as any owner's."""
    target = "(request.operation == 'DELETE' ? oldObject : object)"
    replica = (
        f"request.resource.resource == 'trainingruntimes' && request.operation in ['CREATE', 'DELETE'] && "
        f"{target}.metadata.?name.orValue('').matches({q(owners.NAME_PATTERN)}) && "
        f"{target}.metadata.?labels[?{q(LABEL_REPLICA_OF)}].orValue('') != ''"
    )
    prologue = (
        "request.resource.resource == 'configmaps' && request.operation == 'CREATE' && "
        f"object.metadata.?name.orValue('') == {q(PROLOGUE_CONFIGMAP)}"
    )
    contact = (
        "request.resource.resource == 'leases' && (request.operation in ['CREATE', 'UPDATE'] && "
        f"object.metadata.?name.orValue('') == {q(LEASE_MANAGER_CONTACT)} || "
        f"{target}.metadata.?name.orValue('').startsWith({q(CLAIM_PREFIX)}))"
    )
    return validating_policy(
        MANAGER_AGENT_POLICY,
        [(TRAINER_GROUP, "*", "trainingruntimes"), ("", "*", "configmaps"), (COORDINATION_GROUP, "*", "leases")],
        ["CREATE", "UPDATE", "DELETE"],
        {
            "matchConditions": [
                {"name": "manager-agent", "expression": is_principal(config.principals(owners.MANAGER_AGENT))}
            ],
            "validations": [
                {
                    "expression": f"variables.subresource == '' && (({replica}) || ({prologue}) || ({contact}))",
                    "message": MANAGER_AGENT_MESSAGE,
                    "reason": "Forbidden",
                }
            ],
            "variables": [{"name": "subresource", "expression": "request.?subResource.orValue('')"}],
        },
    )


MANAGER_CONTACT_POLICY: Final = f"{NAME}-manager-contact"

MANAGER_CONTACT_MESSAGE: Final = (
    f"the Lease {LEASE_MANAGER_CONTACT} and the claims {CLAIM_PREFIX}<Workload uid> are created and renewed only by "
    "the manager's dispatch agent (multicluster.managerAgent): while they are renewed, this worker's dispatch agent "
    "lets the copies they name start and keeps them running, so a renewal by anyone else could keep a copy running "
    "after the manager stopped wanting it here (deleting them is anyone's whom RBAC lets: the copies then stop)"
)


def manager_contact_policy(config: Config) -> dict[str, Any]:
    """Role worker: the contact Lease is created and updated by the manager's agent alone. A delete is not
    refused: it only stops the copies here (the worker's agent then sees no contact), and the namespace's deletion
    must not hang on it."""
    return validating_policy(
        MANAGER_CONTACT_POLICY,
        [(COORDINATION_GROUP, "*", "leases")],
        ["CREATE", "UPDATE"],
        {
            "matchConditions": [
                {
                    "name": "contact-lease-or-claim",
                    "expression": f"request.name == {q(LEASE_MANAGER_CONTACT)} || "
                    f"request.name.startsWith({q(CLAIM_PREFIX)}) || "
                    f"object.?metadata.?name.orValue('').startsWith({q(CLAIM_PREFIX)})",
                }
            ],
            "validations": [
                {"expression": "variables.managerAgent", "message": MANAGER_CONTACT_MESSAGE, "reason": "Forbidden"}
            ],
            "variables": [
                {"name": "managerAgent", "expression": is_principal(config.principals(owners.MANAGER_AGENT))}
            ],
        },
    )


def worker_policies(config: Config, namespace: str) -> list[dict[str, Any]]:
    """Role worker's own policies and their bindings, where the manager's agent has a principal here."""
    if config.principals(owners.MANAGER_AGENT) == Principals():
        return []
    out = []
    for policy in (manager_agent_policy(config), manager_contact_policy(config)):
        bound = binding(policy["metadata"]["name"], namespace)
        # Every namespace: the manager's agent writes in the job namespaces, and is confined everywhere; the
        # contact Lease lives in the agent's Lease namespace, which may not be the release's.
        del bound["spec"]["matchResources"]
        out += [policy, bound]
    return out


MANAGER_RUNS_NOTHING: Final = f"{NAME}-manager-runs-nothing"

MANAGER_RUNS_NOTHING_MESSAGE: Final = (
    "this cluster is a MultiKueue manager (multicluster.role manager): it queues and numbers dispatch jobs and runs "
    "none. MultiKueue runs each on a worker; Trainer v2.2.1 ignores spec.managedBy, so a JobSet, Job or pod of a "
    "dispatch job here would be a second copy of it"
)


def manager_runs_nothing_policy() -> dict[str, Any]:
    """Role manager: the CREATE of a dispatch job's JobSet, Job or pod is refused, to everyone (break-glass too),
    the objects known as the owner policies know them (webhook/owners.py ``belongs``)."""
    kinds = (owners.JOBSETS, owners.JOBS, owners.PODS)
    belongs = " || ".join(
        f"(request.resource.group == {q(k.group)} && request.resource.resource == {q(k.resource)} && "
        f"({k.belongs('object')}))"
        for k in kinds
    )
    return validating_policy(
        MANAGER_RUNS_NOTHING,
        [(k.group, "*", k.resource) for k in kinds],
        ["CREATE"],
        {
            "matchConditions": [{"name": "dispatch-job-objects", "expression": belongs}],
            "validations": [
                {
                    "expression": "false",
                    "messageExpression": "request.kind.kind + ' ' + object.metadata.?name.orValue("
                    f"object.metadata.?generateName.orValue('')) + ' {owners.BELONGS}: ' + "
                    f"{q(MANAGER_RUNS_NOTHING_MESSAGE)}",
                    "reason": "Forbidden",
                }
            ],
        },
    )


def manager_policies(namespace: str) -> list[dict[str, Any]]:
    """Role manager's own policy and its binding (the chart renders them only in that role)."""
    policy = manager_runs_nothing_policy()
    return [policy, binding(policy["metadata"]["name"], namespace)]
