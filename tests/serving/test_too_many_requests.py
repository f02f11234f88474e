"""The one client sends a 429 again after the Retry-After the API server asks for, as client-go does: an API server
whose cache is still initializing after its start answers 429 "storage is (re)initializing" for a moment, and a
call should not fail on it. Against a real HTTP server on loopback (the API server is scripted: it must answer
429 on demand)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml
from aiohttp import web

from serving.client import RETRY_AFTER_CAP, TOO_MANY_REQUESTS_RETRIES, Kube, KubeError, retry_after
from serving.kube import api_client

STATUS_429 = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": "storage is (re)initializing",
    "reason": "TooManyRequests",
    "code": 429,
}


class Scripted:
    """An API server that answers ``busy`` 429s to every request before it answers 200."""

    def __init__(self, busy: int) -> None:
        self.busy, self.seen = busy, 0

    async def handle(self, request: web.Request) -> web.Response:
        self.seen += 1
        if self.seen <= self.busy:
            return web.json_response(STATUS_429, status=429, headers={"Retry-After": "0"})
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": "x"}, "body": await request.text()})


def kubeconfig(tmp_path: Path, port: int) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }))  # fmt: skip
    return str(path)


async def serve(script: Scripted) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", script.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    finally:
        await runner.cleanup()


async def call(tmp_path: Path, script: Scripted, method: str = "GET") -> object:
    async for port in serve(script):
        async with await api_client(kubeconfig(tmp_path, port)) as api:
            kube = Kube(api)
            if method == "GET":
                return await kube.request("GET", "/api/v1/namespaces/n/configmaps/x")
            return await kube.request("POST", "/api/v1/namespaces/n/configmaps", body={"metadata": {"name": "x"}})
    raise AssertionError("not served")


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_a_429_is_sent_again_until_answered(tmp_path, method):
    script = Scripted(busy=2)
    answer = asyncio.run(call(tmp_path, script, method))
    assert script.seen == 3
    assert isinstance(answer, dict)
    assert answer["metadata"] == {"name": "x"}
    if method == "POST":
        assert '"name": "x"' in answer["body"] or '"name":"x"' in answer["body"], "the body is sent again whole"


def test_a_429_that_lasts_is_the_answer_after_the_retries(tmp_path):
    script = Scripted(busy=100)
    with pytest.raises(KubeError) as caught:
        asyncio.run(call(tmp_path, script))
    assert caught.value.status == 429
    assert "storage is (re)initializing" in caught.value.message
    assert script.seen == TOO_MANY_REQUESTS_RETRIES + 1


@pytest.mark.parametrize(
    ("header", "seconds"),
    [(None, 1.0), ("0", 0.0), ("1", 1.0), ("30", RETRY_AFTER_CAP), ("soon", 1.0), ("-3", 0.0)],
)
def test_retry_after_reads_the_header_and_caps_it(header, seconds):
    assert retry_after(header) == seconds
