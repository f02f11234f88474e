"""The chart's MultiKueue roles (multicluster.role, multicluster.multikueue) and api.minDispatches, as the real
helm renders them: into the webhook's and the agent's config files, read by their own loaders, and into the
policies, compared with the Python generators' for the same config (docs/multicluster.md, docs/install.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent.config import load_config as load_agent_config
from agent.multicluster.worker_reads import CONTACT_RULES, WORKER_RULES
from contract.multicluster import DEFAULT_MIN_DISPATCHES, ROLE_MANAGER, ROLE_SINGLE, ROLE_WORKER
from tests.charts.helm import Rendered, template, template_error
from tests.charts.test_render import config_file, containers, fullname, load, parse_args, without_labels
from webhook.config import Config, Principals
from webhook.config import load_config as load_webhook_config
from webhook.policies import admission_policies
from webhook.rules.multicluster import (
    MANAGER_AGENT_POLICY,
    MANAGER_CONTACT_POLICY,
    MANAGER_RUNS_NOTHING,
    mark_copy_policy,
)
from webhook.rules.record_start import record_start_policy

MULTIKUEUE_USER = "multikueue-manager"
WORKER = {"multicluster": {"role": ROLE_WORKER, "multikueue": {"usernames": [MULTIKUEUE_USER], "groups": []}}}
MANAGER = {"multicluster": {"role": ROLE_MANAGER}}


def _webhook_config(r: Rendered, tmp_path: Path) -> Config:
    webhook = containers(r)["webhook"]
    return load(tmp_path, config_file(r, webhook, parse_args(webhook).config), load_webhook_config)


def _agent_config(r: Rendered, tmp_path: Path) -> Any:
    agent = containers(r)["agent"]
    return load(tmp_path, config_file(r, agent, parse_args(agent).config), load_agent_config)


def _policies(r: Rendered) -> dict[tuple[str, str], Any]:
    got = r.of("ValidatingAdmissionPolicy") + r.of("ValidatingAdmissionPolicyBinding")
    return {(d["kind"], d["metadata"]["name"]): without_labels(d) for d in got}


def _expected(r: Rendered, config: Config) -> dict[tuple[str, str], Any]:
    docs = [d for d in admission_policies(config, namespace=r.namespace) if d["kind"].startswith("Validating")]
    for doc in docs:
        doc["metadata"]["name"] = doc["metadata"]["name"].replace("dispatch-k8s", fullname(r), 1)
        if "policyName" in doc["spec"]:
            doc["spec"]["policyName"] = doc["spec"]["policyName"].replace("dispatch-k8s", fullname(r), 1)
    return {(d["kind"], d["metadata"]["name"]): without_labels(d) for d in docs}


@pytest.mark.parametrize(
    ("values", "role", "multikueue"),
    [
        ({}, ROLE_SINGLE, Principals()),
        (MANAGER, ROLE_MANAGER, Principals()),
        (WORKER, ROLE_WORKER, Principals(usernames=(MULTIKUEUE_USER,))),
    ],
)
def test_the_role_reaches_the_webhook_and_the_agent_and_the_policies_are_the_generators_for_it(
    values, role, multikueue, tmp_path
):
    r = template(values)
    webhook = _webhook_config(r, tmp_path)
    assert webhook.multicluster_role == role
    assert webhook.multikueue == multikueue
    assert _agent_config(r, tmp_path).multicluster_role == role
    expected = _expected(r, Config(dispatch=webhook.dispatch, kueue=webhook.kueue, multiclusterRole=role,
                                   multikueue=multikueue))  # fmt: skip
    assert _policies(r) == expected
    # The MutatingAdmissionPolicy record-start too (rendered where the API server serves it): in role worker it
    # records the start of MultiKueue's copy without raising A; and there only, mark-copy.
    served = template(values, extra=["--api-versions", MAP_CAPABILITY])
    mutating = {(d["kind"], d["metadata"]["name"]): without_labels(d)
                for d in served.of("MutatingAdmissionPolicy") + served.of("MutatingAdmissionPolicyBinding")}  # fmt: skip
    assert mutating == _mutating_expected(r, role)


MAP_CAPABILITY = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


def _mutating_expected(r: Rendered, role: str) -> dict[tuple[str, str], Any]:
    docs = record_start_policy(r.namespace, role) + (mark_copy_policy(r.namespace) if role == ROLE_WORKER else [])
    for doc in docs:
        doc["metadata"]["name"] = doc["metadata"]["name"].replace("dispatch-k8s", fullname(r), 1)
        if "policyName" in doc["spec"]:
            doc["spec"]["policyName"] = doc["spec"]["policyName"].replace("dispatch-k8s", fullname(r), 1)
    return {(d["kind"], d["metadata"]["name"]): without_labels(d) for d in docs}


def test_only_a_manager_renders_the_policy_that_refuses_a_dispatch_jobs_jobset_job_and_pod():
    name = MANAGER_RUNS_NOTHING  # the release dispatch-k8s: the generators' names
    for values, rendered in (({}, False), (WORKER, False), (MANAGER, True)):
        r = template(values)
        names = {p["metadata"]["name"] for p in r.of("ValidatingAdmissionPolicy")}
        bindings = {b["spec"]["policyName"] for b in r.of("ValidatingAdmissionPolicyBinding")}
        assert (name in names, name in bindings) == (rendered, rendered), values
    policy = template(MANAGER).one("ValidatingAdmissionPolicy", name)
    rules = policy["spec"]["matchConstraints"]["resourceRules"]
    assert {(r["apiGroups"][0], r["resources"][0], tuple(r["operations"])) for r in rules} == {
        ("jobset.x-k8s.io", "jobsets", ("CREATE",)),
        ("batch", "jobs", ("CREATE",)),
        ("", "pods", ("CREATE",)),
    }
    assert "breakGlass" not in str(policy), "refused to everyone, break-glass too"


def test_multikueues_principal_is_nobody_outside_role_worker():
    """The owner policies' multikueue variable lists the principal in role worker only."""

    def multikueue_variables(r: Rendered) -> list[str]:
        return [
            v["expression"]
            for p in r.of("ValidatingAdmissionPolicy")
            for v in p["spec"].get("variables", [])
            if v["name"] == "multikueue"
        ]

    worker = multikueue_variables(template(WORKER))
    assert worker
    assert all(f'["{MULTIKUEUE_USER}"]' in e for e in worker)
    single = multikueue_variables(template({}))
    assert single
    assert all(MULTIKUEUE_USER not in e and "username in []" in e for e in single)


