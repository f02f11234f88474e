"""The webhook's only I/O against the API server: reading the runtime copy a rule needs, and readiness."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from serving.kube import describe_api_error

TRAINER_GROUP: Final = "trainer.kubeflow.org"
TRAINER_VERSION: Final = "v1alpha1"
RUNTIMES: Final = "trainingruntimes"

READY_TTL: Final = 5.0
"""Seconds a readiness answer is reused: kubelet probes every replica every few seconds, and a probe should
not cost the API server a request each time."""


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
