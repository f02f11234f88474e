"""The rendered chart on a real kube-apiserver (tier A, with the Trainer, JobSet and Kueue CRDs).

* Every object of every value set passes a server-side dry run (strict field validation), as Helm 4's
  server-side apply sends it; the ServiceMonitor and the PrometheusRule against the Prometheus Operator's
  real CRDs.
* The pods are admitted in a namespace enforcing the restricted Pod Security Standard.
* The RBAC, applied for real: SubjectAccessReviews as the chart's ServiceAccount allow every call the
  agent, the certificate controller and the agent API make, and deny a sample of what they must not do;
  the same for the webhook's own ServiceAccount (it reads runtime copies only: no Secret, no write, not
  dispatch) and the uninstall hook's.
* The processes themselves, under the chart's ServiceAccounts' tokens and with the chart's arguments and
  config files: the certificate controller fills the chart's empty Secret and injects the CA into the
  chart's webhook configurations; the agent lists, watches and takes the Lease; the webhook serves the
  certificate for the Service's name; then the pre-delete hook's command deletes the configurations.
"""

from __future__ import annotations

import base64
import copy
import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agent.api.rbac import AGENT_RULES
from agent.api.routes import OPENAPI_PATH
from contract.prologue import PROLOGUE_CONFIGMAP
from harness.cluster import ControlPlane, free_port
from harness.kube_http import ApiError
from tests.charts.helm import ROOT, Rendered, template
from tests.charts.sets import VALUE_SETS, value_set

pytestmark = pytest.mark.cluster

CRDS = [
    Path(__file__).parent / "crds" / f"monitoring.coreos.com_{plural}.yaml"
    for plural in ("servicemonitors", "prometheusrules")
]
RBAC = "rbac.authorization.k8s.io/v1"
ADMISSION = "admissionregistration.k8s.io/v1"
HOOK_ANNOTATION = "helm.sh/hook"


@pytest.fixture(scope="module")
def service_monitor_crd(control_plane: ControlPlane) -> None:
    """The ServiceMonitor's and the PrometheusRule's real CRDs (cluster-scoped, left installed: nothing else
    uses them)."""
    crds = [d for path in CRDS for d in yaml.safe_load_all(path.read_text()) if d]
    for crd in crds:
        control_plane.admin.apply(crd)
    control_plane.wait_crds_established([crd["metadata"]["name"] for crd in crds])


def _release() -> str:
    # Cluster-scoped names follow the release: unique per test, as the API server is shared.
    return f"t{secrets.token_hex(3)}-dispatch-k8s"


def _path(cp: ControlPlane, doc: dict[str, Any]) -> str:
    return cp.admin.object_path(doc)


def dry_run_apply(cp: ControlPlane, doc: dict[str, Any]) -> dict[str, Any]:
    """Server-side apply, dry run, unknown or duplicate fields refused."""
    query = {"dryRun": "All", "fieldManager": "helm", "force": "true", "fieldValidation": "Strict"}
    return cp.admin.request("PATCH", _path(cp, doc), doc, query=query, content_type="application/apply-patch+yaml")


def refused_on_dry_run(cp: ControlPlane, docs: list[dict[str, Any]]) -> list[str]:
    """Each rendered object the API server refuses on a server-side dry run, as "<Kind> <name>: <why>"."""
    refused = []
    for doc in docs:
        if doc["kind"] == "Pod":  # a Pod (the test hook) is admitted only with its ServiceAccount in place
            cp.ensure_service_account(doc["metadata"]["namespace"], doc["spec"]["serviceAccountName"])
        try:
            answer = dry_run_apply(cp, doc)
        except ApiError as exc:
            refused.append(f"{doc['kind']} {doc['metadata']['name']}: {exc}")
            continue
        assert answer["kind"] == doc["kind"]
    return refused


@pytest.fixture
def lease_namespace(control_plane: ControlPlane) -> Iterator[str]:
    name = control_plane.create_namespace("leases")
    yield name
    control_plane.delete_namespace(name)


