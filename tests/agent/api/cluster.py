"""The agent's API against a real API server: the agent as a ServiceAccount with exactly the documented
RBAC, supervisors as ServiceAccounts with (or without) the documented Role, real TLS on loopback."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.api.app import ApiServer, serving
from agent.api.client import AgentClient, AgentError
from agent.api.errors import ErrorKind
from agent.api.kube import Kube
from agent.api.models import ObjectRef
from agent.api.rbac import AGENT_RULES, PREFLIGHT_RULES, SUPERVISOR_RULES
from agent.api.settings import ApiSettings
from agent.multicluster.worker_reads import WorkerClients
from certs import pki
from harness.async_client import api_client
from harness.cluster import ControlPlane
from harness.fixtures import runtime
from harness.kube_http import ApiError, Credentials
from serving.tls import ReloadingServerContext

HOST = "127.0.0.1"
AGENT_NAMESPACE = "dispatch-system"
AGENT_SA = "dispatch-agent"
RBAC = "rbac.authorization.k8s.io/v1"


def apply(cp: ControlPlane, obj: dict[str, Any]) -> None:
    try:
        cp.admin.create(obj)
    except ApiError as exc:
        if exc.status != 409:
            raise


def role(cp: ControlPlane, kind: str, name: str, rules: list[dict[str, Any]], namespace: str | None = None) -> None:
    meta: dict[str, Any] = {"name": name} | ({"namespace": namespace} if namespace else {})
    apply(cp, {"apiVersion": RBAC, "kind": kind, "metadata": meta, "rules": rules})


def bind(cp: ControlPlane, kind: str, name: str, role_kind: str, role_name: str, sa: tuple[str, str],
         namespace: str | None = None) -> None:  # fmt: skip
    meta: dict[str, Any] = {"name": name} | ({"namespace": namespace} if namespace else {})
    apply(
        cp,
        {
            "apiVersion": RBAC,
            "kind": kind,
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
            "subjects": [{"kind": "ServiceAccount", "namespace": sa[0], "name": sa[1]}],
        },
    )


def agent_credentials(cp: ControlPlane) -> Credentials:
    """The agent's ServiceAccount, bound to exactly the documented ClusterRole."""
    apply(cp, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": AGENT_NAMESPACE}})
    role(cp, "ClusterRole", "dispatch-agent-api", AGENT_RULES)
    bind(
        cp, "ClusterRoleBinding", "dispatch-agent-api", "ClusterRole", "dispatch-agent-api", (AGENT_NAMESPACE, AGENT_SA)
    )
    role(cp, "ClusterRole", "dispatch-preflight", PREFLIGHT_RULES)
    return cp.service_account_credentials(AGENT_NAMESPACE, AGENT_SA)


def compliant_runtime(cp: ControlPlane, name: str) -> str:
    """A ClusterTrainingRuntime the runtime requirements accept (restartPolicy Never, backoffLimit 0)."""
    source = runtime()
    source["metadata"] = {"name": name}
    apply(cp, source)
    return name


@dataclass
class Supervisors:
    """Tokens: ``supervisor`` (the documented Role here and Preflight), ``elsewhere`` (the Role in another
    namespace only), ``stranger`` (no RBAC)."""

    namespace: str
    other_namespace: str
    tokens: dict[str, str]


def supervisors(cp: ControlPlane, namespace: str, other_namespace: str) -> Supervisors:
    role(cp, "Role", "dispatch-supervisor", SUPERVISOR_RULES, namespace)
    role(cp, "Role", "dispatch-supervisor", SUPERVISOR_RULES, other_namespace)
    bind(cp, "RoleBinding", "supervisor", "Role", "dispatch-supervisor", (namespace, "supervisor"), namespace)
    bind(cp, "ClusterRoleBinding", f"dispatch-preflight-{namespace}", "ClusterRole", "dispatch-preflight",
         (namespace, "supervisor"))  # fmt: skip
    bind(cp, "RoleBinding", "elsewhere", "Role", "dispatch-supervisor", (namespace, "elsewhere"), other_namespace)
    tokens = {who: cp.service_account_token(namespace, who) for who in ("supervisor", "elsewhere", "stranger")}
    return Supervisors(namespace, other_namespace, tokens)


@dataclass
class RunningAgent:
    url: str
    ca: pki.CertifiedKey
    server: ApiServer

    def client(self, token: str) -> AgentClient:
        return AgentClient(self.url, token, ssl_context=ssl.create_default_context(cadata=self.ca.cert_pem.decode()))


@asynccontextmanager
async def running_agent(
    cp: ControlPlane, directory: Path, settings: ApiSettings, workers: WorkerClients | None = None
) -> AsyncIterator[RunningAgent]:
    """The API served on loopback with real TLS, as the agent under exactly AGENT_RULES; ``workers``: on a
    MultiKueue manager, the agent's credential for each worker (``workerKubeconfigs``)."""
    ca = pki.make_ca("dispatch-agent-cluster-test")
    pair = pki.make_serving_cert(ca, "dispatch-agent", ip_addresses=[HOST])
    (directory / "tls.crt").write_bytes(pair.cert_pem)
    (directory / "tls.key").write_bytes(pair.key_pem)
    tls = ReloadingServerContext(directory / "tls.crt", directory / "tls.key")
    async with api_client(agent_credentials(cp)) as api:
        server = ApiServer(Kube(api, workers=workers), settings)
        async with serving(server.app(), HOST, 0, tls) as port:
            yield RunningAgent(f"https://{HOST}:{port}", ca, server)


async def allowed(agent: RunningAgent, token: str, namespace: str, within: float = 20) -> None:
    """Wait until RBAC just created is in effect (the API server's authorizer follows it within a moment)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    async with agent.client(token) as c:
        while True:
            try:
                await c.status(ObjectRef(namespace=namespace, name="dj-probe-rbac", uid="none"))
            except AgentError as exc:
                if exc.kind is ErrorKind.NOT_FOUND:
                    return
                if loop.time() > deadline:
                    raise
            await asyncio.sleep(0.2)


@asynccontextmanager
async def owners_at_work(cp: ControlPlane, namespace: str) -> AsyncIterator[None]:
    """Trainer and JobSet, as far as Preflight sees them in tier A (which runs neither): for each TrainJob of
    ``namespace`` a suspended JobSet of its name and that JobSet's first Job, made by the admin, as the two
    controllers make them for a closed job."""

    def play() -> None:
        for tj in cp.admin.list("trainer.kubeflow.org/v1alpha1", "TrainJob", namespace):
            name = tj["metadata"]["name"]
            owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": name,
                     "uid": tj["metadata"]["uid"], "controller": True}  # fmt: skip
            pod = {"spec": {"template": {"spec": {"restartPolicy": "Never",
                                                  "containers": [{"name": "node", "image": "registry.invalid/x"}]}}}}  # fmt: skip
            for obj in (
                {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
                 "metadata": {"name": name, "namespace": namespace, "ownerReferences": [owner]},
                 "spec": {"suspend": True, "replicatedJobs": [{"name": "node", "replicas": 1, "template": pod}]}},
                {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"{name}-node-0", "namespace": namespace},
                 "spec": {"suspend": True, **pod["spec"]}},
            ):  # fmt: skip
                try:
                    cp.admin.create(obj)
                except ApiError as exc:
                    if exc.status != 409:
                        raise

    async def loop() -> None:
        while True:
            await asyncio.to_thread(play)
            await asyncio.sleep(0.2)

    task = asyncio.create_task(loop())
    try:
        yield
    finally:
        task.cancel()
