"""The chart's ``scope`` on a real kube-apiserver (tier A): the rendered admission policies and webhook
configurations, installed as rendered, police a write in a namespace in scope and let the same write through in a
namespace exempt by name (``scope.exemptNamespaces``) and in one the selector leaves out (``scope.namespaceSelector``).

The selector is a label only this test's namespaces carry, so nothing else on the shared API server is policed.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from ulid import ULID

from harness.cluster import ControlPlane
from harness.kube_http import ApiError, KubeHttp
from tests.charts.helm import Rendered, template

pytestmark = pytest.mark.cluster

RBAC = "rbac.authorization.k8s.io/v1"
STRANGER = "dispatch-test:scope-stranger"
POLICY_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def _trainjob(namespace: str) -> dict[str, Any]:
    """A TrainJob with a dispatch name: one of dispatch's objects, which only its owners may write."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": f"dj-{str(ULID()).lower()}-s1", "namespace": namespace},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": True},
    }


@dataclass
class Scoped:
    cp: ControlPlane
    rendered: Rendered
    stranger: KubeHttp
    policed: str
    """Labelled for the selector."""
    exempt: str
    """Labelled too, and in scope.exemptNamespaces."""
    unselected: str
    """Not labelled."""
    jobs: dict[str, dict[str, Any]]
    """A dispatch TrainJob in each, made before anything was installed."""

    def install(self, kinds: tuple[str, ...]) -> list[dict[str, Any]]:
        docs = [d for kind in kinds for d in self.rendered.of(kind)]
        for doc in docs:
            self.cp.admin.apply(doc)
        return docs

    def uninstall(self, docs: list[dict[str, Any]]) -> None:
        for doc in reversed(docs):
            self.cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


@pytest.fixture
def scoped(control_plane: ControlPlane) -> Iterator[Scoped]:
    cp = control_plane
    token = secrets.token_hex(4)
    label = {"dispatch-test/scope": token}
    release_namespace = cp.create_namespace("scope-release")
    policed = cp.create_namespace("scope-policed", labels=label)
    exempt = cp.create_namespace("scope-exempt", labels=label)
    unselected = cp.create_namespace("scope-unselected")
    jobs = {ns: _create_before_install(cp, _trainjob(ns)) for ns in (policed, exempt, unselected)}
    values = {"scope": {"exemptNamespaces": [exempt], "namespaceSelector": {"matchLabels": label}}}
    rendered = template(values, release=f"t{token}-dispatch-k8s", namespace=release_namespace)
    binding = f"scope-stranger-{token}"
    cp.admin.create({
        "apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": STRANGER}],
    })  # fmt: skip
    stranger = KubeHttp(cp.admin_credentials, impersonate=(STRANGER, None))
    yield Scoped(cp, rendered, stranger, policed, exempt, unselected, jobs)
    cp.admin.delete(RBAC, "ClusterRoleBinding", binding)
    for ns in (release_namespace, policed, exempt, unselected):
        cp.delete_namespace(ns)


