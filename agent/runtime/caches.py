"""The readmission gate's reads of the Workload, the TrainJob and the JobSet, from watch-fed stores.

Why a remembered copy is safe to decide from (docs/agent.md, "Reads from the watch caches, and why they are
safe"): every write that acts on these reads is preconditioned on the resourceVersion read — the raise of A
on the TrainJob's, the Ready write on the Workload's — so a stale copy can only make that write fail with
409, never make it land wrongly. The JobSet only sorts pods between "ours" and "ours, unproven" (both
counted; agent/domain/pod_owners.py), and a JobSet not yet seen is what a GET made a moment earlier returns. The pods
themselves stay on the consistent LIST issued after the pass began (agent/runtime/pod_lists.py), and Jobs and Nodes
stay fresh GETs: no precondition protects those reads.

The rules of a store (``Store``), as the webhook's runtime copies (webhook/kube.py):

* it answers only while its watch's stream is open and its last LIST complete; otherwise the read is a
  GET, never remembered;
* an entry is replaced only by a newer one: resource versions of one resource are comparable (Kubernetes
  v1.35+), so a late event, a LIST page or our own write's response never puts an older copy over a newer;
* a DELETED removes the entry only when the uids match; a LIST removes what it did not list.

What is kept, compactly (JSON without ``metadata.managedFields``, zlib-compressed at level 1, decoded on
each read: a dispatch TrainJob of ≈9 KB of JSON costs ≈3 KB; docs/performance.md):

* Workloads: whole only while one of our checks is due on it (the controller says so from its Hint), then
  its uid only (a pass woken meanwhile finds nothing due without a GET); a Workload none of our checks was
  ever due on is not kept at all, so the 10,000 other jobs' Workloads cost what they cost before;
* TrainJobs: dispatch's in full; of any other only its uid (a marker), since a uid's dispatch-ness never
  changes and the gate approves a TrainJob that is not dispatch's from its uid alone;
* JobSets: those whose name is a dispatch TrainJob name (Trainer names a TrainJob's JobSet after it).
"""

from __future__ import annotations

import json
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from agent.constants import JOBSETS, TRAINJOBS, WORKLOADS
from contract.names import is_dispatch_name
from contract.objects import dig
from contract.ownership import is_dispatch

Obj = dict[str, Any]
Key = tuple[str, str]
"""(namespace, name)"""

CACHE: Final = "cache"
API: Final = "api"


@dataclass(slots=True)
class Entry:
    uid: str
    rv: int | None
    """The resourceVersion as an integer (None if the API server gave one that is not)."""
    data: bytes | None
    """The object as compressed compact JSON (``compact``); None for a marker, of which only the uid is kept."""


def _rv(obj: Mapping[str, Any]) -> int | None:
    try:
        return int(str(dig(obj, "metadata", "resourceVersion")))
    except ValueError:
        return None


def _key(obj: Mapping[str, Any]) -> Key:
    return str(dig(obj, "metadata", "namespace")), str(dig(obj, "metadata", "name"))


def compact(obj: Mapping[str, Any]) -> bytes:
    """The object as compact JSON without ``metadata.managedFields`` (which nothing of the gate reads),
    compressed at zlib's fastest level (a third of the size for ≈0.1 ms per event)."""
    meta = {k: v for k, v in (obj.get("metadata") or {}).items() if k != "managedFields"}
    return zlib.compress(json.dumps({**obj, "metadata": meta}, separators=(",", ":")).encode(), 1)


def newer(a: int | None, b: int | None) -> bool:
    """Is a version ``a`` newer than ``b``? Incomparable versions: the later one seen wins."""
    return a is None or b is None or a > b


