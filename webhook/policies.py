"""Defence in depth: the rules that CEL can state over one object and its old version, as
ValidatingAdmissionPolicies that the API server enforces itself, so they hold while the webhook is down.

* ``dispatch-k8s-reserved-keys``: strangers may not add, change or remove keys under
  dispatch.phpboyscout.uk/ on TrainJobs, TrainingRuntimes and Workloads, nor move dispatch's gate on a
  TrainJob.
* ``dispatch-k8s-identity``: on TrainJobs, for everyone, A in dispatch's runtime patch and the admission
  floor never fall and are never removed, and the recorded JobSet UID never changes.

The principals are rendered into the policies from the webhook's config.
"""

from __future__ import annotations

import json
from typing import Any, Final

from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_JOBSET_UID,
    GATE,
    PREFIX,
    RUNTIME_PATCH_MANAGER,
)
from webhook.config import Config
from webhook.configurations import NAME, RESOURCES, claims, namespace_selector

RESERVED_KEYS: Final = f"{NAME}-reserved-keys"
IDENTITY: Final = f"{NAME}-identity"


def _q(text: str) -> str:
    """A CEL string literal (JSON's escaping is valid CEL)."""
    return json.dumps(text)


def _map(obj: str, field: str) -> str:
    return f"({obj} == null ? {{}} : {obj}.metadata.?{field}.orValue({{}}))"


def _annotation(obj: str, key: str) -> str:
    return f"({obj} == null ? '' : {obj}.metadata.?annotations[?{_q(key)}].orValue(''))"


def _a(obj: str) -> str:
    """A in dispatch's runtime patch entry of ``obj``, or '' when there is none."""
    entry = f"{obj}.spec.runtimePatches.filter(p, p.?manager.orValue('') == {_q(RUNTIME_PATCH_MANAGER)})"
    path = ".?trainingRuntimeSpec.?template.?spec.?replicatedJobs[?0].?template.?spec.?template.?metadata"
    return (
        f"({obj} == null || !{obj}.?spec.?runtimePatches.hasValue() || size({entry}) != 1 ? '' : "
        f"{entry}[0]{path}.?annotations[?{_q(ANNOTATION_ADMISSION)}].orValue(''))"
    )


def _gated(obj: str) -> str:
    return f"{_annotation(obj, ANNOTATION_ADMISSION_GATED_BY)}.split(',').exists(g, g.trim() == {_q(GATE)})"


def _never_falls(old: str, new: str) -> str:
    return f"{old} == '' || ({new} != '' && int({new}) >= int({old}))"


def _unchanged_reserved(old: str, new: str) -> str:
    p = _q(PREFIX)
    return (
        f"{new}.all(k, !k.startsWith({p}) || (k in {old} && {old}[k] == {new}[k])) && "
        f"{old}.all(k, !k.startsWith({p}) || k in {new})"
    )


def _is_dispatch(config: Config) -> str:
    users = json.dumps(list(config.dispatch.usernames))
    groups = json.dumps(list(config.dispatch.groups))
    return f"request.userInfo.username in {users} || request.userInfo.groups.exists(g, g in {groups})"


def _policy(
    name: str, resources: list[tuple[str, str, str]], operations: list[str], spec: dict[str, Any]
) -> dict[str, Any]:
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


def _binding(policy: str, namespace: str) -> dict[str, Any]:
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


def admission_policies(config: Config, *, namespace: str) -> list[dict[str, Any]]:
    """The two policies and their bindings, for dispatch installed in ``namespace``."""
    reserved = _policy(
        RESERVED_KEYS,
        list(RESOURCES),
        ["CREATE", "UPDATE"],
        {
            "variables": [
                {"name": "dispatch", "expression": _is_dispatch(config)},
                {"name": "oldLabels", "expression": _map("oldObject", "labels")},
                {"name": "newLabels", "expression": _map("object", "labels")},
                {"name": "oldAnnotations", "expression": _map("oldObject", "annotations")},
                {"name": "newAnnotations", "expression": _map("object", "annotations")},
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
                    + _unchanged_reserved("variables.oldAnnotations", "variables.newAnnotations")
                    + ")",
                    "message": f"only dispatch adds, changes or removes annotations under {PREFIX}",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"variables.dispatch || request.resource.resource != 'trainjobs' || "
                    f"({_gated('oldObject')}) == ({_gated('object')})",
                    "message": f"only dispatch adds or removes its gate {GATE} in {ANNOTATION_ADMISSION_GATED_BY}",
                    "reason": "Forbidden",
                },
            ],
        },
    )
    identity = _policy(
        IDENTITY,
        [RESOURCES[0]],
        ["UPDATE"],
        {
            "matchConditions": [{"name": "dispatch-objects", "expression": claims("trainjobs")}],
            "variables": [
                {"name": "oldA", "expression": _a("oldObject")},
                {"name": "newA", "expression": _a("object")},
                {"name": "oldFloor", "expression": _annotation("oldObject", ANNOTATION_ADMISSION_FLOOR)},
                {"name": "newFloor", "expression": _annotation("object", ANNOTATION_ADMISSION_FLOOR)},
                {"name": "oldJobSet", "expression": _annotation("oldObject", ANNOTATION_JOBSET_UID)},
                {"name": "newJobSet", "expression": _annotation("object", ANNOTATION_JOBSET_UID)},
            ],
            "validations": [
                {
                    "expression": _never_falls("variables.oldA", "variables.newA"),
                    "messageExpression": "'A in dispatch\\'s runtime patch never falls and is never removed: saw ' "
                    "+ variables.oldA + ' -> ' + variables.newA",
                    "reason": "Forbidden",
                },
                {
                    "expression": _never_falls("variables.oldFloor", "variables.newFloor"),
                    "messageExpression": f"'{ANNOTATION_ADMISSION_FLOOR} never falls and is never removed: saw ' "
                    "+ variables.oldFloor + ' -> ' + variables.newFloor",
                    "reason": "Forbidden",
                },
                {
                    "expression": "variables.oldJobSet == '' || variables.newJobSet == variables.oldJobSet",
                    "message": f"{ANNOTATION_JOBSET_UID} is recorded once and never changed",
                    "reason": "Forbidden",
                },
            ],
        },
    )
    return [reserved, _binding(RESERVED_KEYS, namespace), identity, _binding(IDENTITY, namespace)]
