"""The AdmissionReview protocol over real HTTPS: echoes, patches, denials, internal errors, lookups, probes,
metrics. Rules are replaced where a test needs a particular verdict, so these hold whatever the rules say."""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import itertools
import json
import platform
import re
import time

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

import webhook.admission
from certs import pki
from harness.fixtures import runtime_copy
from serving.prometheus import version
from tests.webhook.conftest import HOST, Running, admission_review
from webhook.review import Lookups, Verdict

pytestmark = pytest.mark.asyncio(loop_scope="function")

RUNTIME = runtime_copy()
RUNTIME_KEY = (RUNTIME["metadata"]["namespace"], RUNTIME["metadata"]["name"])


@pytest.mark.parametrize("path", ["/validate", "/mutate"])
async def test_answer_echoes_uid_api_version_and_kind(server: Running, path: str):
    status, answer = await server.post(path, admission_review(uid="uid-echo-1"))
    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "uid-echo-1"
    assert isinstance(answer["response"]["allowed"], bool)


async def test_patch_is_base64_json_patch(server: Running, monkeypatch: pytest.MonkeyPatch):
    patch = [{"op": "add", "path": "/metadata/annotations/example.com~1closed", "value": "yes"}]
    monkeypatch.setattr(webhook.admission, "mutate", lambda request, config: Verdict.allow(patch=patch))
    status, answer = await server.post("/mutate", admission_review(uid="uid-patch"))
    assert status == 200
    assert answer["response"]["uid"] == "uid-patch"
    assert answer["response"]["allowed"] is True
    assert answer["response"]["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(answer["response"]["patch"])) == patch


async def test_no_patch_fields_without_a_patch(server: Running, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(webhook.admission, "mutate", lambda request, config: Verdict.allow())
    _, answer = await server.post("/mutate", admission_review())
    assert "patch" not in answer["response"]
    assert "patchType" not in answer["response"]


async def test_denial_and_warnings_reach_the_answer(server: Running, monkeypatch: pytest.MonkeyPatch):
    denial = Verdict.deny("reserved-keys", "strangers may not change dispatch.phpboyscout.uk/job-id")
    monkeypatch.setattr(webhook.admission, "validate", lambda request, config, lookups: denial)
    _, answer = await server.post("/validate", admission_review(uid="uid-deny"))
    assert answer["response"] == {
        "uid": "uid-deny",
        "allowed": False,
        "status": {"code": 403, "message": denial.message, "reason": "Forbidden"},
    }
    warned = Verdict.allow(warnings=("the spec's prologue can repeat an epoch",))
    monkeypatch.setattr(webhook.admission, "validate", lambda request, config, lookups: warned)
    _, answer = await server.post("/validate", admission_review())
    assert answer["response"]["warnings"] == ["the spec's prologue can repeat an epoch"]


def _raise(*_args: object) -> Verdict:
    raise ZeroDivisionError("division by zero")


@pytest.mark.parametrize(
    ("path", "function"), [("/validate", "validate"), ("/mutate", "mutate"), ("/validate", "lookups_needed")]
)
async def test_exception_in_the_core_is_a_denial_with_the_uid(
    server: Running, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, path: str, function: str
):
    monkeypatch.setattr(webhook.admission, function, _raise)
    status, answer = await server.post(path, admission_review(uid="uid-boom"))
    assert status == 200
    response = answer["response"]
    assert response["uid"] == "uid-boom"
    assert response["allowed"] is False
    assert response["status"]["code"] == 500
    assert "failed internally" in response["status"]["message"]
    assert "ZeroDivisionError: division by zero" in response["status"]["message"]
    assert any(r.exc_info and r.exc_info[0] is ZeroDivisionError for r in caplog.records)
    monkeypatch.undo()
    await server.assert_serving()


async def test_lookups_are_filled_before_validate(server: Running, monkeypatch: pytest.MonkeyPatch):
    missing = (RUNTIME_KEY[0], "no-such-runtime")
    seen: list[Lookups] = []

    def validate(request, config, lookups):
        seen.append(lookups)
        return Verdict.allow()

    monkeypatch.setattr(webhook.admission, "lookups_needed", lambda request, config=None: [RUNTIME_KEY, missing])
    monkeypatch.setattr(webhook.admission, "validate", validate)
    status, _ = await server.post("/validate", admission_review())
    assert status == 200
    assert seen[0].runtimes == {RUNTIME_KEY: RUNTIME, missing: None}


async def test_lookup_failure_is_a_denial_naming_it(server: Running, monkeypatch: pytest.MonkeyPatch):
    async def failing(namespace: str, name: str):
        raise ApiException(status=503, reason="Service Unavailable")

    server.webhook.lookup = failing
    monkeypatch.setattr(webhook.admission, "lookups_needed", lambda request, config=None: [RUNTIME_KEY])
    _, answer = await server.post("/validate", admission_review(uid="uid-lookup"))
    response = answer["response"]
    assert (response["uid"], response["allowed"], response["status"]["code"]) == ("uid-lookup", False, 500)
    assert f"cannot read TrainingRuntime {RUNTIME_KEY[0]}/{RUNTIME_KEY[1]}" in response["status"]["message"]
    assert "HTTP 503 Service Unavailable" in response["status"]["message"]


async def test_slow_lookup_ends_within_the_api_servers_timeout(server: Running, monkeypatch: pytest.MonkeyPatch):
    async def hanging(namespace: str, name: str):
        await asyncio.sleep(60)

    server.webhook.lookup = hanging
    monkeypatch.setattr(webhook.admission, "lookups_needed", lambda request, config=None: [RUNTIME_KEY])
    started = time.monotonic()
    _, answer = await server.post("/validate", admission_review(uid="uid-slow"), params={"timeout": "1s"})
    assert time.monotonic() - started < 1.0
    assert answer["response"]["allowed"] is False
    assert "took over 0.8s" in answer["response"]["status"]["message"]


async def test_lookup_without_a_kube_client_is_a_denial(server: Running, monkeypatch: pytest.MonkeyPatch):
    server.webhook.lookup = None
    monkeypatch.setattr(webhook.admission, "lookups_needed", lambda request, config=None: [RUNTIME_KEY])
    _, answer = await server.post("/validate", admission_review())
    assert answer["response"]["allowed"] is False
    assert "no Kubernetes client" in answer["response"]["status"]["message"]


async def _get(server: Running, path: str, **kwargs: object) -> tuple[int, str, str]:
    async with server.session.get(server.url + path, **kwargs) as resp:
        return resp.status, await resp.text(), resp.headers["Content-Type"]


async def test_healthz_and_readyz(server: Running):
    assert (await _get(server, "/healthz"))[:2] == (200, "ok")
    assert (await _get(server, "/readyz"))[:2] == (200, "ok")

    async def api_down() -> tuple[bool, str]:
        return False, "API server unreachable: ConnectionRefusedError"

    server.webhook.lookup_ready = api_down
    status, text, _ = await _get(server, "/readyz")
    assert status == 503
    assert "cannot look up TrainingRuntimes: API server unreachable" in text
    assert (await _get(server, "/healthz"))[:2] == (200, "ok")

    server.webhook.lookup_ready = None
    server.webhook.stopping = True
    assert (await _get(server, "/readyz"))[:2] == (503, "shutting down")


async def test_readyz_fails_once_the_certificate_has_expired(server: Running):
    long_ago = dt.datetime.now(dt.UTC) - dt.timedelta(days=30)
    expired = pki.make_serving_cert(
        server.pki.ca, "old", ip_addresses=[HOST], validity=dt.timedelta(days=1), now=long_ago
    )
    server.pki.install(expired)
    assert server.webhook.tls.check()
    status, text, _ = await _get(server, "/readyz", ssl=False)  # as kubelet probes: without verifying
    assert status == 503
    assert "the served certificate expired at" in text


_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*",?)*\})? (\S+)$')


def parse_exposition(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text exposition; fails on any line that is not one."""
    samples = {}
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        labels = frozenset(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"', match[2] or ""))
        samples[match[1], labels] = float(match[3])
    return samples


async def test_metrics_count_reviews_bad_requests_and_latency(server: Running, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(webhook.admission, "validate", lambda r, c, lk: Verdict.deny("creation", "no"))
    for _ in range(3):
        await server.post("/validate", admission_review())
    monkeypatch.setattr(webhook.admission, "mutate", _raise)
    await server.post("/mutate", admission_review(operation="UPDATE", old=RUNTIME, obj=RUNTIME))
    await server.post("/validate", "not a review")  # 400
    async with server.session.post(server.url + "/validate", data=b"{}", headers={"Content-Type": "text/plain"}):
        pass  # 415

    status, text, content_type = await _get(server, "/metrics")
    assert status == 200
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    samples = parse_exposition(text)

    def sample(name: str, **labels: str) -> float:
        return samples[name, frozenset(labels.items())]

    reviews = "dispatch_webhook_reviews_total"
    labels = {"endpoint": "validate", "resource": "trainjobs", "operation": "CREATE", "verdict": "denied"}
    assert sample(reviews, **labels, rule="creation") == 3
    labels = {"endpoint": "mutate", "resource": "trainjobs", "operation": "UPDATE", "verdict": "denied"}
    assert sample(reviews, **labels, rule="internal-error") == 1
    assert sample("dispatch_webhook_bad_requests_total", endpoint="validate", code="400") == 1
    assert sample("dispatch_webhook_bad_requests_total", endpoint="validate", code="415") == 1

    duration = "dispatch_webhook_review_duration_seconds"
    assert sample(f"{duration}_count", endpoint="validate") == 3
    assert sample(f"{duration}_count", endpoint="mutate") == 1
    buckets = sorted(
        (float(dict(k[1])["le"]), v)
        for k, v in samples.items()
        if k[0] == f"{duration}_bucket" and dict(k[1])["endpoint"] == "validate"
    )
    assert buckets[-1] == (float("inf"), 3)
    assert all(a[1] <= b[1] for a, b in itertools.pairwise(buckets)), "buckets are cumulative"
    assert 0 < sample(f"{duration}_sum", endpoint="validate") < 3 * 5

    not_after = server.webhook.tls.info.not_after.timestamp()
    assert sample("dispatch_webhook_certificate_expiration_timestamp_seconds") == pytest.approx(not_after)
    assert sample("dispatch_webhook_certificate_reloads_total", result="loaded") == 0
    # prometheus_client's process and runtime metrics, and the build, in the webhook's own registry.
    build = {"component": "webhook", "version": version(), "python_version": platform.python_version()}
    assert sample("dispatch_build_info", **build) == 1
    assert sample("process_resident_memory_bytes") > 0
    assert sample("process_open_fds") > 0
    assert not [name for name, _ in samples if name.endswith("_created")]
