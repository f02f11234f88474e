"""The Kubernetes client both servers use: from a kubeconfig, or from the pod's ServiceAccount."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException


class KubeConfigError(RuntimeError):
    pass


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
    return client.ApiClient(configuration)


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
