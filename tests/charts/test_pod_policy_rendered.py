"""The chart as helm renders it: one owner policy matches each pod write, in every role (the API server converts a pod
for CEL once per policy that matches the write; docs/performance.md), and it carries the pod rules; beside it only
``dependents``, on the pod's own create and update."""

from __future__ import annotations

import pytest

from contract.multicluster import ROLE_MANAGER, ROLE_SINGLE, ROLE_WORKER
from tests.charts.helm import template
from tests.webhook.test_pod_policies import POD_WRITES, matching

ROLES = {
    ROLE_SINGLE: {},
    ROLE_WORKER: {"multicluster": {"role": ROLE_WORKER, "multikueue": {"usernames": ["mk"], "groups": []}}},
    ROLE_MANAGER: {"multicluster": {"role": ROLE_MANAGER}},
}


@pytest.mark.parametrize("role", list(ROLES))
def test_one_rendered_policy_matches_each_pod_write_and_it_carries_the_pod_rules(role):
    r = template(ROLES[role])
    policies = r.of("ValidatingAdmissionPolicy")
    for operation, sub in POD_WRITES:
        names = matching(policies, "", "pods", sub, operation)
        expected = ["dispatch-k8s-owners-pods"]
        # Beside it, on the pod itself (never a subresource), the policy on strangers' blocking owner references,
        # which matches every namespaced object's create and update (docs/performance.md measures the cost).
        if (operation, sub) in (("CREATE", ""), ("UPDATE", "")):
            expected.append("dispatch-k8s-dependents")
        if role == ROLE_MANAGER and (operation, sub) == ("CREATE", ""):
            expected.append("dispatch-k8s-manager-runs-nothing")
        assert names == expected, (operation, sub, names)
    (pods,) = [p for p in policies if p["metadata"]["name"] == "dispatch-k8s-owners-pods"]
    messages = [v.get("message", "") for v in pods["spec"]["validations"]]
    assert any(m.startswith("only dispatch removes its finalizer") for m in messages), messages
