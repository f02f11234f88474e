"""The roles of a cluster under MultiKueue in the webhook and the policies (docs/multicluster.md): MultiKueue's
principal on a worker, and nothing of a dispatch job running on a manager. The policies' behaviour on the API
server is tests/webhook/test_multicluster_policies.py's."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from contract.keys import ANNOTATION_UNVERIFIED, LABEL_REPLICA_OF, UNVERIFIED_TRUE
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL, ROLE_MANAGER, ROLE_SINGLE, ROLE_WORKER
from contract.prologue import PROLOGUE_CONFIGMAP
from harness.fixtures import runtime_copy, trainjob
from tests.harness.kubelet import apply_json_patch
from tests.webhook.test_webhook_rules import DISPATCH, KUEUE, STRANGER, admit, decide, denied_by, request
from webhook import owners
from webhook.admission import mutate
from webhook.config import Config, Principals
from webhook.policies import admission_policies
from webhook.review import User
from webhook.rules.multicluster import MANAGER_AGENT_POLICY, MANAGER_RUNS_NOTHING

MULTIKUEUE = User("multikueue-manager", ())
WORKER = Config(multiclusterRole=ROLE_WORKER, multikueue=Principals(usernames=(MULTIKUEUE.username,)))


def remote(tj: dict[str, Any]) -> dict[str, Any]:
    """MultiKueue's copy on a worker: the manager's object, with its origin label."""
    copied = copy.deepcopy(tj)
    copied["metadata"].setdefault("labels", {})[MULTIKUEUE_ORIGIN_LABEL] = "manager"
    return copied


def remote_trainjob() -> dict[str, Any]:
    tj = remote(trainjob())
    for key in ("uid", "resourceVersion", "creationTimestamp"):
        tj["metadata"].pop(key, None)
    return tj


def test_multikueues_principal_is_a_workers_alone():
    assert WORKER.principals(owners.MULTIKUEUE).includes(MULTIKUEUE)
    assert Config(multiclusterRole=ROLE_MANAGER).principals(owners.MULTIKUEUE) == Principals()
    assert Config().principals(owners.MULTIKUEUE) == Principals()
    for role in (ROLE_SINGLE, ROLE_MANAGER):
        with pytest.raises(ValueError, match="MultiKueue's principal is used on a worker only"):
            Config(multiclusterRole=role, multikueue=Principals(usernames=("x",)))


def test_on_a_worker_multikueue_creates_its_copy_of_a_dispatch_trainjob_marked_unverified_and_suspended():
    req = request("CREATE", remote_trainjob(), user=MULTIKUEUE)
    ops = mutate(req, WORKER).patch
    created = apply_json_patch(req.object, ops)
    assert created["metadata"]["annotations"][ANNOTATION_UNVERIFIED] == UNVERIFIED_TRUE
    assert created["spec"]["suspend"] is True
    assert admit(req, WORKER).allowed
    # Unmarked (dispatch's mutating webhook did not run), or unsuspended, the copy is refused: it could start with
    # an earlier dispatch's A.
    assert denied_by(decide(req, WORKER)) == "creation.multikueue-copy"
    open_copy = copy.deepcopy(created)
    open_copy["spec"]["suspend"] = False
    assert denied_by(decide(request("CREATE", open_copy, user=MULTIKUEUE), WORKER)) == "creation.multikueue-copy"


@pytest.mark.parametrize(
    ("config", "labelled", "marked"), [(WORKER, True, True), (Config(), True, False), (WORKER, False, False)]
)
def test_the_mark_is_put_on_a_worker_on_every_copy_and_only_there(config, labelled, marked):
    tj = remote_trainjob()
    if not labelled:
        tj["metadata"]["labels"].pop(MULTIKUEUE_ORIGIN_LABEL)
    created = apply_json_patch(tj, mutate(request("CREATE", tj, user=DISPATCH), config).patch or [])
    assert (ANNOTATION_UNVERIFIED in created["metadata"]["annotations"]) is marked


def test_a_marked_copy_does_not_start_and_only_dispatch_removes_the_mark():
    marked = remote(trainjob())
    marked["metadata"]["annotations"][ANNOTATION_UNVERIFIED] = UNVERIFIED_TRUE
    marked["spec"]["suspend"] = True
    started = copy.deepcopy(marked)
    started["spec"]["suspend"] = False
    refused = decide(request("UPDATE", started, marked, user=KUEUE), WORKER)
    assert not refused.allowed
    assert "its A to the stamp of its dispatch" in refused.message
    unmarked = copy.deepcopy(marked)
    del unmarked["metadata"]["annotations"][ANNOTATION_UNVERIFIED]
    assert not decide(request("UPDATE", unmarked, marked, user=MULTIKUEUE), WORKER).allowed
    assert not decide(request("UPDATE", unmarked, marked, user=STRANGER), WORKER).allowed
    assert decide(request("UPDATE", unmarked, marked, user=DISPATCH), WORKER).allowed


@pytest.mark.parametrize(
    ("config", "user", "labelled"),
    [
        (Config(), MULTIKUEUE, True),  # one cluster alone: MultiKueue is a stranger
        (WORKER, MULTIKUEUE, False),  # not its copy: no origin label
        (WORKER, STRANGER, True),  # anyone else, with the label
    ],
)
def test_every_other_create_of_a_dispatch_trainjob_but_dispatchs_is_refused(config, user, labelled):
    tj = remote_trainjob()
    if not labelled:
        tj["metadata"]["labels"].pop(MULTIKUEUE_ORIGIN_LABEL)
    assert denied_by(decide(request("CREATE", tj, user=user), config)) == "creation.principal"


def test_after_the_create_multikueue_changes_a_copys_keys_no_more_than_a_stranger():
    old = remote(trainjob())
    new = copy.deepcopy(old)
    new["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission-floor"] = "99"
    assert not decide(request("UPDATE", new, old, user=MULTIKUEUE), WORKER).allowed


def test_on_a_worker_multikueue_creates_its_copy_of_a_dispatch_workload():
    workload = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": "trainjob-dj-01hx0000000000000000000000-s1-abcde",
            "namespace": "team-a",
            "labels": {MULTIKUEUE_ORIGIN_LABEL: "manager"},
            "annotations": {"dispatch.phpboyscout.uk/opened": "true"},
        },
        "spec": {"queueName": "q"},
    }
    kw = {"resource": "workloads", "kind": "Workload", "group": "kueue.x-k8s.io"}
    assert decide(request("CREATE", workload, user=MULTIKUEUE, **kw), WORKER).allowed
    assert not decide(request("CREATE", workload, user=MULTIKUEUE, **kw), Config()).allowed
    unlabelled = copy.deepcopy(workload)
    unlabelled["metadata"]["labels"] = {}
    assert not decide(request("CREATE", unlabelled, user=MULTIKUEUE, **kw), WORKER).allowed


def _names(config: Config) -> set[str]:
    return {d["metadata"]["name"] for d in admission_policies(config, namespace="dispatch-system")}


def test_the_manager_policy_is_a_managers_alone_and_refuses_everyone():
    assert MANAGER_RUNS_NOTHING in _names(Config(multiclusterRole=ROLE_MANAGER))
    assert MANAGER_RUNS_NOTHING not in _names(Config())
    assert MANAGER_RUNS_NOTHING not in _names(WORKER)
    (policy,) = [
        d
        for d in admission_policies(Config(multiclusterRole=ROLE_MANAGER), namespace="dispatch-system")
        if d["metadata"]["name"] == MANAGER_RUNS_NOTHING and d["kind"] == "ValidatingAdmissionPolicy"
    ]
    assert [v["expression"] for v in policy["spec"]["validations"]] == ["false"]
    assert "variables" not in policy["spec"], "no principal is exempt, break-glass included"


def test_the_owner_policies_give_multikueue_only_its_copies():
    docs = admission_policies(WORKER, namespace="dispatch-system")
    variables = [
        v["expression"]
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy"
        for v in d["spec"].get("variables", [])
        if v["name"] == "multikueue"
    ]
    assert len(variables) == 2, "the TrainJobs' and the Workloads' owner policies"
    for expression in variables:
        assert f'["{MULTIKUEUE.username}"]' in expression
        assert expression.count(MULTIKUEUE_ORIGIN_LABEL) == 2, "on the object and on its old version"


# -- The manager's dispatch agent on a worker: the replicas of runtime copies (docs/multicluster.md) ------------

MANAGER_AGENT = User("manager-agent", ())
AGENT_ON_A_WORKER = WORKER.model_copy(update={"manager_agent": Principals(usernames=(MANAGER_AGENT.username,))})
RUNTIMES = {"resource": "trainingruntimes", "kind": "TrainingRuntime"}


def a_replica() -> dict[str, Any]:
    made = runtime_copy()
    made["metadata"]["labels"][LABEL_REPLICA_OF] = "5f0c1e8a-0000-4000-8000-000000000001"
    for key in ("uid", "resourceVersion", "creationTimestamp", "ownerReferences"):
        made["metadata"].pop(key, None)
    return made


def test_the_manager_agent_s_principal_is_a_worker_s_alone():
    assert AGENT_ON_A_WORKER.principals(owners.MANAGER_AGENT).includes(MANAGER_AGENT)
    assert Config().principals(owners.MANAGER_AGENT) == Principals()
    for role in (ROLE_SINGLE, ROLE_MANAGER):
        with pytest.raises(ValueError, match="managerAgent is set, but multiclusterRole is"):
            Config(multiclusterRole=role, managerAgent=Principals(usernames=("x",)))


def test_on_a_worker_the_manager_agent_creates_a_replica_under_the_runtime_copy_s_rules():
    assert decide(request("CREATE", a_replica(), user=MANAGER_AGENT, **RUNTIMES), AGENT_ON_A_WORKER).allowed
    # The copy's rules bind it as they bind dispatch: a replica that could repeat an identity is refused.
    restarting = a_replica()
    restarting["spec"]["template"]["spec"]["failurePolicy"] = {"restartStrategy": "InPlaceRestart"}
    assert not decide(request("CREATE", restarting, user=MANAGER_AGENT, **RUNTIMES), AGENT_ON_A_WORKER).allowed


@pytest.mark.parametrize(
    ("config", "user", "labelled"),
    [
        (Config(), MANAGER_AGENT, True),  # one cluster alone: the manager's agent is a stranger
        (AGENT_ON_A_WORKER, MANAGER_AGENT, False),  # not a replica: no replica-of label
        (AGENT_ON_A_WORKER, STRANGER, True),  # anyone else, with the label
    ],
)
def test_every_other_create_of_a_runtime_copy_but_dispatch_s_is_refused(config, user, labelled):
    made = a_replica()
    if not labelled:
        made["metadata"]["labels"].pop(LABEL_REPLICA_OF)
    assert denied_by(decide(request("CREATE", made, user=user, **RUNTIMES), config)) == "creation.principal"


def test_on_a_worker_the_manager_agent_s_own_policy_confines_it_to_replicas_and_the_prologue():
    (policy,) = [
        d
        for d in admission_policies(AGENT_ON_A_WORKER, namespace="dispatch-system")
        if d["metadata"]["name"] == MANAGER_AGENT_POLICY and d["kind"] == "ValidatingAdmissionPolicy"
    ]
    (condition,) = policy["spec"]["matchConditions"]
    assert f'["{MANAGER_AGENT.username}"]' in condition["expression"]
    (rule,) = policy["spec"]["validations"]
    assert LABEL_REPLICA_OF in rule["expression"]
    assert PROLOGUE_CONFIGMAP in rule["expression"]
    (binding,) = [
        d
        for d in admission_policies(AGENT_ON_A_WORKER, namespace="dispatch-system")
        if d["metadata"]["name"] == MANAGER_AGENT_POLICY and d["kind"] == "ValidatingAdmissionPolicyBinding"
    ]
    assert "matchResources" not in binding["spec"], "every namespace, kube-system included"
    assert MANAGER_AGENT_POLICY not in _names(WORKER), "no principal for it, no policy"
    assert MANAGER_AGENT_POLICY not in _names(Config())