# --- every object, dry run ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VALUE_SETS)
def test_every_rendered_object_passes_a_server_side_dry_run(
    name, control_plane, namespace, lease_namespace, service_monitor_crd
):
    r = template(value_set(name, lease_namespace=lease_namespace), release=_release(), namespace=namespace)
    refused = refused_on_dry_run(control_plane, r.docs)
    assert not refused, "\n".join(refused)
    assert len(r.docs) >= 18
    if name == "observability":
        assert r.of("ServiceMonitor")
        assert r.of("NetworkPolicy")


@pytest.mark.parametrize("name", ["defaults", "custom", "openshift", "cert-manager"])
def test_the_pods_are_admitted_under_the_restricted_pod_security_standard(name, control_plane, lease_namespace):
    cp = control_plane
    namespace = cp.create_namespace("restricted", labels={"pod-security.kubernetes.io/enforce": "restricted"})
    try:
        r = template(value_set(name, lease_namespace=lease_namespace), release=_release(), namespace=namespace)
        templates = [r.one("Deployment")["spec"]["template"]] + [j["spec"]["template"] for j in r.of("Job")]
        templates += [{"metadata": p["metadata"], "spec": p["spec"]} for p in r.of("Pod")]
        assert len(templates) == 3
        for i, pod_template in enumerate(templates):
            spec = copy.deepcopy(pod_template["spec"])
            cp.ensure_service_account(namespace, spec["serviceAccountName"])
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"pod-{i}", "namespace": namespace, "labels": pod_template["metadata"]["labels"]},
                "spec": spec,
            }
            path = cp.admin.collection_path("v1", "Pod", namespace)
            cp.admin.request("POST", path, pod, query={"dryRun": "All", "fieldValidation": "Strict"})
        # And a pod that breaks the standard is refused there: the namespace does enforce it.
        bad = copy.deepcopy(pod)
        bad["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True
        with pytest.raises(ApiError, match="violates PodSecurity"):
            cp.admin.request("POST", path, bad, query={"dryRun": "All"})
    finally:
        cp.delete_namespace(namespace)


# --- RBAC, applied for real ---------------------------------------------------------------------------------


def _apply_rbac(cp: ControlPlane, r: Rendered) -> list[dict[str, Any]]:
    """The ServiceAccounts, (Cluster)Roles and bindings, hooks' included, created for real; returns the
    cluster-scoped ones for cleanup."""
    kinds = ("ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding")
    applied = []
    for kind in kinds:
        for doc in r.of(kind):
            cp.admin.apply(doc)
            if kind.startswith("Cluster"):
                applied.append(doc)
    return applied


def _cleanup(cp: ControlPlane, docs: list[dict[str, Any]]) -> None:
    for doc in reversed(docs):
        cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace"))


@pytest.fixture
def applied(control_plane, namespace) -> Iterator[Rendered]:
    r = template({}, release=_release(), namespace=namespace)
    cluster_scoped = _apply_rbac(control_plane, r)
    yield r
    _cleanup(control_plane, cluster_scoped)


def can(cp: ControlPlane, namespace: str, sa: str, verb: str, resource: str, *, group: str = "", ns: str = "",
        name: str = "", subresource: str = "") -> tuple[bool, str]:  # fmt: skip
    attributes = {"verb": verb, "group": group, "resource": resource, "namespace": ns, "name": name,
                  "subresource": subresource}  # fmt: skip
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": f"system:serviceaccount:{namespace}:{sa}",
            "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            "resourceAttributes": {k: v for k, v in attributes.items() if v},
        },
    }
    status = cp.admin.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review)["status"]
    return bool(status.get("allowed")), status.get("reason", "")


Check = tuple[str, str, str, dict[str, str]]
"""(verb, group, resource, {ns, name, subresource})"""
KUEUE, TRAINER, JOBSET = "kueue.x-k8s.io", "trainer.kubeflow.org", "jobset.x-k8s.io"
COORDINATION, ADMISSION_GROUP = "coordination.k8s.io", "admissionregistration.k8s.io"
TEAM = "team-a"
"""A namespace the jobs run in; the rights are cluster-wide, so any name will do."""


