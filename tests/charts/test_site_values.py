"""The site's values (scheduling, labels, extra arguments and environment, the user, the quota, leader
election, the webhook's timeout) as the real helm renders them, and what the schema and the chart refuse.
tests/charts/test_on_the_api_server.py dry-runs every value set (custom.yaml turns these on) on a real API
server."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from agent.config import ConfigError
from agent.config import load_config as load_agent_config
from tests.charts.helm import template, template_error
from tests.charts.sets import rendered, value_set
from tests.charts.test_render import config_file, containers, load, parse_args, pod_spec

SELECTOR = {"app.kubernetes.io/name": "dispatch-k8s", "app.kubernetes.io/instance": "dispatch-k8s"}


def test_common_labels_are_on_every_object_and_the_pods_but_not_the_selector():
    r = rendered("custom")
    for doc in r.docs:
        labels = doc["metadata"]["labels"]
        assert labels["example.com/cost-centre"] == "ml", f"{doc['kind']} {doc['metadata']['name']}"
    deployment = r.one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert pod_labels["example.com/cost-centre"] == "ml"
    assert pod_labels["team"] == "platform", "podLabels win over commonLabels on the pods"
    assert r.one("Service")["metadata"]["labels"]["team"] == "platform-core"
    assert set(deployment["spec"]["selector"]["matchLabels"]) == set(SELECTOR)


@pytest.mark.parametrize("key", ["app.kubernetes.io/name", "app.kubernetes.io/instance", "helm.sh/chart"])
@pytest.mark.parametrize("where", ["commonLabels", "podLabels"])
def test_the_recommended_labels_cannot_be_overridden(key, where):
    error = template_error({where: {key: "x"}})
    assert f"invalid propertyName '{key}'" in error, error


def test_affinity_is_added_to_the_preset_anti_affinity():
    spec = pod_spec(rendered("custom"))
    affinity = spec["affinity"]
    assert set(affinity) == {"nodeAffinity", "podAntiAffinity"}
    (term,) = affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "node-role.example.com/control", "operator": "Exists"}]
    assert "requiredDuringSchedulingIgnoredDuringExecution" in affinity["podAntiAffinity"], "the preset stays"


def test_ones_own_pod_anti_affinity_needs_the_preset_off():
    own = {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                                           "labelSelector": {"matchLabels": {"x": "web"}}}}]}  # fmt: skip
    error = template_error({"affinity": {"podAntiAffinity": own}})
    assert "set podAntiAffinity to none to give your own" in error, error
    spec = pod_spec(template({"podAntiAffinity": "none", "affinity": {"podAntiAffinity": own}}))
    assert spec["affinity"] == {"podAntiAffinity": own}


def test_topology_spread_selects_the_releases_pods_unless_told_otherwise():
    (constraint,) = pod_spec(rendered("custom"))["topologySpreadConstraints"]
    assert constraint == {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "minDomains": 2,
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "dispatch-k8s", "app.kubernetes.io/instance": "dispatch-k8s"}},
    }  # fmt: skip
    own = {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
           "labelSelector": {"matchLabels": {"a": "b"}}}  # fmt: skip
    (constraint,) = pod_spec(template({"topologySpreadConstraints": [own]}))["topologySpreadConstraints"]
    assert constraint == own
    assert "topologySpreadConstraints" not in pod_spec(rendered("defaults"))


def test_extra_args_and_env_reach_their_container_and_its_parser():
    c = containers(rendered("custom"))
    assert c["agent"]["args"][-1] == "--workers=6"
    assert parse_args(c["agent"]).workers == 6, "the last flag wins"
    assert parse_args(c["certs"]).ip == ["192.0.2.10"]
    assert {"name": "PYTHONFAULTHANDLER", "value": "1"} in c["webhook"]["env"]
    env = {e["name"]: e for e in c["agent"]["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert "POD_NAME" in env, "the chart's own variables stay"
    assert "env" not in containers(rendered("defaults"))["webhook"]


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"webhook": {"extraArgs": ["workers=3"]}}, "/webhook/extraArgs/0"),
        ({"agent": {"extraEnv": [{"name": "X", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "a"}}}]}},
         "/agent/extraEnv/0"),
        ({"certs": {"extraEnv": [{"name": "X", "valueFrm": {}}]}}, "valueFrm"),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "Never"}]},
         "/topologySpreadConstraints/0/whenUnsatisfiable"),
        ({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "z", "whenUnsatisfiable": "ScheduleAnyway",
                                         "maxskew": 2}]}, "maxskew"),
        ({"affinity": {"nodeAfinity": {}}}, "nodeAfinity"),
        ({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}}]}}},
         "topologyKey"),
        ({"resourceQuota": {"enabled": True, "pod": 3}}, "pod"),
        ({"webhook": {"timeoutSeconds": 31}}, "/webhook/timeoutSeconds"),
        ({"agent": {"lease": {"durationSeconds": "15s"}}}, "/agent/lease/durationSeconds"),
        ({"securityContext": {"runAsUser": 0}}, "/securityContext/runAsUser"),
    ],
)  # fmt: skip
def test_the_schema_refuses_bad_site_values_naming_them(values, named):
    error = template_error(values)
    assert named in error, error


def test_the_user_and_group_may_be_left_to_the_platform():
    r = template(value_set("openshift"))
    pods = [pod_spec(r)] + [j["spec"]["template"]["spec"] for j in r.of("Job")] + [p["spec"] for p in r.of("Pod")]
    for spec in pods:
        assert not {"runAsUser", "runAsGroup"} & set(spec["securityContext"])
        assert spec["securityContext"]["runAsNonRoot"] is True
        for container in spec.get("initContainers", []) + spec["containers"]:
            assert not {"runAsUser", "runAsGroup"} & set(container["securityContext"]), container["name"]
            assert container["securityContext"]["runAsNonRoot"] is True
    one = pod_spec(template({"securityContext": {"runAsGroup": None}}))["securityContext"]
    assert one["runAsUser"] == 65532
    assert "runAsGroup" not in one


def test_the_resource_quota_admits_the_priority_class_in_the_release_namespace():
    r = rendered("custom")
    quota = r.one("ResourceQuota")
    assert quota["metadata"]["namespace"] == r.namespace
    assert quota["spec"] == {
        "hard": {"pods": "8"},
        "scopeSelector": {
            "matchExpressions": [
                {"scopeName": "PriorityClass", "operator": "In", "values": ["system-cluster-critical"]}
            ]
        },
    }
    assert pod_spec(r)["priorityClassName"] == "system-cluster-critical"
    assert not rendered("defaults").of("ResourceQuota")
    error = template_error({"resourceQuota": {"enabled": True}})
    assert "resourceQuota.enabled needs priorityClassName" in error, error


def test_the_webhooks_timeout_is_every_webhooks():
    for name, seconds, values in (
        ("defaults", 5, None),
        ("custom", 10, None),
        ("without the policies", 7, {"webhook": {"timeoutSeconds": 7}, "admissionPolicies": {"enabled": False}}),
    ):
        r = template(values) if values else rendered(name)
        hooks = [h for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
                 for h in r.one(kind)["webhooks"]]  # fmt: skip
        # With the policies (helm template serves no MutatingAdmissionPolicy): the creates of TrainJobs and runtime
        # copies, the create that closes, the record of A at an unsuspend. Without: the writes the policies would
        # judge too (TrainJobs, runtime copies, Workloads, JobSets).
        assert len(hooks) == (8 if values else 4), name
        assert {h["timeoutSeconds"] for h in hooks} == {seconds}, name


def _agent_config(r: Any, tmp_path) -> Any:
    agent = containers(r)["agent"]
    return load(tmp_path, config_file(r, agent, parse_args(agent).config), load_agent_config)


def test_leader_election_timings_reach_the_agents_config(tmp_path):
    config = _agent_config(rendered("custom"), tmp_path)
    assert (config.lease_duration_seconds, config.renew_deadline_seconds) == (30, 20)
    assert (config.renew_period_seconds, config.retry_period_seconds) == (8, 4)
    defaults = _agent_config(rendered("defaults"), tmp_path)
    assert (defaults.lease_duration_seconds, defaults.renew_deadline_seconds) == (15, 10)


@pytest.mark.parametrize(
    ("lease", "says"),
    [
        ({"durationSeconds": 10}, "renewDeadlineSeconds (10) must be less than agent.lease.durationSeconds (10)"),
        ({"retryPeriodSeconds": 10}, "must be less than renewDeadlineSeconds (10)"),
        ({"renewPeriodSeconds": 12}, "must be less than renewDeadlineSeconds (10)"),
    ],
)
def test_timings_that_let_two_lead_are_refused_by_the_chart_as_by_the_agent(lease, says, tmp_path):
    error = template_error({"agent": {"lease": lease}})
    assert says in error, error
    # The agent refuses the same config file (the chart's check mirrors agent/config.py's).
    keys = {"durationSeconds": "leaseDurationSeconds"}
    text = yaml.safe_dump({keys.get(k, k): v for k, v in lease.items()})
    with pytest.raises(ConfigError, match="must be less than"):
        load(tmp_path, text, load_agent_config)


def _notes(values: dict[str, Any], namespace: str) -> str:
    from tests.charts.helm import CHART, _values_args, run_helm

    out = run_helm("install", "r", str(CHART), "--dry-run=client", "--namespace", namespace,
                   *_values_args(values)).stdout  # fmt: skip
    return out.split("NOTES:", 1)[1]


def test_the_notes_warn_when_the_lease_is_not_where_the_supervisor_looks():
    assert "WARNING: the agent's Lease" not in _notes({}, "dispatch-system")
    notes = _notes({}, "ml-platform")
    assert "WARNING: the agent's Lease is ml-platform/dispatch-admission, not in dispatch-system" in notes
    assert "https://r-dispatch-k8s.ml-platform.svc:8443" in notes
    assert "WARNING: the agent's Lease" not in _notes({"agent": {"lease": {"namespace": "dispatch-system"}}}, "x")
