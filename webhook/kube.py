"""The webhook's only I/O against the API server: reading the runtime copy a rule needs, and readiness."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, Final

from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

TRAINER_GROUP: Final = "trainer.kubeflow.org"
TRAINER_VERSION: Final = "v1alpha1"
RUNTIMES: Final = "trainingruntimes"

READY_TTL: Final = 5.0
"""Seconds a readiness answer is reused: kubelet probes every replica every few seconds, and a probe should
not cost the API server a request each time."""


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


class RuntimeReader:
    """Reads a TrainingRuntime; None when it does not exist, ApiException on any other failure."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = client.CustomObjectsApi(api)

    async def __call__(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return await self._api.get_namespaced_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, namespace, RUNTIMES, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


class LookupReadiness:
    """Ready when the API server answers with the TrainingRuntime API: reachable, we are authenticated, and
    the CRD is installed, which is what a lookup needs (RBAC on ``get`` is not probed: a denied lookup
    shows in the verdicts and the metrics)."""

    def __init__(self, api: client.ApiClient, *, ttl: float = READY_TTL, timeout: float = 2.0) -> None:
        self._api = client.CustomObjectsApi(api)
        self._ttl = ttl
        self._timeout = timeout
        self._checked_at = -float("inf")
        self._answer: tuple[bool, str] = (False, "not checked yet")

    async def __call__(self) -> tuple[bool, str]:
        now = time.monotonic()
        if now - self._checked_at >= self._ttl:
            self._answer = await self._probe()
            self._checked_at = time.monotonic()
        return self._answer

    async def _probe(self) -> tuple[bool, str]:
        try:
            resources = await self._api.get_api_resources(
                TRAINER_GROUP, TRAINER_VERSION, _request_timeout=self._timeout
            )
        except ApiException as exc:
            return False, f"API server: {describe_api_error(exc)}"
        except Exception as exc:  # connection refused, TLS, timeout: all mean "cannot look up now"
            return False, f"API server unreachable: {type(exc).__name__}: {exc}"
        if not any(r.name == RUNTIMES for r in resources.resources or ()):
            return False, f"API server does not serve {RUNTIMES}.{TRAINER_GROUP}/{TRAINER_VERSION}"
        return True, "ok"


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
