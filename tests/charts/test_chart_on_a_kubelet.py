"""The chart installed for real (tier C): `helm install`, `helm test`, `helm upgrade` and `helm uninstall` as
docs/install.md gives them (charts/readme.py COMMANDS), with default values but the image, on a real kubelet.

The pods run from the image scripts/build-image built; they reach the API server through the `kubernetes`
Service and the API server reaches the webhook through the chart's Service, both by kube-proxy
(harness/service_network.py). kwok's nodes run nothing, so they are cordoned for the test, and the real node's
taint (which keeps tier B's workloads off it) is lifted: the chart schedules with its own defaults.

It installs from scratch and shares no installation with the other tier C tests: the install, upgrade and
uninstall are what it tests.
"""

from __future__ import annotations

import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from charts.readme import COMMANDS
from contract.keys import ADMISSION_CHECK_NAME
from harness.kube_http import ApiError, KubeHttp
from harness.pytest_plugin import TierC
from harness.real_node import REAL_NODE_TAINT, real_node_pod_spec
from harness.sandbox.on_node import deployment_pods
from tests.agent.gate.kit import eventually
from tests.charts.helm import readme_argv, run_helm
from tests.charts.test_on_the_api_server import _release
from webhook import selftest

pytestmark = [pytest.mark.e2e, pytest.mark.node]

ADMISSION = "admissionregistration.k8s.io/v1"
KUEUE_V = "kueue.x-k8s.io/v1beta2"
KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
CHECK = ADMISSION_CHECK_NAME  # admissionCheck.name's default
CLUSTER_SCOPED = (
    ("rbac.authorization.k8s.io/v1", "ClusterRole"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
    (ADMISSION, "ValidatingAdmissionPolicy"),
    (ADMISSION, "ValidatingAdmissionPolicyBinding"),
)
"""The release's cluster-wide objects (named after it): none may outlive `helm uninstall`."""


def test_a_pod_reaches_the_api_server_through_the_kubernetes_service(tier_c: TierC, namespace: str) -> None:
    """What every pod of the chart needs first: in-cluster configuration (KUBERNETES_SERVICE_HOST, the
    ServiceAccount's token and CA) works on the real node, through kube-proxy."""
    admin = tier_c.tier_b.admin
    script = (
        "import os, ssl, urllib.request\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount/'\n"
        "url = f\"https://{os.environ['KUBERNETES_SERVICE_HOST']}:{os.environ['KUBERNETES_SERVICE_PORT']}/version\"\n"
        "req = urllib.request.Request(url, headers={'Authorization': 'Bearer ' + open(sa + 'token').read()})\n"
        "print(urllib.request.urlopen(req, context=ssl.create_default_context(cafile=sa + 'ca.crt')).read().decode())\n"
    )
    admin.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "in-cluster", "namespace": namespace},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "c", "image": tier_c.node.artifacts.base_image, "imagePullPolicy": "Never",
                     "command": ["python3", "-c", script]}
                ],
                **real_node_pod_spec(tier_c.node.name),
            },
        }
    )  # fmt: skip

    def finished() -> dict[str, Any]:
        pod = admin.get("v1", "Pod", "in-cluster", namespace)
        assert pod["status"].get("phase") in ("Succeeded", "Failed"), pod["status"]
        return pod

    pod = eventually(finished, 120, "the in-cluster pod finished")
    log = admin.request("GET", f"/api/v1/namespaces/{namespace}/pods/in-cluster/log")
    assert pod["status"]["phase"] == "Succeeded", log
    version = log if isinstance(log, dict) else json.loads(log)  # the log is the JSON the pod printed
    assert version["gitVersion"] == tier_c.tier_b.control_plane.artifacts.versions["K8S_VERSION"]


# -- the chart -------------------------------------------------------------------------------------


def _helm(tier_c: TierC, argv: list[str], *extra: str) -> str:
    kubeconfig = str(tier_c.tier_b.control_plane.admin_kubeconfig)
    return run_helm(*argv, "--kubeconfig", kubeconfig, *extra, timeout=600).stdout


