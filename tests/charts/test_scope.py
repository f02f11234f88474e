"""The chart's ``scope`` values as the real helm renders them: every namespaceSelector of the webhook configurations
and the admission policies' bindings is contract/scope.py's for the values, the agent's config carries the same
scope, and the helm test refuses an exempt namespace. (On the API server: test_scope_on_the_api_server.py.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.config import load_config
from contract.scope import NAME_LABEL, namespace_selector
from tests.charts.helm import Rendered, template, template_error

SCOPED_KINDS = (
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicyBinding",
)
SELECTOR = {
    "matchLabels": {"dispatch.example/policed": "true"},
    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "cpu"]}],
}
# Every document that scopes by namespace, in the two runs: the MutatingAdmissionPolicy, and role worker's policies
# (with the manager agent's own) or role manager's.
ROLES = {
    "worker": {
        "role": "worker",
        "multikueue": {"usernames": ["mk"], "groups": []},
        "managerAgent": {"usernames": ["manager-agent"], "groups": []},
    },
    "manager": {"role": "manager"},
}


EVERYWHERE = ("-manager-agent", "-manager-contact")
"""Role worker's confinement of the manager's agent (webhook/rules/multicluster.py ``worker_policies``)."""


def selectors(r: Rendered) -> dict[str, Any]:
    """Each namespaceSelector the chart rendered, by "<kind> <name>[ <webhook>]"."""
    found = {}
    for kind in SCOPED_KINDS:
        for doc in r.of(kind):
            where = f"{kind} {doc['metadata']['name']}"
            if kind.endswith("WebhookConfiguration"):
                for hook in doc["webhooks"]:
                    found[f"{where} {hook['name']}"] = hook["namespaceSelector"]
            elif "matchResources" in doc["spec"]:
                found[where] = doc["spec"]["matchResources"]["namespaceSelector"]
            else:  # bound in every namespace whatever the scope: confining a principal everywhere is never less safe
                assert doc["metadata"]["name"].endswith(EVERYWHERE), doc["metadata"]["name"]
    return found


def _render(scope: dict[str, Any] | None = None) -> list[Rendered]:
    renders = []
    for role in ROLES.values():
        values: dict[str, Any] = {"admissionPolicies": {"enabled": True, "recordStart": "policy"}, "multicluster": role}
        if scope is not None:
            values["scope"] = scope
        renders.append(template(values, namespace="dispatch-system"))
    return renders


def _all(renders: list[Rendered]) -> dict[str, Any]:
    return {f"{i} {k}": v for i, r in enumerate(renders) for k, v in selectors(r).items()}


def test_by_default_every_selector_excludes_kube_system_and_the_release_namespace_only():
    found = _all(_render())
    assert {k.split()[1] for k in found} == set(SCOPED_KINDS), "every kind that scopes by namespace is rendered"
    assert len(found) > 30
    expected = {"matchExpressions": [{"key": NAME_LABEL, "operator": "NotIn", "values": ["dispatch-system", "kube-system"]}]}  # fmt: skip
    assert {k: v for k, v in found.items() if v != expected} == {}


def test_exempt_namespaces_join_the_built_in_exemptions_in_every_selector():
    found = _all(_render({"exemptNamespaces": ["sandbox", "kube-system"], "namespaceSelector": {}}))
    expected = namespace_selector("dispatch-system", ["sandbox"])
    assert expected["matchExpressions"][0]["values"] == ["dispatch-system", "kube-system", "sandbox"]
    assert {k: v for k, v in found.items() if v != expected} == {}


def test_a_namespace_selector_is_added_to_every_selector():
    found = _all(_render({"exemptNamespaces": ["sandbox"], "namespaceSelector": SELECTOR}))
    expected = namespace_selector("dispatch-system", ["sandbox"], SELECTOR)
    assert expected["matchLabels"] == SELECTOR["matchLabels"]
    assert expected["matchExpressions"][1:] == SELECTOR["matchExpressions"]
    assert {k: v for k, v in found.items() if v != expected} == {}


def test_match_labels_alone_or_match_expressions_alone():
    labels_only = {"matchLabels": {"team": "ml"}}
    for selector in (labels_only, {"matchExpressions": SELECTOR["matchExpressions"]}):
        found = _all(_render({"exemptNamespaces": [], "namespaceSelector": selector}))
        expected = namespace_selector("dispatch-system", (), selector)
        assert {k: v for k, v in found.items() if v != expected} == {}


def test_the_agent_gets_the_same_scope(tmp_path: Path):
    r = template({"scope": {"exemptNamespaces": ["sandbox"], "namespaceSelector": SELECTOR}})
    (configmap,) = [c for c in r.of("ConfigMap") if c["metadata"]["name"].endswith("-agent")]
    path = tmp_path / "config.yaml"
    path.write_text(configmap["data"]["config.yaml"])
    scope = load_config(path).api.scope
    assert scope.exempt_namespaces == ("sandbox",)
    assert scope.namespace_selector.as_kubernetes() == SELECTOR
    defaults = template({})
    (configmap,) = [c for c in defaults.of("ConfigMap") if c["metadata"]["name"].endswith("-agent")]
    assert yaml.safe_load(configmap["data"]["config.yaml"])["api"]["scope"] == {
        "exemptNamespaces": [],
        "namespaceSelector": {},
    }


@pytest.mark.parametrize(
    ("scope", "where"),
    [
        ({"exemptNamespaces": ["Not_A_Name"]}, "exemptNamespaces"),
        ({"exemptNamespaces": ["a", "a"]}, "exemptNamespaces"),
        ({"namespaceSelector": {"matchLabels": {"a": 1}}}, "matchLabels"),
        ({"namespaceSelector": {"matchExpressions": [{"key": "a", "operator": "Gt"}]}}, "operator"),
        ({"namespaceSelector": {"matchNames": ["a"]}}, "matchNames"),
    ],
)
def test_the_schema_refuses_what_is_no_scope(scope, where):
    assert where in template_error({"scope": scope})


def test_the_helm_test_refuses_an_exempt_namespace():
    error = template_error({"scope": {"exemptNamespaces": ["default"]}, "helmTest": {"namespace": "default"}})
    assert "scope.exemptNamespaces" in error
