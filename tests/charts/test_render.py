"""The chart as the real helm renders it: lint, and what every value set must render.

The rendered objects are checked against the code they configure: container arguments are parsed by the
commands' own argument parsers, the config files by the servers' own loaders, the webhook configurations
and policies compared with the Python generators' output, the names with contract/keys.py.
"""

from __future__ import annotations

import argparse
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent import cli as agent_cli
from agent.api.rbac import AGENT_RULES, PREFLIGHT_RULES, SUPERVISOR_RULES
from agent.config import load_config as load_agent_config
from certs import cli as certs_cli
from certs import lifecycle
from certs.injection import LABEL, LABEL_VALUE
from contract.keys import ADMISSION_CHECK_CONTROLLER, ADMISSION_CHECK_NAME, LEASE_NAME
from contract.prologue import PROLOGUE_CONFIGMAP
from tests.charts.helm import CHART, ROOT, Rendered, run_helm, template, template_error
from tests.charts.sets import VALUE_SETS, VALUES_DIR, rendered, value_set
from webhook import cli as webhook_cli
from webhook.config import Config, Owners, Principals
from webhook.config import load_config as load_webhook_config
from webhook.configurations import webhook_configurations
from webhook.policies import admission_policies

PARSERS = {
    "dispatch-webhook": webhook_cli._parser,
    "dispatch-agent": agent_cli._parser,
    "dispatch-certs": certs_cli._parser,
}
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "ValidatingWebhookConfiguration",
    "MutatingWebhookConfiguration",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "AdmissionCheck",
}


# --- helpers -------------------------------------------------------------------------------------------


def fullname(r: Rendered) -> str:
    return r.one("Deployment")["metadata"]["name"]


def pod_spec(r: Rendered) -> dict[str, Any]:
    return r.one("Deployment")["spec"]["template"]["spec"]


def containers(r: Rendered) -> dict[str, dict[str, Any]]:
    spec = pod_spec(r)
    return {c["name"]: c for c in spec.get("initContainers", []) + spec["containers"]}


def parse_args(container: dict[str, Any]) -> argparse.Namespace:
    """The container's arguments as its own command parses them (an unknown flag fails the test)."""
    (command,) = container["command"]
    try:
        return PARSERS[command]().parse_args(container["args"])
    except SystemExit:
        pytest.fail(f"{command} refuses the chart's arguments {container['args']}")


def port(container: dict[str, Any], name: str) -> int:
    (found,) = [p["containerPort"] for p in container.get("ports", []) if p["name"] == name]
    return found


def mount_of(container: dict[str, Any], path: str) -> dict[str, Any]:
    """The volume mount that holds ``path``."""
    mounts = [m for m in container.get("volumeMounts", []) if Path(path).is_relative_to(m["mountPath"])]
    assert len(mounts) == 1, f"{container['name']}: {path} is not on exactly one mount"
    return mounts[0]


def volume(r: Rendered, name: str) -> dict[str, Any]:
    (found,) = [v for v in pod_spec(r)["volumes"] if v["name"] == name]
    return found


def config_file(r: Rendered, container: dict[str, Any], path: str) -> str:
    """The text of a config file as the container sees it: through its mount, from the ConfigMap."""
    mount = mount_of(container, path)
    configmap = volume(r, mount["name"])["configMap"]["name"]
    key = str(Path(path).relative_to(mount["mountPath"]))
    return r.one("ConfigMap", configmap)["data"][key]


def load(tmp_path: Path, text: str, loader: Any) -> Any:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return loader(path)


def without_labels(doc: Any) -> Any:
    """The object without its labels, and with every selector's values sorted (the generators sort the
    namespaces they exclude, and "{{ .Release.Namespace }}" sorts after "kube-system")."""
    if isinstance(doc, list):
        return [without_labels(x) for x in doc]
    if not isinstance(doc, dict):
        return doc
    out = {k: without_labels(v) for k, v in doc.items() if k != "labels" or not isinstance(v, dict)}
    if "operator" in out and isinstance(out.get("values"), list):
        out["values"] = sorted(out["values"])
    return out


def sa_username(r: Rendered) -> str:
    return f"system:serviceaccount:{r.namespace}:{pod_spec(r)['serviceAccountName']}"


# --- helm lint and the value sets ----------------------------------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_helm_lint_is_clean(name):
    args = ["lint", "--strict", str(CHART), "--namespace", "dispatch-system"]
    if name != "defaults":
        args += ["--values", str(VALUES_DIR / f"{name}.yaml")]
    out = run_helm(*args).stdout
    assert "0 chart(s) failed" in out
    assert "[WARNING]" not in out, out
    assert "[ERROR]" not in out, out


def test_the_value_sets_render_what_they_turn_on_and_off():
    expected = {
        "Deployment", "Service", "ServiceAccount", "Secret", "ConfigMap", "ClusterRole", "ClusterRoleBinding",
        "Role", "RoleBinding", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
    }  # fmt: skip
    defaults = rendered("defaults").kinds()
    assert defaults == expected | {
        "PodDisruptionBudget",
        "AdmissionCheck",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "Job",
        "Pod",
    }
    assert rendered("observability").kinds() == defaults | {"NetworkPolicy", "ServiceMonitor", "PrometheusRule"}
    assert rendered("minimal").kinds() == expected
    assert not [d for d in rendered("minimal").of("ClusterRole") if d["metadata"]["name"].endswith("-api")]


