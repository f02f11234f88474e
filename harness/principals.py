"""Who writes, on the real API server: dispatch's ServiceAccount and a stranger's, with the same RBAC."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any

from harness.cluster import ControlPlane
from harness.kube_http import KubeHttp

VERBS = ["get", "list", "create", "update", "patch", "delete"]
EDIT_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": ["trainer.kubeflow.org"],
        "resources": ["trainjobs", "trainingruntimes", "clustertrainingruntimes"],
        "verbs": VERBS,
    },
    # The attacker of issue 10: ordinary namespace RBAC on Workloads and JobSets, their status, and pods.
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "workloads/status"], "verbs": VERBS},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets", "jobsets/status"], "verbs": VERBS},
    {"apiGroups": [""], "resources": ["pods"], "verbs": VERBS},
]


@dataclass
class Principals:
    dispatch: KubeHttp
    dispatch_username: str
    stranger: KubeHttp
    stranger_username: str


def principals(cp: ControlPlane, namespace: str) -> Principals:
    """Two ServiceAccounts in ``namespace`` that may edit dispatch's kinds there: the RBAC is equal, so
    anything one may do and the other may not is the admission rules' doing."""
    role = f"edit-{secrets.token_hex(3)}"
    cp.admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": role, "namespace": namespace},
            "rules": EDIT_RULES,
        }
    )
    clients = {}
    for who in ("dispatch", "stranger"):
        cp.ensure_service_account(namespace, who)
        cp.admin.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"{role}-{who}", "namespace": namespace},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
                "subjects": [{"kind": "ServiceAccount", "name": who, "namespace": namespace}],
            }
        )
        clients[who] = KubeHttp(cp.service_account_credentials(namespace, who))
    return Principals(
        dispatch=clients["dispatch"],
        dispatch_username=f"system:serviceaccount:{namespace}:dispatch",
        stranger=clients["stranger"],
        stranger_username=f"system:serviceaccount:{namespace}:stranger",
    )


def json_patch(http: KubeHttp, obj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return http.request("PATCH", http.object_path(obj), ops, content_type="application/json-patch+json")


def merge_patch(http: KubeHttp, obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    return http.request("PATCH", http.object_path(obj), patch, content_type="application/merge-patch+json")


def bound_here(docs: list[dict[str, Any]], namespace: str, suffix: str) -> list[dict[str, Any]]:
    """Policies and bindings renamed with ``suffix`` and bound to ``namespace`` alone, so that a test's own copies
    police only its namespace and never another test's."""
    for doc in docs:
        doc["metadata"]["name"] += f"-{suffix}"
        if doc["kind"].endswith("Binding"):
            doc["spec"]["policyName"] += f"-{suffix}"
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
    return docs