def test_min_dispatches_reaches_the_agents_api_settings(tmp_path):
    assert _agent_config(template({}), tmp_path).api.min_dispatches == DEFAULT_MIN_DISPATCHES
    assert _agent_config(template({"api": {"minDispatches": 5}}), tmp_path).api.min_dispatches == 5


def test_a_manager_s_agent_reads_kueue_s_configuration_where_the_values_say_and_may_get_only_that_configmap(tmp_path):
    """Preflight proves workerContactSeconds below Kueue's workerLostTimeout from Kueue's ConfigMap (agent/multicluster/kueue_config.py):
    the agent's config names it, and a Role in Kueue's namespace grants get on exactly it, on a manager only."""
    where = {"namespace": "kq", "name": "kueue-config", "key": "config.yaml"}
    r = template({"multicluster": {"role": ROLE_MANAGER, "kueueConfig": where}})
    assert _agent_config(r, tmp_path).api.kueue_config.model_dump() == where
    (role,) = [d for d in r.of("Role") if d["metadata"]["name"] == f"{fullname(r)}-kueue-config"]
    assert role["metadata"]["namespace"] == "kq"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["kueue-config"],
                              "verbs": ["get"]}]  # fmt: skip
    (binding,) = [d for d in r.of("RoleBinding") if d["metadata"]["name"] == f"{fullname(r)}-kueue-config"]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    default = _agent_config(template(MANAGER), tmp_path).api.kueue_config
    assert (default.namespace, default.name, default.key) == (
        "kueue-system", "kueue-manager-config", "controller_manager_config.yaml"
    )  # fmt: skip
    for values in ({}, WORKER):
        assert not [d for d in template(values).of("Role") if d["metadata"]["name"].endswith("-kueue-config")]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"multicluster": {"role": "primary"}}, "/multicluster/role"),
        ({"multicluster": {"role": "Manager"}}, "/multicluster/role"),
        ({"multicluster": {"multikueue": {"users": ["x"]}}}, "'users'"),
        ({"api": {"minDispatches": 0}}, "/api/minDispatches"),
        ({"api": {"minDispatches": "many"}}, "/api/minDispatches"),
    ],
)
def test_the_schema_refuses_a_bad_value_naming_it(values, named):
    error = template_error(values)
    assert named in error, error


