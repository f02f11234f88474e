"""dispatch installed on a local tier B cluster as the chart installs it, with the pods replaced by local
processes.

`helm template` (the real helm) renders the chart; everything that does not need a pod is applied as rendered
(ServiceAccount, RBAC, ConfigMaps, the AdmissionCheck, the ValidatingAdmissionPolicies, the webhook
configurations). The webhook configurations are the one change: their clientConfig reaches the webhook on
loopback (`url: https://127.0.0.1:<port>/...` and the caBundle of certificates from `dispatch-certs generate`)
instead of through the Service. The webhook and the agent then run as local processes, each with its
ConfigMap's file as its configuration and a kubeconfig holding a token of the ServiceAccount its container
holds in the pod, so the chart's RBAC is exactly what they have: the agent a token of the chart's
ServiceAccount from the TokenRequest API (what the pod's projected volume holds), the webhook the token that
kube-controller-manager's token controller wrote into the chart's token Secret of the webhook's own
ServiceAccount (what the webhook container mounts).
"""

from __future__ import annotations

import base64
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ulid import ULID

from harness.cluster import ADMIN_USER, LOOPBACK, ControlPlane, free_port
from harness.kube_http import ApiError, Credentials, KubeHttp
from harness.kubeconfig import write_kubeconfig
from harness.processes import ManagedProcess, tail, wait_until

CHART = Path(__file__).resolve().parents[2] / "charts" / "dispatch-k8s"
RELEASE = "dispatch-k8s"
NAMESPACE = "dispatch-system"
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
# Applied as rendered, in this order (webhook configurations last, once the webhook answers).
APPLIED_KINDS = (
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
    "ConfigMap",
    "AdmissionCheck",
    "ValidatingAdmissionPolicy",
    "ValidatingAdmissionPolicyBinding",
    "MutatingAdmissionPolicy",
    "MutatingAdmissionPolicyBinding",
)
# Rendered but not applied: what runs or reaches pods, which a cluster of kwok nodes cannot run.
NOT_APPLIED = {
    "Deployment": "its pods: the webhook and the agent run as local processes instead",
    "Service": "the webhook is reached on loopback, the agent's API too",
    "PodDisruptionBudget": "no pods",
    "Secret": "the certificate controller's (it runs in the pod); dispatch-certs generate wrote the files",
    "NetworkPolicy": "no pods",
    "ServiceMonitor": "no pods",
}
TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"
"""The one kind of Secret applied: the webhook's token, which kube-controller-manager's token controller fills."""
IDENTITY = "dispatch-k8s-sandbox"
"""The agent's holder identity in the Lease."""
TOKEN_SECONDS = 24 * 3600
"""Lifetime of the ServiceAccount tokens the local processes and the supervisor use."""

# The chart's values for a local run. Kueue, Trainer and JobSet run in tier B under the usernames of upstream's
# ServiceAccounts and each node's kwok as that node, system:node:<node> (harness/tier_b.py), so the chart's default
# principals are theirs. The sandbox's admin plays a kubelet's part, telling kwok that a trainer container exited (an
# annotation on its pod), which no owner but break-glass may write: the admin is break-glass here.
VALUES: dict[str, Any] = {
    "replicas": 1,
    "podAntiAffinity": "none",
    "podDisruptionBudget": {"enabled": False},
    "uninstallHook": {"enabled": False},
    "webhook": {"owners": {"breakGlass": {"usernames": [ADMIN_USER], "groups": []}}},
    "api": {"probeSeconds": 5},
}


def helm_env(home: Path) -> dict[str, str]:
    """helm's state under ``home``, and no kubeconfig: `helm template` needs no cluster."""
    return {
        **os.environ,
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_DATA_HOME": str(home / "data"),
        "KUBECONFIG": str(home / "no-kubeconfig"),
    }


@dataclass
class Rendered:
    docs: list[dict[str, Any]]
    helm_version: str
    file: Path

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str) -> dict[str, Any]:
        (doc,) = [d for d in self.of(kind) if d["metadata"]["name"] == name]
        return doc


MUTATING_ADMISSION_POLICY = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"


def _served_api_versions(cp: ControlPlane) -> list[str]:
    """--api-versions for what the chart asks of the cluster and the API server serves: `helm install` reads them
    from discovery, `helm template` knows only its own defaults."""
    group, version, kind = MUTATING_ADMISSION_POLICY.split("/")
    served = cp.admin.request("GET", f"/apis/{group}/{version}").get("resources", [])
    return ["--api-versions", MUTATING_ADMISSION_POLICY] if any(r.get("kind") == kind for r in served) else []