def _create_before_install(cp: ControlPlane, obj: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    """Created as no dispatch policy is installed yet: the policies of a release another test on this API server
    uninstalled a moment ago may still be enforced for a while (the API server's policy cache lags the delete)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return cp.admin.create(obj)
        except ApiError as exc:
            if exc.status != 403 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _refusal(call: Any) -> str | None:
    """None when the write was admitted, else the API server's refusal."""
    try:
        call()
    except ApiError as exc:
        if exc.status not in (403, 422, 500):
            raise
        return str(exc)
    return None


def _label_as_stranger(s: Scoped, namespace: str) -> str | None:
    job = s.jobs[namespace]
    path = s.stranger.object_path(job)
    patch = {"metadata": {"labels": {"touched-by": "stranger"}}}
    return _refusal(
        lambda: s.stranger.request(
            "PATCH", path, patch, query={"dryRun": "All"}, content_type="application/merge-patch+json"
        )
    )


def _create(s: Scoped, namespace: str) -> str | None:
    body = _trainjob(namespace)
    path = s.cp.admin.object_path(body).rsplit("/", 1)[0]
    return _refusal(lambda: s.cp.admin.request("POST", path, body, query={"dryRun": "All"}))


def _until_refused(what: Any, timeout: float = 30) -> str:
    """Policies and webhook configurations take effect a moment after they are written."""
    deadline = time.monotonic() + timeout
    while True:
        refusal = what()
        if refusal is not None:
            return refusal
        assert time.monotonic() < deadline, f"not policed within {timeout} s"
        time.sleep(0.2)


def test_the_policies_police_the_namespace_in_scope_only(scoped: Scoped):
    docs = scoped.install(POLICY_KINDS)
    try:
        bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
        assert len(bindings) >= 10
        refusal = _until_refused(lambda: _label_as_stranger(scoped, scoped.policed))
        assert "belongs to a dispatch job" in refusal, refusal
        # Each policy loads on its own: the refusal above shows the owner policy of TrainJobs is enforced.
        assert _label_as_stranger(scoped, scoped.exempt) is None, "scope.exemptNamespaces is policed"
        assert _label_as_stranger(scoped, scoped.unselected) is None, "a namespace the selector leaves out is policed"
    finally:
        scoped.uninstall(docs)


def test_the_webhook_configurations_call_the_webhook_for_the_namespace_in_scope_only(scoped: Scoped):
    # No webhook runs behind the rendered Service: a write the API server sends it fails closed, one it does not
    # send is admitted. A dispatch TrainJob's create is sent to the webhook (no policy judges it).
    docs = scoped.install(WEBHOOK_KINDS)
    try:
        refusal = _until_refused(lambda: _create(scoped, scoped.policed))
        assert "failed calling webhook" in refusal, refusal
        assert "dispatch.phpboyscout.uk" in refusal, refusal
        assert _create(scoped, scoped.exempt) is None, "scope.exemptNamespaces is sent to the webhook"
        assert _create(scoped, scoped.unselected) is None, "a namespace the selector leaves out is sent to the webhook"
    finally:
        scoped.uninstall(docs)


# -- docs/install.md's policy keeping the opt-in label to cluster admins ---------------------------------------

INSTALL_MD = Path(__file__).resolve().parents[2] / "docs" / "install.md"
OPT_IN = "dispatch.example.com/policed"


def _label_policy() -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy and its binding, as docs/install.md's "Scope" section gives them."""
    text = INSTALL_MD.read_text()
    section = text[text.index("## Scope: which namespaces dispatch polices") :]
    section = section[: section.index("\n## ", 1)]
    start = section.index("```yaml\napiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy")
    block = section[start + len("```yaml\n") : section.index("```\n", start + 1)]
    return [d for d in yaml.safe_load_all(block) if d]


def _relabel(http: KubeHttp, namespace: str, labels: dict[str, str | None]) -> str | None:
    return _refusal(
        lambda: http.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}",
            {"metadata": {"labels": labels}},
            query={"dryRun": "All"},
            content_type="application/merge-patch+json",
        )
    )


def test_install_mds_label_policy_keeps_the_opt_in_label_to_cluster_admins(control_plane: ControlPlane):
    cp = control_plane
    token = secrets.token_hex(3)
    namespace = cp.create_namespace("scope-tenant", labels={OPT_IN: "true"})
    tenant_name = f"dispatch-test:namespace-admin-{token}"
    # A namespace admin as many platforms make one: a RoleBinding in their namespace that may edit the namespace.
    cp.admin.create({"apiVersion": RBAC, "kind": "Role", "metadata": {"name": "namespace-editor", "namespace": namespace},
                     "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "patch", "update"]}]})  # fmt: skip
    cp.admin.create({
        "apiVersion": RBAC, "kind": "RoleBinding", "metadata": {"name": "namespace-admin", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "namespace-editor"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": tenant_name}],
    })  # fmt: skip
    tenant = KubeHttp(cp.admin_credentials, impersonate=(tenant_name, None))
    docs = _label_policy()
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    for doc in docs:  # cluster-scoped names: this test's own
        doc["metadata"]["name"] += f"-{token}"
    docs[1]["spec"]["policyName"] = docs[0]["metadata"]["name"]
    try:
        # Without it, the namespace admin takes their namespace out of scope (after RBAC takes effect).
        deadline = time.monotonic() + 20
        while (refusal := _relabel(tenant, namespace, {OPT_IN: None})) is not None:
            assert time.monotonic() < deadline, refusal
            time.sleep(0.2)
        for doc in docs:
            cp.admin.apply(doc)
        refusal = _until_refused(lambda: _relabel(tenant, namespace, {OPT_IN: None}))
        assert "only cluster admins may set, change or remove the label" in refusal, refusal
        assert _relabel(tenant, namespace, {OPT_IN: "false"}) is not None, "changed"
        assert _relabel(tenant, namespace, {"team": "ml"}) is None, "other labels stay the tenant's"
        assert _relabel(cp.admin, namespace, {OPT_IN: None}) is None, "a cluster admin may"
    finally:
        for doc in reversed(docs):
            cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
        cp.delete_namespace(namespace)