class Store:
    """Entries of one resource, fed by its watch (the ``watch.Handler`` calls) and by our writes' responses."""

    def __init__(self, resource: str) -> None:
        self.resource = resource
        self._entries: dict[Key, Entry] = {}
        self._seen: set[Key] | None = None
        """While a LIST is in progress: the keys it handed over (at its end, the rest is gone)."""
        self._listed = False
        self._open = False

    # -- liveness ---------------------------------------------------------------------------------------

    @property
    def live(self) -> bool:
        """The watch's stream is open and its last LIST complete: the store is as current as the watch."""
        return self._open and self._listed and self._seen is None

    def on_live(self, open_: bool) -> None:
        self._open = open_

    def begin(self) -> None:
        self._seen = set()

    def end(self) -> None:
        seen, self._seen = self._seen or set(), None
        for key in [k for k in self._entries if k not in seen]:
            del self._entries[key]
        self._listed = True

    # -- entries ----------------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, obj: Mapping[str, Any], *, marker: bool = False) -> bool:
        """Keep ``obj`` (its uid only, for a marker) unless the entry held is newer; whether it was kept."""
        key = _key(obj)
        if self._seen is not None:
            self._seen.add(key)
        rv, held = _rv(obj), self._entries.get(key)
        if held is not None and not newer(rv, held.rv):
            return False
        self._entries[key] = Entry(str(dig(obj, "metadata", "uid")), rv, None if marker else compact(obj))
        return True

    def offer(self, obj: Mapping[str, Any], *, marker: bool = False, only_held: bool = False) -> bool:
        """Our own write's response: kept only when both versions are comparable and it is newer (a watch
        event may already have brought a later one), and with ``only_held`` only over an entry held."""
        rv, held = _rv(obj), self._entries.get(_key(obj))
        if rv is None or (held is None and only_held) or (held is not None and (held.rv is None or rv <= held.rv)):
            return False
        self._entries[_key(obj)] = Entry(str(dig(obj, "metadata", "uid")), rv, None if marker else compact(obj))
        return True

    def mark(self, obj: Mapping[str, Any]) -> None:
        """Keep only the uid of an object held (unless what is held is newer): the watch says it no longer
        needs keeping whole, and a read should still not cost a GET (a Workload no check of ours is due on)."""
        key, rv = _key(obj), _rv(obj)
        held = self._entries.get(key)
        if held is None:
            return
        if self._seen is not None:
            self._seen.add(key)
        if held.rv is None or rv is None or rv >= held.rv:
            self._entries[key] = Entry(str(dig(obj, "metadata", "uid")), rv, None)

    def discard(self, key: Key) -> None:
        """Not to be kept (any more): the watch says so. (Not noted as seen by a LIST in progress: no entry is
        left to keep, and 10,000 other jobs' Workloads must not cost a set of their keys.)"""
        self._entries.pop(key, None)

    def delete(self, obj: Mapping[str, Any]) -> None:
        """A DELETED event: removes the entry only if it is of the same uid (a newer object keeps its own)."""
        key = _key(obj)
        held = self._entries.get(key)
        if held is not None and held.uid == str(dig(obj, "metadata", "uid")):
            del self._entries[key]

    def entry(self, namespace: str, name: str) -> Entry | None:
        return self._entries.get((namespace, name))

    def read(self, namespace: str, name: str) -> Obj | None:
        """The object held (a marker as its identity only), or None."""
        held = self._entries.get((namespace, name))
        if held is None:
            return None
        if held.data is None:
            return {"metadata": {"namespace": namespace, "name": name, "uid": held.uid}}
        value: Obj = json.loads(zlib.decompress(held.data))
        return value


# -- what each watch keeps -------------------------------------------------------------------------------


def keep_trainjob(store: Store, obj: Mapping[str, Any]) -> bool:
    """Dispatch's TrainJobs in full; of any other, its uid. Whether it was news (kept, not older)."""
    return store.put(obj, marker=not is_dispatch(obj))


def keep_jobset(store: Store, obj: Mapping[str, Any]) -> bool:
    """JobSets of a dispatch TrainJob's name (orphans of the name included: the gate reports them)."""
    if is_dispatch_name(dig(obj, "metadata", "name")):
        return store.put(obj)
    store.discard(_key(obj))
    return False