def render_chart(cp: ControlPlane, work: Path) -> Rendered:
    """`helm template` of the chart with VALUES, as helm would install it into NAMESPACE."""
    helm = cp.artifacts.binary("helm")
    env = helm_env(work / "helm-home")
    values = work / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES, sort_keys=False))
    kube_version = cp.artifacts.versions["K8S_VERSION"].lstrip("v")
    argv = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--kube-version", kube_version,
            "--values", str(values), *_served_api_versions(cp)]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=60, check=False)
    (work / "helm.log").write_text(f"+ {' '.join(argv)}\n{result.stderr}")
    if result.returncode != 0:
        raise RuntimeError(f"helm template exited {result.returncode}: {result.stderr.strip()[-1500:]}")
    version = subprocess.run([str(helm), "version", "--short"], capture_output=True, text=True, env=env,
                             timeout=30, check=False).stdout.strip()  # fmt: skip
    file = work / "chart.yaml"
    file.write_text(result.stdout)
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return Rendered(docs, version.split("+")[0] or cp.artifacts.versions.get("HELM_VERSION", "helm"), file)


def _is_hook(doc: dict[str, Any]) -> bool:
    return "helm.sh/hook" in (doc["metadata"].get("annotations") or {})


@dataclass
class Applied:
    applied: Counter[str] = field(default_factory=Counter)
    skipped: list[tuple[str, str, str]] = field(default_factory=list)
    """(kind, name, why) of what was rendered and not applied."""


def apply_chart(admin: KubeHttp, rendered: Rendered) -> Applied:
    """The namespace, then every rendered object of APPLIED_KINDS as rendered (server-side apply). Webhook
    configurations wait for `apply_webhook_configurations`; the rest is listed as not applied, with why."""
    report = Applied()
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    report.applied["Namespace"] += 1
    for kind in APPLIED_KINDS:
        for doc in rendered.of(kind):
            if not _is_hook(doc):
                admin.apply(doc)
                report.applied[kind] += 1
    # After the ServiceAccounts, as helm orders them: the token controller deletes a token Secret whose
    # ServiceAccount does not exist.
    for doc in rendered.of("Secret"):
        if doc.get("type") == TOKEN_SECRET_TYPE:
            admin.apply(doc)
            report.applied["Secret"] += 1
    for doc in rendered.docs:
        kind, name = doc["kind"], doc["metadata"]["name"]
        if _is_hook(doc):
            report.skipped.append((kind, name, "a helm hook"))
        elif kind == "Secret" and doc.get("type") == TOKEN_SECRET_TYPE:
            continue
        elif kind not in APPLIED_KINDS and kind not in WEBHOOK_KINDS:
            report.skipped.append((kind, name, NOT_APPLIED.get(kind, "not known to the sandbox")))
    return report


