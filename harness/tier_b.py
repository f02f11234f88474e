"""Tier B: tier A plus kube-controller-manager, kube-scheduler, kwok nodes, and the JobSet, Trainer
and Kueue managers as local processes with their own webhooks registered in the API server.

Ready to use once `start_tier_b()` returns: nodes Ready, every manager's webhooks answering through
the API server, a ClusterTrainingRuntime, a ResourceFlavor and an active ClusterQueue; call
`create_local_queue(namespace)` for a LocalQueue.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import os
import ssl
import time
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from certs import pki
from contract.keys import POD_FINALIZER
from contract.multicluster import ROLE_SINGLE, ROLE_WORKER, Role
from harness.binaries import TIER_B_BINARIES
from harness.cluster import LOOPBACK, ControlPlane, free_port, load_yaml_docs
from harness.kube_http import ApiError, KubeHttp
from harness.kubeconfig import write_kubeconfig
from harness.processes import wait_until
from harness.webhooks import (
    ServiceRef,
    apply_json6902_patches,
    dump_ca_bundle,
    external_name_service,
    kueue_webhooks,
    wire_to_service,
    with_prefix,
)
from webhook import owners
from webhook.config import DEFAULT_KUEUE_USERNAME, Config, Owners, Principals
from webhook.configurations import NAME, namespace_selector
from webhook.dependents import dependents_policy
from webhook.rules.multicluster import mark_copy_policy, worker_policies
from webhook.rules.owners import owner_policies
from webhook.rules.record_start import record_start_policy
from webhook.rules.unsuspend import start_approval_policy

KUEUE_NAMESPACE = "kueue-system"
KUEUE_WEBHOOK_SERVICE = "kueue-webhook-service"
# Kueue's CRDs that upstream installs with a conversion webhook (config/components/crd/kustomization.yaml).
KUEUE_CONVERSION_CRDS = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
JOBSET_NAMESPACE = "jobset-system"
TRAINER_NAMESPACE = "kubeflow-system"

RESOURCE_FLAVOR = "default-flavor"
CLUSTER_QUEUE = "cluster-queue"
LOCAL_QUEUE = "user-queue"
TRAINING_RUNTIME = "torch-distributed"
CLUSTER_QUEUE_QUOTA = {"cpu": "64", "memory": "256Gi"}
NODE_CAPACITY = {"cpu": "32", "memory": "256Gi", "pods": "110"}

# A pod of a Job completes only when its pod template carries this annotation (value "true"); by
# default kwok keeps pods Running, as long training jobs are.
# The nodes kwok plays the kubelet of (tier C's real nodes are their own kubelets').
KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"
KWOK_COMPLETE_ANNOTATION = "kwok.harness.dispatch.phpboyscout.uk/complete"
# A test's stand-in for a kubelet that has not yet stopped a deleted pod's containers (a long grace
# period, a slow runtime), and stop_node_heartbeat's for a lost one: the harness's kubelet stage leaves
# such a pod Running, so it "may still run".
KWOK_SLOW_KUBELET_ANNOTATION = "kwok.harness.dispatch.phpboyscout.uk/kubelet-slow"
# Lease holder written by stop_node_heartbeat: kwok sees the node's Lease held by someone else
# and stops renewing it and updating the node (its pods: see stop_node_heartbeat).
PARTITION_HOLDER = "dispatch-harness-partition"

# kwok's general pod stages, at the harness's pace (kwok_pod_stage_pace); the chaos stage
# pod-container-running-failed keeps upstream's timing.
KWOK_PACED_STAGES = (
    "pod-create",
    "pod-init-container-running",
    "pod-init-container-completed",
    "pod-ready",
    "pod-complete",
    "pod-delete",
)
KWOK_POD_STEP_MS = 200

# Node lifecycle timing: kwok renews leases every duration/4 (5 s); the controller manager
# declares a node unreachable after 20 s without renewal (default 50 s, too slow for tests).
NODE_LEASE_SECONDS = 20
NODE_MONITOR_GRACE = "20s"
NODE_MONITOR_PERIOD = "2s"


@dataclass
class TierB:
    control_plane: ControlPlane
    node_names: list[str]
    timings: dict[str, float] = field(default_factory=dict)
    health_urls: dict[str, str] = field(default_factory=dict)
    resource_flavor: str = RESOURCE_FLAVOR
    cluster_queue: str = CLUSTER_QUEUE
    local_queue: str = LOCAL_QUEUE
    training_runtime: str = TRAINING_RUNTIME
    kwok_config: Path | None = None
    """The stages and logs every node's kwok runs with (``_kwok_config``)."""

    @property
    def container_log(self) -> Path:
        """What kwok serves as every container's log (CRI format: ``<RFC 3339> stdout F <line>``)."""
        return self.control_plane.run_dir / "kwok" / "container.log"

    @property
    def admin(self) -> KubeHttp:
        return self.control_plane.admin

    def create_local_queue(self, namespace: str, name: str = LOCAL_QUEUE, timeout: float = 30) -> None:
        self.admin.apply(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"namespace": namespace, "name": name},
                "spec": {"clusterQueue": self.cluster_queue},
            }
        )
        wait_until(
            lambda: _condition(self.admin.get("kueue.x-k8s.io/v1beta2", "LocalQueue", name, namespace), "Active"),
            timeout,
            what=f"LocalQueue {namespace}/{name} Active",
        )

    def add_node(self, name: str, timeout: float = 30) -> None:
        """A node of its own kwok (``start_kwok``), Ready."""
        start_kwok(self, name)
        self.admin.create(kwok_node(name))
        wait_until(lambda: node_ready(self.admin, name), timeout, what=f"node {name} Ready")

    def delete_node(self, name: str) -> None:
        """The Node object gone, then its kubelet: its kwok stops."""
        self.admin.delete("v1", "Node", name)
        self.control_plane.supervisor.stop(kwok_process(name))

    def stop_node_heartbeat(self, node: str) -> None:
        """Simulates losing the node: nothing renews its Lease any more, so after the grace period the node
        lifecycle controller marks it Unknown and taints it node.kubernetes.io/unreachable; and kwok stops
        playing its kubelet for the pods there, as a dead kubelet writes nothing.

        Taking over the Lease stops kwok's renewals, but not at once its pod stages: kwok v0.8.0 decides per
        pod event from its own Lease cache, and a CI run saw it stop a deleted pod's containers there 17 s
        after the takeover. (Nor would removing the node's annotation help: kwok's informer drops an update
        that stops matching its selector instead of turning it into a delete, so the node stays managed.)
        So each pod on the node is also marked with KWOK_SLOW_KUBELET_ANNOTATION, which the harness's
        kubelet stage honours, before anything deletes it."""
        self.admin.merge_patch(
            "coordination.k8s.io/v1",
            "Lease",
            node,
            {"spec": {"holderIdentity": PARTITION_HOLDER, "leaseDurationSeconds": 86400}},
            namespace="kube-node-lease",
        )
        self._mark_pods_on(node, "true")

    def resume_node_heartbeat(self, node: str) -> None:
        """Ends the partition: the Lease expires at once and kwok takes it back, and the pods there are its to
        play again."""
        long_ago = (dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        self.admin.merge_patch(
            "coordination.k8s.io/v1",
            "Lease",
            node,
            {"spec": {"renewTime": long_ago, "leaseDurationSeconds": 1}},
            namespace="kube-node-lease",
        )
        self._mark_pods_on(node, None)

    def _mark_pods_on(self, node: str, value: str | None) -> None:
        """Sets (or, None, removes) KWOK_SLOW_KUBELET_ANNOTATION on every pod bound to ``node``."""
        on_node = self.admin.request("GET", "/api/v1/pods", query={"fieldSelector": f"spec.nodeName={node}"})
        for pod in on_node["items"]:
            meta = pod["metadata"]
            try:
                self.admin.merge_patch("v1", "Pod", meta["name"],
                                       {"metadata": {"annotations": {KWOK_SLOW_KUBELET_ANNOTATION: value}}},
                                       namespace=meta["namespace"])  # fmt: skip
            except ApiError as e:
                if e.status != 404:  # gone meanwhile: nothing left to play
                    raise


def _condition(obj: dict[str, Any], type_: str) -> bool:
    return any(c["type"] == type_ and c["status"] == "True" for c in obj.get("status", {}).get("conditions", []))


def node_ready(admin: KubeHttp, name: str) -> bool:
    return _condition(admin.get("v1", "Node", name), "Ready")


def kwok_node(name: str, zone: str = "zone-a") -> dict[str, Any]:
    """A node for kwok to manage, shaped like kwokctl's node template (no taints)."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0", KWOK_NODE_ANNOTATION: "fake"},
            "labels": {
                "beta.kubernetes.io/arch": "amd64",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/role": "agent",
                "node-role.kubernetes.io/agent": "",
                "topology.kubernetes.io/zone": zone,
                "type": "kwok",
            },
        },
        "spec": {},
        "status": {
            "allocatable": dict(NODE_CAPACITY),
            "capacity": dict(NODE_CAPACITY),
            "nodeInfo": {
                "architecture": "amd64",
                "kubeletVersion": "fake",
                "kubeProxyVersion": "fake",
                "operatingSystem": "linux",
            },
            "phase": "Running",
        },
    }


def kwok_stages(stage_dir: Path) -> list[dict[str, Any]]:
    """kwok's node stages (initialize, heartbeat with lease) and general pod stages, with pod
    completion gated behind KWOK_COMPLETE_ANNOTATION and the failure chaos stage (label-gated); the pod
    stages at the harness's pace (kwok_pod_stage_pace)."""
    stages: list[dict[str, Any]] = []
    for path in sorted(stage_dir.glob("*.yaml")):
        for stage in load_yaml_docs(path):
            if stage["spec"]["resourceRef"]["kind"] == "Pod":
                stage = kwok_pod_stage_pace(stage)
            if stage["metadata"]["name"] == "pod-complete":
                stage = copy.deepcopy(stage)
                stage["spec"]["selector"]["matchExpressions"].append(
                    {
                        "key": f'.metadata.annotations["{KWOK_COMPLETE_ANNOTATION}"]',
                        "operator": "In",
                        "values": ["true"],
                    }
                )
            stages.append(stage)
    stages.append(kubelet_terminates_deleted_pods())
    return stages


def kwok_pod_stage_pace(stage: dict[str, Any]) -> dict[str, Any]:
    """A pod stage without kwok's random wait: each step (created, init containers, ready, completed) takes
    KWOK_POD_STEP_MS instead of 1 s plus up to 5 s of jitter, and a deleted pod goes after that step instead of at a
    random moment of its grace period (up to 30 s). Four steps a start made each pod start 4-24 s, and the suite
    waits on hundreds of them. A test that needs a slower kubelet says so on the pod: the stage's own delay
    annotations (e.g. harness/sandbox/site.py KWOK_DELETE_DELAY) still override the step, and
    KWOK_SLOW_KUBELET_ANNOTATION keeps a deleted pod running."""
    stage = copy.deepcopy(stage)
    delay = stage["spec"].get("delay")
    if delay is not None and stage["metadata"]["name"] in KWOK_PACED_STAGES:
        delay["durationMilliseconds"] = KWOK_POD_STEP_MS
        delay.pop("jitterDurationMilliseconds", None)
        if stage["metadata"]["name"] == "pod-delete":
            delay.pop("jitterDurationFrom", None)  # the deletionTimestamp: a random moment of the grace period
    return stage


def kubelet_terminates_deleted_pods() -> dict[str, Any]:
    """What a kubelet does with a deleted pod that still has finalizers, and kwok's own stages do not: it
    stops the containers and writes a terminal phase (since 1.27, before it confirms the deletion). kwok's
    ``pod-delete`` only removes pods with no finalizers left, so without this a trainer pod carrying
    dispatch's finalizer (contract/keys.py POD_FINALIZER) would stay Running forever on a healthy node.
    Limited to pods carrying that finalizer, so every other pod behaves as kwok made it, and skipping pods
    a test marks with KWOK_SLOW_KUBELET_ANNOTATION: their kubelet has not stopped them yet."""
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": "harness-pod-terminate-when-deleted"},
        "spec": {
            "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
            "selector": {
                "matchExpressions": [
                    {"key": ".metadata.deletionTimestamp", "operator": "Exists"},
                    {"key": ".metadata.finalizers.[]", "operator": "In", "values": [POD_FINALIZER]},
                    {"key": ".status.phase", "operator": "In", "values": ["Running", "Pending"]},
                    {"key": f'.metadata.annotations["{KWOK_SLOW_KUBELET_ANNOTATION}"]', "operator": "DoesNotExist"},
                ]
            },
            "delay": {"durationMilliseconds": 500},
            "next": {
                "statusTemplate": (
                    "{{ $now := Now }}\n"
                    "containerStatuses:\n"
                    "{{ range $index, $item := .spec.containers }}\n"
                    "- image: {{ $item.image | Quote }}\n"
                    "  name: {{ $item.name | Quote }}\n"
                    "  ready: false\n"
                    "  restartCount: 0\n"
                    "  started: false\n"
                    "  state:\n"
                    "    terminated:\n"
                    "      exitCode: 137\n"
                    "      finishedAt: {{ $now | Quote }}\n"
                    "      reason: Error\n"
                    "      startedAt: {{ $now | Quote }}\n"
                    "{{ end }}\n"
                    "phase: Failed\n"
                )
            },
        },
    }


