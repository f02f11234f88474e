"""One of dispatch's owner and field policies matches each pod write: the API server converts a typed pod to
unstructured form for CEL once per policy whose match constraints match the write (docs/performance.md), and pod
writes are the cluster's most frequent (the kubelets' status writes most of all, which ``dependents``, on every
namespaced object's own create and update, never meets). The pod rules ride in the owner policy of pods, guarded to judge exactly the writes
their own policy matched (tests/webhook/test_pod_rules_carried.py holds them on the real API server)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from contract.keys import POD_FINALIZER
from contract.multicluster import ROLE_MANAGER, ROLE_WORKER
from webhook import owners
from webhook.cel import FIELD_RULES_APPLY, FieldRules
from webhook.config import Config
from webhook.dependents import DEPENDENTS
from webhook.policies import admission_policies
from webhook.rules.multicluster import MANAGER_RUNS_NOTHING
from webhook.rules.owners import owner_policies, owner_policy, owner_policy_name
from webhook.rules.pods import pod_policy, pod_rules

POD_WRITES = [
    (operation, sub)
    for operation in ("CREATE", "UPDATE", "DELETE")
    for sub in ("", "status", "binding", "eviction", "ephemeralcontainers", "resize")
]


def _matches(rule: dict[str, Any], group: str, resource: str, sub: str, operation: str) -> bool:
    """A resourceRule of matchConstraints matches the request (the API server's rule matching)."""
    if not ({group, "*"} & set(rule["apiGroups"]) and {operation, "*"} & set(rule["operations"])):
        return False
    wanted = {f"{resource}/{sub}", f"{resource}/*", "*/*", f"*/{sub}"} if sub else {resource, "*"}
    return bool(wanted & set(rule["resources"]))


def matching(docs: list[dict[str, Any]], group: str, resource: str, sub: str, operation: str) -> list[str]:
    """The validating policies whose match constraints match a write (before their match conditions)."""
    return [
        d["metadata"]["name"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy"
        and any(_matches(r, group, resource, sub, operation) for r in d["spec"]["matchConstraints"]["resourceRules"])
    ]


@pytest.mark.parametrize("role", [None, ROLE_WORKER, ROLE_MANAGER])
def test_exactly_one_policy_matches_each_pod_write(role):
    config = Config() if role is None else Config(multiclusterRole=role)
    docs = admission_policies(config, namespace="dispatch-system")
    pods = owner_policy_name(owners.PODS)
    for operation, sub in POD_WRITES:
        names = matching(docs, "", "pods", sub, operation)
        # The policy on blocking owner references matches every namespaced object's create and update, a pod's too
        # (never a subresource: the kubelets' status writes, bindings, evictions): its match condition sends all
        # but a stranger's pin away (docs/performance.md measures the cost).
        dependents = [DEPENDENTS] if (operation, sub) in (("CREATE", ""), ("UPDATE", "")) else []
        if role == ROLE_MANAGER and (operation, sub) == ("CREATE", ""):
            # A manager runs nothing: its own policy refuses the create of a dispatch job's pod to everyone.
            assert names == [pods, DEPENDENTS, MANAGER_RUNS_NOTHING], names
        else:
            assert names == [pods, *dependents], (operation, sub, names)


def test_without_the_owner_policies_the_pod_rules_are_a_policy_of_their_own():
    docs = admission_policies(Config(), namespace="dispatch-system", owners_too=False)
    alone = pod_policy(Config())
    assert alone in docs
    assert matching(docs, "", "pods", "", "UPDATE") == [alone["metadata"]["name"]]
    assert matching(docs, "", "pods", "status", "UPDATE") == [alone["metadata"]["name"]]
    assert matching(docs, "", "pods", "", "DELETE") == []


def _pods_policy(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (policy,) = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy" and d["metadata"]["name"] == owner_policy_name(owners.PODS)
    ]
    return policy


def test_the_owner_policy_of_pods_carries_the_pod_rules_each_guarded_to_their_own_writes():
    config = Config()
    rules = pod_rules(config)
    carried = _pods_policy(admission_policies(config, namespace="dispatch-system"))["spec"]
    alone = owner_policy(config, owners.PODS)["spec"]
    # The owner rules first, unchanged (a write both refuse is refused naming its owners), then the pod rules.
    assert carried["validations"][: len(alone["validations"])] == alone["validations"]
    assert carried["matchConditions"] == alone["matchConditions"]
    assert carried["variables"][: len(alone["variables"])] == alone["variables"]
    guarded = carried["validations"][len(alone["validations"]) :]
    assert guarded == [
        {**v, "expression": f"!variables.{FIELD_RULES_APPLY} || ({v['expression']})"} for v in rules.validations
    ]
    # Each guard is the pod rules' own policy's match: UPDATE of pods or pods/status, the old pod finalized.
    variables = {v["name"]: v["expression"] for v in carried["variables"]}
    assert variables[FIELD_RULES_APPLY] == (
        'request.operation in ["UPDATE"] && variables.subresource in ["", "status"] && '
        f"(oldObject != null && {json.dumps(POD_FINALIZER)} in oldObject.metadata.?finalizers.orValue([]))"
    )
    for v in rules.variables:
        assert variables[v["name"]] == v["expression"]
    # The break-glass exemption is the owner rule's alone: the pod rules bind break-glass as they did alone.
    assert all("breakGlass" not in v["expression"] for v in guarded)


def test_the_pod_rules_condition_implies_the_owner_policys():
    """Carried, the pod rules judge only writes the owner policy matches: the old pod with dispatch's finalizer
    belongs to a dispatch job (one of ``belongs``'s clauses)."""
    assert f"({json.dumps(POD_FINALIZER)} in oldObject.?metadata.?finalizers.orValue([]))" in owners.PODS.belongs(
        "oldObject"
    )
    assert "oldObject.metadata.?finalizers" in pod_rules(Config()).conditions[0][1]


def test_the_harness_and_the_owner_tests_run_the_owner_rules_alone():
    (policy,) = [p for p in owner_policies(Config()) if p["metadata"]["name"] == owner_policy_name(owners.PODS)]
    assert all(FIELD_RULES_APPLY not in v["expression"] for v in policy["spec"]["validations"])


def test_carried_rules_must_be_of_the_policys_kind_and_resources():
    rules = pod_rules(Config())
    with pytest.raises(ValueError, match="not Job"):
        owner_policy(Config(), owners.JOBS, rules)
    stray = FieldRules(**{**rules.__dict__, "resources": (("", "v1", "pods"), ("", "v1", "configmaps"))})
    with pytest.raises(ValueError, match="not a resource of Pod"):
        owner_policy(Config(), owners.PODS, stray)
    clash = FieldRules(**{**rules.__dict__, "variables": ({"name": "dispatch", "expression": "true"},)})
    with pytest.raises(ValueError, match="variable dispatch differs"):
        owner_policy(Config(), owners.PODS, clash)
