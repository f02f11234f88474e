"""A small fake of the API server's TrainingRuntime endpoints (kopf's kmock idea: a real HTTP server, not a
patched client), so the webhook's kubernetes_asyncio calls are exercised as they are in a cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from tests.loopback import serving

PREFIX = "/apis/trainer.kubeflow.org/v1alpha1"


def _status(code: int, reason: str, message: str) -> web.Response:
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": code}
    return web.json_response({**body, "message": message}, status=code)


class FakeApi:
    def __init__(self) -> None:
        self.runtimes: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.failing: dict[tuple[str, str], int] = {}
        self.serve_runtimes = True
        self.discovery_calls = 0

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(PREFIX, self._discovery)
        app.router.add_get(PREFIX + "/namespaces/{namespace}/trainingruntimes/{name}", self._get)
        return app

    async def _discovery(self, _: web.Request) -> web.Response:
        self.discovery_calls += 1
        resources = []
        if self.serve_runtimes:
            resources.append(
                {"name": "trainingruntimes", "singularName": "trainingruntime", "namespaced": True,
                 "kind": "TrainingRuntime", "verbs": ["get", "list", "watch"]}
            )  # fmt: skip
        return web.json_response(
            {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "trainer.kubeflow.org/v1alpha1",
             "resources": resources}
        )  # fmt: skip

    async def _get(self, request: web.Request) -> web.Response:
        key = (request.match_info["namespace"], request.match_info["name"])
        if key in self.failing:
            return _status(self.failing[key], "InternalError", "etcdserver: request timed out")
        if key not in self.runtimes:
            return _status(404, "NotFound", f'trainingruntimes.trainer.kubeflow.org "{key[1]}" not found')
        return web.json_response(self.runtimes[key])

    def kubeconfig(self, url: str, path: Path) -> Path:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "fake", "cluster": {"server": url}}],
                    "users": [{"name": "webhook", "user": {"token": "fake-token"}}],
                    "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "webhook"}}],
                    "current-context": "fake",
                }
            )
        )
        return path


@asynccontextmanager
async def running(api: FakeApi) -> AsyncIterator[str]:
    """Serve the fake on loopback over plain HTTP; yields its URL."""
    async with serving(api.app()) as url:
        yield url
