"""The shared Kubernetes client (serving/kube.py): no per-request proxy or netrc look-up in a thread unless a
proxy is configured."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import yaml

from serving.kube import api_client, proxy_environment

PROXIES = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY")


def kubeconfig(tmp_path: Path) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {"name": "c", "cluster": {"server": "https://127.0.0.1:1", "insecure-skip-tls-verify": True}}
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


def settings(path: str) -> bool:
    async def read() -> bool:
        async with await api_client(path) as api:
            return bool(api.rest_client.pool_manager.trust_env)

    return asyncio.run(read())


@pytest.fixture
def no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in PROXIES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def test_without_a_proxy_variable_nothing_is_looked_up_per_request(tmp_path, no_proxy_env):
    assert settings(kubeconfig(tmp_path)) is False


@pytest.mark.parametrize("name", ["HTTPS_PROXY", "https_proxy", "NO_PROXY"])
def test_a_proxy_variable_keeps_the_environment_trusted(tmp_path, no_proxy_env, name):
    no_proxy_env.setenv(name, "http://proxy.invalid:3128")
    assert settings(kubeconfig(tmp_path)) is True
    assert proxy_environment({name: "x"}) == [name.upper()]
