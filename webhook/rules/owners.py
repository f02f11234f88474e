"""The owner policies ``dispatch-k8s-owners-<resource>``: default deny by principal, rendered from the table in
``webhook.owners`` (one ValidatingAdmissionPolicy per kind), each carrying the field rules of its kind
(``carried_field_rules``: the pod rules), and the prologue's ConfigMap created only as this version's.
"""

from __future__ import annotations

import json
from typing import Any, Final

from contract.keys import PROLOGUE_CONFIGMAP_PREFIX, PROLOGUE_KEY
from contract.prologue import PROLOGUE, PROLOGUE_CONFIGMAP
from webhook import owners
from webhook.cel import FieldRules, carried, is_principal, q, validating_policy
from webhook.config import Config
from webhook.configurations import NAME
from webhook.dependents import dependents_policy
from webhook.rules.pods import pod_rules


def carried_field_rules(config: Config) -> dict[str, FieldRules]:
    """The field rules each owner policy carries, by its kind's resource."""
    return {rules.kind.resource: rules for rules in (pod_rules(config),)}


def owner_policy_name(kind: owners.Kind) -> str:
    return f"{NAME}-owners-{kind.resource}"


def _write_test(operation: str, subresource: str) -> str:
    return f"(request.operation == {q(operation)} && variables.subresource == {q(subresource)})"


def _roles_test(roles: tuple[str, ...]) -> str:
    return "true" if owners.EVERYONE in roles else " || ".join(f"variables.{r}" for r in roles)


def _principal_test(config: Config, role: str) -> str:
    """CEL: the request's principal is one of ``role``'s: Kubernetes' own (owners.KUBERNETES_PRINCIPALS), or the
    config's."""
    return owners.KUBERNETES_PRINCIPALS.get(role) or is_principal(config.principals(role))


def _owner_test(config: Config, role: str) -> str:
    """CEL: the request's principal is one of ``role``'s, on an object the role owns (owners.ONLY_ON)."""
    only_on = owners.ONLY_ON.get(role)
    if only_on is None:
        return _principal_test(config, role)
    on_both = " && ".join(f"({o} == null || {only_on(o)})" for o in ("object", "oldObject"))
    return f"({_principal_test(config, role)}) && {on_both}"


def _who(roles: tuple[str, ...]) -> str:
    return ", ".join(owners.ROLE_TITLES[r] for r in roles)


