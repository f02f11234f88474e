"""The Kubernetes client every command uses, configured as kubectl is: ``--kubeconfig``, ``$KUBECONFIG``,
``~/.kube/config``, else the pod's ServiceAccount; ``--context`` picks a context (where: ``serving.kubeconfig``)."""

from __future__ import annotations

import json
import os
from collections.abc import Awaitable, Mapping
from typing import Any, Final

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from serving.client import KubeError, read_json
from serving.kubeconfig import KubeConfigError as KubeConfigError
from serving.kubeconfig import kubeconfig_files as kubeconfig_files

PROXY_VARIABLES: Final = ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "WS_PROXY", "WSS_PROXY")


IN_CLUSTER: Final = "the in-cluster ServiceAccount"


async def load_configuration(kubeconfig: str | None, context: str | None = None) -> client.Configuration:
    """The client configuration resolved as kubectl resolves it (``kubeconfig_files``), for ``context`` (the
    kubeconfig's current context when None). A kubeconfig is only read: token refreshes are not written back."""
    configuration = client.Configuration()
    files = kubeconfig_files(kubeconfig)
    try:
        if files is not None:
            await config.load_kube_config(
                config_file=files, context=context, client_configuration=configuration, persist_config=False
            )
        elif context:
            raise ConfigException(f"--context {context} needs a kubeconfig, and none was found")
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (ConfigException, OSError) as exc:
        where = files or f"{IN_CLUSTER} (no --kubeconfig, no $KUBECONFIG file, no ~/.kube/config)"
        raise KubeConfigError(f"cannot configure the Kubernetes client from {where}: {exc}") from None
    return configuration


async def api_client(kubeconfig: str | None, context: str | None = None) -> client.ApiClient:
    """A client configured as kubectl would be (``load_configuration``)."""
    api = client.ApiClient(await load_configuration(kubeconfig, context))
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


def describe_error(exc: BaseException) -> str:
    """One line for any failure of a call to an API server: the API server's answer (``KubeError.describe``,
    ``describe_api_error``), the exception's type and message otherwise (a connection refused, a timeout, an
    unreadable kubeconfig)."""
    if isinstance(exc, KubeError):
        return exc.describe()
    if isinstance(exc, ApiException):
        return describe_api_error(exc)
    return f"{type(exc).__name__}: {exc}".rstrip(": ")


async def or_none(call: Awaitable[Any]) -> Any:
    """The call's JSON object (``read_json``), or None when it is not found (404); any other failure raises."""
    try:
        return await read_json(call)
    except KubeError as exc:
        if exc.status == 404:
            return None
        raise
