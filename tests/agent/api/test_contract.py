"""Contract tests: schemathesis generates requests from the served OpenAPI document, valid and invalid, and
checks every answer against it (status codes, content types, headers, bodies) and that invalid requests
are refused. The agent runs for real (TLS, auth, the service) over the fake API server, in a thread, since
schemathesis calls synchronously."""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from kubernetes_asyncio import client
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from agent.api.app import ApiServer, serving
from agent.api.kube import Kube
from agent.api.openapi import document
from agent.api.settings import ApiSettings
from certs import pki
from contract.upstream import CLUSTER_TRAINING_RUNTIMES
from harness.fixtures import runtime
from serving.tls import ReloadingServerContext
from tests.agent.api import controllers as c
from tests.agent.api.conftest import HOST, NAMESPACE, SUPERVISOR, SUPERVISOR_TOKEN, supervisor_grants
from tests.agent.api.fake_kube import FakeKube, Grant, running

SCHEMA = schemathesis.openapi.from_dict(document())
SETTINGS = ApiSettings(workloadTimeout=0.2, probeSeconds=0.1)


def no_internal_error(ctx, response, case) -> None:
    """Nothing the caller sends makes the agent fail: 503 (observe-only, the API server) is a typed answer,
    500 is a bug."""
    assert response.status_code != 500, response.text


class Contract:
    def __init__(self, directory: Path) -> None:
        ca = pki.make_ca("contract-ca")
        pair = pki.make_serving_cert(ca, "agent", ip_addresses=[HOST])
        self.cert, self.key, self.ca = directory / "tls.crt", directory / "tls.key", directory / "ca.crt"
        self.cert.write_bytes(pair.cert_pem)
        self.key.write_bytes(pair.key_pem)
        self.ca.write_bytes(ca.cert_pem)
        self.fake = FakeKube(namespaces={NAMESPACE})
        self.fake.user(SUPERVISOR_TOKEN, SUPERVISOR)
        # Every namespace, so that generated namespaces reach the service rather than stop at 403.
        self.fake.grants += [Grant(g.user, g.verb, g.resource, None, g.subresource) for g in supervisor_grants()]
        source = runtime()
        source["metadata"] = {"name": "torch-distributed"}
        self.fake.put(CLUSTER_TRAINING_RUNTIMES.path(), source)
        c.admission_check(self.fake)
        self.fake.after_write.append(c.kueue())
        self.url = ""
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with running(self.fake) as kube_url, client.ApiClient(self.fake.configuration(kube_url)) as api:
            server = ApiServer(Kube(api), SETTINGS)
            async with serving(server.app(), HOST, 0, ReloadingServerContext(self.cert, self.key)) as port:
                self.url = f"https://{HOST}:{port}"
                self._ready.set()
                await self._stop.wait()

    def __enter__(self) -> Contract:
        self._thread.start()
        assert self._ready.wait(30), "the agent did not start"
        return self

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def agent_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    with Contract(tmp_path_factory.mktemp("contract")) as contract:
        yield contract.url, str(contract.ca)


def test_the_served_document_is_the_one_tested(agent_url):
    url, ca = agent_url
    with urllib.request.urlopen(url + "/v1/openapi.json", context=ssl.create_default_context(cafile=ca)) as r:
        assert json.loads(r.read()) == document()


@SCHEMA.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_the_api_keeps_its_contract(case, agent_url):
    url, ca = agent_url
    response = case.call(base_url=url, headers={"Authorization": f"Bearer {SUPERVISOR_TOKEN}"}, verify=ca)
    case.validate_response(
        response,
        checks=[
            no_internal_error,
            status_code_conformance,
            content_type_conformance,
            response_headers_conformance,
            response_schema_conformance,
            negative_data_rejection,
        ],
    )