# --- labels, names, namespaces -------------------------------------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_object_has_the_recommended_labels_and_its_namespace(name):
    r = rendered(name)
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    for doc in r.docs:
        what = f"{doc['kind']} {doc['metadata']['name']}"
        labels = doc["metadata"]["labels"]
        assert labels["helm.sh/chart"] == f"{chart['name']}-{chart['version']}", what
        # The certificate controller injects only into configurations with this label.
        assert labels[LABEL] == LABEL_VALUE == "dispatch-k8s", what
        assert labels["app.kubernetes.io/instance"] == r.release, what
        assert labels["app.kubernetes.io/managed-by"] == "Helm", what
        assert labels["app.kubernetes.io/part-of"] == "dispatch", what
        assert labels["app.kubernetes.io/version"], what
        if doc["kind"] in CLUSTER_SCOPED:
            assert "namespace" not in doc["metadata"], what
        else:
            assert doc["metadata"].get("namespace"), f"{what} has no namespace"


def test_names_follow_the_release():
    assert fullname(rendered("defaults")) == "dispatch-k8s"
    assert fullname(rendered("custom")) == "gate"
    assert fullname(template(release="dispatch")) == "dispatch-dispatch-k8s"
    r = template(release="prod-dispatch-k8s")
    assert fullname(r) == "prod-dispatch-k8s"
    assert r.one("Secret", "prod-dispatch-k8s-certs")["type"] == "Opaque"
    assert r.one("ServiceAccount", "prod-dispatch-k8s-webhook")["metadata"]["namespace"] == r.namespace


# --- the Secret, the webhook configurations and the policies --------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_the_secret_is_rendered_empty_and_no_ca_bundle_anywhere(name):
    r = rendered(name)
    secret = r.one("Secret", f"{fullname(r)}-certs")
    assert secret["type"] == "Opaque"
    assert not {"data", "stringData"} & set(secret), "an upgrade would overwrite the controller's keys"
    assert "helm.sh/resource-policy" not in (secret["metadata"].get("annotations") or {})
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        for hook in r.one(kind)["webhooks"]:
            assert "caBundle" not in hook["clientConfig"], f"{kind} {hook['name']}"
    assert "caBundle" not in yaml.safe_dump_all(r.docs)


@pytest.mark.parametrize("name", VALUE_SETS)
def test_the_webhook_configurations_are_the_generators_and_reach_the_webhook_through_the_service(name):
    r = rendered(name)
    name_ = fullname(r)
    timeout = value_set(name).get("webhook", {}).get("timeoutSeconds", 5)
    policies = value_set(name).get("admissionPolicies", {}).get("enabled", True)
    expected = webhook_configurations(
        namespace=r.namespace,
        service=name_,
        port=443,
        name=name_,
        timeout_seconds=timeout,
        # With the policies, the writes they judge are not sent to the webhook (helm template serves no
        # MutatingAdmissionPolicy here, so the webhook records A: record-start stays, failing open).
        policies=policies,
    )
    got = [r.one("ValidatingWebhookConfiguration"), r.one("MutatingWebhookConfiguration")]
    assert [without_labels(d) for d in got] == [without_labels(d) for d in expected]

    service = r.one("Service")
    assert service["metadata"]["name"] == name_
    (webhook_port,) = [p for p in service["spec"]["ports"] if p["port"] == 443]
    assert webhook_port["targetPort"] == "webhook"
    webhook = containers(r)["webhook"]
    assert port(webhook, "webhook") == parse_args(webhook).port
    for doc in got:
        for hook in doc["webhooks"]:
            assert hook["clientConfig"]["service"]["name"] == name_
            assert hook["clientConfig"]["service"]["namespace"] == r.namespace
            assert hook["clientConfig"]["service"]["path"] in ("/validate", "/mutate")
            # The webhook's own namespace is never sent to it.
            assert r.namespace in hook["namespaceSelector"]["matchExpressions"][0]["values"]


@pytest.mark.parametrize("name", ["defaults", "custom"])
def test_the_policies_are_the_generators_with_the_same_principals_as_the_webhook(name, tmp_path):
    r = rendered(name)
    webhook = containers(r)["webhook"]
    config = load(tmp_path, config_file(r, webhook, parse_args(webhook).config), load_webhook_config)
    assert config.dispatch.usernames[0] == sa_username(r), "the chart's ServiceAccount is dispatch"
    assert config.admission_checks == (r.one("AdmissionCheck")["metadata"]["name"],), "the chart's check is dispatch's"
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["webhook"]["owners"]
    owners = defaults | value_set(name).get("webhook", {}).get("owners", {})
    expected = admission_policies(
        Config(
            dispatch=config.dispatch,
            kueue=config.kueue,
            owners=Owners.model_validate(owners),
            admissionChecks=config.admission_checks,
        ),
        namespace=r.namespace,
    )
    for doc in expected:
        doc["metadata"]["name"] = doc["metadata"]["name"].replace("dispatch-k8s", fullname(r), 1)
        if "policyName" in doc["spec"]:
            doc["spec"]["policyName"] = doc["spec"]["policyName"].replace("dispatch-k8s", fullname(r), 1)
    got = r.of("ValidatingAdmissionPolicy") + r.of("ValidatingAdmissionPolicyBinding")
    by_name = {(d["kind"], d["metadata"]["name"]): without_labels(d) for d in got}
    validating = [d for d in expected if d["kind"].startswith("Validating")]
    assert by_name == {(d["kind"], d["metadata"]["name"]): without_labels(d) for d in validating}
    # helm template knows no MutatingAdmissionPolicy unless told the cluster serves it (helm install asks).
    assert not r.of("MutatingAdmissionPolicy")


