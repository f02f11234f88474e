"""Fixtures for the API's HTTP tests: the agent's API on loopback with real TLS, over a fake API server."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
from kubernetes_asyncio import client

from agent.api.app import ApiServer, serving
from agent.api.client import AgentClient
from agent.api.kube import Kube
from agent.api.settings import ApiSettings
from certs import pki
from contract.upstream import CLUSTER_TRAINING_RUNTIMES
from harness.fixtures import runtime
from serving.tls import ReloadingServerContext
from tests.agent.api.fake_kube import FakeKube, Grant, running

HOST = "127.0.0.1"
NAMESPACE = "team-a"
SUPERVISOR = "system:serviceaccount:team-a:supervisor"
SUPERVISOR_TOKEN = "supervisor-token"
RUNTIME = "torch-distributed"
TEST_SETTINGS = ApiSettings(workloadTimeout=1.5, probeSeconds=1.0, labels={"site": "test"})


@dataclass
class Tls:
    ca: pki.CertifiedKey
    cert_file: Path
    key_file: Path

    def client_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cadata=self.ca.cert_pem.decode())

    @property
    def ca_file(self) -> Path:
        path = self.cert_file.parent / "ca.crt"
        path.write_bytes(self.ca.cert_pem)
        return path


SERVICE_NAME = "dispatch-k8s.dispatch-system.svc"
"""A name the test certificate carries that no resolver knows: reached with ``resolve`` only."""


@pytest.fixture
def tls(tmp_path: Path) -> Tls:
    ca = pki.make_ca("dispatch-agent-test-ca")
    pair = pki.make_serving_cert(ca, "dispatch-agent", ip_addresses=[HOST], dns_names=["localhost", SERVICE_NAME])
    files = Tls(ca, tmp_path / "tls.crt", tmp_path / "tls.key")
    files.cert_file.write_bytes(pair.cert_pem)
    files.key_file.write_bytes(pair.key_pem)
    return files


def supervisor_grants(namespace: str = NAMESPACE) -> list[Grant]:
    """What docs/api.md tells a cluster admin to grant a supervisor in its namespace (and Preflight)."""
    verbs = ("create", "update", "delete", "get", "list", "watch")
    grants = [Grant(SUPERVISOR, verb, "trainjobs", namespace) for verb in verbs]
    grants.append(Grant(SUPERVISOR, "get", "trainjobs", namespace, subresource="log"))
    grants += [Grant(SUPERVISOR, "create", "preflights"), Grant(SUPERVISOR, "get", "preflights")]
    return grants


@pytest.fixture
def fake() -> FakeKube:
    kube = FakeKube(namespaces={NAMESPACE, "team-b", "dispatch-system"})
    kube.user(SUPERVISOR_TOKEN, SUPERVISOR)
    kube.grants += supervisor_grants()
    source = runtime()
    source["metadata"] = {"name": RUNTIME}
    kube.put(CLUSTER_TRAINING_RUNTIMES.path(), source)
    return kube


@dataclass
class Agent:
    url: str
    fake: FakeKube
    server: ApiServer
    tls: Tls

    def client(self, token: str = SUPERVISOR_TOKEN) -> AgentClient:
        return AgentClient(self.url, token, ssl_context=self.tls.client_context())


@pytest_asyncio.fixture
async def agent(fake: FakeKube, tls: Tls, request: pytest.FixtureRequest) -> AsyncIterator[Agent]:
    settings = getattr(request, "param", TEST_SETTINGS)
    async with running(fake) as kube_url, client.ApiClient(fake.configuration(kube_url)) as api:
        server = ApiServer(Kube(api, timeout=10), settings)
        context = ReloadingServerContext(tls.cert_file, tls.key_file)
        async with serving(server.app(), HOST, 0, context) as port:
            yield Agent(f"https://{HOST}:{port}", fake, server, tls)
