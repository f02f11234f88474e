"""The certificate controller against a real kube-apiserver (tier A), authenticated as a ServiceAccount
that has exactly the RBAC the chart grants it: get/list/watch/patch on the one Secret and on the named
webhook configurations, nothing else."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import platform
import secrets
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web
from cryptography import x509
from kubernetes_asyncio import client

from certs import contents
from certs import lifecycle as lc
from certs.controller import FIELD_MANAGER, CertController, SecretMissingError, Target, utcnow
from certs.metrics import certs_registry
from harness.async_client import api_client as admin_api_client
from serving.kube import api_client
from serving.prometheus import exposition, version
from serving.tls import ReloadingServerContext
from tests.webhook.test_protocol import parse_exposition
from webhook.configurations import webhook_configurations

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

SERVICE = "dispatch-k8s"
SECRET = "dispatch-k8s-certs"
SA = "dispatch-certs"
ADMISSION = "admissionregistration.k8s.io/v1"
KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


@dataclass
class Env:
    cp: Any
    namespace: str
    name: str
    """Our webhook configurations' name (unique per test: they are cluster-scoped)."""
    kubeconfig: Path
    tmp: Path
    cleanup: list[Callable[[], None]] = field(default_factory=list)
    apis: list[client.ApiClient] = field(default_factory=list)

    @property
    def unlabelled(self) -> str:
        return f"{self.name}-unlabelled"

    @property
    def other(self) -> str:
        return f"{self.name}-other"

    def policy(self, **kwargs: Any) -> lc.Policy:
        return lc.Policy(dns_names=lc.service_dns_names(SERVICE, self.namespace), **kwargs)

    async def controller(
        self, out: str = "served", *, clock: Callable[[], dt.datetime] = utcnow, secret: str = SECRET, **policy: Any
    ) -> CertController:
        api = await api_client(str(self.kubeconfig))
        self.apis.append(api)
        target = Target(self.namespace, secret, (self.name, self.unlabelled), self.tmp / out)
        return CertController(api, target, self.policy(**policy), clock=clock)

    def secret_data(self) -> dict[str, bytes]:
        return contents.decode_secret_data(self.cp.admin.get("v1", "Secret", SECRET, self.namespace).get("data"))

    def configuration(self, kind: str, name: str | None = None) -> dict[str, Any]:
        return self.cp.admin.get(ADMISSION, kind, name or self.name)

    def bundles(self, kind: str, name: str | None = None) -> set[bytes]:
        hooks = self.configuration(kind, name)["webhooks"]
        return {base64.b64decode(h["clientConfig"].get("caBundle", "")) for h in hooks}


def _configurations(namespace: str, name: str) -> list[dict[str, Any]]:
    docs = webhook_configurations(namespace=namespace, url="https://127.0.0.1:9", name=name)
    for doc in docs:
        for hook in doc["webhooks"]:
            # Unreachable on purpose; scoped to the test's namespace so nothing else ever waits on it.
            hook["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return docs


def _rbac(cp: Any, namespace: str, names: list[str]) -> list[Callable[[], None]]:
    verbs = ["get", "list", "watch", "patch"]
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": SA, "namespace": namespace},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SECRET], "verbs": verbs}],
    }
    cluster_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": f"{names[0]}-certs"},
        "rules": [
            {
                "apiGroups": ["admissionregistration.k8s.io"],
                "resources": ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
                "resourceNames": names,
                "verbs": verbs,
            }
        ],
    }
    subject = [{"kind": "ServiceAccount", "name": SA, "namespace": namespace}]
    for role_kind, obj in (("Role", role), ("ClusterRole", cluster_role)):
        cp.admin.create(obj)
        binding_kind = role_kind.replace("Role", "RoleBinding")
        meta = {**obj["metadata"]}
        cp.admin.create(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": binding_kind,
                "metadata": meta,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": meta["name"]},
                "subjects": subject,
            }
        )
    name = cluster_role["metadata"]["name"]
    return [
        lambda: cp.admin.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", name),
        lambda: cp.admin.delete("rbac.authorization.k8s.io/v1", "ClusterRole", name),
    ]