# --- health checks -----------------------------------------------------------------------------


def _http_ok(url: str) -> bool:
    # Only to poll loopback health endpoints that serve self-signed certificates.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with urllib.request.urlopen(url, context=context, timeout=5) as resp:
            return resp.status == 200
    except OSError:
        return False


def _write_yaml(path: Path, docs: list[dict[str, Any]] | dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(docs, list):
        path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    else:
        path.write_text(yaml.safe_dump(docs, sort_keys=False))
    return path


def _serving_pair(cp: ControlPlane, service: ServiceRef, dir_: Path) -> Path:
    ck = pki.make_serving_cert(
        pki.CertifiedKey(cp.pki.ca_cert.read_bytes(), cp.pki.path("ca.key").read_bytes()),
        service.dns_names[0],
        dns_names=service.dns_names,
        ip_addresses=[LOOPBACK],
    )
    dir_.mkdir(parents=True, exist_ok=True)
    (dir_ / "tls.crt").write_bytes(ck.cert_pem)
    (dir_ / "tls.key").write_bytes(ck.key_pem)
    (dir_ / "tls.key").chmod(0o600)
    return dir_


def _project_secret(admin: KubeHttp, namespace: str, name: str, dir_: Path) -> bool:
    """Writes the Secret's keys as files into `dir_`, as a kubelet's secret volume would; False while
    the Secret has no data yet."""
    secret = admin.get("v1", "Secret", name, namespace)
    data = secret.get("data") or {}
    if not data:
        return False
    dir_.mkdir(parents=True, exist_ok=True)
    for key, value in data.items():
        path = dir_ / key
        path.write_bytes(base64.b64decode(value))
        path.chmod(0o600)
    return True


def _dry_run_create(admin: KubeHttp, obj: dict[str, Any]) -> Callable[[], bool]:
    """A probe that passes once a server-side dry-run create gets through every admission webhook."""

    def probe() -> bool:
        meta = obj["metadata"]
        path = admin.collection_path(obj["apiVersion"], obj["kind"], meta.get("namespace"))
        try:
            admin.request("POST", path, obj, query={"dryRun": "All"})
        except ApiError as e:
            if e.status == 409:  # AlreadyExists: admission passed
                return True
            raise
        return True

    return probe


# --- the components ----------------------------------------------------------------------------

SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
COMPONENTS_GROUP: Final = "dispatch-harness:components"
"""Kueue, JobSet, Trainer and kwok: bound to cluster-admin, as their upstream RBAC would grant them what they use."""
NODES_GROUP: Final = "system:nodes"
COMPONENT_IDENTITIES: Final = {
    # As their upstream manifests run them, so that dispatch's default-deny policies see the principals their
    # defaults name (webhook/owners.py).
    "kueue": (DEFAULT_KUEUE_USERNAME, (COMPONENTS_GROUP,)),
    "jobset": (owners.DEFAULT_USERNAMES[owners.JOBSET][0], (COMPONENTS_GROUP,)),
    "trainer": (owners.DEFAULT_USERNAMES[owners.TRAINER][0], (COMPONENTS_GROUP,)),
}


def kwok_identity(node: str) -> tuple[str, tuple[str, ...]]:
    """A node's kwok plays its kubelet as that node: system:node:<node> in system:nodes, so the node authorizer,
    NodeRestriction and dispatch's policies confine it to that node's pods and Lease as they do a real kubelet (and
    in COMPONENTS_GROUP: its RBAC as the other components')."""
    return f"{owners.NODE_USER_PREFIX}{node}", (NODES_GROUP, COMPONENTS_GROUP)


def component_kubeconfig(cp: ControlPlane, component: str) -> Path:
    """The admin's credentials acting as the component (impersonation: a ServiceAccount's username is too long for
    a certificate's CN)."""
    return _kubeconfig_as(cp, component, COMPONENT_IDENTITIES[component])


def _kubeconfig_as(cp: ControlPlane, name: str, identity: tuple[str, tuple[str, ...]]) -> Path:
    path = cp.run_dir / "kubeconfigs" / f"{name}.kubeconfig"
    return write_kubeconfig(path, cp.admin_credentials, name, impersonate=identity)


def install_owner_policies(
    cp: ControlPlane,
    *,
    multicluster_role: Role = ROLE_SINGLE,
    multikueue: Principals | None = None,
    manager_agent: Principals | None = None,
) -> None:
    """dispatch's owner policies (webhook/owners.py), and the policy that refuses strangers' blocking owner references
    to a dispatch job's objects (webhook/dependents.py), over every namespace of tier B, from its start: whatever a
    test does, the real controllers do their work under them, as they would beside the chart. Kueue, JobSet, Trainer
    and kwok are known by the identities above, kube-controller-manager's controllers and the scheduler by their
    own; dispatch is any ServiceAccount (the tests' agents run as ServiceAccounts of their own namespaces), and the
    harness's admin, which plays the parts no controller plays here, is break-glass. Beside them the chart's
    MutatingAdmissionPolicy ``record-start`` (webhook/policies.py ``record_start_policy``), of the role, as the
    chart binds it: in Kueue mode A rises in the write that unsuspends the TrainJob (Kueue's), so without it no
    readmission would be numbered; and the unsuspend policy's rule that a Kueue-mode start carries the readmission
    gate's approval of its A (``start_approval_policy``), which Preflight proves. A test that polices strangers
    installs the chart's other policies on its namespace besides. A MultiKueue worker's (harness.multicluster) are
    installed again as the chart's in role worker, with the manager's MultiKueue principal (``multikueue``), and the
    manager agent's (``manager_agent``) with its own policy (webhook/policies.py ``worker_policies``: it writes only
    replicas and the prologue's ConfigMap), and the chart's MutatingAdmissionPolicy ``mark-copy`` (MultiKueue's
    copies created marked unverified: a worker's agent in role worker verifies them), and the worker's own policies
    (the manager agent's writes, its contact Lease)."""
    config = policy_config(multicluster_role, multikueue, manager_agent)
    for doc in worker_policies(config, "dispatch-system"):
        doc["metadata"]["name"] = doc["metadata"]["name"].replace(NAME, HARNESS_POLICY_PREFIX, 1)
        if "policyName" in doc["spec"]:
            doc["spec"]["policyName"] = doc["spec"]["policyName"].replace(NAME, HARNESS_POLICY_PREFIX, 1)
        cp.admin.apply(doc)
    for policy in [*owner_policies(config), dependents_policy(config), start_approval_policy(config)]:
        name = policy["metadata"]["name"].replace(NAME, HARNESS_POLICY_PREFIX, 1)
        policy["metadata"]["name"] = name
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": namespace_selector("dispatch-system")},
            },
        }
        cp.admin.apply(policy)
        cp.admin.apply(binding)
    marks = mark_copy_policy("dispatch-system") if multicluster_role == ROLE_WORKER else []
    for doc in record_start_policy("dispatch-system", multicluster_role) + marks:
        doc["metadata"]["name"] = doc["metadata"]["name"].replace(NAME, HARNESS_POLICY_PREFIX, 1)
        if "policyName" in doc["spec"]:
            doc["spec"]["policyName"] = doc["spec"]["policyName"].replace(NAME, HARNESS_POLICY_PREFIX, 1)
        cp.admin.apply(doc)