def test_a_worker_without_multikueues_principal_is_refused_naming_the_value():
    error = template_error({"multicluster": {"role": ROLE_WORKER}})
    assert "multicluster.role worker needs multicluster.multikueue.usernames or groups" in error, error


@pytest.mark.parametrize("role", [ROLE_SINGLE, ROLE_MANAGER])
def test_multikueues_principal_outside_role_worker_is_refused_naming_the_value(role):
    error = template_error({"multicluster": {"role": role, "multikueue": {"usernames": ["x"], "groups": []}}})
    assert f'multicluster.multikueue is set, but multicluster.role is "{role}"' in error, error


MANAGER_AGENT_USER = "dispatch-manager-agent"
WORKER_WITH_AGENT = {
    "multicluster": {**WORKER["multicluster"], "managerAgent": {"usernames": [MANAGER_AGENT_USER], "groups": []}}
}


def _normalized(rules: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    return sorted(
        (tuple(r["apiGroups"]), tuple(r["resources"]), tuple(r["verbs"]), tuple(r.get("resourceNames", ())))
        for r in rules
    )


def test_on_a_worker_the_manager_agent_gets_exactly_its_rules_and_its_own_policy(tmp_path):
    """multicluster.managerAgent on a worker: bound to exactly agent.multicluster.worker_reads.WORKER_RULES (the rights the tests
    run the manager's agent under), a principal in the webhook's config, and the policies the generators make for
    it, the manager agent's own included."""
    r = template(WORKER_WITH_AGENT)
    role = r.one("ClusterRole", f"{fullname(r)}-manager-agent")
    assert _normalized(role["rules"]) == _normalized([dict(rule) for rule in WORKER_RULES])
    binding = r.one("ClusterRoleBinding", f"{fullname(r)}-manager-agent")
    assert [s["name"] for s in binding["subjects"]] == [MANAGER_AGENT_USER]
    # Its contact Lease: in the agent's Lease namespace only, and the worker's agent may read it there.
    contact = r.one("Role", f"{fullname(r)}-manager-contact")
    assert contact["metadata"]["namespace"] == r.namespace
    assert _normalized(contact["rules"]) == _normalized([dict(rule) for rule in CONTACT_RULES])
    bound = r.one("RoleBinding", f"{fullname(r)}-manager-contact")
    assert [s["name"] for s in bound["subjects"]] == [MANAGER_AGENT_USER]
    lease_rules = r.one("Role", f"{fullname(r)}-lease")["rules"]
    # The worker's agent reads the contact Lease and lists the claims, named per job (agent/multicluster/claims.py).
    assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list"]} in lease_rules
    assert ("ValidatingAdmissionPolicy", f"{fullname(r)}{MANAGER_CONTACT_POLICY[len('dispatch-k8s') :]}") in (
        _policies(r)
    )
    webhook = _webhook_config(r, tmp_path)
    assert webhook.manager_agent == Principals(usernames=(MANAGER_AGENT_USER,))
    expected = _expected(r, Config(dispatch=webhook.dispatch, kueue=webhook.kueue, multiclusterRole=ROLE_WORKER,
                                   multikueue=webhook.multikueue, managerAgent=webhook.manager_agent))  # fmt: skip
    assert _policies(r) == expected
    assert ("ValidatingAdmissionPolicy", f"{fullname(r)}{MANAGER_AGENT_POLICY[len('dispatch-k8s') :]}") in expected
    # Without the principal, neither the ClusterRole nor the policy.
    plain = template(WORKER)
    assert not [d for d in plain.of("ClusterRole") if d["metadata"]["name"].endswith("-manager-agent")]
    assert not [d for d in plain.of("ValidatingAdmissionPolicy") if d["metadata"]["name"].endswith("-manager-agent")]
    assert not [d for d in plain.of("Role") if d["metadata"]["name"].endswith("-manager-contact")]


@pytest.mark.parametrize(("values", "deletes"), [({}, False), (MANAGER, False), (WORKER, True)])
def test_only_on_a_worker_may_the_agent_delete_trainjobs(values, deletes):
    """The agent deletes MultiKueue's copy made from a stale view of the manager's TrainJob (agent/multicluster/copies.py), and
    only on a worker: elsewhere it never deletes a TrainJob."""
    r = template(values)
    rules = r.one("ClusterRole", f"{fullname(r)}-agent")["rules"]
    verbs = {v for rule in rules if "trainjobs" in rule["resources"] for v in rule["verbs"]}
    assert ("delete" in verbs) is deletes
    assert {"get", "list", "watch", "patch"} <= verbs
