"""List-then-watch of one collection, forever, on kubernetes_asyncio's calls, with the bookkeeping around them.

* LIST (paginated), handing the handler each page as it arrives and then the end of the list (whatever was
  not listed is gone); then WATCH from the list's resourceVersion, with bookmarks, and carry the last
  resourceVersion seen across reconnects. Pages are not kept: memory holds one page, not the collection.
* The watch's lines are decoded once, into the API's JSON. (kubernetes_asyncio's Watch decodes each event,
  encodes it again and decodes that into its return type, a client model for pods and nodes: CPU for
  nothing, on every event.)
* 410 Gone (the resourceVersion is too old to resume from): LIST again.
* Any other failure: reconnect from the last resourceVersion after a jittered, capped backoff.
* The API server ends each watch after ``timeout_seconds``; a client timeout a little longer catches a
  connection that died silently.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Protocol

import aiohttp

from contract.objects import dig
from serving.backoff import Backoff
from serving.client import KubeError, error

WATCH_TIMEOUT_SECONDS: Final = 300
"""A watch asks the API server to close it after this long (jittered), and is then resumed."""
LIST_PAGE_SIZE: Final = 500

log = logging.getLogger(__name__)


class Lister(Protocol):
    async def list_page(self, call: Callable[..., Awaitable[Any]], **kwargs: Any) -> Mapping[str, Any]:
        """One page of ``call``'s LIST, as the API's JSON, with the caller's request options."""
        ...


class Handler(Protocol):
    def begin(self) -> None:
        """A LIST starts: the pages that follow, up to ``end``, are the full state."""

    def page(self, items: list[Mapping[str, Any]]) -> None:
        """One page of the LIST; the handler keeps what it needs, the watch keeps nothing."""

    def end(self) -> None:
        """The LIST is complete: whatever was not in its pages is gone."""

    def event(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One ADDED, MODIFIED or DELETED event."""


# A handler may also have ``listed(resource_version: str)``: called after each complete LIST with the list's own
# resourceVersion (what it shows is the collection as of then; the watch resumes from it).


async def list_all(kube: Lister, call: Callable[..., Awaitable[Any]], handler: Handler) -> tuple[int, str]:
    """Every item, in pages (10,000 Workloads in one response would be tens of MB), each handed over as it
    arrives and then dropped; how many there were and the list's resourceVersion."""
    token: str | None = None
    count = 0
    handler.begin()
    while True:
        kwargs: dict[str, Any] = {"limit": LIST_PAGE_SIZE}
        if token:
            kwargs["_continue"] = token
        page = await kube.list_page(call, **kwargs)
        items = page.get("items") or []
        count += len(items)
        handler.page(items)
        token = dig(page, "metadata", "continue")
        if not token:
            handler.end()
            return count, str(dig(page, "metadata", "resourceVersion") or "")
        del page, items  # not kept while the next page is read


async def stream(
    call: Callable[..., Awaitable[Any]],
    position: list[str],
    handler: Handler,
    server_timeout: int,
    on_live: Callable[[bool], None] | None = None,
) -> None:
    """Watch from ``position[0]`` until the server ends the watch, keeping ``position[0]`` at the last version
    seen, also when the stream fails half-way (the reconnect resumes from there, not from the start).
    ``on_live(True)`` once the API server accepted the watch, ``on_live(False)`` when it ends for any reason."""
    response = await call(
        watch=True,
        resource_version=position[0],
        allow_watch_bookmarks=True,
        timeout_seconds=server_timeout,
        _preload_content=False,
        _request_timeout=aiohttp.ClientTimeout(total=server_timeout + 30, sock_connect=10),
    )
    try:
        status = getattr(response, "status", 200)
        if not 200 <= status <= 299:
            raise error(status, await response.read())
        if on_live is not None:
            on_live(True)
        while line := await response.content.readline():
            event = json.loads(line)
            kind, obj = event.get("type"), event.get("object")
            if kind == "ERROR":
                obj = obj if isinstance(obj, Mapping) else {}
                raise KubeError(int(obj.get("code") or 0), str(obj.get("reason") or ""), str(obj.get("message") or ""))
            if kind in ("ADDED", "MODIFIED", "DELETED") and isinstance(obj, Mapping):
                handler.event(kind, obj)
            rv = dig(obj, "metadata", "resourceVersion")
            if rv:
                position[0] = str(rv)
    finally:
        if on_live is not None:
            on_live(False)
        response.release()


async def run(
    name: str,
    kube: Lister,
    call: Callable[..., Awaitable[Any]],
    handler: Handler,
    synced: asyncio.Event,
    on_restart: Callable[[str], None] | None = None,
    on_live: Callable[[bool], None] | None = None,
) -> None:
    """List and watch ``call``'s collection until cancelled; ``synced`` is set after the first full list.
    ``on_live`` says when a watch stream is open (the handler is then as current as the watch can make it)."""
    backoff = Backoff()
    position: list[str] = []  # the resourceVersion to resume from; empty: LIST first
    loop = asyncio.get_running_loop()
    while True:
        try:
            if not position:
                count, rv = await list_all(kube, call, handler)
                if (listed := getattr(handler, "listed", None)) is not None:
                    listed(rv)
                synced.set()
                position = [rv]
                log.debug("%s: listed %d, watching from %s", name, count, rv)
            started = loop.time()
            timeout = int(WATCH_TIMEOUT_SECONDS * random.uniform(0.8, 1.2))
            await stream(call, position, handler, timeout, on_live)
            if loop.time() - started > 1:
                backoff.reset()
                continue
            # Ended at once without an error: do not hammer the API server with reconnects.
            why, text = "closed", "the server ended the watch at once"
        except KubeError as exc:
            if exc.status == 404 and not position:
                # The API server does not serve the resource: its CRD (Kueue's) is not installed. An absent
                # collection is an empty one — nothing to gate, plain mode only — so the agent is ready and
                # the webhook beside it in the pod serves; the LIST is tried again to notice an install.
                if not synced.is_set():
                    handler.begin()
                    handler.end()
                    synced.set()
                    log.warning("%s: not served by the API server (CRD not installed?): watching nothing", name)
                why, text = "absent", exc.describe()
                _restarted(on_restart, why)
                await asyncio.sleep(backoff.next())
                continue
            if exc.status == 410:
                log.info("%s: resourceVersion %s expired: listing again", name, position[0] if position else "")
                position = []
                _restarted(on_restart, "gone")
                continue
            why, text = "error", exc.describe()
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as exc:
            why, text = "error", f"{type(exc).__name__}: {exc}"
        delay = backoff.next()
        log.warning("%s: watch failed (%s); again in %.1fs", name, text, delay)
        _restarted(on_restart, why)
        await asyncio.sleep(delay)


def _restarted(on_restart: Callable[[str], None] | None, why: str) -> None:
    if on_restart is not None:
        on_restart(why)
