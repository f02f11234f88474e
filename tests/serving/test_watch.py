"""The list-then-watch loop against a scripted API: resume from the last resourceVersion after a broken
connection, LIST again on 410 Gone, bookmarks move the position, no hammering when a watch ends at once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from serving import watch
from serving.client import KubeError

pytestmark = pytest.mark.asyncio(loop_scope="function")


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv}}


def line(kind: str, o: dict[str, Any]) -> bytes:
    return (json.dumps({"type": kind, "object": o}) + "\n").encode()


class Response:
    status = 200

    def __init__(self, lines: list[Any], forever: asyncio.Event | None = None) -> None:
        self.lines, self.forever = list(lines), forever
        self.content = self

    async def readline(self) -> bytes:
        if not self.lines:
            if self.forever is not None:
                await self.forever.wait()
            return b""
        item = self.lines.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    def release(self) -> None:
        pass

    def close(self) -> None:
        pass


class Api:
    """LIST pages and WATCH streams, in the order the test expects them."""

    def __init__(self, lists: list[dict[str, Any]], watches: list[Response]) -> None:
        self.lists, self.watches = lists, watches
        self.watched_from: list[str] = []
        self.listed = 0
        self.all_watched = asyncio.Event()

    async def list_page(self, call: Any, **kwargs: Any) -> dict[str, Any]:
        self.listed += 1
        return self.lists.pop(0)

    async def call(self, **kwargs: Any) -> Response:
        assert kwargs["watch"] is True
        assert kwargs["allow_watch_bookmarks"] is True
        assert kwargs["_preload_content"] is False  # the lines are decoded once, by us
        self.watched_from.append(kwargs["resource_version"])
        response = self.watches.pop(0)
        if not self.watches:
            self.all_watched.set()
        return response


class Recorder:
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []
        self.listing: list[str] | None = None

    def begin(self) -> None:
        self.listing = []  # also after a LIST that failed half-way: it starts again

    def page(self, items: list[Any]) -> None:
        assert self.listing is not None
        self.listing += [i["metadata"]["name"] for i in items]

    def end(self) -> None:
        assert self.listing is not None
        self.seen.append(("replace", *self.listing))
        self.listing = None

    def event(self, kind: str, o: Any) -> None:
        self.seen.append((kind, o["metadata"]["name"]))


async def test_resume_relist_and_bookmarks():
    forever = asyncio.Event()
    api = Api(
        lists=[
            {"metadata": {"resourceVersion": "10"}, "items": [obj("a", "1")]},
            {"metadata": {"resourceVersion": "20"}, "items": [obj("b", "12")]},
        ],
        watches=[
            Response(
                [
                    line("ADDED", obj("b", "11")),
                    line("MODIFIED", obj("b", "12")),
                    aiohttp.ClientConnectionError("reset"),
                ]
            ),
            Response([line("ERROR", {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"})]),
            Response([line("BOOKMARK", obj("", "25"))]),  # ends at once: backed off, not hammered
            Response([], forever),
        ],
    )
    handler, synced, restarts = Recorder(), asyncio.Event(), []
    task = asyncio.create_task(watch.run("things", api, api.call, handler, synced, restarts.append))  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(api.all_watched.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert synced.is_set()
    assert api.listed == 2
    # Resumed from the last version seen before the connection broke; listed again after 410; the bookmark
    # moved the position.
    assert api.watched_from == ["10", "12", "20", "25"]
    assert handler.seen == [("replace", "a"), ("ADDED", "b"), ("MODIFIED", "b"), ("replace", "b")]
    assert restarts == ["error", "gone", "closed"]


async def test_a_resource_that_is_not_served_is_an_empty_synced_collection(monkeypatch):
    """Kueue not installed: the LIST is a 404. The agent must still be ready (the webhook shares its pod, and
    plain mode needs no Kueue), and must notice when the CRD appears."""
    monkeypatch.setattr(watch.Backoff, "next", lambda self: 0.01)
    forever = asyncio.Event()
    api = Api(
        lists=[{"metadata": {"resourceVersion": "30"}, "items": [obj("late", "29")]}], watches=[Response([], forever)]
    )
    failures = [KubeError(404, "NotFound", "not found"), KubeError(404, "NotFound", "not found")]
    listed = api.list_page

    async def list_page(call: Any, **kwargs: Any) -> dict[str, Any]:
        if failures:
            raise failures.pop(0)
        return await listed(call, **kwargs)

    api.list_page = list_page  # type: ignore[method-assign]
    handler, synced, restarts = Recorder(), asyncio.Event(), []
    task = asyncio.create_task(watch.run("workloads", api, api.call, handler, synced, restarts.append))  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(api.all_watched.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert synced.is_set()
    assert handler.seen == [("replace",), ("replace", "late")]  # empty once, then what the install brought
    assert restarts == ["absent", "absent"]
    assert api.watched_from == ["30"]


async def test_each_page_is_handed_over_before_the_next_is_read():
    """The initial LIST keeps no page: the handler has page n before page n + 1 is requested."""
    forever = asyncio.Event()
    pages = [
        {"metadata": {"resourceVersion": "", "continue": "p2"}, "items": [obj("a", "1"), obj("b", "2")]},
        {"metadata": {"resourceVersion": "", "continue": "p3"}, "items": [obj("c", "3")]},
        {"metadata": {"resourceVersion": "9"}, "items": [obj("d", "4")]},
    ]
    api = Api(lists=pages, watches=[Response([], forever)])
    handler, synced = Recorder(), asyncio.Event()
    handed: list[int] = []
    page = handler.page

    def on_page(items: list[Any]) -> None:
        handed.append(api.listed)  # how many pages had been requested when this one was handed over
        page(items)

    handler.page = on_page  # type: ignore[method-assign]
    task = asyncio.create_task(watch.run("things", api, api.call, handler, synced))  # type: ignore[arg-type]
    try:
        await asyncio.wait_for(api.all_watched.wait(), 10)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert handed == [1, 2, 3]
    assert handler.seen == [("replace", "a", "b", "c", "d")]
    assert api.watched_from == ["9"]