def needed(full: str, ns: str, lease: tuple[str, str]) -> list[tuple[str, Check]]:
    """Every call the chart's ServiceAccount makes, and where in the code it is made."""
    lease_ns, lease_name = lease
    checks: list[tuple[str, Check]] = [
        # agent/runtime/kube.py and serving/watch.py: the watches (LIST then WATCH, all namespaces).
        ("agent: watch Workloads", ("list", KUEUE, "workloads", {})),
        ("agent: watch Workloads", ("watch", KUEUE, "workloads", {})),
        ("agent: watch AdmissionChecks", ("list", KUEUE, "admissionchecks", {})),
        ("agent: watch AdmissionChecks", ("watch", KUEUE, "admissionchecks", {})),
        ("agent: watch JobSet pods", ("list", "", "pods", {})),
        ("agent: watch JobSet pods", ("watch", "", "pods", {})),
        ("agent: watch Nodes", ("list", "", "nodes", {})),
        ("agent: watch Nodes", ("watch", "", "nodes", {})),
        ("agent: watch TrainJobs (agent/runtime/caches.py)", ("list", TRAINER, "trainjobs", {})),
        ("agent: watch TrainJobs (agent/runtime/caches.py)", ("watch", TRAINER, "trainjobs", {})),
        ("agent: watch JobSets (agent/runtime/caches.py)", ("list", JOBSET, "jobsets", {})),
        ("agent: watch JobSets (agent/runtime/caches.py)", ("watch", JOBSET, "jobsets", {})),
        # agent/runtime/kube.py: one reconcile pass.
        ("agent: get_workload", ("get", KUEUE, "workloads", {"ns": TEAM, "name": "wl"})),
        ("agent: get_trainjob", ("get", TRAINER, "trainjobs", {"ns": TEAM, "name": "tj"})),
        ("agent: get_jobset", ("get", JOBSET, "jobsets", {"ns": TEAM, "name": "tj"})),
        ("agent: list_pods", ("list", "", "pods", {"ns": TEAM})),
        ("agent: get_job", ("get", "batch", "jobs", {"ns": TEAM, "name": "tj-node-0"})),
        ("agent: get_node", ("get", "", "nodes", {"name": "node-1"})),
        ("agent: patch_pod (dispatch's finalizer)", ("patch", "", "pods", {"ns": TEAM, "name": "p"})),
        ("agent: patch_trainjob (the raise of A)", ("patch", TRAINER, "trainjobs", {"ns": TEAM, "name": "tj"})),
        (
            "agent: patch_trainjob status=True (a lost worker's quota, agent/multicluster/lost_quota.py)",
            ("patch", TRAINER, "trainjobs", {"ns": TEAM, "name": "tj", "subresource": "status"}),
        ),
        ("agent: patch_workload (a worker's record)", ("patch", KUEUE, "workloads", {"ns": TEAM, "name": "wl"})),
        (
            "agent: apply_workload_status",
            ("patch", KUEUE, "workloads", {"ns": TEAM, "name": "wl", "subresource": "status"}),
        ),
        (
            "agent: patch_admission_check_status",
            ("patch", KUEUE, "admissionchecks", {"name": "dispatch-admission", "subresource": "status"}),
        ),
        ("agent: create_event", ("create", "", "events", {"ns": TEAM})),
        (
            "agent: patch an Event (agent/runtime/events.py: its count)",
            ("patch", "", "events", {"ns": TEAM, "name": "e"}),
        ),
        # agent/runtime/leader.py: leader election.
        ("agent: get_lease", ("get", COORDINATION, "leases", {"ns": lease_ns, "name": lease_name})),
        ("agent: replace_lease", ("update", COORDINATION, "leases", {"ns": lease_ns, "name": lease_name})),
        ("agent: create_lease", ("create", COORDINATION, "leases", {"ns": lease_ns})),
        # certs/controller.py: the Secret and our two configurations, by name.
        *[
            (f"certs: {verb} the Secret", (verb, "", "secrets", {"ns": ns, "name": f"{full}-certs"}))
            for verb in ("get", "list", "watch", "patch")
        ],
        *[
            (f"certs: {verb} {resource}", (verb, ADMISSION_GROUP, resource, {"name": full}))
            for verb in ("get", "list", "watch", "patch")
            for resource in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
        ],
    ]
    # agent/api (agent/api/rbac.py): every rule, in some namespace; the Lease's by the agent's Role.
    for rule in AGENT_RULES:
        for resource in rule["resources"]:
            plural, _, sub = resource.partition("/")
            for verb in rule["verbs"]:
                for name in rule.get("resourceNames", [""]):
                    where = {"ns": lease_ns if plural == "leases" else TEAM, "name": name, "subresource": sub}
                    checks.append((f"api: {verb} {resource}", (verb, rule["apiGroups"][0], plural, where)))
    return checks