def test_the_mutating_admission_policy_where_the_api_server_serves_it():
    r = template(extra=["--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"])
    expected = [d for d in admission_policies(Config(), namespace=r.namespace) if d["kind"].startswith("Mutating")]
    got = r.of("MutatingAdmissionPolicy") + r.of("MutatingAdmissionPolicyBinding")
    assert [without_labels(d) for d in got] == [without_labels(d) for d in expected]
    off = template(
        {"admissionPolicies": {"enabled": False}},
        extra=["--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"],
    )
    assert not off.of("MutatingAdmissionPolicy")


MAP_SERVED = ["--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"]


def _routes(r: Rendered) -> dict[str, list[tuple[str, str, tuple[str, ...]]]]:
    """Each rendered webhook's name: (resource, failurePolicy, operations) of each of its rules."""
    return {
        hook["name"].split(".", 1)[0] + "." + hook["name"].split(".")[1]: [
            (resource, hook["failurePolicy"], tuple(rule["operations"]))
            for rule in hook["rules"]
            for resource in rule["resources"]
        ]
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
        for hook in r.one(kind)["webhooks"]
    }


@pytest.mark.parametrize("served", [True, False], ids=["MutatingAdmissionPolicy served", "not served"])
def test_with_the_policies_the_webhook_is_sent_no_write_they_judge(served):
    """The chart with the policies (the default): the webhook is sent only the creates no policy can judge and the
    closing of a TrainJob created open; on an API server serving MutatingAdmissionPolicy not one update (the MAP
    records A), elsewhere only the unsuspend, whose record fails open onto the unsuspend policy."""
    r = template(extra=MAP_SERVED if served else [])
    expected = {
        "validate.trainjobs": [("trainjobs", "Fail", ("CREATE",))],
        "validate.trainingruntimes": [("trainingruntimes", "Fail", ("CREATE",))],
        "mutate.trainjobs": [("trainjobs", "Fail", ("CREATE",))],
    }
    if not served:
        expected["record-start.trainjobs"] = [("trainjobs", "Ignore", ("UPDATE",))]
    assert _routes(r) == expected
    assert [p["metadata"]["name"] for p in r.of("MutatingAdmissionPolicy")] == (
        ["dispatch-k8s-record-start"] if served else []
    )
    assert r.of("ValidatingAdmissionPolicy"), "the policies judge what the webhook is not sent"


@pytest.mark.parametrize(
    ("record_start", "served", "by_policy"),
    [
        ("auto", True, True),
        ("auto", False, False),
        ("policy", False, True),
        ("policy", True, True),
        ("webhook", True, False),
        ("webhook", False, False),
    ],
)
def test_record_start_names_who_records_a_whatever_helm_template_knows(record_start, served, by_policy):
    """``admissionPolicies.recordStart``: ``policy`` renders the MutatingAdmissionPolicy even where ``helm template``
    is not told the cluster serves it (a GitOps render), ``webhook`` never does, ``auto`` asks the cluster; exactly
    one of the two records A."""
    r = template({"admissionPolicies": {"recordStart": record_start}}, extra=MAP_SERVED if served else [])
    assert bool(r.of("MutatingAdmissionPolicy")) is by_policy
    assert ("record-start.trainjobs" in _routes(r)) is not by_policy


def test_record_start_refuses_an_unknown_value():
    assert "recordStart" in template_error({"admissionPolicies": {"recordStart": "both"}})


def test_without_the_policies_every_route_is_sent_and_fails_closed():
    r = template({"admissionPolicies": {"enabled": False}}, extra=MAP_SERVED)
    routes = _routes(r)
    assert set(routes) == {
        "validate.trainjobs",
        "validate-mirrored.trainjobs",
        "validate.trainingruntimes",
        "validate-mirrored.trainingruntimes",
        "validate-mirrored.workloads",
        "validate-mirrored.jobsets",
        "mutate.trainjobs",
        "record-start.trainjobs",
    }
    assert {policy for rules in routes.values() for _, policy, _ in rules} == {"Fail"}
    assert ("workloads/status", "Fail", ("UPDATE",)) in routes["validate-mirrored.workloads"]
    assert not r.of("ValidatingAdmissionPolicy")
    assert not r.of("MutatingAdmissionPolicy")


def test_extra_principals_reach_the_webhook_config_and_the_policies(tmp_path):
    r = rendered("custom")
    webhook = containers(r)["webhook"]
    config = load(tmp_path, config_file(r, webhook, parse_args(webhook).config), load_webhook_config)
    hook = f"system:serviceaccount:{r.namespace}:{fullname(r)}-uninstall"  # the pre-delete hook's, last
    assert config.dispatch == Principals(
        usernames=(sa_username(r), "system:serviceaccount:dispatch-system:dispatch-supervisor", hook),
        groups=("dispatch:admins",),
    )
    text = yaml.safe_dump_all(r.of("ValidatingAdmissionPolicy"), width=10_000)
    assert "dispatch-supervisor" in text
    assert "dispatch:admins" in text
    assert "system:serviceaccount:jobset:jobset-controller" in text, "an owner's principals reach the policies"
    assert "platform:oncall" in text, "break-glass reaches the policies"