HARNESS_POLICY_PREFIX: Final = "dispatch-harness"


def policy_config(
    multicluster_role: Role = ROLE_SINGLE, multikueue: Principals | None = None, manager_agent: Principals | None = None
) -> Config:
    """The webhook config tier B's policies are made from (``install_owner_policies``): dispatch is any
    ServiceAccount, the harness's admin is break-glass."""
    return Config(
        dispatch=Principals(groups=("system:serviceaccounts",)),
        owners=Owners(breakGlass=Principals(groups=("system:masters",))),
        multiclusterRole=multicluster_role,
        multikueue=multikueue or Principals(),
        managerAgent=manager_agent or Principals(),
    )


STAND_IN_NODE: Final = "kwok-stand-ins"
STAND_IN_TAINT: Final = {"key": "dispatch-harness/stand-ins", "effect": "NoSchedule"}
"""A cluster that runs no job (a MultiKueue manager) has no node for jobs; its components' stand-ins get one of
their own, tainted, so that a job's pod sent there by mistake still stays Pending."""


def _stand_in_node(tb: TierB, timeout: float) -> None:
    start_kwok(tb, STAND_IN_NODE)
    node = kwok_node(STAND_IN_NODE)
    node["spec"]["taints"] = [STAND_IN_TAINT]
    tb.admin.apply(node)
    wait_until(lambda: node_ready(tb.admin, STAND_IN_NODE), timeout, what=f"node {STAND_IN_NODE} Ready")