@dataclass(frozen=True)
class StoreHandler:
    """A ``watch.Handler`` that feeds a store and tells ``changed`` about each object that was news: not
    what the store already held (our own write's response, an older event), so our own raise does not wake
    the gate for a pass with nothing to do."""

    store: Store
    keep: Callable[[Store, Mapping[str, Any]], bool]
    changed: Callable[[Mapping[str, Any]], None] = lambda _: None

    def begin(self) -> None:
        self.store.begin()

    def page(self, items: list[Mapping[str, Any]]) -> None:
        for obj in items:
            if self.keep(self.store, obj):
                self.changed(obj)

    def end(self) -> None:
        self.store.end()

    def event(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            self.store.delete(obj)
            self.changed(obj)
        elif self.keep(self.store, obj):
            self.changed(obj)


# -- the reads of a pass -------------------------------------------------------------------------------


class Fetch(Protocol):
    """The fresh GETs behind the stores (agent/runtime/kube.py ``Kube``)."""

    def get_workload(self, namespace: str, name: str) -> Awaitable[Obj | None]: ...

    def get_trainjob(self, namespace: str, name: str) -> Awaitable[Obj | None]: ...

    def get_jobset(self, namespace: str, name: str) -> Awaitable[Obj | None]: ...


class Reads:
    """Where a pass reads the Workload, the TrainJob and the JobSet: a live store, else a fresh GET.

    Without watches feeding them (a pass run on its own, or a ServiceAccount without list/watch on
    TrainJobs and JobSets), the stores never go live and every read is a GET, as before."""

    def __init__(self, fetch: Fetch) -> None:
        self._fetch = fetch
        self.workloads = Store(WORKLOADS)
        self.trainjobs = Store(TRAINJOBS)
        self.jobsets = Store(JOBSETS)
        self.counts: Counter[tuple[str, str]] = Counter()
        """(resource, "cache" or "api") -> reads (the metric ``dispatch_agent_reads_total``)."""
        self.count: Callable[[str, str], None] = lambda resource, source: None
        """Told of each read as well (the controller's metrics)."""

    def _counted(self, resource: str, source: str) -> None:
        self.counts[resource, source] += 1
        self.count(resource, source)

    async def workload(self, namespace: str, name: str) -> Obj | None:
        """A miss (the store not live, or the Workload not held: no check of ours was due on it) is a GET. A
        marker reads as a Workload with no check due: the watch's last word, and when a check becomes due its
        event puts the whole Workload back and enqueues it."""
        if self.workloads.live and (found := self.workloads.read(namespace, name)) is not None:
            self._counted(WORKLOADS, CACHE)
            return found
        self._counted(WORKLOADS, API)
        return await self._fetch.get_workload(namespace, name)

    async def trainjob(self, namespace: str, name: str, uid: str) -> Obj | None:
        """The TrainJob of this name, when the store holds the one of this uid (the Workload's owner);
        anything else (not live, not held, another uid held) is a GET."""
        held = self.trainjobs.entry(namespace, name) if self.trainjobs.live else None
        if held is not None and held.uid == uid:
            self._counted(TRAINJOBS, CACHE)
            return self.trainjobs.read(namespace, name)
        self._counted(TRAINJOBS, API)
        return await self._fetch.get_trainjob(namespace, name)

    async def jobset(self, namespace: str, name: str) -> Obj | None:
        """From a live store, an absent JobSet is answered "none" (what a GET a moment earlier returns);
        only a store that is not live, or a name that is not dispatch's (not kept), is a GET."""
        if self.jobsets.live and is_dispatch_name(name):
            self._counted(JOBSETS, CACHE)
            return self.jobsets.read(namespace, name)
        self._counted(JOBSETS, API)
        return await self._fetch.get_jobset(namespace, name)

    def wrote_trainjob(self, obj: Mapping[str, Any]) -> None:
        """The raise's response: the next pass (another check of ours) reads it, not our pre-write copy."""
        self.trainjobs.offer(obj, marker=not is_dispatch(obj))

    def wrote_workload(self, obj: Mapping[str, Any]) -> None:
        """The check write's response, over the copy held (the watch decides whether it is kept at all)."""
        self.workloads.offer(obj, only_held=True)
