"""The chart's admission on the real API server, for some namespaces alone: its policies (the owner policies, the
field rules and the MutatingAdmissionPolicy) beside dispatch's webhook as the chart registers it, with Kueue's
principal a ServiceAccount of the test's."""

from __future__ import annotations

import copy
import secrets
import time
from typing import Any

from contract.admission import raise_admission
from contract.keys import ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_ADMISSION_STARTED, ANNOTATION_OPENED
from contract.objects import annotations
from harness.cluster import ControlPlane
from harness.kube_http import ApiError, KubeHttp
from harness.principals import Principals
from webhook.config import Config
from webhook.config import Principals as ConfigPrincipals
from webhook.policies import admission_policies

KUEUE_SA = "kueue"
JSON_PATCH = "application/json-patch+json"


def kueue(cp: ControlPlane, home: str, namespaces: list[str]) -> tuple[KubeHttp, str]:
    """A ServiceAccount of ``home`` playing Kueue's controller, with every right in ``namespaces`` (what it may
    write is the policies' to say): its client and username."""
    cp.ensure_service_account(home, KUEUE_SA)
    for namespace in namespaces:
        cp.admin.create({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": f"kueue-{secrets.token_hex(3)}", "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": KUEUE_SA, "namespace": home}],
        })  # fmt: skip
    return KubeHttp(cp.service_account_credentials(home, KUEUE_SA)), f"system:serviceaccount:{home}:{KUEUE_SA}"


def chart_policies(who: Principals, kueue_username: str, namespaces: list[str]) -> list[dict[str, Any]]:
    """Every policy the chart renders (on an API server serving MutatingAdmissionPolicy), renamed for this run and
    bound to ``namespaces`` alone."""
    config = Config(
        dispatch=ConfigPrincipals(usernames=(who.dispatch_username,)),
        kueue=ConfigPrincipals(usernames=(kueue_username,)),
    )
    suffix = secrets.token_hex(3)
    selector = {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": namespaces}]}
    docs = admission_policies(config, namespace="dispatch-system")
    for doc in docs:
        doc["metadata"]["name"] += f"-{suffix}"
        if "policyName" in doc["spec"]:
            doc["spec"]["policyName"] += f"-{suffix}"
            doc["spec"]["matchResources"] = {"namespaceSelector": selector}
    return docs


def opened_and_raised(who: Principals, tj: dict[str, Any]) -> dict[str, Any]:
    """A Kueue-mode TrainJob as dispatch leaves it for Kueue to admit: Open (the gate removed, the opened mark), then
    the readmission gate's raise of A. Still suspended."""
    opened = copy.deepcopy(tj)
    opened["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY)
    opened["metadata"]["annotations"][ANNOTATION_OPENED] = "true"
    tj = who.dispatch.request("PUT", who.dispatch.object_path(tj), opened)
    return who.dispatch.request("PATCH", who.dispatch.object_path(tj), raise_admission(tj).patch,
                                content_type=JSON_PATCH)  # fmt: skip


def unsuspend(http: KubeHttp, tj: dict[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
    """Kueue's admission: ``spec.suspend`` false, as one merge patch."""
    query = {"dryRun": "All"} if dry_run else None
    return http.request("PATCH", http.object_path(tj), {"spec": {"suspend": False}}, query=query,
                        content_type="application/merge-patch+json")  # fmt: skip


def wait_recorded(http: KubeHttp, tj: dict[str, Any], timeout: float = 30) -> None:
    """Policies load asynchronously: dry-run unsuspends of ``tj`` until the MutatingAdmissionPolicy records A in
    them and the unsuspend policy lets them through."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if ANNOTATION_ADMISSION_STARTED in annotations(unsuspend(http, tj, dry_run=True)):
                return
        except ApiError as err:
            if err.status != 403:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"the chart's policies did not admit an unsuspend within {timeout:.0f} s")
        time.sleep(0.2)


def wait_refused(http: KubeHttp, tj: dict[str, Any], reason: str, timeout: float = 30) -> None:
    """The validating and mutating policies load apart, each on its own refresh: dry-run unsuspends of ``tj``
    until the unsuspend policy refuses them with ``reason`` (so a test's real unsuspend meets it loaded)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            unsuspend(http, tj, dry_run=True)
        except ApiError as err:
            if err.status == 403 and reason in err.body:
                return
            if err.status != 403:
                raise
        if time.monotonic() > deadline:
            raise AssertionError(f"the unsuspend policy did not refuse ({reason!r}) within {timeout:.0f} s")
        time.sleep(0.2)
