"""dispatch's webhook as a real process, registered with the real API server for one namespace."""

from __future__ import annotations

import secrets
import ssl
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from certs import pki
from harness.cluster import ControlPlane, free_port
from harness.kube_http import ApiError
from harness.processes import ManagedProcess
from webhook.configurations import webhook_configurations

LOOKUP_RULES = [
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainingruntimes"], "verbs": ["get", "list", "watch"]}
]


@dataclass
class WebhookProcess:
    cp: ControlPlane
    namespace: str
    process: ManagedProcess
    port: int
    ca_pem: bytes
    configurations: list[dict[str, Any]]

    def stop(self) -> None:
        self.cp.supervisor.stop(self.process.name)

    def restart(self) -> None:
        self.process = self.cp.supervisor.start(self.process.name, self.process.argv)
        wait_ready(self.process, self.port, self.ca_pem)

    def unregister(self) -> None:
        for doc in self.configurations:
            self.cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


def _https_ok(url: str, ca_pem: bytes) -> bool:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    try:
        with urllib.request.urlopen(url, context=context, timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def wait_ready(process: ManagedProcess, port: int, ca_pem: bytes) -> None:
    deadline = time.monotonic() + 30
    while not _https_ok(f"https://127.0.0.1:{port}/readyz", ca_pem):
        if not process.alive() or time.monotonic() > deadline:
            raise RuntimeError(process.describe_exit())
        time.sleep(0.2)


def start_webhook(
    cp: ControlPlane,
    namespace: str,
    dispatch_username: str,
    workdir: Path,
    config: dict[str, Any] | None = None,
    **configuration: bool,
) -> WebhookProcess:
    """Run ``python -m webhook serve`` on loopback under its own ServiceAccount (which may only read and
    watch TrainingRuntimes, its one lookup) and register it for ``namespace`` alone. ``config``: the webhook's
    config file, instead of one naming ``dispatch_username`` as dispatch. ``configuration``: ``policies`` and
    ``mutating_policy`` of webhook_configurations (the chart's, with the policies): every route without."""
    ca_pem = serving_files(workdir, "dispatch-webhook")
    (workdir / "config.yaml").write_text(yaml.safe_dump(config or {"dispatch": {"usernames": [dispatch_username]}}))
    role = f"webhook-lookup-{secrets.token_hex(3)}"
    cp.admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": role},
            "rules": LOOKUP_RULES,
        }
    )
    cp.ensure_service_account(namespace, "dispatch-webhook")
    cp.admin.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": "dispatch-webhook", "namespace": namespace}],
        }
    )
    kubeconfig = cp.service_account_kubeconfig(namespace, "dispatch-webhook")
    port = free_port()
    argv = [sys.executable, "-m", "webhook", "serve", "--bind-address", "127.0.0.1", "--port", str(port),
            "--tls-cert-file", workdir / "tls.crt", "--tls-private-key-file", workdir / "tls.key",
            "--config", workdir / "config.yaml", "--kubeconfig", kubeconfig]  # fmt: skip
    process = cp.supervisor.start(f"dispatch-webhook-{namespace}", argv)
    return register(cp, namespace, process, port, ca_pem, "dispatch-k8s", **configuration)


def serving_files(workdir: Path, name: str) -> bytes:
    """A fresh CA, and a serving certificate for 127.0.0.1 it issued in ``workdir``/tls.crt and tls.key;
    the CA's PEM."""
    workdir.mkdir(parents=True, exist_ok=True)
    ca = pki.make_ca(f"{name}-test-ca")
    serving = pki.make_serving_cert(ca, name, ip_addresses=["127.0.0.1"])
    (workdir / "tls.crt").write_bytes(serving.cert_pem)
    (workdir / "tls.key").write_bytes(serving.key_pem)
    return ca.cert_pem


def register(
    cp: ControlPlane,
    namespace: str,
    process: ManagedProcess,
    port: int,
    ca_pem: bytes,
    name: str,
    **configuration: bool,
) -> WebhookProcess:
    """Once the webhook at ``port`` is ready, dispatch's webhook configurations (named ``name``-<suffix>)
    pointing at it, for ``namespace`` alone; ``configuration`` as start_webhook's."""
    wait_ready(process, port, ca_pem)
    docs = webhook_configurations(
        namespace="dispatch-system",
        url=f"https://127.0.0.1:{port}",
        ca_bundle=ca_pem,
        name=f"{name}-{secrets.token_hex(3)}",
        **configuration,
    )
    for doc in docs:
        for hook in doc["webhooks"]:
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
        cp.admin.create(doc)
    return WebhookProcess(cp, namespace, process, port, ca_pem, docs)


def wait_enforced(http: Any, namespace: str) -> None:
    """Webhook configurations load asynchronously: wait until a stranger's canary is refused by the webhook."""
    canary = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainingRuntime",
        "metadata": {"name": "dj-01arz3ndektsv4rrffq69g5fav-s0", "namespace": namespace},
        "spec": {"template": {"spec": {"replicatedJobs": []}}},
    }
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            http.create(canary)
        except ApiError as err:
            if "creation.principal" in err.body:
                return
            raise
        http.delete(canary["apiVersion"], canary["kind"], canary["metadata"]["name"], namespace)
        time.sleep(0.2)
    raise AssertionError("the webhook was not called within 30 s")


def reviews(hook: WebhookProcess, endpoint: str = "") -> float:
    """How many reviews the webhook has answered (``dispatch_webhook_reviews_total``), at ``endpoint``
    (validate, mutate) or at all."""
    context = ssl.create_default_context(cadata=hook.ca_pem.decode())
    with urllib.request.urlopen(f"https://127.0.0.1:{hook.port}/metrics", context=context, timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    label = f'endpoint="{endpoint}"' if endpoint else ""
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("dispatch_webhook_reviews_total{") and label in line
    )