@pytest.fixture
def only_the_real_node(tier_c: TierC) -> Iterator[None]:
    """kwok's nodes cordoned and the real node's taint lifted, for the length of the test."""
    admin = tier_c.tier_b.admin
    kwok = [n["metadata"]["name"] for n in admin.list("v1", "Node") if n["metadata"]["name"] != tier_c.node.name]
    merge = "application/merge-patch+json"
    for name in kwok:
        admin.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}}, content_type=merge)
    node = admin.get("v1", "Node", tier_c.node.name)
    taints = node["spec"].get("taints") or []
    kept = [t for t in taints if t["key"] != REAL_NODE_TAINT]
    admin.request("PATCH", f"/api/v1/nodes/{tier_c.node.name}", {"spec": {"taints": kept}}, content_type=merge)
    try:
        yield
    finally:
        now = admin.get("v1", "Node", tier_c.node.name)["spec"].get("taints") or []
        back = [t for t in now if t["key"] != REAL_NODE_TAINT] + [t for t in taints if t["key"] == REAL_NODE_TAINT]
        admin.request("PATCH", f"/api/v1/nodes/{tier_c.node.name}", {"spec": {"taints": back}}, content_type=merge)
        for name in kwok:
            admin.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"unschedulable": None}}, content_type=merge)


class Prober:
    """The helm test's dry run (webhook/selftest.py), sent again and again in a thread: every answer must be
    one the webhook gave; "failed calling webhook" is an unanswered review."""

    def __init__(self, admin: KubeHttp, namespace: str) -> None:
        self.admin, self.namespace = admin, namespace
        self.answers: list[selftest.Verdict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{self.namespace}/trainjobs"
        while not self._stop.is_set():
            try:
                self.admin.request("POST", path, selftest.probe(self.namespace), query={"dryRun": "All"})
                verdict = selftest.judge(201, "")
            except ApiError as exc:
                verdict = selftest.judge(exc.status, exc.body)
            self.answers.append(verdict)
            self._stop.wait(0.2)

    def __enter__(self) -> Prober:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)


def _ready(admin: KubeHttp, namespace: str, name: str, image: str) -> dict[str, Any]:
    d = admin.get("apps/v1", "Deployment", name, namespace)
    status, replicas = d.get("status") or {}, d["spec"]["replicas"]
    assert d["spec"]["template"]["spec"]["containers"][0]["image"] == image
    assert status.get("observedGeneration") == d["metadata"]["generation"], status
    assert status.get("updatedReplicas") == replicas, status
    assert status.get("readyReplicas") == replicas, status
    assert status.get("replicas") == replicas, status  # no old pod left
    return d


def _agent_api_answers(tier_c: TierC, namespace: str, service: str) -> str:
    """The agent's API through its Service's ClusterIP (kube-proxy): an unauthenticated call is refused by the
    agent itself, over TLS with the certificate the chart's controller issued for the Service's name."""
    svc = tier_c.tier_b.admin.get("v1", "Service", service, namespace)
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "api")
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE  # the CA is checked by the certs tests
    req = urllib.request.Request(f"https://{svc['spec']['clusterIP']}:{port}/v1/status", data=b"{}", method="POST")
    try:
        urllib.request.urlopen(req, context=ctx, timeout=10)
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode(errors='replace')}"
    except OSError as exc:
        raise AssertionError(f"the agent's Service does not answer: {exc}") from exc
    return "200"


