"""The policy that keeps strangers from pinning a dispatch job's objects (webhook/dependents.py), as rendered: what it
matches, which references it judges, and who it lets make them. tests/webhook/test_dependents_on_the_api_server.py holds it on the
real API server; tests/agent/api/test_stop_pinned.py shows Stop completing under it."""

from __future__ import annotations

import re

import pytest

from webhook import dependents, owners
from webhook.config import Config
from webhook.dependents import DEPENDENTS, OWNED, dependents_policy, match_condition
from webhook.policies import admission_policies

NAMES = {
    owners.NAME_PATTERN: "dj-01m8teswbywsp6rmqspyn2dsqq-s1",
    owners.CHILD_NAME_PATTERN: "dj-01m8teswbywsp6rmqspyn2dsqq-s1-node-0-0-x7k2p",
    owners.WORKLOAD_NAME_PATTERN: "trainjob-dj-01m8teswbywsp6rmqspyn2dsqq-s1-3f2a1",
}


def _owned(kind: owners.Kind) -> dependents.Owned:
    (owned,) = [o for o in OWNED if o.kind is kind]
    return owned


def test_every_kind_a_stop_deletes_is_judged():
    """The job's objects the garbage collector deletes after the TrainJob, and the TrainJob: each a possible owner."""
    judged = {o.kind.resource for o in OWNED}
    assert judged == {k.resource for k in owners.KINDS} - {owners.PROLOGUES.resource}


@pytest.mark.parametrize("owned", OWNED, ids=[o.kind.kind for o in OWNED])
def test_the_match_condition_lets_every_name_of_the_kind_through(owned: dependents.Owned):
    """The match condition tests names by their start only: every name the pattern accepts starts so."""
    name = NAMES[owned.pattern]
    assert re.search(owned.pattern, name), (owned.pattern, name)
    assert f'.startsWith("{dependents._prefix(owned.pattern)}")' in match_condition()
    assert name.startswith(dependents._prefix(owned.pattern))


def test_each_creator_of_a_child_makes_dependents_of_its_parent():
    """Whoever the owner table lets create a kind whose controller is another of the job's objects makes that
    object's dependents: JobSet's Jobs, the Job controller's pods, Trainer's JobSet and Kueue's Workload."""
    parents = [
        (owners.JOBS, owners.JOBSETS),
        (owners.PODS, owners.JOBS),
        (owners.JOBSETS, owners.TRAINJOBS),
        (owners.WORKLOADS, owners.TRAINJOBS),
    ]
    for child, parent in parents:
        creators = set(child.writes[("CREATE", "")]) - {owners.MULTIKUEUE}  # MultiKueue's copies carry no references
        assert creators <= set(_owned(parent).makers), (child.kind, parent.kind)


def test_only_the_components_that_make_dependents_are_named():
    makers = {o.kind.kind: set(o.makers) for o in OWNED}
    assert makers == {
        "TrainJob": {owners.DISPATCH, owners.KUEUE, owners.TRAINER},
        "TrainingRuntime": {owners.DISPATCH},
        "JobSet": {owners.JOBSET},
        "Job": {owners.JOB_CONTROLLER},
        "Pod": {owners.JOB_CONTROLLER},
        "Workload": {owners.KUEUE},
    }
    assert _owned(owners.PODS).usernames == (
        "system:serviceaccount:kube-system:ephemeral-volume-controller",
        "system:serviceaccount:kube-system:resource-claim-controller",
    )


def test_it_matches_every_namespaced_create_and_update_and_nothing_else():
    rules = dependents_policy(Config())["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["CREATE", "UPDATE"],
         "scope": "Namespaced"}
    ]  # fmt: skip


def test_only_blocking_references_are_judged_and_only_new_ones():
    """A reference that does not block holds nothing; one already in the old object, unchanged, was judged when
    it was made (or before the policy), so the controllers' own updates and the garbage collector's pass."""
    condition = match_condition()
    assert "r.?blockOwnerDeletion.orValue(false) == true" in condition
    assert "oldObject == null || oldObject.?metadata.?ownerReferences.orValue([]) != " in condition
    assert dependents.ADDED.endswith(
        "!(oldObject != null && oldObject.metadata.?ownerReferences.orValue([]).exists(o, o == r)))"
    )


def test_each_kind_is_refused_to_all_but_its_makers_and_break_glass():
    policy = dependents_policy(Config())
    validations = {v["expression"].split("(variables.")[1].split(")")[0]: v for v in policy["spec"]["validations"]}
    assert set(validations) == {f"to{o.kind.kind}" for o in OWNED}
    for owned in OWNED:
        expression = validations[f"to{owned.kind.kind}"]["expression"]
        allowed = expression.split(" || ", 1)[1]
        assert set(re.findall(r"variables\.(\w+)", allowed)) == {*owned.makers, owners.BREAK_GLASS}, expression
        assert all(u in allowed for u in owned.usernames), expression


def test_the_refusal_says_what_it_holds_and_what_to_do():
    policy = dependents_policy(Config())
    message = policy["spec"]["validations"][0]["messageExpression"]
    assert "its owner reference to TrainJob" in message
    assert dependents.PINS in message
    assert (
        "such a reference to a dispatch job's TrainJob is made only by dispatch, Kueue, Trainer (or break-glass)"
        in message
    )
    assert "Set blockOwnerDeletion to false" in message


def test_the_chart_renders_it_with_the_owner_policies_and_bound_like_them():
    docs = admission_policies(Config(), namespace="dispatch-system")
    names = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert ("ValidatingAdmissionPolicy", DEPENDENTS) in names
    (binding,) = [
        d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding" and d["spec"]["policyName"] == DEPENDENTS
    ]
    selector = binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"][0]
    assert selector["operator"] == "NotIn"
    assert set(selector["values"]) == {"kube-system", "dispatch-system"}
    # Without the owner policies (the field rules' own tests, where one ServiceAccount plays an owner), without it.
    alone = admission_policies(Config(), namespace="dispatch-system", owners_too=False)
    assert DEPENDENTS not in {d["metadata"]["name"] for d in alone}