def test_the_owner_defaults_of_the_chart_are_the_webhooks():
    """values.yaml states each owner's principals as webhook/owners.py's defaults, which the docs describe."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())["webhook"]["owners"]
    assert Owners.model_validate(values) == Owners()


def test_principals_with_quotes_stay_one_cel_string():
    r = template({"webhook": {"dispatch": {"extraUsernames": ['we"ird: #user'], "groups": ["g\\1"]}}})
    (policy,) = [p for p in r.of("ValidatingAdmissionPolicy") if p["metadata"]["name"].endswith("reserved-keys")]
    (variable,) = [v for v in policy["spec"]["variables"] if v["name"] == "dispatch"]
    users = [sa_username(r), 'we"ird: #user', f"system:serviceaccount:{r.namespace}:{fullname(r)}-uninstall"]
    generated = admission_policies(
        Config(dispatch=Principals(usernames=tuple(users), groups=("g\\1",))), namespace=r.namespace
    )
    (reserved,) = [
        p for p in generated if p["metadata"]["name"].endswith("-reserved-keys") and "policyName" not in p["spec"]
    ]
    assert (
        variable["expression"]
        == next(v for v in reserved["spec"]["variables"] if v["name"] == "dispatch")["expression"]
    )


# --- the pod --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_container_runs_a_console_script_of_the_image_with_arguments_it_accepts(name):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    r = rendered(name)
    pods = [pod_spec(r)] + [j["spec"]["template"]["spec"] for j in r.of("Job")] + [p["spec"] for p in r.of("Pod")]
    for spec in pods:
        for container in spec.get("initContainers", []) + spec["containers"]:
            (command,) = container["command"]
            assert command in scripts, f"{container['name']}: {command} is not a console script of the image"
            parse_args(container)


@pytest.mark.parametrize("name", VALUE_SETS)
def test_the_certificate_controller_is_a_native_sidecar_serving_the_servers_through_a_memory_volume(name):
    r = rendered(name)
    spec = pod_spec(r)
    (certs,) = spec["initContainers"]
    assert certs["name"] == "certs"
    assert certs["restartPolicy"] == "Always", "a native sidecar: it starts first and runs for the pod's life"
    args = parse_args(certs)
    assert args.command == "run"
    assert not args.once
    assert args.secret == r.one("Secret", f"{fullname(r)}-certs")["metadata"]["name"]
    assert args.service == r.one("Service")["metadata"]["name"]
    assert args.configurations == [fullname(r)]
    assert args.configurations == [r.one("ValidatingWebhookConfiguration")["metadata"]["name"]]
    assert args.configurations == [r.one("MutatingWebhookConfiguration")["metadata"]["name"]]
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in certs["env"]} == {
        "POD_NAMESPACE": "metadata.namespace"
    }
    tls = mount_of(certs, str(args.out))
    assert str(args.out) == tls["mountPath"]
    assert not tls.get("readOnly")
    assert volume(r, tls["name"])["emptyDir"]["medium"] == "Memory", "the key never touches the node's disk"
    c = containers(r)
    for server in ("webhook", "agent"):
        mount = mount_of(c[server], str(args.out) + "/tls.crt")
        assert mount["name"] == tls["name"]
        assert mount["readOnly"] is True
    webhook = parse_args(c["webhook"])
    assert (webhook.tls_cert_file, webhook.tls_private_key_file) == (f"{args.out}/tls.crt", f"{args.out}/tls.key")
    # Its probes: startup gates the servers' start, readiness the pod's, liveness on /healthz.
    health = port(certs, "certs-health")
    assert args.health_port == health
    assert certs["startupProbe"]["httpGet"] == {"path": "/readyz", "port": "certs-health"}
    assert certs["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "certs-health"}
    assert certs["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "certs-health"}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_ports_probes_and_configs_agree(name, tmp_path):
    r = rendered(name)
    c = containers(r)
    every = [p["containerPort"] for container in c.values() for p in container.get("ports", [])]
    assert len(every) == len(set(every)), f"two containers of one pod listen on one port: {every}"

    webhook = parse_args(c["webhook"])
    assert webhook.port == port(c["webhook"], "webhook")
    for probe, path in (("startupProbe", "/healthz"), ("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert c["webhook"][probe]["httpGet"] == {"scheme": "HTTPS", "path": path, "port": "webhook"}
    load(tmp_path, config_file(r, c["webhook"], webhook.config), load_webhook_config)

    agent = parse_args(c["agent"])
    config = load(tmp_path, config_file(r, c["agent"], agent.config), load_agent_config)
    assert agent.health_port is None
    assert config.health_port == port(c["agent"], "health")
    for probe, path in (("startupProbe", "/healthz"), ("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        assert c["agent"][probe]["httpGet"] == {"path": path, "port": "health"}
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["agent"]["env"]}["POD_NAME"] == (
        "metadata.name"
    ), "the Lease holder identity is the pod's name"

    # After SIGTERM the webhook and the API serve on for their delays; the kubelet must not kill them first.
    grace = pod_spec(r)["terminationGracePeriodSeconds"]
    assert webhook.shutdown_delay_duration > 0
    assert agent.shutdown_delay_duration > 0 or agent.tls_cert_file is None  # no API, nothing to drain
    assert grace >= max(webhook.shutdown_delay_duration, agent.shutdown_delay_duration) + 10


@pytest.mark.parametrize("name", ["defaults", "custom"])
def test_the_agent_config_names_the_lease_and_serves_the_api(name, tmp_path):
    r = rendered(name)
    agent = containers(r)["agent"]
    args = parse_args(agent)
    config = load(tmp_path, config_file(r, agent, args.config), load_agent_config)
    values = value_set(name)
    lease = values.get("agent", {}).get("lease", {})
    assert config.lease_namespace == (lease.get("namespace") or r.namespace)
    assert config.lease_name == lease.get("name", LEASE_NAME)
    assert config.workers == values.get("agent", {}).get("workers", 16)
    assert list(config.node_loss_taints) == values.get("site", {}).get("nodeLossTaints", [])

    # The API is served (agent/cli.py serves it only with both TLS files) on api.port, the Service's `api`.
    certs = parse_args(containers(r)["certs"])
    assert (args.tls_cert_file, args.tls_private_key_file) == (f"{certs.out}/tls.crt", f"{certs.out}/tls.key")
    assert args.api_port is None
    assert config.api.port == port(agent, "api") == values.get("api", {}).get("port", 8443)
    (service_port,) = [p for p in r.one("Service")["spec"]["ports"] if p["name"] == "api"]
    assert service_port == {"name": "api", "port": config.api.port, "targetPort": "api", "protocol": "TCP"}
    api = values.get("api", {})
    assert config.api.token_audiences == tuple(api.get("tokenAudiences", ()))
    assert config.api.require_preflight is api.get("requirePreflight", False)
    assert config.api.site_labels == api.get("labels", {})
    assert config.api.allow_rank_restart is values.get("site", {}).get("allowRankRestart", False)
    # Start and Preflight refuse the namespaces the webhook excludes: kube-system and the release's own.
    assert config.api.own_namespace == r.namespace


def test_without_the_api_the_agent_serves_none(tmp_path):
    r = rendered("minimal")
    agent = containers(r)["agent"]
    args = parse_args(agent)
    assert (args.tls_cert_file, args.tls_private_key_file) == (None, None), "no TLS files: no API"
    assert "api" not in yaml.safe_load(config_file(r, agent, args.config))
    assert "api" not in {p["name"] for p in agent["ports"]}
    assert "api" not in {p["name"] for p in r.one("Service")["spec"]["ports"]}


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_container_is_restricted_and_bounded(name):
    r = rendered(name)
    pods = [pod_spec(r)] + [j["spec"]["template"]["spec"] for j in r.of("Job")] + [p["spec"] for p in r.of("Pod")]
    for spec in pods:
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for container in spec.get("initContainers", []) + spec["containers"]:
            sc = container["securityContext"]
            what = container["name"]
            assert sc["runAsNonRoot"] is True, what
            assert (sc["runAsUser"], sc["runAsGroup"]) == (65532, 65532), f"{what}: the image's USER"
            assert sc["readOnlyRootFilesystem"] is True, what
            assert sc["allowPrivilegeEscalation"] is False, what
            assert sc["capabilities"] == {"drop": ["ALL"]}, what
            assert sc["seccompProfile"] == {"type": "RuntimeDefault"}, what
            for kind in ("requests", "limits"):
                assert set(container["resources"][kind]) >= {"cpu", "memory"}, f"{what} {kind}"
            assert container["image"] == r.one("Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]


def test_the_image_is_pinned_by_tag_and_digest():
    assert containers(rendered("defaults"))["webhook"]["image"] == "ghcr.io/phpboyscout/dispatch-k8s:0.1.0"
    digest = "sha256:" + "0123456789abcdef" * 4
    assert containers(rendered("custom"))["webhook"]["image"] == (
        f"registry.example/dispatch/dispatch-k8s:0.1.0-rc.1@{digest}"
    )


def test_replicas_spread_and_disruption_budget():
    r = rendered("defaults")
    deployment = r.one("Deployment")
    assert deployment["spec"]["replicas"] == 2
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "dispatch-k8s", "app.kubernetes.io/instance": r.release}
    assert selector.items() <= deployment["spec"]["template"]["metadata"]["labels"].items()
    (term,) = pod_spec(r)["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert term["podAffinityTerm"] == {
        "topologyKey": "kubernetes.io/hostname",
        "labelSelector": {"matchLabels": selector},
    }
    pdb = r.one("PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == selector
    assert r.one("Service")["spec"]["selector"] == selector
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert (
        "requiredDuringSchedulingIgnoredDuringExecution" in pod_spec(rendered("custom"))["affinity"]["podAntiAffinity"]
    )
    assert "affinity" not in pod_spec(rendered("minimal"))


def test_a_changed_config_rolls_the_pods():
    def checksum(values: dict[str, Any]) -> str:
        return template(values).one("Deployment")["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum({}) != checksum({"agent": {"workers": 3}})
    assert checksum({}) == checksum({"replicas": 3})


@pytest.mark.parametrize(
    ("webhook", "api", "least"), [(5, 0, 15), (0, 7, 17), (9, 7, 19)], ids=["webhook", "api", "the-longest"]
)
def test_a_grace_period_shorter_than_a_shutdown_delay_is_refused(webhook, api, least):
    values = {"webhook": {"shutdownDelaySeconds": webhook}, "api": {"shutdownDelaySeconds": api}}
    error = template_error({"terminationGracePeriodSeconds": least - 1, **values})
    assert f"terminationGracePeriodSeconds ({least - 1}) must be at least the longest of" in error
    assert f"+ 10 ({least})" in error
    assert template({"terminationGracePeriodSeconds": least, **values}).one("Deployment")


def test_without_the_api_its_delay_is_not_the_pods():
    values = {"api": {"enabled": False, "shutdownDelaySeconds": 60}, "terminationGracePeriodSeconds": 15}
    agent = containers(template(values))["agent"]
    assert not [a for a in agent["args"] if a.startswith("--shutdown-delay-duration")], agent["args"]


# --- the AdmissionCheck ---------------------------------------------------------------------------------


def test_the_admission_check_names_dispatchs_controller():
    check = rendered("defaults").one("AdmissionCheck")
    assert check["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert check["metadata"]["name"] == ADMISSION_CHECK_NAME
    assert check["spec"] == {"controllerName": ADMISSION_CHECK_CONTROLLER}
    assert rendered("custom").one("AdmissionCheck")["metadata"]["name"] == "dispatch-gate"


# --- RBAC -----------------------------------------------------------------------------------------------


def _role(r: Rendered, kind: str, name: str) -> dict[str, Any]:
    return r.one(kind, name)


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_binding_grants_a_rendered_role_to_the_pods_service_account(name):
    r = rendered(name)
    sa = pod_spec(r)["serviceAccountName"]
    webhook_sa = f"{fullname(r)}-webhook"
    assert r.one("ServiceAccount", sa)["metadata"]["namespace"] == r.namespace
    for binding in r.regular():
        if binding["kind"] not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        # The webhook's role goes to the webhook container's own ServiceAccount, every other to the pod's.
        subject = webhook_sa if binding["roleRef"]["name"] == f"{fullname(r)}-webhook" else sa
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": subject, "namespace": r.namespace}]
        role = _role(r, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        assert role["metadata"].get("namespace") == binding["metadata"].get("namespace")


TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


@pytest.mark.parametrize("name", VALUE_SETS)
def test_the_webhook_container_holds_its_own_token_and_the_others_the_pods(name):
    """Only the agent and the certificate controller hold a token of the pod's ServiceAccount (dispatch's
    principal, with the certificate Secret); the webhook container holds its own ServiceAccount's."""
    r = rendered(name)
    full, spec = fullname(r), pod_spec(r)
    assert spec["automountServiceAccountToken"] is False, "no container gets the pod's token unasked"
    webhook_sa = r.one("ServiceAccount", f"{full}-webhook")
    assert webhook_sa["metadata"]["name"] != spec["serviceAccountName"]
    assert webhook_sa["automountServiceAccountToken"] is False
    secret = r.one("Secret", f"{full}-webhook-token")
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": f"{full}-webhook"}
    assert not {"data", "stringData"} & set(secret), "the token controller writes the token"

    token = volume(r, "token")["projected"]["sources"]
    assert token[0] == {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}}
    assert {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}} in token
    assert {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1",
            "fieldPath": "metadata.namespace"}}]}} in token  # fmt: skip
    webhook_token = volume(r, "webhook-token")["secret"]
    assert webhook_token["secretName"] == f"{full}-webhook-token"
    # Listed keys: the kubelet waits for the token controller to fill them instead of mounting an empty volume.
    assert [i["key"] for i in webhook_token["items"]] == ["token", "ca.crt", "namespace"]
    assert "optional" not in webhook_token

    c = containers(r)
    expected = {"webhook": "webhook-token", "agent": "token"}
    if "certs" in c:
        expected["certs"] = "token"
    assert set(c) == set(expected)
    for container, vol in expected.items():
        assert mount_of(c[container], f"{TOKEN_DIR}/token")["name"] == vol, container
        mounts = {m["name"] for m in c[container]["volumeMounts"]}
        assert not ({"token", "webhook-token"} - {vol}) & mounts, f"{container} holds one token only"

    # Nothing the webhook container mounts holds the CA key, and its username is not dispatch.
    for mount in c["webhook"]["volumeMounts"]:
        source = volume(r, mount["name"])
        if "secret" in source:
            assert source["secret"]["secretName"] in (f"{full}-webhook-token", f"{full}-tls"), mount
    config = yaml.safe_load(config_file(r, c["webhook"], "/etc/dispatch/webhook/config.yaml"))
    assert f"system:serviceaccount:{r.namespace}:{full}-webhook" not in config["dispatch"]["usernames"]


