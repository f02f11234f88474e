"""dispatch installed for real on tier C's node: `helm install` of the chart with the image scripts/build-image
built, its pods on a real kubelet, the webhook reached by the API server through its Service and the agent's
API through its Service (kube-proxy, harness/service_network.py). The sandbox takes this path when tier C is
available (root, controlplane/build-node.sh's build and the image); otherwise harness/sandbox/install.py's.

The values are the sandbox's (install.VALUES: one replica; Kueue and the controllers as tier B runs them) and
the real node's selector and toleration, so the pods never land on kwok's nodes, which run nothing.
"""

from __future__ import annotations

import base64
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from contract.keys import LEASE_NAME
from harness.binaries import REPO_ROOT, locate_node
from harness.cluster import ControlPlane
from harness.kube_http import KubeHttp
from harness.processes import wait_until
from harness.real_node import REAL_NODE_TAINT, RealNode
from harness.sandbox.install import CHART, NAMESPACE, RELEASE, VALUES, helm_env
from harness.service_network import lock_holder


@dataclass(frozen=True)
class Image:
    archive: Path
    ref: str

    @property
    def repository(self) -> str:
        return self.ref.rsplit(":", 1)[0]

    @property
    def tag(self) -> str:
        return self.ref.rsplit(":", 1)[1]


def available(kube_proxy: bool = True) -> tuple[Image | None, str]:
    """The project's image when tier C can run here; else None and why not (said by the sandbox).
    ``kube_proxy=False``: real nodes without the machine's kube-proxy (no Service to reach on them), which may
    run beside another run that holds it."""
    if os.geteuid() != 0:
        return None, "not root (a real node needs root)"
    missing = locate_node().missing()
    if missing:
        return None, f"controlplane/build-node.sh has not built {', '.join(missing)}"
    holder = lock_holder() if kube_proxy else None
    if holder is not None:
        return None, f"another run (pid {holder}) has the machine's kube-proxy; a real node needs it"
    return available_image()


def available_image() -> tuple[Image | None, str]:
    """The project's image as scripts/build-image built it for this checkout; else None and why not."""
    out = subprocess.run([str(REPO_ROOT / "scripts" / "build-image"), "--print"], capture_output=True, text=True,
                         check=False)  # fmt: skip
    if out.returncode != 0:
        return None, f"scripts/build-image --print failed: {out.stderr.strip()}"
    archive, ref = out.stdout.split()[:2]
    if not Path(archive).is_file():
        return None, f"the image is not built ({archive}): run scripts/build-image"
    return Image(Path(archive), ref), ""


def values(node: RealNode) -> dict[str, Any]:
    return {
        **VALUES,
        "nodeSelector": {"kubernetes.io/hostname": node.name},
        "tolerations": [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    }


@dataclass(frozen=True)
class AgentApi:
    api_url: str
    """The agent's API by the Service's name, as a supervisor in the cluster reaches it."""
    resolve: dict[str, str]
    """That name → the Service's ClusterIP (this machine has no cluster DNS)."""
    ca_file: Path
    lease_holder: str
    """The pod leading: it holds the Lease agent.lease.name (the contract's LEASE_NAME by default)."""


def _helm(cp: ControlPlane, work: Path, *args: str, timeout: float = 600) -> str:
    argv = [str(cp.artifacts.binary("helm")), *args, "--kubeconfig", str(cp.admin_kubeconfig)]
    env = {**helm_env(work / "helm-home"), "KUBECONFIG": str(cp.admin_kubeconfig)}
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout, check=False)
    with (work / "helm.log").open("a") as log:
        log.write(f"+ {' '.join(argv)}\n{result.stdout}{result.stderr}\n")
    if result.returncode != 0:
        raise RuntimeError(f"helm {args[0]} exited {result.returncode}: {result.stderr.strip()[-1500:]}")
    return result.stdout


def deployment_pods(admin: KubeHttp, namespace: str, release: str) -> list[dict[str, Any]]:
    """The release's Deployment's pods (not its hooks' pods)."""
    return [
        p for p in admin.list("v1", "Pod", namespace, label_selector=f"app.kubernetes.io/instance={release}")
        if (p["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "ReplicaSet"
    ]  # fmt: skip


def helm_install(
    cp: ControlPlane, node: RealNode, image: Image, work: Path, more: dict[str, Any] | None = None
) -> tuple[str, list[str]]:
    """`helm install --wait`: returns helm's version and the Deployment's pods, Ready on the real node. ``more``
    overrides the sandbox's values (the chaos campaign runs two replicas)."""
    file = work / "values.yaml"
    file.write_text(yaml.safe_dump({**values(node), **(more or {})}, sort_keys=False))
    _helm(cp, work, "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--create-namespace", "--values",
          str(file), "--set", f"image.repository={image.repository}", "--set", f"image.tag={image.tag}", "--wait",
          "--timeout", "5m")  # fmt: skip
    version = _helm(cp, work, "version", "--short").strip().split("+")[0]
    pods = deployment_pods(cp.admin, NAMESPACE, RELEASE)
    elsewhere = [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") != node.name]
    if elsewhere:
        raise RuntimeError(f"pods not on {node.name}: {elsewhere}")
    return version, [p["metadata"]["name"] for p in pods]


def helm_test(cp: ControlPlane, work: Path) -> str:
    """`helm test --logs`: its pod runs on the real node; returns the line the selftest printed."""
    out = _helm(cp, work, "test", RELEASE, "--namespace", NAMESPACE, "--logs")
    said = [line for line in out.splitlines() if line.startswith("ok: ")]
    if not said:
        raise RuntimeError(f"helm test passed without the selftest's line: {out.strip()[-1500:]}")
    return said[-1].partition(": HTTP ")[0]


def agent_api(cp: ControlPlane, work: Path, pods: list[str]) -> AgentApi:
    """The agent's API through its Service, the CA the chart's certificate controller made, the Lease."""
    admin = cp.admin
    svc = admin.get("v1", "Service", RELEASE, NAMESPACE)
    port = next(p["port"] for p in svc["spec"]["ports"] if p["name"] == "api")
    host = f"{RELEASE}.{NAMESPACE}.svc"
    ca = base64.b64decode(admin.get("v1", "Secret", f"{RELEASE}-certs", NAMESPACE)["data"]["ca.crt"])
    ca_file = work / "ca.crt"
    ca_file.write_bytes(ca)
    holder: list[str] = []

    def leading() -> bool:
        lease = admin.get_or_none("coordination.k8s.io/v1", "Lease", LEASE_NAME, NAMESPACE) or {}
        who = (lease.get("spec") or {}).get("holderIdentity")
        if who in pods:
            holder.append(who)
        return bool(holder)

    wait_until(leading, 60, interval=0.5, what=f"a pod of the chart holding Lease {NAMESPACE}/{LEASE_NAME}")
    return AgentApi(f"https://{host}:{port}", {host: svc["spec"]["clusterIP"]}, ca_file, holder[0])


def helm_uninstall(cp: ControlPlane, work: Path) -> None:
    """`helm uninstall --wait` of the release: everything it installed goes, the webhook configurations with it."""
    _helm(cp, work, "uninstall", RELEASE, "--namespace", NAMESPACE, "--wait", "--timeout", "3m")