def _component_deployments(cp: ControlPlane, components: list[str]) -> Callable[[], bool]:
    """Each component's ServiceAccount, and a Deployment of one pod running as it on kwok's nodes. The components run
    here as local processes under that name (impersonated); on a cluster it is their Deployment's pod's, and the
    agent's Preflight reads both before it trusts the name (agent/api/principals.py). Whether every pod runs."""
    accounts = []
    for component in components:
        username, _ = COMPONENT_IDENTITIES[component]
        namespace, _, name = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
        cp.ensure_service_account(namespace, name)
        labels = {"app.kubernetes.io/name": name, "dispatch-harness/stand-in": component}
        container = {"name": "manager", "image": f"registry.invalid/dispatch-harness/{component}:stand-in"}
        pod = {"serviceAccountName": name, "automountServiceAccountToken": False, "containers": [container],
               "nodeSelector": {"type": "kwok"}, "tolerations": [{**STAND_IN_TAINT, "operator": "Exists"}]}  # fmt: skip
        cp.admin.apply({"apiVersion": "apps/v1", "kind": "Deployment",
                        "metadata": {"name": name, "namespace": namespace},
                        "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                                 "template": {"metadata": {"labels": labels}, "spec": pod}}})  # fmt: skip
        accounts.append((namespace, name))

    def running() -> bool:
        return all(
            any(
                p.get("status", {}).get("phase") == "Running" and p["spec"].get("serviceAccountName") == name
                for p in cp.admin.list("v1", "Pod", namespace)
            )
            for namespace, name in accounts
        )

    return running


def _grant_components(cp: ControlPlane) -> None:
    cp.admin.apply(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "dispatch-harness-components"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": COMPONENTS_GROUP}],
        }
    )


def _start_kube_components(tb: TierB) -> None:
    cp = tb.control_plane
    bins = cp.artifacts
    run = cp.run_dir
    for component, binary, extra in (
        (
            "controller-manager",
            "kube-controller-manager",
            [
                "--leader-elect=false",
                f"--service-account-private-key-file={cp.pki.path('sa.key')}",
                f"--root-ca-file={cp.pki.ca_cert}",
                f"--cluster-signing-cert-file={cp.pki.ca_cert}",
                f"--cluster-signing-key-file={cp.pki.path('ca.key')}",
                # As kubeadm: each controller acts under its own service account and RBAC role.
                "--use-service-account-credentials=true",
                "--controllers=*",
                f"--node-monitor-period={NODE_MONITOR_PERIOD}",
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
            ],
        ),
        ("scheduler", "kube-scheduler", ["--leader-elect=false"]),
    ):
        kubeconfig = cp.component_kubeconfig(component)
        port = free_port()
        cp.supervisor.start(
            binary,
            [
                bins.binary(binary),
                f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}",
                f"--bind-address={LOOPBACK}",
                f"--secure-port={port}",
                f"--cert-dir={run / binary}",
                "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
                "--profiling=false",
                *extra,
            ],
        )
        tb.health_urls[binary] = f"https://{LOOPBACK}:{port}/healthz"


