"""List-then-watch of one collection, forever: kubernetes_asyncio's watch, with the bookkeeping it leaves to us.

* LIST (paginated) and hand the handler the full state; then WATCH from the list's resourceVersion, with
  bookmarks, and carry the last resourceVersion seen across reconnects.
* 410 Gone (the resourceVersion is too old to resume from): LIST again. kubernetes_asyncio retries a 410
  itself only once and from the same, expired version, so its own retry is disabled (``timeout_seconds``
  is always given) and the 410 comes to us.
* Any other failure: reconnect from the last resourceVersion after a jittered, capped backoff.
* The API server ends each watch after ``timeout_seconds``; a client timeout a little longer catches a
  connection that died silently.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import aiohttp
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from agent.constants import LIST_PAGE_SIZE, WATCH_TIMEOUT_SECONDS
from agent.kube import Kube
from agent.queue import Backoff
from contract.objects import dig
from serving.kube import describe_api_error

log = logging.getLogger(__name__)


class Handler(Protocol):
    def replace(self, items: list[Mapping[str, Any]]) -> None:
        """The full state after a LIST: whatever is not in it is gone."""

    def event(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One ADDED, MODIFIED or DELETED event."""


async def list_all(kube: Kube, call: Callable[..., Awaitable[Any]]) -> tuple[list[Mapping[str, Any]], str]:
    """Every item, in pages (10,000 Workloads in one response would be tens of MB), and the list's version."""
    items: list[Mapping[str, Any]] = []
    token: str | None = None
    while True:
        kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
        if token:
            kwargs["_continue"] = token
        page = await kube.list_page(call, **kwargs)
        items.extend(page.get("items") or [])
        token = dig(page, "metadata", "continue")
        if not token:
            return items, str(dig(page, "metadata", "resourceVersion") or "")


async def stream(
    call: Callable[..., Awaitable[Any]], position: list[str], handler: Handler, server_timeout: int
) -> None:
    """Watch from ``position[0]`` until the server ends the watch, keeping ``position[0]`` at the last version
    seen, also when the stream fails half-way (the reconnect resumes from there, not from the start)."""
    async with watch.Watch(return_type="object") as w:
        async for event in w.stream(
            call,
            resource_version=position[0],
            allow_watch_bookmarks=True,
            timeout_seconds=server_timeout,
            _request_timeout=aiohttp.ClientTimeout(total=server_timeout + 30, sock_connect=10),
        ):
            kind, obj = event.get("type"), event.get("raw_object")
            if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, Mapping):
                handler.event(kind, obj)
            rv = dig(obj, "metadata", "resourceVersion")
            if rv:
                position[0] = str(rv)


async def run(
    name: str,
    kube: Kube,
    call: Callable[..., Awaitable[Any]],
    handler: Handler,
    synced: asyncio.Event,
    on_restart: Callable[[str], None] | None = None,
) -> None:
    """List and watch ``call``'s collection until cancelled; ``synced`` is set after the first full list."""
    backoff = Backoff()
    position: list[str] = []  # the resourceVersion to resume from; empty: LIST first
    loop = asyncio.get_running_loop()
    while True:
        try:
            if not position:
                items, rv = await list_all(kube, call)
                handler.replace(items)
                synced.set()
                position = [rv]
                log.debug("%s: listed %d, watching from %s", name, len(items), rv)
            started = loop.time()
            await stream(call, position, handler, int(WATCH_TIMEOUT_SECONDS * random.uniform(0.8, 1.2)))
            if loop.time() - started > 1:
                backoff.reset()
                continue
            # Ended at once without an error: do not hammer the API server with reconnects.
            why, text = "closed", "the server ended the watch at once"
        except ApiException as exc:
            if exc.status == 404 and not position:
                # The API server does not serve the resource: its CRD (Kueue's) is not installed. An absent
                # collection is an empty one — nothing to gate, plain mode only — so the agent is ready and
                # the webhook beside it in the pod serves; the LIST is tried again to notice an install.
                if not synced.is_set():
                    handler.replace([])
                    synced.set()
                    log.warning("%s: not served by the API server (CRD not installed?): watching nothing", name)
                why, text = "absent", describe_api_error(exc)
                _restarted(on_restart, why)
                await asyncio.sleep(backoff.next())
                continue
            if exc.status == 410:
                log.info("%s: resourceVersion %s expired: listing again", name, position[0] if position else "")
                position = []
                _restarted(on_restart, "gone")
                continue
            why, text = "error", describe_api_error(exc)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            why, text = "error", f"{type(exc).__name__}: {exc}"
        delay = backoff.next()
        log.warning("%s: watch failed (%s); again in %.1fs", name, text, delay)
        _restarted(on_restart, why)
        await asyncio.sleep(delay)


def _restarted(on_restart: Callable[[str], None] | None, why: str) -> None:
    if on_restart is not None:
        on_restart(why)
