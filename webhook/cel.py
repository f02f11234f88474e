"""The CEL text, and the shapes of the admission policies it goes in, shared by every rendered policy (the
concerns in ``webhook.rules``, ``webhook.owners``, ``webhook.dependents``): one helper per test, never a private copy.

Two tests of dispatch's gate differ on purpose and are kept apart: ``mentions_gate`` is a substring test (the owner
policies ask whether an object shows any sign of being dispatch's), ``lists_gate`` an exact one (the field rules ask
whether the gate is one of admission-gated-by's entries, as contract.gates reads it).

Imports ``contract`` and ``webhook.configurations`` only: every policy module imports this one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final, Protocol

from contract import upstream
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_GATED_BY,
    GATE,
    LABEL_RESTART_ATTEMPT,
    PREFIX,
    RUNTIME_PATCH_MANAGER,
)
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL
from webhook.configurations import NAME, namespace_selector


class Principals(Protocol):
    """webhook.config ``Principals``, as read here (that module imports the owner table, which imports this)."""

    @property
    def usernames(self) -> tuple[str, ...]: ...

    @property
    def groups(self) -> tuple[str, ...]: ...


class Kind(Protocol):
    """webhook.owners ``Kind``, as read here (that module imports this one)."""

    @property
    def kind(self) -> str: ...

    @property
    def group(self) -> str: ...

    @property
    def resource(self) -> str: ...


def q(text: str) -> str:
    """A CEL string literal (JSON's escaping is valid CEL)."""
    return json.dumps(text)


def annotation(obj: str, key: str) -> str:
    """The annotation ``key`` of ``obj``, or '' when ``obj`` is null or has none."""
    return f"({obj} == null ? '' : {obj}.metadata.?annotations[?{q(key)}].orValue(''))"


def mentions_gate(o: str) -> str:
    """dispatch's gate anywhere in Kueue's admission-gated-by of ``o`` (a TrainJob, or its Workload, which copies
    it): a substring test, so any trace of the gate counts."""
    return f"{o}.metadata.?annotations[?{q(ANNOTATION_ADMISSION_GATED_BY)}].orValue('').contains({q(GATE)})"


def lists_gate(obj: str) -> str:
    """dispatch's gate as one of admission-gated-by's comma-separated entries, trimmed (contract.gates' reading);
    ``obj`` may be null."""
    return f"{annotation(obj, ANNOTATION_ADMISSION_GATED_BY)}.split(',').exists(g, g.trim() == {q(GATE)})"


def is_principal(principals: Principals) -> str:
    """CEL: the request's user is one of ``principals``."""
    users = json.dumps(list(principals.usernames))
    groups = json.dumps(list(principals.groups))
    return f"request.userInfo.username in {users} || request.userInfo.groups.exists(g, g in {groups})"


def validating_policy(
    name: str, resources: list[tuple[str, str, str]], operations: list[str], spec: dict[str, Any]
) -> dict[str, Any]:
    """A ValidatingAdmissionPolicy of dispatch's, failing closed, over ``resources`` (group, version, resource)."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "policy"},
        },
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {"apiGroups": [g], "apiVersions": [v], "resources": [r], "operations": operations}
                    for g, v, r in resources
                ],
            },
            **spec,
        },
    }


CANONICAL_COUNT: Final = "^(0|[1-9][0-9]{0,17})$"
"""contract/admission.py ``parse_count``: a decimal count without leading zeros, in a 64-bit int."""


def metadata_map(obj: str, field: str) -> str:
    """CEL: the labels or annotations (``field``) of ``obj``, {} when ``obj`` is null or has none."""
    return f"({obj} == null ? {{}} : {obj}.metadata.?{field}.orValue({{}}))"


def count_or_zero(count: str) -> str:
    """CEL: the count ``count`` (a string, '' when absent) as an int, 0 when absent."""
    return f"({count} == '' ? 0 : int({count}))"


def pod_key_reserved(k: str) -> str:
    """CEL: pod key ``k`` decides identity (contract.patches ``reserved_pod_key``): dispatch's, J's, or a
    strategic-merge directive."""
    return f"({k}.startsWith({q(PREFIX)}) || {k} == {q(LABEL_RESTART_ATTEMPT)} || {k}.startsWith('$'))"


def dispatch_entries(obj: str) -> str:
    """CEL: the runtime-patch entries of dispatch's manager in ``obj``."""
    return f"{obj}.spec.?runtimePatches.orValue([]).filter(p, p.?manager.orValue('') == {q(RUNTIME_PATCH_MANAGER)})"


def dispatch_a(obj: str) -> str:
    """A in dispatch's runtime patch entry of ``obj``, or '' when there is none."""
    entry = f"{obj}.spec.runtimePatches.filter(p, p.?manager.orValue('') == {q(RUNTIME_PATCH_MANAGER)})"
    path = ".?trainingRuntimeSpec.?template.?spec.?replicatedJobs[?0].?template.?spec.?template.?metadata"
    return (
        f"({obj} == null || !{obj}.?spec.?runtimePatches.hasValue() || size({entry}) != 1 ? '' : "
        f"{entry}[0]{path}.?annotations[?{q(ANNOTATION_ADMISSION)}].orValue(''))"
    )


def is_multikueue_copy(obj: str) -> str:
    """CEL: ``obj`` is MultiKueue's copy on a worker (its origin label; contract/multicluster.py ``is_copy``)."""
    return f"{obj}.metadata.?labels[?{q(MULTIKUEUE_ORIGIN_LABEL)}].orValue('') != ''"


def binding(policy: str, namespace: str) -> dict[str, Any]:
    """The ValidatingAdmissionPolicyBinding of ``policy``: Deny, in every namespace but kube-system and
    ``namespace``."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {
            "name": policy,
            "labels": {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "policy"},
        },
        "spec": {
            "policyName": policy,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": namespace_selector(namespace)},
        },
    }


def json_patch(op: str, path: str, value: str) -> str:
    """CEL: one JSON Patch operation; ``path`` and ``value`` are CEL expressions."""
    return f"JSONPatch{{op: {q(op)}, path: {path}, value: {value}}}"


def json_patch_add(obj: str, path: str, parents: tuple[str, ...], key: str, value: str) -> str:
    """CEL: one JSON Patch ``add`` setting ``key`` under the fields ``parents`` of ``obj`` (at JSON Pointer ``path``,
    a CEL string) to ``value``. The first parent missing is added whole with the rest of the nest inside, as
    contract/objects.py ``add_op`` does: an ``add`` under a missing parent fails, and the API server refuses the
    write."""
    leaf = json_patch("add", f"{path} + '/{'/'.join(parents)}/' + jsonpatch.escapeKey({q(key)})", value)
    for depth in range(len(parents), 0, -1):
        nest = value
        for name in reversed((*parents[depth:], key)):
            nest = f"{{{q(name)}: {nest}}}"
        missing = json_patch("add", f"{path} + '/{'/'.join(parents[:depth])}'", nest)
        leaf = f"(!{obj}{''.join(f'.?{p}' for p in parents[:depth])}.hasValue() ? {missing} : {leaf})"
    return leaf


def trainjob_mutation(
    name: str, namespace: str, operation: str, conditions: list[dict[str, str]], body: dict[str, Any]
) -> list[dict[str, Any]]:
    """A MutatingAdmissionPolicy over dispatch TrainJobs (``operation``, ``conditions``; ``body``: its variables and
    mutations), failing closed and never reinvoked, and its binding to the job namespaces."""
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "policy"}
    rule = {
        "apiGroups": [upstream.TRAINJOBS.group],
        "apiVersions": ["*"],
        "resources": [upstream.TRAINJOBS.plural],
        "operations": [operation],
    }
    policy = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicy",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "failurePolicy": "Fail",
            "reinvocationPolicy": "Never",
            "matchConstraints": {"resourceRules": [rule]},
            "matchConditions": conditions,
            **body,
        },
    }
    binding = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": labels},
        "spec": {"policyName": name, "matchResources": {"namespaceSelector": namespace_selector(namespace)}},
    }
    return [policy, binding]


@dataclass(frozen=True)
class FieldRules:
    """Field rules over some writes of one kind of a dispatch job's objects, in one of two forms: a policy of their
    own (``field_policy``), or carried by the kind's owner policy (``owner_policy``), where every write they judge
    is already matched. Carried, a write is converted for CEL and matched once instead of twice: the API server
    converts a typed object (a pod) to unstructured form once per policy whose match constraints match it
    (docs/performance.md)."""

    name: str
    """The policy's name in its own form."""
    kind: Kind
    resources: tuple[tuple[str, str, str], ...]
    """(group, version, resource or resource/subresource): the kind's resource, and subresources of it."""
    operations: tuple[str, ...]
    conditions: tuple[tuple[str, str], ...]
    """The match conditions (name, CEL), all of which hold of the writes the rules are about. Carried, they must
    imply the owner policy's (the kind's ``belongs`` on the object or the old one), else a write they match would
    not be judged."""
    variables: tuple[dict[str, str], ...]
    validations: tuple[dict[str, str], ...]


FIELD_RULES_APPLY: Final = "fieldRulesApply"
"""In an owner policy that carries field rules: this write is one of theirs (their resources, operations and
match conditions), the guard of each of their validations."""


def field_policy(rules: FieldRules) -> dict[str, Any]:
    """The field rules as a policy of their own."""
    return validating_policy(
        rules.name,
        list(rules.resources),
        list(rules.operations),
        {
            "matchConditions": [{"name": name, "expression": expression} for name, expression in rules.conditions],
            "variables": list(rules.variables),
            "validations": list(rules.validations),
        },
    )


def carried(rules: FieldRules, variables: list[dict[str, str]]) -> tuple[list[dict[str, str]], list[dict[str, Any]]]:
    """The owner policy's ``variables`` with the field rules' and their guard, and the field rules' validations
    guarded: each judges exactly the writes the rules' own policy would match (its resources, operations and match
    conditions), and passes every other write the owner policy matches."""
    subresources = []
    for group, _, resource in rules.resources:
        base, _, sub = resource.partition("/")
        if group != rules.kind.group or base != rules.kind.resource:
            raise ValueError(f"{rules.name}: {group}/{resource} is not a resource of {rules.kind.kind}")
        subresources.append(sub)
    merged = list(variables)
    for v in rules.variables:
        same = [m for m in merged if m["name"] == v["name"]]
        if same and same[0]["expression"] != v["expression"]:
            raise ValueError(f"{rules.name}: variable {v['name']} differs from the owner policy's")
        if not same:
            merged.append(v)
    # An owner policy's variables.subresource is the request's, '' for the object itself.
    guard = (
        f"request.operation in {json.dumps(list(rules.operations))} && "
        f"variables.subresource in {json.dumps(subresources)} && "
        + " && ".join(f"({expression})" for _, expression in rules.conditions)
    )
    merged.append({"name": FIELD_RULES_APPLY, "expression": guard})
    validations = [
        {**v, "expression": f"!variables.{FIELD_RULES_APPLY} || ({v['expression']})"} for v in rules.validations
    ]
    return merged, validations
