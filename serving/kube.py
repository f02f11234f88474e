"""The Kubernetes client both servers use: from a kubeconfig, or from the pod's ServiceAccount."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Mapping
from typing import Any, Final

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException


class KubeConfigError(RuntimeError):
    pass


PROXY_VARIABLES: Final = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY")


async def api_client(kubeconfig: str | None) -> client.ApiClient:
    """A client from the kubeconfig file, or from the pod's ServiceAccount when there is none."""
    configuration = client.Configuration()
    try:
        if kubeconfig:
            await config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (ConfigException, OSError) as exc:
        where = kubeconfig or "the in-cluster ServiceAccount (no --kubeconfig given)"
        raise KubeConfigError(f"cannot configure the Kubernetes client from {where}: {exc}") from None
    api = client.ApiClient(configuration)
    if not proxy_environment(os.environ):
        # kubernetes_asyncio's session trusts the environment, so aiohttp looks for a proxy and in ~/.netrc on
        # every request, each in a worker thread (two thread hops per request; docs/performance.md). With no
        # proxy variable set there is no proxy to find, and a Kubernetes client never authenticates by netrc.
        api.rest_client.pool_manager._trust_env = False
    return api


def proxy_environment(environ: Mapping[str, str]) -> list[str]:
    """The proxy variables set, in either case (aiohttp reads both)."""
    return [name for name in PROXY_VARIABLES if environ.get(name) or environ.get(name.lower())]


def describe_api_error(exc: ApiException) -> str:
    """One line: the HTTP status and the API server's own message (ApiException's str has headers)."""
    raw = exc.body.decode("utf-8", "replace") if isinstance(exc.body, bytes) else str(exc.body or "")
    try:
        body = json.loads(raw) if raw else None
        message = str(body.get("message", "")) if isinstance(body, dict) else raw[:200]
    except ValueError:
        message = raw[:200]
    text = f"HTTP {exc.status} {exc.reason or ''}".rstrip()
    return f"{text}: {message}" if message else text


async def read_json(call: Awaitable[Any]) -> Any:
    """The JSON body of a call made with ``_preload_content=False`` (the API's own JSON, not a client model:
    the pure core reads camelCase dicts), or ApiException carrying the API server's message."""
    response = await call
    try:
        raw = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        exc = ApiException(status=response.status, reason=response.reason)
        exc.body = raw.decode("utf-8", "replace")
        raise exc
    return json.loads(raw) if raw else None