def owner_policy(config: Config, kind: owners.Kind, fields: FieldRules | None = None) -> dict[str, Any]:
    """Default deny on one kind: a write on an object of a dispatch job (judged on the object and its old
    version) is refused unless its principal owns that write (webhook/owners.py), whatever field it touches."""
    roles = sorted({r for rs in kind.writes.values() for r in rs if r != owners.EVERYONE} | {owners.BREAK_GLASS})
    allowed = " || ".join(f"({_write_test(op, sub)} && ({_roles_test(rs)}))" for (op, sub), rs in kind.writes.items())
    who = json.dumps({owners.write_name(op, sub): _who(rs) for (op, sub), rs in kind.writes.items()})
    rule = {
        "apiGroups": [kind.group],
        "apiVersions": ["*"],
        "resources": [kind.resource, f"{kind.resource}/*"],
        "operations": ["CREATE", "UPDATE", "DELETE"],
    }
    validations = [
        {
            "expression": f"variables.{owners.BREAK_GLASS} || {allowed}",
            "messageExpression": f"'{kind.kind} ' + request.name + ' {owners.BELONGS}: ' + variables.write + "
            f"' is made only by ' + (variables.write in {who} ? {who}[variables.write] : 'nobody') + "
            "' (or break-glass), and ' + request.userInfo.username + ' is none of them'",
            "reason": "Forbidden",
        }
    ]
    if kind.parent is not None:
        parent_kind, pattern = kind.parent
        validations.append(
            {
                # Only a dispatch job's own children carry dispatch's finalizer and keys: a stranger's Job or
                # JobSet that copies them would otherwise block the controllers (the finalizer) or mislead the
                # gate.
                "expression": f"variables.{owners.BREAK_GLASS} || request.operation != 'CREATE' || "
                "variables.subresource != '' || "
                f"object.metadata.?ownerReferences.orValue([]).exists(r, r.?controller.orValue(false) && "
                f"r.?kind.orValue('') == {q(parent_kind)} && r.?name.orValue('').matches({q(pattern)}))",
                "message": f"a {kind.kind} with dispatch's marks (its finalizer, its keys, a dispatch job's name or "
                f"labels) is created only by its controller, a {parent_kind} of a dispatch job",
                "reason": "Forbidden",
            }
        )
    if kind is owners.PROLOGUES:
        validations.append(prologue_content_validation())
    variables = [
        # An empty subResource is absent from the request.
        {"name": "subresource", "expression": "request.?subResource.orValue('')"},
        {
            "name": "write",
            "expression": "request.operation + (variables.subresource == '' ? '' : ' ' + variables.subresource)",
        },
        *({"name": r, "expression": _owner_test(config, r)} for r in roles),
    ]
    if fields is not None:
        if fields.kind is not kind:
            raise ValueError(f"{fields.name} is about {fields.kind.kind}, not {kind.kind}")
        # After the owner rule, so that a write refused by both is refused naming its owners.
        variables, guarded = carried(fields, variables)
        validations += guarded
    spec: dict[str, Any] = {
        "matchConditions": [
            {
                "name": "dispatch-job-objects",
                "expression": " || ".join(f"({o} != null && ({kind.belongs(o)}))" for o in ("object", "oldObject")),
            }
        ],
        "variables": variables,
        "validations": validations,
    }
    policy = validating_policy(owner_policy_name(kind), [], ["CREATE", "UPDATE", "DELETE"], spec)
    policy["spec"]["matchConstraints"]["resourceRules"] = [rule]
    return policy


PROLOGUE_CONTENT: Final = (
    f"a ConfigMap named {PROLOGUE_CONFIGMAP_PREFIX}<hash> is the prologue's, and whoever creates it, it is created "
    f"only as dispatch creates it: named {PROLOGUE_CONFIGMAP} (this version's hash), data exactly {{{PROLOGUE_KEY}: "
    "this version's prologue text}, no binaryData, immutable: true. A name always means one text: every dispatch "
    "trainer pod runs the file it holds"
)


def prologue_content_validation() -> dict[str, Any]:
    """On the prologue's ConfigMap, for everyone (break-glass too): created only with this version's name and
    exactly its text (contract/prologue.py ``prologue_configmap``). Its data never changes after (immutable)."""
    return {
        "expression": f"request.operation != 'CREATE' || (object.metadata.name == {q(PROLOGUE_CONFIGMAP)} && "
        f"object.?immutable.orValue(false) == true && size(object.?binaryData.orValue({{}})) == 0 && "
        f"object.?data.orValue({{}}) == {{{q(PROLOGUE_KEY)}: {q(PROLOGUE)}}})",
        "message": PROLOGUE_CONTENT,
        "reason": "Forbidden",
    }


def owner_policies(config: Config, *, carrying: bool = False) -> list[dict[str, Any]]:
    """One default-deny policy per kind of a dispatch job's objects; ``carrying``, each with the field rules it
    carries (``carried_field_rules``), as the chart renders them. Without, the owner rules alone: their tests, and
    the harness, which runs them over every namespace of tier B while the field rules are a test's choice."""
    carried = carried_field_rules(config) if carrying else {}
    return [owner_policy(config, kind, carried.get(kind.resource)) for kind in owners.KINDS]


def principal_policies(config: Config) -> list[dict[str, Any]]:
    """Default deny by principal, as the chart renders it: the owner policies, carrying their field rules, and the
    policy that keeps strangers from pinning a dispatch job's objects with blocking owner references."""
    return [*owner_policies(config, carrying=True), dependents_policy(config)]
