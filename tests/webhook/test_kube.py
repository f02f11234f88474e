"""The runtime lookup and the readiness probe through kubernetes_asyncio against a fake API server."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from harness.fixtures import runtime_copy
from serving.kube import KubeConfigError, api_client, describe_api_error
from tests.webhook.fake_api import FakeApi, running
from webhook.kube import LookupReadiness, RuntimeReader

pytestmark = pytest.mark.asyncio(loop_scope="function")

RUNTIME = runtime_copy()
KEY = (RUNTIME["metadata"]["namespace"], RUNTIME["metadata"]["name"])


async def test_runtime_reader(tmp_path: Path):
    fake = FakeApi()
    fake.runtimes[KEY] = RUNTIME
    fake.failing["team-a", "broken"] = 500
    async with running(fake) as url, await api_client(str(fake.kubeconfig(url, tmp_path / "kc"))) as api:
        read = RuntimeReader(api)
        assert await read(*KEY) == RUNTIME
        assert await read("team-a", "absent") is None
        with pytest.raises(ApiException) as failure:
            await read("team-a", "broken")
    assert describe_api_error(failure.value) == "HTTP 500 Internal Server Error: etcdserver: request timed out"


async def test_readiness_follows_the_api_server_and_is_cached(tmp_path: Path):
    fake = FakeApi()
    async with running(fake) as url:
        api = await api_client(str(fake.kubeconfig(url, tmp_path / "kc")))
        ready = LookupReadiness(api, ttl=60)
        assert await ready() == (True, "ok")
        assert await ready() == (True, "ok")
        assert fake.discovery_calls == 1, "a second probe within the TTL reuses the answer"

        fake.serve_runtimes = False
        ok, why = await LookupReadiness(api)()
        assert not ok
        assert "does not serve trainingruntimes.trainer.kubeflow.org/v1alpha1" in why

    async with api:  # the fake has stopped: nothing listens there any more
        ok, why = await LookupReadiness(api, timeout=2)()
    assert not ok
    assert why.startswith("API server unreachable: ClientConnectorError"), why


async def test_no_kubeconfig_outside_a_cluster_is_a_config_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="in-cluster ServiceAccount"):
        await api_client(None)
    with pytest.raises(KubeConfigError, match="cannot configure"):
        await api_client(str(tmp_path / "missing-kubeconfig"))
