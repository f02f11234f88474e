"""Health, readiness and metrics over plain HTTP on a port of their own (probes and scrapes, no secrets).

* /healthz: the process serves HTTP (the event loop is not stuck).
* /readyz: every watch has listed once; a standby is as ready as the leader (either may lead next, and only
  one acts), and neither is ready while stopping.
* /metrics: Prometheus text of the agent process's one registry (the gate's, the API's, the process's).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from aiohttp import web
from prometheus_client import CollectorRegistry

from serving.prometheus import CONTENT_TYPE, exposition


class HealthServer:
    def __init__(self, metrics: CollectorRegistry, ready: Callable[[], tuple[bool, str]]) -> None:
        self.metrics = metrics
        self.ready = ready
        self.stopping = False

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        ok, why = (False, "shutting down") if self.stopping else self.ready()
        return web.Response(status=200 if ok else 503, text=why)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(body=exposition(self.metrics), headers={"Content-Type": CONTENT_TYPE})


@asynccontextmanager
async def serving(server: HealthServer, host: str, port: int) -> AsyncIterator[int]:
    """Serve on host:port (0 picks a free port) until the block ends; yields the bound port."""
    runner = web.AppRunner(server.app(), access_log=None, handle_signals=False, shutdown_timeout=5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()