def webhook_needed() -> list[tuple[str, Check]]:
    """Every call the webhook makes, under its own ServiceAccount (webhook/kube.py; discovery, for its
    readiness, is every authenticated user's)."""
    return [
        ("webhook: RuntimeReader", ("get", TRAINER, "trainingruntimes", {"ns": TEAM, "name": "rt"})),
        *[(f"webhook: RuntimeCopies {verb}", (verb, TRAINER, "trainingruntimes", {})) for verb in ("list", "watch")],
    ]


def webhook_forbidden(full: str, ns: str, lease: tuple[str, str]) -> list[tuple[str, Check]]:
    """What a compromised webhook must not get: the CA key, dispatch's writes, the agent's or the API's rights."""
    return [
        ("not the certificate Secret (the CA key)", ("get", "", "secrets", {"ns": ns, "name": f"{full}-certs"})),
        ("nor a watch of it", ("watch", "", "secrets", {"ns": ns, "name": f"{full}-certs"})),
        ("nor its own token's Secret", ("get", "", "secrets", {"ns": ns, "name": f"{full}-webhook-token"})),
        ("no Secret at all", ("list", "", "secrets", {})),
        ("no raise of A", ("patch", TRAINER, "trainjobs", {"ns": TEAM, "name": "tj"})),
        ("no TrainJob is created", ("create", TRAINER, "trainjobs", {"ns": TEAM})),
        ("runtime copies are only read", ("create", TRAINER, "trainingruntimes", {"ns": TEAM})),
        ("nor changed", ("patch", TRAINER, "trainingruntimes", {"ns": TEAM, "name": "rt"})),
        ("no Workload status", ("patch", KUEUE, "workloads", {"ns": TEAM, "name": "wl", "subresource": "status"})),
        ("no Lease", ("update", COORDINATION, "leases", {"ns": lease[0], "name": lease[1]})),
        ("no pod finalizer", ("patch", "", "pods", {"ns": TEAM, "name": "p"})),
        ("no caBundle injection", ("patch", ADMISSION_GROUP, "validatingwebhookconfigurations", {"name": full})),
        (
            "no token minted for dispatch",
            ("create", "", "serviceaccounts", {"ns": ns, "name": full, "subresource": "token"}),
        ),
        ("no TokenReview", ("create", "authentication.k8s.io", "tokenreviews", {})),
        ("no impersonation", ("impersonate", "", "serviceaccounts", {"ns": ns, "name": full})),
    ]