def test_the_webhooks_service_account_cannot_be_made_dispatch():
    webhook = "system:serviceaccount:dispatch-system:dispatch-k8s-webhook"
    error = template_error({"webhook": {"dispatch": {"extraUsernames": [webhook]}}})
    assert f"webhook.dispatch.extraUsernames must not name {webhook}" in error
    error = template_error({"serviceAccount": {"name": "dispatch-k8s-webhook"}})
    assert "serviceAccount.name must not be dispatch-k8s-webhook" in error


@pytest.mark.parametrize("name", ["defaults", "custom"])
def test_the_namespaced_rights_are_narrowed_to_the_lease_and_the_secret(name):
    r = rendered(name)
    full = fullname(r)
    agent = containers(r)["agent"]
    with_lease = yaml.safe_load(config_file(r, agent, "/etc/dispatch/agent/config.yaml"))
    lease = r.one("Role", f"{full}-lease")
    assert lease["metadata"]["namespace"] == with_lease["leaseNamespace"]
    assert lease["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": [with_lease["leaseName"]],
         "verbs": ["get", "update"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
    ]  # fmt: skip
    certs = r.one("Role", f"{full}-certs")
    assert certs["metadata"]["namespace"] == r.namespace
    assert certs["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [f"{full}-certs"],
         "verbs": ["get", "list", "watch", "patch"]}
    ]  # fmt: skip
    (rule,) = r.one("ClusterRole", f"{full}-certs")["rules"]
    assert rule["resourceNames"] == [full]
    assert rule["verbs"] == ["get", "list", "watch", "patch"]


