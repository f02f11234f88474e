"""Stopping behind a Service without breaking a client's kept-alive connection.

Once a pod stops being Ready the Service sends it no new connection, but an established keep-alive
connection stays pinned to it (conntrack keeps the flow), and a client such as the API server goes on
sending through it until the listener closes; the request in flight then meets EOF. So while stopping,
each answer closes its connection (as kube-apiserver's own graceful shutdown does for HTTP/1.1), and the
client's next request opens a new one, which the Service sends to a Ready pod.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import hdrs, web

ResponseHook = Callable[[web.Request, web.StreamResponse], Awaitable[None]]


def close_when(stopping: Callable[[], bool]) -> ResponseHook:
    """An ``on_response_prepare`` hook: once ``stopping()``, each answer is the last on its connection."""

    async def hook(_: web.Request, response: web.StreamResponse) -> None:
        if stopping():
            # aiohttp has chosen the headers by the time these hooks run: the header is set here besides
            # the flag that closes the connection once the answer is sent.
            response.force_close()
            response.headers[hdrs.CONNECTION] = "close"

    return hook