def forbidden(full: str, ns: str, lease: tuple[str, str]) -> list[tuple[str, Check]]:
    lease_ns, lease_name = lease
    return [
        ("no pod is ever deleted", ("delete", "", "pods", {"ns": TEAM, "name": "p"})),
        ("no pod is created", ("create", "", "pods", {"ns": TEAM})),
        ("pods are listed, never read one by one", ("get", "", "pods", {"ns": TEAM, "name": "p"})),
        ("nodes are never changed", ("patch", "", "nodes", {"name": "node-1"})),
        ("nor updated", ("update", "", "nodes", {"name": "node-1"})),
        ("no other Secret is read", ("get", "", "secrets", {"ns": ns, "name": "other"})),
        ("no other Secret is written", ("patch", "", "secrets", {"ns": ns, "name": "other"})),
        ("its own Secret is only patched", ("update", "", "secrets", {"ns": ns, "name": f"{full}-certs"})),
        ("nor deleted", ("delete", "", "secrets", {"ns": ns, "name": f"{full}-certs"})),
        ("Secrets are not listed", ("list", "", "secrets", {"ns": ns})),
        ("no Secret elsewhere", ("get", "", "secrets", {"ns": "kube-system", "name": f"{full}-certs"})),
        (
            "no other webhook configuration is patched",
            ("patch", ADMISSION_GROUP, "validatingwebhookconfigurations", {"name": "other"}),
        ),
        ("nor another mutating one", ("patch", ADMISSION_GROUP, "mutatingwebhookconfigurations", {"name": "other"})),
        (
            "ours is not deleted by the servers",
            ("delete", ADMISSION_GROUP, "validatingwebhookconfigurations", {"name": full}),
        ),
        ("none is created", ("create", ADMISSION_GROUP, "validatingwebhookconfigurations", {})),
        ("ours is not replaced", ("update", ADMISSION_GROUP, "mutatingwebhookconfigurations", {"name": full})),
        ("configurations are not listed", ("list", ADMISSION_GROUP, "validatingwebhookconfigurations", {})),
        (
            "policies are not touched",
            ("patch", ADMISSION_GROUP, "validatingadmissionpolicies", {"name": f"{full}-identity"}),
        ),
        ("another Lease is not renewed", ("update", COORDINATION, "leases", {"ns": lease_ns, "name": "other"})),
        ("nor is the Lease deleted", ("delete", COORDINATION, "leases", {"ns": lease_ns, "name": lease_name})),
        ("no Lease elsewhere", ("update", COORDINATION, "leases", {"ns": "kube-system", "name": lease_name})),
        ("AdmissionChecks are not changed", ("patch", KUEUE, "admissionchecks", {"name": "dispatch-admission"})),
        ("nor deleted", ("delete", KUEUE, "admissionchecks", {"name": "dispatch-admission"})),
        ("Workloads are not deleted", ("delete", KUEUE, "workloads", {"ns": TEAM, "name": "wl"})),
        ("Workloads are not replaced", ("update", KUEUE, "workloads", {"ns": TEAM, "name": "wl"})),
        # A TrainJob's status is Trainer's (and, where MultiKueue manages it, Kueue's): the agent's patch of it is
        # confined by the owner policy to the TrainJobs MultiKueue manages; it never replaces it.
        (
            "a TrainJob's status is never replaced",
            ("update", TRAINER, "trainjobs", {"ns": TEAM, "name": "tj", "subresource": "status"}),
        ),
        ("JobSets are only read", ("delete", JOBSET, "jobsets", {"ns": TEAM, "name": "tj"})),
        ("no RBAC is granted", ("create", "rbac.authorization.k8s.io", "clusterrolebindings", {})),
        # Start reads and creates the prologue's ConfigMap (AGENT_RULES); nothing more of ConfigMaps.
        ("no ConfigMap is changed", ("update", "", "configmaps", {"ns": TEAM, "name": PROLOGUE_CONFIGMAP})),
        ("nor patched", ("patch", "", "configmaps", {"ns": ns, "name": f"{full}-agent"})),
        ("nor deleted", ("delete", "", "configmaps", {"ns": TEAM, "name": PROLOGUE_CONFIGMAP})),
        ("nor listed", ("list", "", "configmaps", {"ns": TEAM})),
        ("the runtime copies are the webhook's to watch", ("watch", TRAINER, "trainingruntimes", {})),
        (
            "no ServiceAccount token is minted",
            ("create", "", "serviceaccounts", {"ns": ns, "name": full, "subresource": "token"}),
        ),
    ]