def loopback_webhook_configurations(rendered: Rendered, url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The rendered webhook configurations, each webhook's clientConfig changed from the Service to
    ``url`` + its path, with ``ca_pem`` as caBundle. Nothing else changes."""
    docs = []
    for kind in WEBHOOK_KINDS:
        for doc in rendered.of(kind):
            for hook in doc["webhooks"]:
                path = hook["clientConfig"]["service"]["path"]
                hook["clientConfig"] = {"url": url.rstrip("/") + path, "caBundle": base64.b64encode(ca_pem).decode()}
            docs.append(doc)
    return docs


# --- certificates and the local processes ---------------------------------------------------------------


def console_script(name: str) -> list[str]:
    """The installed console script (dispatch-webhook, dispatch-agent, dispatch-certs) beside this Python."""
    script = Path(sys.executable).parent / name
    if script.exists():
        return [str(script)]
    found = shutil.which(name)
    if found:
        return [found]
    module = {"dispatch-webhook": "webhook", "dispatch-agent": "agent", "dispatch-certs": "certs"}[name]
    return [sys.executable, "-m", module]


@dataclass(frozen=True)
class Certs:
    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def cert(self) -> Path:
        return self.dir / "tls.crt"

    @property
    def key(self) -> Path:
        return self.dir / "tls.key"


def generate_certs(work: Path) -> Certs:
    """`dispatch-certs generate`: a CA and a serving certificate for loopback, shared by the webhook and the
    agent's API, as the chart's pod shares one."""
    out = work / "certs"
    argv = [*console_script("dispatch-certs"), "generate", "--out", str(out), "--dns", "localhost", "--ip", LOOPBACK]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    (work / "dispatch-certs.log").write_text(f"+ {' '.join(argv)}\n{result.stdout}{result.stderr}")
    if result.returncode != 0:
        raise RuntimeError(f"dispatch-certs generate exited {result.returncode}: {result.stderr.strip()}")
    return Certs(out)


def config_file(admin: KubeHttp, configmap: str, path: Path) -> Path:
    """The ConfigMap's config.yaml as the kubelet would mount it (read back from the cluster). The agent's
    API settings, when the chart keeps them apart in api.yaml, become config.yaml's `api:` section, which is
    where `dispatch-agent serve` reads them."""
    data = admin.get("v1", "ConfigMap", configmap, NAMESPACE).get("data") or {}
    config = yaml.safe_load(data.get("config.yaml") or "") or {}
    if "api.yaml" in data and "api" not in config:
        config["api"] = yaml.safe_load(data["api.yaml"]) or {}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def _get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, context=context, timeout=3) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")
    except OSError as err:
        return 0, str(err)


def wait_for_process(
    process: ManagedProcess, ready: Callable[[], bool], timeout: float, what: str, last: list[tuple[int, str]]
) -> None:
    """Polls ``ready`` until it holds; fails at once, with the end of its log, if the process exits."""
    deadline = time.monotonic() + timeout
    while not ready():
        code = process.popen.poll()
        if code is not None:
            raise RuntimeError(
                f"{process.name} exited with status {code}; the end of its log:\n{tail(process.log_path, 8)}"
            )
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not within {timeout:.0f}s; it last answered {last[0]}")
        time.sleep(0.2)


def start_webhook(cp: ControlPlane, work: Path, certs: Certs, kubeconfig: Path) -> tuple[ManagedProcess, str]:
    port = free_port()
    config = config_file(cp.admin, f"{RELEASE}-webhook", work / "webhook" / "config.yaml")
    argv = [*console_script("dispatch-webhook"), "serve", "--tls-cert-file", certs.cert,
            "--tls-private-key-file", certs.key, "--port", str(port), "--bind-address", LOOPBACK,
            "--config", config, "--kubeconfig", kubeconfig]  # fmt: skip
    process = cp.supervisor.start("dispatch-webhook", argv)
    url = f"https://{LOOPBACK}:{port}"
    context = ssl.create_default_context(cafile=str(certs.ca))

    last = [(0, "")]

    def ready() -> bool:
        last[0] = _get(f"{url}/readyz", context)
        return last[0][0] == 200

    wait_for_process(process, ready, 30, f"dispatch-webhook ready ({url}/readyz)", last)
    return process, url


def apply_webhook_configurations(cp: ControlPlane, rendered: Rendered, url: str, certs: Certs) -> int:
    """Registers the webhook on loopback, then waits until the API server calls it: a server-side dry-run create,
    by dispatch's ServiceAccount, of a dispatch TrainJob that is not in its canonical form (and has no runtime
    copy) must come back denied by our webhook. (Only the webhook judges a create of dispatch's: a stranger's
    probe would be refused first by the owner policy, which the API server evaluates before any webhook. The
    probe names upstream's ClusterTrainingRuntime, so that Trainer's webhook, called at once beside ours,
    accepts it and ours is the denial reported.)"""
    docs = loopback_webhook_configurations(rendered, url, certs.ca.read_bytes())
    for doc in docs:
        cp.admin.apply(doc)
    (deployment,) = rendered.of("Deployment")
    dispatch = KubeHttp(
        cp.service_account_credentials(NAMESPACE, deployment["spec"]["template"]["spec"]["serviceAccountName"])
    )
    name = f"dj-{str(ULID()).lower()}-s1"
    probe = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"runtimeRef": {"name": "torch-distributed"}},
    }
    path = cp.admin.collection_path(probe["apiVersion"], probe["kind"], "default")

    def denied_by_our_webhook() -> bool:
        try:
            dispatch.request("POST", path, probe, query={"dryRun": "All"})
        except ApiError as exc:
            if "dispatch-k8s denied" in exc.body:
                return True
            raise  # named by wait_until when it times out
        raise RuntimeError("a dispatch TrainJob without its runtime copy was admitted: the webhook is not called")

    wait_until(denied_by_our_webhook, 30, interval=0.3, what="the API server calling dispatch-webhook")
    return len(docs)


def start_agent(cp: ControlPlane, work: Path, certs: Certs, kubeconfig: Path) -> tuple[ManagedProcess, str, str]:
    api_port, health_port = free_port(), free_port()
    config = config_file(cp.admin, f"{RELEASE}-agent", work / "agent" / "config.yaml")
    argv = [*console_script("dispatch-agent"), "serve", "--kubeconfig", kubeconfig, "--config", config,
            "--tls-cert-file", certs.cert, "--tls-private-key-file", certs.key, "--api-port", str(api_port),
            "--health-port", str(health_port), "--bind-address", LOOPBACK, "--identity", IDENTITY]  # fmt: skip
    process = cp.supervisor.start("dispatch-agent", argv)
    health = f"http://{LOOPBACK}:{health_port}"
    last = [(0, "")]

    def leader() -> bool:
        last[0] = _get(f"{health}/readyz")
        return last[0] == (200, "ok (leader)")

    wait_for_process(process, leader, 60, f"dispatch-agent ready and leading ({health}/readyz)", last)
    return process, f"https://{LOOPBACK}:{api_port}", health


def helm_test(cp: ControlPlane, rendered: Rendered, work: Path) -> tuple[str, str]:
    """`helm test` as the chart renders it: the test hook's ServiceAccount, Role and RoleBinding applied as
    rendered, then its Pod's command (`dispatch-webhook selftest`) as a local process signed in with a token
    of that ServiceAccount, so the hook's RBAC is all it has. Returns (its principal, what it printed);
    RuntimeError naming the cause when it fails. The hook's objects are deleted after it passes, as
    helm's hook-delete-policy hook-succeeded does."""
    hooks = [
        d for d in rendered.docs if _is_hook(d) and "test" in d["metadata"]["annotations"]["helm.sh/hook"].split(",")
    ]
    (pod,) = [d for d in hooks if d["kind"] == "Pod"]
    rights = [d for d in hooks if d["kind"] in ("ServiceAccount", "Role", "RoleBinding")]
    for doc in rights:
        cp.admin.apply(doc)
    sa = pod["spec"]["serviceAccountName"]
    kubeconfig = cp.service_account_kubeconfig(NAMESPACE, sa)
    (container,) = pod["spec"]["containers"]
    (command,) = container["command"]
    argv = [*console_script(command), *container["args"], "--kubeconfig", str(kubeconfig)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    (work / "selftest.log").write_text(f"+ {' '.join(argv)}\n{result.stdout}{result.stderr}")
    if result.returncode != 0:
        raise RuntimeError(f"{command} selftest exited {result.returncode}: {result.stderr.strip()[-1500:]}")
    for doc in reversed(rights):
        cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace"))
    return f"system:serviceaccount:{NAMESPACE}:{sa}", result.stdout.strip()


def install(cp: ControlPlane, work: Path) -> tuple[Rendered, Applied]:
    rendered = render_chart(cp, work)
    return rendered, apply_chart(cp.admin, rendered)


def service_account_kubeconfig(cp: ControlPlane, rendered: Rendered) -> tuple[str, Path]:
    """The pod's ServiceAccount (the agent's and the certificate controller's, dispatch's principal): a
    bound token from the TokenRequest API, as the pod's projected token volume holds."""
    (deployment,) = rendered.of("Deployment")
    name = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    rendered.one("ServiceAccount", name)
    return name, cp.service_account_kubeconfig(NAMESPACE, name, expiration_seconds=TOKEN_SECONDS)


def webhook_kubeconfig(cp: ControlPlane, rendered: Rendered, work: Path, timeout: float = 60) -> tuple[str, Path]:
    """The webhook container's ServiceAccount, signed in with the token it mounts: the one the token
    controller of kube-controller-manager wrote into the chart's token Secret (applied by `apply_chart`)."""
    (deployment,) = rendered.of("Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    (container,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "webhook"]
    (mount,) = [
        m for m in container["volumeMounts"] if m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    ]
    secret_name = volumes[mount["name"]]["secret"]["secretName"]
    secret = rendered.one("Secret", secret_name)
    name = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    token: list[str] = []

    def filled() -> bool:
        data = (cp.admin.get_or_none("v1", "Secret", secret_name, NAMESPACE) or {}).get("data") or {}
        if "token" in data:
            token.append(base64.b64decode(data["token"]).decode())
        return bool(token)

    wait_until(filled, timeout, interval=0.3, what=f"kube-controller-manager filling Secret {NAMESPACE}/{secret_name}")
    credentials = Credentials(server=cp.api_url, ca_file=cp.ca_file, token=token[0])
    path = write_kubeconfig(work / "webhook" / "kubeconfig", credentials, f"system:serviceaccount:{NAMESPACE}:{name}")
    return name, path