def test_helm_install_upgrade_and_uninstall_on_a_real_node(
    tier_c: TierC, namespace: str, only_the_real_node: None
) -> None:
    if tier_c.image is None:
        pytest.fail(tier_c.image_problem, pytrace=False)
    admin = tier_c.tier_b.admin
    release = _release()
    ns = f"{release}-ns"
    repository, tag = tier_c.image.rsplit(":", 1)
    upgrade_tag = "0.2.0"  # the README's upgrade: the same image under another tag
    tier_c.node.ctr("images", "tag", "--force", tier_c.image, f"{repository}:{upgrade_tag}")
    if (check := admin.get_or_none(KUEUE_V, "AdmissionCheck", CHECK)) is not None:
        # Left by another test; the chart owns this name. Kueue keeps it while a ClusterQueue names it.
        assert "meta.helm.sh/release-name" not in (check["metadata"].get("annotations") or {}), check["metadata"]
        admin.delete(KUEUE_V, "AdmissionCheck", CHECK)
        users = [q["metadata"]["name"] for q in admin.list(KUEUE_V, "ClusterQueue") if CHECK in json.dumps(q["spec"])]
        eventually(lambda: _assert(admin.get_or_none(KUEUE_V, "AdmissionCheck", CHECK) is None), 60,
                   f"AdmissionCheck {CHECK}, left by another test, deleted (ClusterQueues naming it: {users})")  # fmt: skip
    image_args = ("--set", f"image.repository={repository}", "--set", f"image.tag={tag}")
    try:
        _helm(tier_c, readme_argv(COMMANDS["install"], release, ns), *image_args)
        eventually(lambda: _ready(admin, ns, release, tier_c.image), 300, "the Deployment's pods Ready")
        pods = deployment_pods(admin, ns, release)
        assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
        assert {p["spec"]["nodeName"] for p in pods} == {tier_c.node.name}, [p["spec"] for p in pods]

        # The controller generated the certificate and injected its CA.
        assert set(admin.get("v1", "Secret", f"{release}-certs", ns).get("data") or {}) >= {"ca.crt", "tls.crt"}
        for kind in KINDS:
            hooks = admin.get(ADMISSION, kind, release)["webhooks"]
            assert all(h["clientConfig"].get("caBundle") for h in hooks), kind

        # The README's `helm test`: its pod, on the real node, has the API server call the webhook through the
        # Service; and the same dry run from here.
        out = _helm(tier_c, readme_argv(COMMANDS["test"], release, ns), "--logs")
        assert "Phase:          Succeeded" in out, out
        verdict = selftest.judge(*_dry_run(admin, namespace))
        assert verdict.result is selftest.Result.PASSED, verdict.message

        # The agent won the Lease and serves its API through the Service.
        lease = admin.get("coordination.k8s.io/v1", "Lease", CHECK, ns)
        assert lease["spec"]["holderIdentity"] in {p["metadata"]["name"] for p in pods}, lease["spec"]
        answer = eventually(lambda: _agent_api_answers(tier_c, ns, release), 60, "the agent's API answers")
        assert answer.startswith("401"), answer

        # The README's upgrade rolls the pods; every review during the rollout is answered by the webhook.
        with Prober(admin, namespace) as prober:
            _helm(tier_c, readme_argv(COMMANDS["upgrade"], release, ns))
            eventually(lambda: _ready(admin, ns, release, f"{repository}:{upgrade_tag}"), 300, "the rollout")
        unanswered = [v.message for v in prober.answers if v.result is not selftest.Result.PASSED]
        assert len(prober.answers) >= 10, len(prober.answers)
        assert not [m for m in unanswered if "failed calling webhook" in m], unanswered

        # The README's uninstall: its pre-delete hook runs on the real node and removes the configurations.
        _helm(tier_c, readme_argv(COMMANDS["uninstall"], release, ns))
        for kind in KINDS:
            assert admin.get_or_none(ADMISSION, kind, release) is None, f"{kind} left failing closed"
        left = [f"{kind} {o['metadata']['name']}" for api, kind in CLUSTER_SCOPED
                for o in admin.list(api, kind) if o["metadata"]["name"].startswith(release)]  # fmt: skip
        assert left == [], left
        assert admin.get_or_none("apps/v1", "Deployment", release, ns) is None
        assert admin.get_or_none(KUEUE_V, "AdmissionCheck", CHECK) is None

        # The API server drops deleted policies from its admission cache a moment after their deletion.
        def admitted() -> str:
            status, message = _dry_run(admin, namespace)
            assert status == 201, f"a TrainJob is still refused after the uninstall: {message}"
            return message

        eventually(admitted, 15, "a TrainJob admitted once the release is gone")
    finally:
        run_helm("uninstall", release, "--namespace", ns, "--kubeconfig",
                 str(tier_c.tier_b.control_plane.admin_kubeconfig), "--no-hooks", "--ignore-not-found",
                 check=False)  # fmt: skip
        for kind in KINDS:
            admin.delete(ADMISSION, kind, release)
        tier_c.tier_b.control_plane.delete_namespace(ns)


def _dry_run(admin: KubeHttp, namespace: str) -> tuple[int, str]:
    path = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs"
    try:
        admin.request("POST", path, selftest.probe(namespace), query={"dryRun": "All"})
    except ApiError as exc:
        return exc.status, exc.body
    return 201, ""


def _assert(value: Any) -> Any:
    assert value
    return value