def _verdicts(cp: ControlPlane, namespace: str, sa: str, checks: list[tuple[str, Check]]) -> dict[str, bool]:
    out = {}
    for why, (verb, group, resource, where) in checks:
        allowed, _ = can(cp, namespace, sa, verb, resource, group=group, ns=where.get("ns", ""),
                         name=where.get("name", ""), subresource=where.get("subresource", ""))  # fmt: skip
        out[
            f"{why}: {verb} {group or 'core'}/{resource}{'/' + where['subresource'] if where.get('subresource') else ''} {where}"
        ] = allowed
    return out


def test_the_service_account_may_do_exactly_what_the_code_does(control_plane, applied):
    r = applied
    full = r.one("Deployment")["metadata"]["name"]
    sa = r.one("Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    lease = (r.namespace, "dispatch-admission")
    allowed = _verdicts(control_plane, r.namespace, sa, needed(full, r.namespace, lease))
    assert [k for k, ok in allowed.items() if not ok] == [], "calls the code makes that the chart's RBAC refuses"
    denied = _verdicts(control_plane, r.namespace, sa, forbidden(full, r.namespace, lease))
    assert [k for k, ok in denied.items() if ok] == [], "rights the chart grants that nothing needs"


def test_the_webhooks_service_account_may_only_read_runtime_copies_and_is_not_dispatch(control_plane, applied):
    r = applied
    full = r.one("Deployment")["metadata"]["name"]
    sa = f"{full}-webhook"
    lease = (r.namespace, "dispatch-admission")
    allowed = _verdicts(control_plane, r.namespace, sa, webhook_needed())
    assert [k for k, ok in allowed.items() if not ok] == [], "calls the webhook makes that its RBAC refuses"
    denied = _verdicts(control_plane, r.namespace, sa, webhook_forbidden(full, r.namespace, lease))
    assert [k for k, ok in denied.items() if ok] == [], "rights the webhook's ServiceAccount must not have"
    config = yaml.safe_load(r.one("ConfigMap", f"{full}-webhook")["data"]["config.yaml"])
    assert f"system:serviceaccount:{r.namespace}:{sa}" not in config["dispatch"]["usernames"]
    # The chart's ServiceAccount, and the pre-delete hook's (it deletes the prologue's ConfigMaps, which the owner
    # policy lets only dispatch and the garbage collector delete).
    assert config["dispatch"]["usernames"] == [
        f"system:serviceaccount:{r.namespace}:{full}",
        f"system:serviceaccount:{r.namespace}:{full}-uninstall",
    ]


def test_the_uninstall_hook_may_only_delete_our_two_configurations_and_the_prologues_configmaps(control_plane, applied):
    r = applied
    full = r.one("Deployment")["metadata"]["name"]
    (job,) = r.of("Job")
    sa = job["spec"]["template"]["spec"]["serviceAccountName"]
    kinds = ("validatingwebhookconfigurations", "mutatingwebhookconfigurations")
    allowed = _verdicts(control_plane, r.namespace, sa, [
        *[("uninstall", (verb, ADMISSION_GROUP, kind, {"name": full})) for verb in ("get", "delete") for kind in kinds],
        # The prologue's ConfigMap of this version, in any namespace: a list by its name, then each delete.
        ("prologues", ("list", "", "configmaps", {"name": PROLOGUE_CONFIGMAP})),
        ("prologues", ("delete", "", "configmaps", {"ns": "team-a", "name": PROLOGUE_CONFIGMAP})),
    ])  # fmt: skip
    assert all(allowed.values()), allowed
    denied = _verdicts(control_plane, r.namespace, sa, [
        ("not another", ("delete", ADMISSION_GROUP, kinds[0], {"name": "other"})),
        ("not patched", ("patch", ADMISSION_GROUP, kinds[1], {"name": full})),
        ("not listed", ("list", ADMISSION_GROUP, kinds[0], {})),
        ("nothing else", ("get", "", "secrets", {"ns": r.namespace, "name": f"{full}-certs"})),
        ("no other ConfigMap", ("delete", "", "configmaps", {"ns": "team-a", "name": f"{full}-webhook"})),
        ("no list of every ConfigMap", ("list", "", "configmaps", {})),
        ("no read of one", ("get", "", "configmaps", {"ns": "team-a", "name": PROLOGUE_CONFIGMAP})),
    ])  # fmt: skip
    assert not any(denied.values()), denied


# --- the processes, under the chart's RBAC -------------------------------------------------------------------


def _args(container: dict[str, Any], **replace: str) -> list[str]:
    """The container's arguments with some flags' values replaced (paths and ports of this machine)."""
    out = []
    for arg in container["args"]:
        flag = arg.split("=", 1)[0]
        key = flag.lstrip("-").replace("-", "_")
        out.append(f"{flag}={replace[key]}" if key in replace else arg)
    return out


def _config(r: Rendered, configmap: str, key: str, into: Path) -> Path:
    into.write_text(r.one("ConfigMap", configmap)["data"][key])
    return into


def _wait(what: str, fn, process=None, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        if process is not None and not process.alive():
            raise AssertionError(f"{what}: {process.describe_exit()}")
        time.sleep(0.2)
    raise AssertionError(
        f"timed out after {timeout}s waiting for {what}" + (f": {process.describe_exit()}" if process else "")
    )


def _get(url: str, context: ssl.SSLContext | None = None) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as resp:
            return resp.status
    except urllib.error.HTTPError as err:
        return err.code
    except OSError:
        return 0


def _https_status(port: int, server_name: str, context: ssl.SSLContext, path: str = "/readyz") -> int:
    """GET over TLS to 127.0.0.1, verifying the certificate for ``server_name`` (as the API server dials it)."""
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=2) as raw,
            context.wrap_socket(raw, server_hostname=server_name) as tls,
        ):
            tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode())
            status_line = tls.recv(64).split(b"\r\n", 1)[0].decode()
    except OSError:
        return 0
    return int(status_line.split()[1])