def _kwok_config(tb: TierB) -> Path:
    """The stages and logs of every node's kwok, written once."""
    cp = tb.control_plane
    tb.container_log.parent.mkdir(parents=True, exist_ok=True)
    tb.container_log.touch()
    # kwok serves the kubelet's log endpoint: every container's log is this file (CRI format), and each
    # node advertises its kwok's port, so `pods/log` through the API server reaches it as it would a kubelet.
    logs = {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "ClusterLogs",
        "metadata": {"name": "all-containers"},
        "spec": {"logs": [{"logsFile": str(tb.container_log), "follow": True}]},
    }
    stages = kwok_stages(cp.artifacts.manifests_dir / "kwok" / "stages")
    return _write_yaml(cp.run_dir / "kwok" / "kwok.yaml", [*stages, logs])


def kwok_process(node: str) -> str:
    """The name, in the control plane's supervisor, of the kwok that plays ``node``'s kubelet."""
    return f"kwok-{node}"


def start_kwok(tb: TierB, node: str) -> None:
    """One kwok per node, as that node's kubelet (``kwok_identity``): one process playing every node would be a
    member of system:nodes that no node's name confines."""
    cp = tb.control_plane
    if tb.kwok_config is None:
        tb.kwok_config = _kwok_config(tb)
    port = free_port()
    cp.supervisor.start(
        kwok_process(node),
        [
            cp.artifacts.binary("kwok"),
            f"--kubeconfig={_kubeconfig_as(cp, kwok_process(node), kwok_identity(node))}",
            f"--config={tb.kwok_config}",
            # Its node alone (tier C's real nodes are their kubelets').
            f"--manage-single-node={node}",
            f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            f"--node-ip={LOOPBACK}",
            f"--server-address={LOOPBACK}:{port}",
            f"--node-port={port}",
            f"--tls-cert-file={cp.pki.path('apiserver.crt')}",
            f"--tls-private-key-file={cp.pki.path('apiserver.key')}",
        ],
    )


