"""Events on the TrainJob: a held check's reason when it changes, and foreign reports.

Events are reports, never part of a decision: one that cannot be created is logged and retried on a later
pass, and it never changes what the gate writes.

They go through a correlator that does what client-go's recorder does (k8s.io/client-go/tools/record,
events_cache.go: ``EventCorrelator``), with its constants, so that a burst of held checks whose message
changes as pods go (3 pods, 2 pods, 1 pod...) cannot grow the Events without bound:

* **aggregation**: similar Events (same source, object, type, reason and reporting instance; a different
  message) seen for ``AGGREGATE_MAX_EVENTS`` (10) different messages within ``AGGREGATE_INTERVAL`` (600 s)
  of one another become one Event, ``(combined from similar events): <the latest message>``;
* **counting**: an Event identical to one already written (the same key, message included) is a PATCH of
  that Event's ``count``, ``lastTimestamp`` (and ``message``, for the combined one), never a new Event;
* **spam filter**: per source and object, a token bucket of ``SPAM_BURST`` (25) Events refilled at
  ``SPAM_QPS`` (1 per 300 s); an Event past it is not written (it is still counted, so the next one written
  carries the true count).

Each of the three keeps at most ``LRU_ENTRIES`` (4096) keys, least recently used first out, as client-go
does; messages are kept as 8-byte digests, so memory is bounded whatever the messages.

The PATCH is a write of ours: a JSON Patch with the field manager ``dispatch.phpboyscout.uk/adapter``,
``test`` of the Event's uid, ``replace`` of its resourceVersion with the one our last write returned (409
if anyone wrote it since), and ``replace`` of exactly the fields the correlator owns. A refused or missing
Event (404 after the API server's Event TTL, 409, 422) is created afresh, as client-go does on 404.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Generic, Literal, TypeVar

from agent.constants import (
    EVENT_COMPONENT,
    EVENT_MESSAGE_MAX,
    REASON_COPY_UNVERIFIED,
    REASON_FOREIGN,
    REASON_HELD,
    REASON_OUT_OF_CONTACT,
    REASON_QUOTA_KEPT,
    REASON_QUOTA_RELEASED,
    REASON_STALE_COPY,
    REASON_UNCLAIMED,
)
from contract.keys import KIND_TRAINJOB
from contract.objects import dig
from contract.upstream import TRAINER_API_VERSION
from serving.client import KubeError

log = logging.getLogger(__name__)

FOREIGN_MEMORY = 10_000
"""(TrainJob uid, reason) pairs remembered as reported; the oldest are forgotten past this, so a long-lived
process stays bounded (a forgotten one is at worst reported once more)."""

# client-go, tools/record/events_cache.go: maxLruCacheEntries, defaultAggregateMaxEvents,
# defaultAggregateIntervalInSeconds, defaultSpamBurst, defaultSpamQPS, EventAggregatorByReasonMessageFunc.
LRU_ENTRIES: Final = 4096
AGGREGATE_MAX_EVENTS: Final = 10
AGGREGATE_INTERVAL: Final = 600.0
SPAM_BURST: Final = 25
SPAM_QPS: Final = 1.0 / 300.0
COMBINED: Final = "(combined from similar events): "


CreateEvent = Callable[[str, Mapping[str, Any]], Awaitable[Any]]
PatchEvent = Callable[[str, str, list[dict[str, Any]]], Awaitable[Any]]
"""(namespace, name, JSON Patch ops) -> the Event as written."""


def event_body(
    trainjob: Mapping[str, Any], *, reason: str, message: str, warning: bool, instance: str, now: dt.datetime
) -> dict[str, Any]:
    """A core/v1 Event about ``trainjob`` as read (its uid pins the object the report is about)."""
    name = dig(trainjob, "metadata", "name")
    namespace = dig(trainjob, "metadata", "namespace")
    stamp = timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": event_name(str(name)), "namespace": namespace},
        "involvedObject": {
            "apiVersion": TRAINER_API_VERSION,
            "kind": KIND_TRAINJOB,
            "name": name,
            "namespace": namespace,
            "uid": dig(trainjob, "metadata", "uid"),
            "resourceVersion": dig(trainjob, "metadata", "resourceVersion"),
        },
        "reason": reason,
        "message": bounded(message),
        "type": "Warning" if warning else "Normal",
        "source": {"component": EVENT_COMPONENT},
        "reportingComponent": EVENT_COMPONENT,
        "reportingInstance": instance,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


def timestamp(now: dt.datetime) -> str:
    return now.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def event_name(object_name: str) -> str:
    return f"{object_name}.{secrets.token_hex(8)}"


def bounded(message: str) -> str:
    if len(message) > EVENT_MESSAGE_MAX:
        return message[: EVENT_MESSAGE_MAX - 16] + " ... (truncated)"
    return message


# -- the correlator: pure, a function of the Events it is given and the time --------------------------------

K = TypeVar("K")
V = TypeVar("V")


class Lru(Generic[K, V]):
    """At most ``size`` entries; a get or a put makes an entry the most recent (groupcache's lru.Cache)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)


def digest(text: str) -> bytes:
    return hashlib.blake2b(text.encode(), digest_size=8).digest()


def object_key(event: Mapping[str, Any]) -> tuple[str, ...]:
    """Source and object (client-go's getSpamKey)."""
    obj = event.get("involvedObject") or {}
    return (
        str(dig(event, "source", "component")),
        str(dig(event, "source", "host") or ""),
        *(str(obj.get(f) or "") for f in ("kind", "namespace", "name", "uid", "apiVersion")),
    )


def similar_key(event: Mapping[str, Any]) -> tuple[str, ...]:
    """Source, object, type, reason and reporter: everything but the message (EventAggregatorByReasonFunc)."""
    return (
        *object_key(event),
        str(event.get("type")),
        str(event.get("reason")),
        str(event.get("reportingComponent") or ""),
        str(event.get("reportingInstance") or ""),
    )


@dataclass
class _Similar:
    messages: set[bytes] = field(default_factory=set)
    last: float = 0.0


@dataclass
class _Bucket:
    tokens: float
    last: float

    def take(self, now: float, burst: int, qps: float) -> bool:
        self.tokens = min(float(burst), self.tokens + max(0.0, now - self.last) * qps)
        self.last = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass
class Written:
    """What we know of an Event we wrote: the occurrences counted under its key, and, once a write of it
    succeeded, its name, uid and resourceVersion (the PATCH's preconditions)."""

    count: int
    first: str
    message: str
    name: str = ""
    uid: str = ""
    resource_version: str = ""


Key = tuple[Any, ...]


@dataclass(frozen=True)
class Correlated:
    """What to write: ``create`` ``event``, ``patch`` the Event ``written`` names with ``ops``, or ``skip``."""

    action: Literal["create", "patch", "skip"]
    key: Key
    event: dict[str, Any]
    ops: list[dict[str, Any]] = field(default_factory=list)


class EventCorrelator:
    """client-go's EventCorrelator: aggregate similar Events, count identical ones, filter spam. Pure: the
    caller gives the time and reports back what the API server answered (``written``, ``failed``)."""

    def __init__(
        self,
        *,
        entries: int = LRU_ENTRIES,
        max_events: int = AGGREGATE_MAX_EVENTS,
        interval: float = AGGREGATE_INTERVAL,
        burst: int = SPAM_BURST,
        qps: float = SPAM_QPS,
    ) -> None:
        self.max_events, self.interval, self.burst, self.qps = max_events, interval, burst, qps
        self._similar: Lru[Key, _Similar] = Lru(entries)
        self._written: Lru[Key, Written] = Lru(entries)
        self._spam: Lru[Key, _Bucket] = Lru(entries)

    def correlate(self, event: Mapping[str, Any], now: dt.datetime) -> Correlated:
        seconds = now.timestamp()
        event, key = self._aggregate(dict(event), seconds, now)
        event, ops = self._observe(event, key)
        bucket = self._spam.get(object_key(event)) or _Bucket(float(self.burst), seconds)
        self._spam.put(object_key(event), bucket)
        if not bucket.take(seconds, self.burst, self.qps):
            return Correlated("skip", key, event)
        return Correlated("patch" if ops else "create", key, event, ops)

    def written(self, key: Key, server: Mapping[str, Any]) -> None:
        """The API server's answer to a create or patch of ``key``'s Event: the next PATCH's preconditions."""
        entry = self._written.get(key)
        if entry is None:
            return
        entry.name = str(dig(server, "metadata", "name") or "")
        entry.uid = str(dig(server, "metadata", "uid") or "")
        entry.resource_version = str(dig(server, "metadata", "resourceVersion") or "")
        entry.count = max(entry.count, int(server.get("count") or 1))
        entry.first = str(server.get("firstTimestamp") or entry.first)
        entry.message = str(server.get("message") or entry.message)

    def gone(self, key: Key) -> None:
        """The Event named for ``key`` cannot be patched (404, 409, 422): the next occurrence creates one."""
        entry = self._written.get(key)
        if entry is not None:
            entry.name = entry.uid = entry.resource_version = ""

    def _aggregate(self, event: dict[str, Any], seconds: float, now: dt.datetime) -> tuple[dict[str, Any], Key]:
        similar = similar_key(event)
        record = self._similar.get(similar)
        if record is None or seconds - record.last > self.interval:
            record = _Similar()
        record.messages.add(digest(str(event.get("message"))))
        record.last = seconds
        self._similar.put(similar, record)
        if len(record.messages) < self.max_events:
            return event, (*similar, digest(str(event.get("message"))))
        record.messages.pop()  # never more than max_events kept (client-go: PopAny)
        combined = {
            **event,
            "metadata": {**event["metadata"], "name": event_name(str(dig(event, "involvedObject", "name")))},
            "message": bounded(COMBINED + str(event.get("message"))),
            "count": 1,
            "firstTimestamp": timestamp(now),
            "lastTimestamp": timestamp(now),
        }
        return combined, (*similar, "combined")

    def _observe(self, event: dict[str, Any], key: Key) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        entry = self._written.get(key)
        if entry is None:
            self._written.put(key, Written(1, str(event["firstTimestamp"]), str(event["message"])))
            return event, []
        entry.count += 1
        event = {**event, "count": entry.count, "firstTimestamp": entry.first}
        self._written.put(key, entry)
        if not entry.uid:  # never written (its create failed, or it was gone): created, with the count so far
            return event, []
        event["metadata"] = {**event["metadata"], "name": entry.name}
        ops: list[dict[str, Any]] = [
            {"op": "test", "path": "/metadata/uid", "value": entry.uid},
            {"op": "replace", "path": "/metadata/resourceVersion", "value": entry.resource_version},
            {"op": "replace", "path": "/count", "value": entry.count},
            {"op": "replace", "path": "/lastTimestamp", "value": event["lastTimestamp"]},
        ]
        if event["message"] != entry.message:
            ops.append({"op": "replace", "path": "/message", "value": event["message"]})
        return event, ops


# -- the recorder -------------------------------------------------------------------------------------------


class EventRecorder:
    def __init__(
        self,
        create: CreateEvent,
        instance: str,
        patch: PatchEvent | None = None,
        *,
        correlator: EventCorrelator | None = None,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
    ) -> None:
        self._create = create
        self._patch = patch
        self.instance = instance
        self.correlator = correlator if correlator is not None else EventCorrelator()
        self._clock = clock
        self._reported: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._busy: dict[Key, _Busy] = {}
        self.writes: dict[str, int] = {"create": 0, "patch": 0, "skip": 0}
        """Events created, patched and filtered as spam by this recorder."""

    async def held(self, trainjob: Mapping[str, Any], message: str) -> bool:
        return await self._emit(trainjob, REASON_HELD, message, warning=True)

    async def quota_kept(self, trainjob: Mapping[str, Any], message: str) -> bool:
        return await self._emit(trainjob, REASON_QUOTA_KEPT, message, warning=True)

    async def quota_released(self, trainjob: Mapping[str, Any], message: str) -> bool:
        return await self._emit(trainjob, REASON_QUOTA_RELEASED, message, warning=False)

    async def copy_unverified(self, trainjob: Mapping[str, Any], message: str) -> bool:
        return await self._emit(trainjob, REASON_COPY_UNVERIFIED, message, warning=True)

    async def stale_copy(self, trainjob: Mapping[str, Any], message: str) -> bool:
        return await self._emit(trainjob, REASON_STALE_COPY, message, warning=True)

    async def out_of_contact(self, trainjob: Mapping[str, Any], message: str) -> bool:
        return await self._emit(trainjob, REASON_OUT_OF_CONTACT, message, warning=True)

    async def unclaimed(self, trainjob: Mapping[str, Any], message: str) -> bool:
        return await self._emit(trainjob, REASON_UNCLAIMED, message, warning=True)

    async def foreign(self, trainjob: Mapping[str, Any], reasons: Iterable[str]) -> int:
        """Reports each reason not yet reported for this TrainJob uid by this process; returns how many were."""
        uid = str(dig(trainjob, "metadata", "uid"))
        sent = 0
        for reason in reasons:
            key = (uid, reason)
            if key in self._reported:
                continue
            if await self._emit(trainjob, REASON_FOREIGN, reason, warning=True):
                self._reported[key] = None
                if len(self._reported) > FOREIGN_MEMORY:
                    self._reported.popitem(last=False)
                sent += 1
        return sent

    async def _emit(self, trainjob: Mapping[str, Any], reason: str, message: str, *, warning: bool) -> bool:
        """True when the occurrence is recorded: written, or counted and left out by the spam filter."""
        now = self._clock()
        body = event_body(trainjob, reason=reason, message=message, warning=warning, instance=self.instance, now=now)
        # One write at a time per object and reason: a PATCH carries the resourceVersion the previous one got.
        key = similar_key(body)
        busy = self._busy.setdefault(key, _Busy())
        busy.users += 1
        try:
            async with busy.lock:
                return await self._write(body, now)
        finally:
            busy.users -= 1
            if not busy.users:
                del self._busy[key]

    async def _write(self, body: dict[str, Any], now: dt.datetime) -> bool:
        c = self.correlator.correlate(body, now)
        if c.action == "skip":
            self.writes["skip"] += 1
            return True
        namespace = str(c.event["metadata"]["namespace"])
        try:
            if c.action == "patch" and self._patch is not None:
                try:
                    written = await self._patch(namespace, str(c.event["metadata"]["name"]), c.ops)
                    self.writes["patch"] += 1
                    self.correlator.written(c.key, written)
                    return True
                except KubeError as exc:
                    if exc.status not in (404, 409, 422):
                        raise
                    # Gone (the API server's Event TTL), or written by someone else: a new Event carries the count.
                    self.correlator.gone(c.key)
            event = c.event
            if c.action == "patch":
                name = event_name(str(dig(event, "involvedObject", "name")))
                event = {**event, "metadata": {**event["metadata"], "name": name}}
            written = await self._create(namespace, event)
            self.writes["create"] += 1
            self.correlator.written(c.key, written)
        except KubeError as exc:
            log.warning(
                "cannot record event %s on TrainJob %s: %s",
                body["reason"],
                body["involvedObject"]["name"],
                exc.describe(),
            )
            return False
        except Exception as exc:  # a report must never break a reconcile
            log.warning("cannot record event %s: %s: %s", body["reason"], type(exc).__name__, exc)
            return False
        return True


@dataclass
class _Busy:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0
