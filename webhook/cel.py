"""CEL text, and the ValidatingAdmissionPolicy it goes in, shared by the rendered policies (``webhook.owners``,
``webhook.policies``, ``webhook.dependents``).

The two tests of dispatch's gate differ on purpose and are kept apart: the owner policies ask whether an object
shows any sign of being dispatch's (``mentions_gate``), the field rules whether the gate is set (``lists_gate``).
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from contract.keys import ANNOTATION_ADMISSION_GATED_BY, GATE
from webhook.configurations import NAME


class Principals(Protocol):
    """webhook.config ``Principals``, as read here (that module imports the owner table, which imports this)."""

    @property
    def usernames(self) -> tuple[str, ...]: ...

    @property
    def groups(self) -> tuple[str, ...]: ...


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