@pytest.fixture
def env_sync(control_plane, namespace, tmp_path) -> Iterator[Env]:
    name = f"dispatch-k8s-{secrets.token_hex(3)}"
    cp = control_plane
    # The chart creates the Secret empty; only the controller fills it.
    cp.admin.create({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": SECRET, "namespace": namespace}})
    env = Env(cp, namespace, name, Path(), tmp_path)
    for doc in _configurations(namespace, name):
        cp.admin.create(doc)
        env.cleanup.append(lambda d=doc: cp.admin.delete(ADMISSION, d["kind"], d["metadata"]["name"]))
    # Our label on another name, and one of the names we are given without our label: neither may be touched.
    # The ServiceAccount may patch both (RBAC is not what keeps it off here: the code is).
    other = _configurations(namespace, env.other)[0]
    unlabelled = _configurations(namespace, env.unlabelled)[0]
    unlabelled["metadata"]["labels"] = {"app.kubernetes.io/name": "someone-else"}
    for doc in (other, unlabelled):
        cp.admin.create(doc)
        env.cleanup.append(lambda d=doc: cp.admin.delete(ADMISSION, d["kind"], d["metadata"]["name"]))
    env.cleanup += _rbac(cp, namespace, [name, env.unlabelled, env.other])
    env.kubeconfig = cp.service_account_kubeconfig(namespace, SA)
    yield env
    for undo in reversed(env.cleanup):
        undo()


@pytest_asyncio.fixture(loop_scope="function")
async def env(env_sync: Env) -> AsyncIterator[Env]:
    yield env_sync
    for api in env_sync.apis:
        await api.close()


# --- filling, injecting, readiness -------------------------------------------------------------------------


async def test_fills_the_empty_secret_and_injects_only_into_our_configurations(env: Env):
    controller = await env.controller()
    assert controller.readiness.check() == (False, "the certificate controller has not run yet")
    await controller.reconcile()

    data = env.secret_data()
    assert sorted(data) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    material = contents.parse(data)
    bundle = contents.trust_bundle(material)
    for kind in KINDS:
        assert env.bundles(kind) == {bundle}, f"our {kind} carries the bundle"
    assert env.bundles("ValidatingWebhookConfiguration", env.other) == {b""}, "our label on another name"
    assert env.bundles("ValidatingWebhookConfiguration", env.unlabelled) == {b""}, "our name without our label"

    secret = env.cp.admin.get("v1", "Secret", SECRET, env.namespace)
    assert FIELD_MANAGER in {m["manager"] for m in secret["metadata"]["managedFields"]}
    vwc = env.configuration("ValidatingWebhookConfiguration")
    assert FIELD_MANAGER in {m["manager"] for m in vwc["metadata"]["managedFields"]}

    out = env.tmp / "served"
    assert (out / "tls.crt").read_bytes() == material.serving.cert_pem
    assert (out / "ca.crt").read_bytes() == bundle
    assert contents.verifies((out / "tls.crt").read_bytes(), bundle, utcnow(), f"{SERVICE}.{env.namespace}.svc")
    assert controller.readiness.check() == (True, "ok")

    await controller.reconcile()
    assert (controller.stats.secret_writes, controller.stats.injections, controller.stats.files_written) == (1, 2, 1)


async def test_a_missing_secret_is_reported_and_not_ready(env: Env):
    env.cp.admin.delete("v1", "Secret", SECRET, env.namespace)
    controller = await env.controller()
    with pytest.raises(SecretMissingError, match="the chart creates it"):
        await controller.reconcile()
    ready, why = controller.readiness.check()
    assert not ready
    assert "does not exist" in why
    samples = parse_exposition(exposition(certs_registry(controller)).decode())
    assert samples["dispatch_certs_pass_failures_total", frozenset()] == 1
    assert samples["dispatch_certs_ready", frozenset()] == 0
    assert not [name for name, _ in samples if name.endswith("_expiration_timestamp_seconds")]  # nothing read


async def test_readiness_waits_for_injection(env: Env):
    controller = await env.controller()
    # Injection refused (as with RBAC missing): the certificate is there, yet the pod must not be ready.
    original = controller._inject

    async def refuse(bundle: bytes):
        return await controller._read_configurations()

    controller._inject = refuse  # type: ignore[method-assign]
    await controller.reconcile()
    ready, why = controller.readiness.check()
    assert not ready
    assert "not injected" in why
    controller._inject = original  # type: ignore[method-assign]
    await controller.reconcile()
    assert controller.readiness.check() == (True, "ok")


# --- races ---------------------------------------------------------------------------------------------


def _in_lockstep(controllers: list[CertController]) -> None:
    """Make the controllers' next passes all read the Secret before any of them writes it: a guaranteed race."""
    barrier = asyncio.Barrier(len(controllers))
    for c in controllers:
        original = c._read_configurations
        armed = [True]

        async def wait_for_the_others(original=original, armed=armed):
            result = await original()
            if armed[0]:
                armed[0] = False
                await barrier.wait()
            return result

        c._read_configurations = wait_for_the_others  # type: ignore[method-assign]


async def test_racing_controllers_converge_on_one_certificate(env: Env):
    now = [utcnow()]
    controllers = [await env.controller(f"served-{i}", clock=lambda: now[0]) for i in range(3)]

    _in_lockstep(controllers)
    await asyncio.gather(*(c.reconcile() for c in controllers))
    assert sum(c.stats.secret_writes for c in controllers) == 1, "one writer won"
    assert sum(c.stats.conflicts for c in controllers) >= 2, "the others got 409 and re-read"
    stored = contents.parse(env.secret_data())
    assert all(c.material == stored for c in controllers)
    served = {(env.tmp / f"served-{i}" / "tls.crt").read_bytes() for i in range(3)}
    assert served == {stored.serving.cert_pem}, "every replica serves the one certificate"

    # A rotation raced the same way: one new CA is staged, and later one promotion happens.
    now[0] = contents.renewal_due_at(stored.ca.cert, lc.RENEW_AT) + dt.timedelta(seconds=1)
    _in_lockstep(controllers)
    await asyncio.gather(*(c.reconcile() for c in controllers))
    staged = contents.parse(env.secret_data())
    assert staged.next_ca is not None
    assert staged.ca == stored.ca
    assert all(c.material == staged for c in controllers)

    now[0] += lc.SETTLE
    _in_lockstep(controllers)
    await asyncio.gather(*(c.reconcile() for c in controllers))
    promoted = contents.parse(env.secret_data())
    assert promoted.ca == staged.next_ca
    assert promoted.previous_ca == stored.ca.cert_pem
    assert all(c.material == promoted for c in controllers)
    for kind in KINDS:
        assert env.bundles(kind) == {contents.trust_bundle(promoted)}
    assert {(env.tmp / f"served-{i}" / "tls.crt").read_bytes() for i in range(3)} == {promoted.serving.cert_pem}


# --- a blanked caBundle --------------------------------------------------------------------------------


async def _until(condition: Callable[[], bool], limit: float = 10.0) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > limit:
            raise AssertionError(f"not within {limit}s")
        await asyncio.sleep(0.05)
    return time.monotonic() - started


async def test_a_blanked_ca_bundle_is_reinjected_at_once(env: Env):
    controller = await env.controller()
    task = asyncio.create_task(controller.run())
    try:
        await asyncio.wait_for(controller.readiness.wait_ready(), 10)
        bundle = contents.trust_bundle(controller.material)

        # What a helm upgrade does to a field its templates lack (a replace of the whole object).
        vwc = env.configuration("ValidatingWebhookConfiguration")
        for hook in vwc["webhooks"]:
            hook["clientConfig"].pop("caBundle")
        env.cp.admin.request("PUT", f"/apis/{ADMISSION}/validatingwebhookconfigurations/{env.name}", vwc)
        # And a JSON Patch removing it from the mutating one.
        patch = [{"op": "remove", "path": "/webhooks/0/clientConfig/caBundle"}]
        env.cp.admin.request(
            "PATCH",
            f"/apis/{ADMISSION}/mutatingwebhookconfigurations/{env.name}",
            patch,
            content_type="application/json-patch+json",
        )
        # The watch brings it back (the resync is minutes away, so this is the watch, under its
        # name-scoped RBAC).
        took = await _until(lambda: all(env.bundles(k) == {bundle} for k in KINDS))
        assert took < 5
        # The count moves when the controller has the patch's answer, a moment after the API server has it.
        await _until(lambda: controller.stats.injections >= 4)
        await asyncio.wait_for(controller.readiness.wait_ready(), 5)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# --- CA rotation with requests flowing -----------------------------------------------------------------


async def _serve(tls: ReloadingServerContext) -> tuple[web.AppRunner, int]:
    async def hello(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls.context)
    await site.start()
    return runner, runner.addresses[0][1]


async def test_ca_rotation_fails_no_request(env: Env):
    """Two replicas (their clocks 5 s apart) rotate the CA while clients keep opening fresh TLS
    connections to both servers, each trusting exactly the caBundle injected at that moment, as the API
    server does. The clock is driven through a CA's whole rotation; not one request fails.

    Lifetimes are scaled to minutes; the fake clock stays within the certificates' one hour of backdating,
    so the clients' real-time checks of validity hold too."""
    offset = [dt.timedelta(0)]
    policy = {
        "ca_validity": dt.timedelta(minutes=30),
        "serving_validity": dt.timedelta(minutes=9),
        "settle": dt.timedelta(seconds=20),
        "overlap": dt.timedelta(seconds=40),
    }
    # Skew between replicas must stay below settle and overlap (docs/certs.md): 20 s and 40 s here.
    skews = [dt.timedelta(0), dt.timedelta(seconds=5)]
    controllers = [
        await env.controller(f"served-{i}", clock=lambda s=s: utcnow() + offset[0] + s, **policy)
        for i, s in enumerate(skews)
    ]
    await asyncio.gather(*(c.reconcile() for c in controllers))
    servers = [
        ReloadingServerContext(env.tmp / f"served-{i}" / "tls.crt", env.tmp / f"served-{i}" / "tls.key", interval=0.02)
        for i in range(2)
    ]
    watchers = [asyncio.create_task(s.watch()) for s in servers]
    runners = [await _serve(s) for s in servers]
    host = f"{SERVICE}.{env.namespace}.svc"

    admin = admin_api_client(env.cp.admin_credentials)
    admission = client.AdmissionregistrationV1Api(admin)
    done = asyncio.Event()
    failures: list[str] = []
    issuers: set[str] = set()
    requests = [0]
    contexts: dict[bytes, ssl.SSLContext] = {}

    async def injected_bundle() -> bytes:
        vwc = await admission.read_validating_webhook_configuration(env.name)
        return base64.b64decode(vwc.webhooks[0].client_config.ca_bundle)

    async def one_request(port: int) -> None:
        bundle = await injected_bundle()
        if bundle not in contexts:
            contexts[bundle] = ssl.create_default_context(cadata=bundle.decode())
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=contexts[bundle], server_hostname=host)
        try:
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            issuers.add(x509.load_der_x509_certificate(der).issuer.rfc4514_string())
            writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
            status = await reader.readline()
            assert status.startswith(b"HTTP/1.1 200"), status
        finally:
            writer.close()

    async def requester(n: int) -> None:
        i = 0
        while not done.is_set():
            i += 1
            port = runners[(n + i) % 2][1]
            try:
                await one_request(port)
                requests[0] += 1
            except Exception as exc:  # every failure is kept, with what was served and trusted then
                served = x509.load_pem_x509_certificate(servers[(n + i) % 2].cert_file.read_bytes())
                trusted = [c.subject.rfc4514_string() for c in contents.bundle_certificates(await injected_bundle())]
                failures.append(
                    f"offset {offset[0]}: {type(exc).__name__}: {exc}; served {served.issuer.rfc4514_string()}, "
                    f"trusted {trusted}; plans {[p for c in controllers for p in c.stats.plans][-4:]}"
                )

    clients = [asyncio.create_task(requester(n)) for n in range(2)]
    try:
        while offset[0] < dt.timedelta(minutes=23):
            offset[0] += dt.timedelta(seconds=30)
            await asyncio.gather(*(c.reconcile() for c in controllers))
            await asyncio.sleep(0.05)
    finally:
        done.set()
        await asyncio.gather(*clients)
        for task in watchers:
            task.cancel()
        for runner, _ in runners:
            await runner.cleanup()
        await admin.close()

    print(f"{requests[0]} requests, {len(failures)} failed, issuers {sorted(issuers)}")  # shown with -s / -rP
    plans = " | ".join(p for c in controllers for p in c.stats.plans)
    for step in ("new-ca:", "stage:", "promote:", "drop-previous:", "issue: the serving certificate is past"):
        assert step in plans, f"the drive reached {step!r}"
    assert failures == [], f"{len(failures)} of {requests[0] + len(failures)} requests failed: {failures[:5]}"
    assert requests[0] > 100
    assert len(issuers) == 2, "clients met certificates of the old CA and of the new one"


# --- the command -------------------------------------------------------------------------------------------


async def test_dispatch_certs_run_once(env: Env):
    out = env.tmp / "once"
    argv = [
        sys.executable, "-m", "certs", "run", "--once", "--kubeconfig", str(env.kubeconfig),
        "--namespace", env.namespace, "--secret", SECRET, "--service", SERVICE,
        "--webhook-configuration", env.name, "--out", str(out),
    ]  # fmt: skip
    done = await asyncio.to_thread(subprocess.run, argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    material = contents.parse(env.secret_data())
    assert (out / "tls.crt").read_bytes() == material.serving.cert_pem
    assert env.bundles("ValidatingWebhookConfiguration") == {contents.trust_bundle(material)}


async def test_dispatch_certs_run_serves_readiness_and_stops_on_sigterm(env: Env):
    from harness.cluster import free_port

    port = free_port()
    argv = [
        sys.executable, "-m", "certs", "run", "--kubeconfig", str(env.kubeconfig),
        "--namespace", env.namespace, "--secret", SECRET, "--service", SERVICE,
        "--webhook-configuration", env.name, "--out", str(env.tmp / "run"),
        "--health-bind-address", "127.0.0.1", "--health-port", str(port),
    ]  # fmt: skip
    process = await asyncio.create_subprocess_exec(*argv, stderr=asyncio.subprocess.PIPE)
    try:

        async def ready() -> bool:
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                return False
            writer.write(b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            answer = await reader.read()
            writer.close()
            return answer.startswith(b"HTTP/1.1 200")

        deadline = time.monotonic() + 30
        while not await ready():
            assert process.returncode is None, (await process.stderr.read()).decode()
            assert time.monotonic() < deadline, "not ready in 30s"
            await asyncio.sleep(0.1)
        material = contents.parse(env.secret_data())
        assert env.bundles("MutatingWebhookConfiguration") == {contents.trust_bundle(material)}

        # Its metrics, scraped from the same port as Prometheus would.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        head, _, body = (await reader.read()).partition(b"\r\n\r\n")
        writer.close()
        assert head.startswith(b"HTTP/1.1 200")
        samples = parse_exposition(body.decode())

        def expiry(keyed: contents.KeyedCert | None) -> float:
            assert keyed is not None
            return keyed.cert.not_valid_after_utc.timestamp()

        assert samples["dispatch_certs_ca_expiration_timestamp_seconds", frozenset()] == expiry(material.ca)
        assert samples["dispatch_certs_serving_expiration_timestamp_seconds", frozenset()] == expiry(material.serving)
        assert samples["dispatch_certs_pass_failures_total", frozenset()] == 0
        assert samples["dispatch_certs_secret_writes_total", frozenset()] == 1
        assert samples["dispatch_certs_ready", frozenset()] == 1
        assert ("dispatch_build_info", frozenset({("component", "certs"), ("version", version()),
                                                  ("python_version", platform.python_version())})) in samples  # fmt: skip
        assert samples["process_resident_memory_bytes", frozenset()] > 0
    finally:
        if process.returncode is None:
            process.terminate()
        code = await asyncio.wait_for(process.wait(), 15)
    assert code == 0
