"""contract/scope.py: the namespaces dispatch polices, as a LabelSelector (what the chart renders) and as the
decision the agent refuses by, and a LabelSelector's meaning."""

from __future__ import annotations

import pytest

from contract.scope import NAME_LABEL, exempt, namespace_selector, out_of_scope, selects

OWN = "dispatch-system"
TENANT = {"matchLabels": {"dispatch.example/policed": "true"}}


def test_the_built_in_exemptions_alone_are_the_webhooks_selector_as_before():
    assert namespace_selector(OWN) == {
        "matchExpressions": [{"key": NAME_LABEL, "operator": "NotIn", "values": [OWN, "kube-system"]}]
    }


def test_exemptions_are_added_sorted_once_and_the_selectors_requirements_follow_the_names():
    selector = {
        "matchLabels": {"team": "ml"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}],
    }
    got = namespace_selector(OWN, ["sandbox", "kube-system", "sandbox"], selector)
    assert got == {
        "matchExpressions": [
            {"key": NAME_LABEL, "operator": "NotIn", "values": [OWN, "kube-system", "sandbox"]},
            {"key": "tier", "operator": "In", "values": ["gpu"]},
        ],
        "matchLabels": {"team": "ml"},
    }
    assert exempt(OWN, ["a"]) == ["a", OWN, "kube-system"]


@pytest.mark.parametrize(
    ("selector", "labels", "expected"),
    [
        (None, {}, True),
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchLabels": {"a": "1"}}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "x"}, False),
        # every requirement at once
        (
            {"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]},
            {"a": "1"},
            False,
        ),
    ],
)
def test_a_label_selector_means_what_the_api_server_means(selector, labels, expected):
    assert selects(selector, labels) is expected


def test_an_unknown_operator_is_an_error_not_a_match():
    with pytest.raises(ValueError, match="not a LabelSelector operator"):
        selects({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, {"a": "2"})


@pytest.mark.parametrize("namespace", ["kube-system", OWN])
def test_the_built_in_exemptions_are_out_of_scope_whatever_the_labels(namespace):
    why = out_of_scope(namespace, {"dispatch.example/policed": "true"}, own_namespace=OWN, selector=TENANT)
    assert why is not None
    assert "excluded from dispatch's admission webhook" in why


def test_an_exempt_namespace_is_out_of_scope_and_names_the_value():
    why = out_of_scope("sandbox", None, own_namespace=OWN, exempt_namespaces=["sandbox"])
    assert why is not None
    assert "scope.exemptNamespaces" in why


def test_without_a_selector_the_labels_are_not_needed():
    assert out_of_scope("team-a", None, own_namespace=OWN) is None
    assert out_of_scope("team-a", None, own_namespace=OWN, selector={}) is None


def test_with_a_selector_the_labels_decide_and_the_refusal_shows_them():
    assert out_of_scope("team-a", {"dispatch.example/policed": "true"}, own_namespace=OWN, selector=TENANT) is None
    why = out_of_scope("team-a", {"team": "a", NAME_LABEL: "team-a"}, own_namespace=OWN, selector=TENANT)
    assert why is not None
    assert "scope.namespaceSelector" in why
    assert "team=a" in why
    assert NAME_LABEL not in why
    with pytest.raises(ValueError, match="labels"):
        out_of_scope("team-a", None, own_namespace=OWN, selector=TENANT)


def test_a_selector_on_the_name_label_sees_the_name_even_when_the_labels_read_lack_it():
    by_name = {"matchExpressions": [{"key": NAME_LABEL, "operator": "In", "values": ["team-a"]}]}
    assert out_of_scope("team-a", {}, own_namespace=OWN, selector=by_name) is None
    assert out_of_scope("team-b", {}, own_namespace=OWN, selector=by_name) is not None
