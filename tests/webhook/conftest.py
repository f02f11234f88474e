"""Fixtures for the webhook's HTTP tests: real sockets, real TLS, certificates from certs/pki.py."""

from __future__ import annotations

import asyncio
import ssl
import threading
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from certs import pki
from contract.trainjob import build_trainjob
from harness.fixtures import runtime, runtime_copy, submission
from serving.tls import ReloadingServerContext
from webhook.config import Config
from webhook.server import Webhook, serving

HOST = "127.0.0.1"
DISPATCH = "system:serviceaccount:dispatch-system:dispatch-k8s"


@dataclass
class Pki:
    ca: pki.CertifiedKey
    cert_file: Path
    key_file: Path

    def issue(self, common_name: str = "dispatch-webhook") -> pki.CertifiedKey:
        return pki.make_serving_cert(self.ca, common_name, ip_addresses=[HOST], dns_names=["localhost"])

    def install(self, pair: pki.CertifiedKey) -> None:
        self.cert_file.write_bytes(pair.cert_pem)
        self.key_file.write_bytes(pair.key_pem)

    def client_context(self, **versions: ssl.TLSVersion) -> ssl.SSLContext:
        context = ssl.create_default_context(cadata=self.ca.cert_pem.decode())
        for attribute, version in versions.items():
            setattr(context, attribute, version)
        return context


def make_pki(directory: Path) -> Pki:
    files = Pki(pki.make_ca("dispatch-webhook-test-ca"), directory / "tls.crt", directory / "tls.key")
    files.install(files.issue())
    return files


@pytest.fixture
def tls_files(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


def admission_review(
    obj: Mapping[str, Any] | None = None,
    *,
    uid: str = "705ab4f5-6393-11e8-b7cc-42010a800002",
    operation: str = "CREATE",
    username: str = DISPATCH,
    old: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview v1 request as the API server sends it, for a TrainJob by default."""
    if obj is None and operation == "CREATE":
        obj = build_trainjob(submission(), runtime()["spec"])  # as the agent sends it: no uid yet
    meta = (obj or old or {}).get("metadata", {})
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "resource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "requestKind": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "kind": "TrainJob"},
            "requestResource": {"group": "trainer.kubeflow.org", "version": "v1alpha1", "resource": "trainjobs"},
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "operation": operation,
            "userInfo": {"username": username, "uid": "u-1", "groups": ["system:serviceaccounts"]},
            "object": obj,
            "oldObject": old,
            "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


class MemoryRuntimes:
    """The runtime lookup, in memory: the runtime copies that exist, and the lookups made."""

    def __init__(self, runtimes: Mapping[tuple[str, str], Mapping[str, Any]] | None = None) -> None:
        rt = runtime_copy()
        self.runtimes = dict(runtimes or {(rt["metadata"]["namespace"], rt["metadata"]["name"]): rt})
        self.calls: list[tuple[str, str]] = []

    async def __call__(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.calls.append((namespace, name))
        return self.runtimes.get((namespace, name))


@dataclass
class Running:
    webhook: Webhook
    url: str
    pki: Pki
    session: aiohttp.ClientSession

    async def post(self, path: str, body: Any, **kwargs: Any) -> tuple[int, Any]:
        async with self.session.post(self.url + path, json=body, **kwargs) as resp:
            return resp.status, (await resp.json() if resp.content_type == "application/json" else await resp.text())

    async def assert_serving(self) -> None:
        """A well-formed review still gets its answer: the server survived whatever came before."""
        review = admission_review(uid="still-serving")
        status, answer = await self.post("/validate", review)
        assert status == 200
        assert answer["response"]["uid"] == "still-serving"


@pytest_asyncio.fixture
async def server(tls_files: Pki) -> AsyncIterator[Running]:
    tls = ReloadingServerContext(tls_files.cert_file, tls_files.key_file, interval=0.05)
    webhook = Webhook(Config(), tls, lookup=MemoryRuntimes())
    async with serving(webhook, HOST, 0) as port:
        connector = aiohttp.TCPConnector(ssl=tls_files.client_context())
        async with aiohttp.ClientSession(connector=connector) as session:
            yield Running(webhook, f"https://{HOST}:{port}", tls_files, session)


class ServerThread:
    """The server on its own event loop in a thread, for synchronous tests (hypothesis) to call."""

    def __init__(self, webhook: Webhook) -> None:
        self.webhook = webhook
        self.port = 0
        self._started = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._main(),), daemon=True)

    async def _main(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with serving(self.webhook, HOST, 0) as port:
            self.port = port
            self._started.set()
            await self._stop.wait()

    def __enter__(self) -> ServerThread:
        self._thread.start()
        assert self._started.wait(10), "the server thread did not start"
        return self

    def __exit__(self, *_: object) -> None:
        assert self._loop is not None
        assert self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)


@pytest.fixture(scope="module")
def server_thread(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerThread, Pki]]:
    files = make_pki(tmp_path_factory.mktemp("tls"))
    tls = ReloadingServerContext(files.cert_file, files.key_file)
    with ServerThread(Webhook(Config(), tls, lookup=MemoryRuntimes())) as running:
        yield running, files