def test_the_api_rights_are_agent_api_rbac_py():
    r = rendered("defaults")
    leases = [x for x in AGENT_RULES if x["resources"] == ["leases"]]
    assert all(set(x["verbs"]) <= {"get", "update", "create"} for x in leases), "the agent's Role on its Lease"
    assert r.one("ClusterRole", "dispatch-k8s-api")["rules"] == [x for x in AGENT_RULES if x not in leases]
    assert r.one("ClusterRole", "dispatch-k8s-supervisor")["rules"] == SUPERVISOR_RULES
    assert r.one("ClusterRole", "dispatch-k8s-preflight")["rules"] == PREFLIGHT_RULES
    bound = {b["roleRef"]["name"] for b in r.of("ClusterRoleBinding")}
    assert not {"dispatch-k8s-supervisor", "dispatch-k8s-preflight"} & bound, "the admin binds these"


# --- the pre-delete hook ----------------------------------------------------------------------------------


def test_the_pre_delete_hook_deletes_our_configurations_with_its_own_narrow_rights():
    r = rendered("custom")
    full = fullname(r)
    hooks = {(d["kind"], d["metadata"]["name"]): d for d in r.hooks() if "-uninstall" in d["metadata"]["name"]}
    assert set(hooks) == {
        ("ServiceAccount", f"{full}-uninstall"),
        ("ClusterRole", f"{full}-uninstall"),
        ("ClusterRoleBinding", f"{full}-uninstall"),
        ("Job", f"{full}-uninstall"),
    }
    for doc in hooks.values():
        annotations = doc["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-delete"
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
    job = hooks[("Job", f"{full}-uninstall")]
    weights = {k: int(d["metadata"]["annotations"]["helm.sh/hook-weight"]) for k, d in hooks.items()}
    assert all(w < weights[("Job", f"{full}-uninstall")] for k, w in weights.items() if k[0] != "Job"), weights
    spec = job["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == f"{full}-uninstall"
    assert spec["restartPolicy"] == "Never"
    (container,) = spec["containers"]
    args = parse_args(container)
    assert args.command == "uninstall"
    assert args.configurations == [full]
    assert args.prologues == [PROLOGUE_CONFIGMAP]
    configurations, prologues = hooks[("ClusterRole", f"{full}-uninstall")]["rules"]
    assert configurations == {
        "apiGroups": ["admissionregistration.k8s.io"],
        "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
        "resourceNames": [full],
        "verbs": ["get", "delete"],
    }
    # This version's prologue ConfigMap, by name (listed with a field selector on it), in any namespace.
    assert prologues == {
        "apiGroups": [""],
        "resources": ["configmaps"],
        "resourceNames": [PROLOGUE_CONFIGMAP],
        "verbs": ["list", "delete"],
    }
    # The owner policy lets only dispatch delete the prologue's ConfigMap: the hook is among dispatch's usernames.
    config = yaml.safe_load(r.one("ConfigMap", f"{full}-webhook")["data"]["config.yaml"])
    assert config["dispatch"]["usernames"][-1] == f"system:serviceaccount:{r.namespace}:{full}-uninstall"
    assert f"{full}-uninstall" not in yaml.safe_dump(template({"uninstallHook": {"enabled": False}}).docs)
    assert hooks[("ClusterRoleBinding", f"{full}-uninstall")]["subjects"] == [
        {"kind": "ServiceAccount", "name": f"{full}-uninstall", "namespace": r.namespace}
    ]


# --- NetworkPolicy and ServiceMonitor -------------------------------------------------------------------------


def test_the_network_policy_opens_the_webhook_and_api_ports_and_metrics_to_monitoring_only():
    r = rendered("observability")
    policy = r.one("NetworkPolicy")["spec"]
    names = {p["name"] for c in containers(r).values() for p in c.get("ports", [])}
    assert policy["podSelector"]["matchLabels"] == r.one("Deployment")["spec"]["selector"]["matchLabels"]
    open_, metrics = policy["ingress"]
    assert "from" not in open_, "the API server's address is no pod's: any source"
    assert {p["port"] for p in open_["ports"]} == {"webhook", "api"} <= names
    assert metrics["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    assert [p["port"] for p in metrics["ports"]] == ["health", "certs-health"]
    (egress,) = policy["egress"]
    assert {p["port"] for p in egress["ports"]} == {443, 6443}
    assert egress["to"] == [{"ipBlock": {"cidr": "10.0.0.0/8"}}, {"ipBlock": {"cidr": "192.168.0.0/16"}}]


def test_the_service_monitor_scrapes_all_three_servers_verifying_the_webhooks_certificate():
    r = rendered("observability")
    monitor = r.one("ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    service_ports = {p["name"]: p for p in r.one("Service")["spec"]["ports"]}
    webhook, agent, certs = monitor["spec"]["endpoints"]
    assert {webhook["port"], agent["port"], certs["port"]} <= set(service_ports)
    assert service_ports[certs["port"]]["targetPort"] == "certs-health"
    assert port(containers(r)["certs"], "certs-health") == parse_args(containers(r)["certs"]).health_port
    assert webhook["scheme"] == "https"
    assert agent["scheme"] == certs["scheme"] == "http"
    assert webhook["tlsConfig"]["ca"]["secret"] == {"name": f"{fullname(r)}-certs", "key": "ca.crt"}
    names = lifecycle.service_dns_names(fullname(r), r.namespace)
    assert webhook["tlsConfig"]["serverName"] in names, "a name the serving certificate carries"


def test_every_command_logs_at_the_level_and_in_the_format_of_the_values():
    for name, want in (("defaults", ("info", "text")), ("observability", ("debug", "json"))):
        r = rendered(name)
        pods = [pod_spec(r)] + [j["spec"]["template"]["spec"] for j in r.of("Job")]
        for spec in pods:
            for container in spec.get("initContainers", []) + spec["containers"]:
                args = parse_args(container)
                assert (args.log_level, args.log_format) == want, container["name"]


def test_the_prometheus_rule_is_opt_in_and_selected_by_its_labels():
    assert not rendered("defaults").of("PrometheusRule")
    rule = rendered("observability").one("PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prometheus"


# --- values.schema.json --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"replica": 3}, "replica"),
        ({"webhook": {"prot": 9443}}, "prot"),
        ({"image": {"tags": "x"}}, "tags"),
        ({"networkPolicy": {"apiServer": {"cidr": []}}}, "cidr"),
        ({"certs": {"resources": {"limits": {"gpu": 1}}}}, "gpu"),
    ],
)
def test_the_schema_refuses_an_unknown_key_naming_it(values, named):
    error = template_error(values)
    assert "additional properties" in error.lower(), error
    assert f"'{named}'" in error, error


@pytest.mark.parametrize(
    ("values", "named"),
    [
        ({"replicas": "two"}, "/replicas"),
        ({"replicas": 0}, "/replicas"),
        ({"webhook": {"allowSpecPrologue": "yes"}}, "/webhook/allowSpecPrologue"),
        ({"agent": {"workers": 65}}, "/agent/workers"),
        ({"image": {"digest": "sha256:abc"}}, "/image/digest"),
        ({"certs": {"overlap": "one day"}}, "/certs/overlap"),
        ({"podAntiAffinity": "sometimes"}, "/podAntiAffinity"),
        ({"site": {"nodeLossTaints": "example.com/lost"}}, "/site/nodeLossTaints"),
    ],
)
def test_the_schema_refuses_a_wrong_type_or_value_naming_it(values, named):
    error = template_error(values)
    assert named in error, error


@pytest.mark.parametrize(
    "values",
    [
        {"webhook": {"owners": {"kubelet": {"usernames": [], "groups": ["system:nodes"]}}}},
        {"webhook": {"owners": {"kubelet": {}}}},
    ],
)
def test_a_kubelet_value_is_refused_saying_what_to_do(values):
    """A kubelet is a node's own user (webhook/owners.py): a site's old values that name one are refused, not
    ignored, so its operator learns the value no longer widens or narrows anything."""
    error = template_error(values)
    assert "webhook.owners.kubelet is no longer a value: remove it from your values" in error, error
    assert "system:node:<node>" in error, error


def test_a_set_flag_with_a_typo_is_refused_too():
    error = template_error(extra=["--set", "serviceMonitor.enable=true"])
    assert "'enable'" in error, error


def _leaves(values: Any, prefix: str = "") -> list[str]:
    """Dotted paths of values.yaml's keys, stopping at maps whose keys are the user's (labels and such)."""
    if isinstance(values, dict) and values and prefix.split(".")[-1] not in FREE_MAPS:
        return [p for k, v in values.items() for p in _leaves(v, f"{prefix}.{k}" if prefix else k)]
    return [prefix]


FREE_MAPS = {"nodeSelector", "podLabels", "podAnnotations", "annotations", "labels", "matchLabels",
             "metricsNamespaceSelector", "namespaceSelector", "requests", "limits", "affinity", "issuerRef"}  # fmt: skip


def _schema_leaves(schema: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> list[str]:
    if "$ref" in schema:
        schema = defs[schema["$ref"].rsplit("/", 1)[1]]
    if schema.get("deprecated"):  # a removed value, kept in the schema only for the chart's own refusal of it
        return []
    props = schema.get("properties")
    if schema.get("type") == "object" and props and prefix.split(".")[-1] not in FREE_MAPS:
        assert schema.get("additionalProperties") is False, f"{prefix or 'the top level'} accepts unknown keys"
        return [p for k, v in props.items() for p in _schema_leaves(v, defs, f"{prefix}.{k}" if prefix else k)]
    assert "type" in schema or "oneOf" in schema or "$ref" in schema, f"{prefix} is not typed"
    return [prefix]


def test_the_schema_types_every_value_and_docs_install_lists_them():
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    in_values = set(_leaves(values))
    in_schema = set(_schema_leaves(schema, schema["definitions"])) - {"global"}
    assert in_values == in_schema
    docs = (ROOT / "docs" / "install.md").read_text()
    missing = [v for v in sorted(in_values) if f"`{v}`" not in docs]
    assert not missing, f"docs/install.md does not list: {missing}"


def test_install_mds_owner_example_renders_into_the_owner_policies():
    """docs/install.md's example of an owner's principals, as a user pastes it into their values."""
    docs = (ROOT / "docs" / "install.md").read_text()
    section = docs[docs.index("## Who may write a dispatch job's objects") :]
    block = section[section.index("```yaml\n") + len("```yaml\n") : section.index("```\n", section.index("```yaml"))]
    values = yaml.safe_load(block)
    r = template(values)
    jobs = next(p for p in r.of("ValidatingAdmissionPolicy") if p["metadata"]["name"].endswith("-owners-jobs"))
    (jobset,) = [v for v in jobs["spec"]["variables"] if v["name"] == "jobset"]
    assert '"system:serviceaccount:kubeflow-system:jobset-controller-manager"' in jobset["expression"]
    assert "jobset-system" not in jobset["expression"], "the example replaces the defaults"