def _start_jobset(tb: TierB) -> Callable[[], None]:
    cp = tb.control_plane
    service = ServiceRef(JOBSET_NAMESPACE, "jobset-webhook-service", free_port())
    health = free_port()
    certs = _serving_pair(cp, service, cp.run_dir / "jobset" / "certs")
    manifests = cp.artifacts.manifests_dir / "jobset"
    config = yaml.safe_load((manifests / "controller_manager_config.yaml").read_text())
    config.update(
        {
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"port": service.port, "host": LOOPBACK, "certDir": str(certs)},
            "metrics": {"bindAddress": "0"},
            "health": {"healthProbeBindAddress": f"{LOOPBACK}:{health}"},
        }
    )
    config_path = _write_yaml(cp.run_dir / "jobset" / "config.yaml", config)
    cp.supervisor.start(
        "jobset",
        [
            cp.artifacts.binary("jobset"),
            f"--config={config_path}",
            f"--kubeconfig={component_kubeconfig(cp, 'jobset')}",
        ],
    )

    def install() -> None:
        wait_until(lambda: _http_ok(f"http://{LOOPBACK}:{health}/readyz"), 60, what="jobset /readyz")
        kustomization = yaml.safe_load((manifests / "webhook-kustomization.yaml").read_text())
        patches = [
            (p["target"], yaml.safe_load((manifests / p["path"]).read_text())) for p in kustomization.get("patches", [])
        ]
        docs = apply_json6902_patches(load_yaml_docs(manifests / "webhook.yaml"), patches)
        docs = wire_to_service(with_prefix(docs, "jobset-"), service, dump_ca_bundle(cp.pki.ca_cert.read_bytes()))
        cp.apply_all([external_name_service(service), *docs])
        probe = {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            # Kueue's webhooks (registered before Kueue runs) skip its own namespace.
            "metadata": {"namespace": KUEUE_NAMESPACE, "name": "webhook-probe"},
            "spec": {"replicatedJobs": [_probe_replicated_job()]},
        }
        wait_until(_dry_run_create(cp.admin, probe), 60, what="JobSet webhooks answering")

    return install


def _probe_replicated_job() -> dict[str, Any]:
    return {
        "name": "probe",
        "replicas": 1,
        "template": {
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "c", "image": "registry.invalid/probe"}],
                    }
                }
            }
        },
    }