def test_the_three_processes_run_under_the_charts_service_accounts_and_the_hook_uninstalls(
    control_plane, applied, tmp_path
):
    cp, r = control_plane, applied
    ns, full = r.namespace, r.one("Deployment")["metadata"]["name"]
    spec = r.one("Deployment")["spec"]["template"]["spec"]
    containers = {c["name"]: c for c in spec["initContainers"] + spec["containers"]}
    cp.admin.apply(r.one("Secret", f"{full}-certs"))
    configurations = [r.one("ValidatingWebhookConfiguration"), r.one("MutatingWebhookConfiguration")]
    for doc in configurations:
        doc = copy.deepcopy(doc)
        for hook in doc["webhooks"]:
            # As rendered, but matching no namespace: the API server shared with other tests never calls it.
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": f"{ns}-nothing"}}
        cp.admin.apply(doc)
    kubeconfig = cp.service_account_kubeconfig(ns, spec["serviceAccountName"])
    python = [sys.executable, "-m"]
    try:
        # The certificate controller fills the empty Secret and injects into both configurations (--once:
        # it exits 0 once ready, which needs both, under exactly the chart's rights, watches included).
        out = tmp_path / "tls"
        argv = [*python, "certs", *_args(containers["certs"], out=str(out), health_port="0"),
                "--kubeconfig", str(kubeconfig), "--once", "--once-timeout=60s"]  # fmt: skip
        done = subprocess.run(argv, env={**os.environ, "POD_NAMESPACE": ns}, cwd=ROOT,
                              capture_output=True, text=True, timeout=90)  # fmt: skip
        assert done.returncode == 0, done.stderr
        secret = cp.admin.get("v1", "Secret", f"{full}-certs", ns)
        assert {"ca.crt", "ca.key", "tls.crt", "tls.key"} <= set(secret["data"])
        for doc in configurations:
            live = cp.admin.get(ADMISSION, doc["kind"], full)
            assert all(h["clientConfig"].get("caBundle") for h in live["webhooks"]), f"{doc['kind']} injected"

        # What a client trusting the injected bundle accepts, for the name the API server (and the
        # supervisor) dials: <service>.<namespace>.svc.
        live = cp.admin.get(ADMISSION, "ValidatingWebhookConfiguration", full)
        context = ssl.create_default_context(
            cadata=base64.b64decode(live["webhooks"][0]["clientConfig"]["caBundle"]).decode()
        )
        name = f"{full}.{ns}.svc"
        tls = {"tls_cert_file": str(out / "tls.crt"), "tls_private_key_file": str(out / "tls.key")}

        # The agent: every watch lists and it takes the Lease (its readiness needs the first, the Lease the
        # second), and it serves the supervisor API with the controller's certificate.
        agent_config = _config(r, f"{full}-agent", "config.yaml", tmp_path / "agent.yaml")
        health, api_port = free_port(), free_port()
        flags = _args(containers["agent"], config=str(agent_config), **tls)
        agent = cp.supervisor.start(f"chart-agent-{ns}", [
            *python, "agent", *flags, "--kubeconfig", str(kubeconfig), "--health-port", str(health),
            "--api-port", str(api_port), "--bind-address", "127.0.0.1", "--identity", "chart-test",
        ])  # fmt: skip
        try:
            _wait("the agent's /readyz", lambda: _get(f"http://127.0.0.1:{health}/readyz") == 200, agent)
            lease = yaml.safe_load(agent_config.read_text())
            _wait(
                "the agent holding the Lease",
                lambda: ((cp.admin.get_or_none("coordination.k8s.io/v1", "Lease", lease["leaseName"],
                          lease["leaseNamespace"]) or {}).get("spec", {}).get("holderIdentity") == "chart-test"),
                agent,
            )  # fmt: skip
            _wait(
                f"the agent API over TLS for {name}",
                lambda: _https_status(api_port, name, context, OPENAPI_PATH) == 200,
                agent,
            )
        finally:
            cp.supervisor.stop(agent.name)

        # The webhook: serves the same certificate; ready means it reaches the API server (the watch of the
        # runtime copies listed) with a token of its own ServiceAccount, which is all the webhook container holds.
        webhook_config = _config(r, f"{full}-webhook", "config.yaml", tmp_path / "webhook.yaml")
        port = free_port()
        flags = _args(containers["webhook"], config=str(webhook_config), port=str(port), bind_address="127.0.0.1",
                      shutdown_delay_duration="0s", **tls)  # fmt: skip
        webhook_kubeconfig = cp.service_account_kubeconfig(ns, f"{full}-webhook")
        webhook = cp.supervisor.start(
            f"chart-webhook-{ns}", [*python, "webhook", *flags, "--kubeconfig", str(webhook_kubeconfig)]
        )
        try:
            _wait(
                f"the webhook's /readyz over TLS for {name}", lambda: _https_status(port, name, context) == 200, webhook
            )
        finally:
            cp.supervisor.stop(webhook.name)

        # The pre-delete hook, under its own ServiceAccount: both configurations go; again, nothing to do.
        (job,) = r.of("Job")
        hook_spec = job["spec"]["template"]["spec"]
        hook_kubeconfig = cp.service_account_kubeconfig(ns, hook_spec["serviceAccountName"])
        (hook,) = hook_spec["containers"]
        argv = [*python, "certs", *hook["args"], "--kubeconfig", str(hook_kubeconfig)]
        first = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert first.returncode == 0, first.stderr
        # Then the prologue's ConfigMaps in every namespace: on this shared API server, those other tests' Starts
        # made, if any (what they are and that they go: test_install_from_release.py); none are left after it.
        done = first.stdout.splitlines()
        assert done[:2] == [
            f"ValidatingWebhookConfiguration {full}: deleted",
            f"MutatingWebhookConfiguration {full}: deleted",
        ]
        assert len(done) == 3
        assert done[2].startswith(f"ConfigMap {PROLOGUE_CONFIGMAP}: "), done
        for doc in configurations:
            assert cp.admin.get_or_none(ADMISSION, doc["kind"], full) is None
        again = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines() == [
            f"ValidatingWebhookConfiguration {full}: absent",
            f"MutatingWebhookConfiguration {full}: absent",
            f"ConfigMap {PROLOGUE_CONFIGMAP}: none",
        ]
    finally:
        for doc in configurations:
            cp.admin.delete(ADMISSION, doc["kind"], full)