def _start_trainer(tb: TierB) -> Callable[[], None]:
    cp = tb.control_plane
    service = ServiceRef(TRAINER_NAMESPACE, "kubeflow-trainer-controller-manager", free_port())
    health = free_port()
    # The Trainer takes no cert dir setting; controller-runtime's default is $TMPDIR/k8s-webhook-server.
    tmpdir = cp.run_dir / "trainer" / "tmp"
    _serving_pair(cp, service, tmpdir / "k8s-webhook-server" / "serving-certs")
    manifests = cp.artifacts.manifests_dir / "trainer"
    config = yaml.safe_load((manifests / "controller_manager_config.yaml").read_text())
    config.update(
        {
            "health": {
                "healthProbeBindAddress": f"{LOOPBACK}:{health}",
                "readinessEndpointName": "readyz",
                "livenessEndpointName": "healthz",
            },
            "metrics": {"bindAddress": "0"},
            "webhook": {"port": service.port, "host": LOOPBACK},
            "leaderElection": {"leaderElect": False},
            "certManagement": {"enable": False},
        }
    )
    config_path = _write_yaml(cp.run_dir / "trainer" / "config.yaml", config)
    cp.supervisor.start(
        "trainer-controller-manager",
        [
            cp.artifacts.binary("trainer-controller-manager"),
            f"--config={config_path}",
            f"--kubeconfig={component_kubeconfig(cp, 'trainer')}",
        ],
        env={**os.environ, "TMPDIR": str(tmpdir)},
    )

    def install() -> None:
        wait_until(lambda: _http_ok(f"http://{LOOPBACK}:{health}/readyz"), 60, what="trainer /readyz")
        docs = load_yaml_docs(manifests / "webhook.yaml")
        patches = [
            (
                {"kind": "MutatingWebhookConfiguration"},
                yaml.safe_load((manifests / "patch_mutating.yaml").read_text()),
            ),
            (
                {"kind": "ValidatingWebhookConfiguration"},
                yaml.safe_load((manifests / "patch_validating.yaml").read_text()),
            ),
        ]
        docs = wire_to_service(
            apply_json6902_patches(docs, patches), service, dump_ca_bundle(cp.pki.ca_cert.read_bytes())
        )
        cp.apply_all([external_name_service(service), *docs])
        runtime = training_runtime(cp)
        wait_until(_dry_run_create(cp.admin, runtime), 60, what="Trainer webhooks answering")
        cp.admin.apply(runtime)

    return install


def _runtime_only(tb: TierB) -> Callable[[], None]:
    """Without Trainer: its CRDs (tier A's) and the runtime, which Kueue reads for a TrainJob's pod sets."""

    def install() -> None:
        tb.control_plane.admin.apply(training_runtime(tb.control_plane))

    return install


def training_runtime(cp: ControlPlane) -> dict[str, Any]:
    """Upstream's torch-distributed ClusterTrainingRuntime, at the pinned Trainer version."""
    path = cp.artifacts.manifests_dir / "trainer" / "runtimes" / "torch_distributed.yaml"
    (runtime,) = load_yaml_docs(path)
    return runtime


def _start_kueue(tb: TierB, overrides: Mapping[str, Any]) -> Callable[[], None]:
    cp = tb.control_plane
    service = ServiceRef(KUEUE_NAMESPACE, KUEUE_WEBHOOK_SERVICE, free_port())
    health = free_port()
    manifests = cp.artifacts.manifests_dir / "kueue"
    certs = cp.run_dir / "kueue" / "certs"

    # Kueue's own cert management (upstream's default): without it Kueue insists on a metrics cert
    # at the fixed path /etc/kueue/metrics/certs. Its rotator needs the Secret to exist, writes the
    # serving cert to certDir and injects its CA into these webhook configurations and CRDs.
    kustomization = yaml.safe_load((manifests / "webhook-kustomization.yaml").read_text())
    docs = wire_to_service(kueue_webhooks(load_yaml_docs(manifests / "webhook.yaml"), kustomization), service, None)
    cp.apply_all(
        [
            external_name_service(service),
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"namespace": KUEUE_NAMESPACE, "name": "kueue-webhook-server-cert"},
            },
            *docs,
        ]
    )
    for plural in KUEUE_CONVERSION_CRDS:
        cp.admin.merge_patch(
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            f"{plural}.kueue.x-k8s.io",
            {"spec": {"conversion": kueue_conversion(service.port)}},
        )

    config = yaml.safe_load((manifests / "controller_manager_config.yaml").read_text())
    config.update(
        {
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f"{LOOPBACK}:{health}"},
            "metrics": {"bindAddress": "0"},
            "webhook": {
                "port": service.port,
                "host": LOOPBACK,
                "certDir": str(certs),
            },
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {
                "enable": True,
                "webhookServiceName": service.name,
                "webhookSecretName": "kueue-webhook-server-cert",
            },
            "featureGates": {
                # An aggregated API server on a fixed port with certs under /visibility; not needed.
                "VisibilityOnDemand": False,
                # No kubelets: without this an admitted Workload is evicted after 30 min.
                "DisableWaitForPodsReady": True,
            },
        }
    )
    # The caller's top-level sections replace the harness's (a MultiKueue manager's `multiKueue` and
    # `integrations`: harness.multicluster).
    config.update(overrides)
    config_path = _write_yaml(cp.run_dir / "kueue" / "config.yaml", config)
    cp.supervisor.start(
        "kueue",
        [
            cp.artifacts.binary("kueue"),
            f"--config={config_path}",
            f"--kubeconfig={component_kubeconfig(cp, 'kueue')}",
            "--zap-log-level=2",
        ],
        env={**os.environ, "NAMESPACE": KUEUE_NAMESPACE},
    )

    def install() -> None:
        # Kueue's rotator writes its certificate into the Secret and waits for it to appear in certDir,
        # where the kubelet would mount the Secret; here the harness plays the kubelet.
        wait_until(
            lambda: _project_secret(cp.admin, KUEUE_NAMESPACE, "kueue-webhook-server-cert", certs),
            60,
            what="Kueue's webhook certificate in its Secret",
        )
        wait_until(lambda: _http_ok(f"http://{LOOPBACK}:{health}/readyz"), 120, what="kueue /readyz")
        flavor = {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": RESOURCE_FLAVOR},
        }
        wait_until(_dry_run_create(cp.admin, flavor), 60, what="Kueue webhooks answering")
        cp.admin.apply(flavor)
        cp.admin.apply(cluster_queue())
        wait_until(
            lambda: _condition(cp.admin.get("kueue.x-k8s.io/v1beta2", "ClusterQueue", CLUSTER_QUEUE), "Active"),
            60,
            what="ClusterQueue Active",
        )
        # Reading the stored v1beta2 object as v1beta1 goes through the conversion webhook.
        wait_until(
            lambda: cp.admin.get("kueue.x-k8s.io/v1beta1", "ClusterQueue", CLUSTER_QUEUE),
            60,
            what="Kueue conversion webhook answering",
        )

    return install


def kueue_conversion(port: int) -> dict[str, Any]:
    """Upstream's config/components/crd/patches/webhook_in_*.yaml, pointed at our port; Kueue's cert
    rotator injects the CA bundle."""
    service = {"namespace": KUEUE_NAMESPACE, "name": KUEUE_WEBHOOK_SERVICE, "path": "/convert", "port": port}
    return {
        "strategy": "Webhook",
        "webhook": {"clientConfig": {"service": service}, "conversionReviewVersions": ["v1"]},
    }


def cluster_queue() -> dict[str, Any]:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": CLUSTER_QUEUE},
        "spec": {
            "namespaceSelector": {},  # every namespace; a missing selector matches none
            "resourceGroups": [
                {
                    "coveredResources": list(CLUSTER_QUEUE_QUOTA),
                    "flavors": [
                        {
                            "name": RESOURCE_FLAVOR,
                            "resources": [{"name": k, "nominalQuota": v} for k, v in CLUSTER_QUEUE_QUOTA.items()],
                        }
                    ],
                }
            ],
        },
    }


def start_tier_b(
    cp: ControlPlane,
    nodes: int = 3,
    timeout: float = 180,
    *,
    kueue_config: Mapping[str, Any] | None = None,
    trainer: bool = True,
) -> TierB:
    """Extends a running tier A control plane to tier B; its processes stop with the control plane.

    ``kueue_config``: top-level sections of Kueue's configuration that replace the harness's. ``trainer=False``:
    no Trainer controller and no Trainer webhooks, only its CRDs and the ClusterTrainingRuntime (a MultiKueue
    manager's: Trainer v2.2.1 runs a TrainJob whatever its ``spec.managedBy``, harness.multicluster)."""
    cp.artifacts.require(TIER_B_BINARIES)
    started = time.monotonic()
    tb = TierB(control_plane=cp, node_names=[f"kwok-node-{i}" for i in range(nodes)])
    for ns in (KUEUE_NAMESPACE, JOBSET_NAMESPACE, TRAINER_NAMESPACE):
        cp.admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    _grant_components(cp)
    install_owner_policies(cp)
    before = {p.name for p in cp.supervisor.processes}
    _start_kube_components(tb)
    for name in tb.node_names:
        start_kwok(tb, name)
    installers = [
        ("jobset", _start_jobset(tb)),
        ("trainer", _start_trainer(tb) if trainer else _runtime_only(tb)),
        ("kueue", _start_kueue(tb, kueue_config or {})),
    ]
    # Only tier B's own components: a test may have stopped processes of its own on purpose.
    components = [p.name for p in cp.supervisor.processes if p.name not in before]

    def alive(check: Callable[[], bool]) -> Callable[[], bool]:
        def probe() -> bool:
            cp.supervisor.check_alive(components)
            return check()

        return probe

    for name in tb.node_names:
        cp.admin.apply(kwok_node(name))
    wait_until(alive(lambda: all(node_ready(cp.admin, n) for n in tb.node_names)), timeout, what="kwok nodes Ready")
    tb.timings["nodes_ready"] = time.monotonic() - started
    for component, url in tb.health_urls.items():
        wait_until(alive(lambda url=url: _http_ok(url)), timeout, what=f"{component} /healthz")
    tb.timings["kube_components_ready"] = time.monotonic() - started
    for name, install in installers:
        install()
        cp.supervisor.check_alive(components)
        tb.timings[f"{name}_ready"] = time.monotonic() - started
    if not tb.node_names:
        _stand_in_node(tb, timeout)
    # After Kueue: its webhook on Deployments fails closed until it serves.
    deployed = _component_deployments(cp, [c for c in COMPONENT_IDENTITIES if trainer or c != "trainer"])
    wait_until(alive(deployed), timeout, what="the components' Deployments running")
    cp.timings["tier_b_ready"] = time.monotonic() - started
    return tb
