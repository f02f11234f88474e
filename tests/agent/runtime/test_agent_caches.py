"""The stores a pass reads the Workload, the TrainJob and the JobSet from (agent/runtime/caches.py): newer-only
replacement, answers only while live, uid-checked deletes, and entries that decide as the full object does.

The watch loop itself (list, watch, resume, re-list) is serving/watch.py's, tested in tests/serving/test_watch.py;
here the stores are driven through the handler calls that loop makes. The passes reading from deliberately
stale entries on a real API server are tests/agent/runtime/test_cached_reads.py."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.domain.decide import decide
from agent.runtime.caches import Reads, Store, StoreHandler, keep_jobset, keep_trainjob
from contract.keys import ANNOTATION_HOLD_INSTANCE
from tests.agent.domain.test_gate import CHECK, NOW, jobset, opened, workload

MANAGED = [{"manager": "someone", "operation": "Update", "fieldsV1": {"f:spec": {}}, "time": NOW}]


def obj(name: str, uid: str, rv: int | str, **extra: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": str(rv)}, **extra}


class Fetch:
    """What a fresh GET returns, counted."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.gets: list[str] = []

    async def _get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.gets.append(resource)
        return self.objects.get((resource, namespace, name))

    async def get_workload(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get("workloads", namespace, name)

    async def get_trainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get("trainjobs", namespace, name)

    async def get_jobset(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._get("jobsets", namespace, name)


def live(store: Store, *items: dict[str, Any], keep=None) -> Store:
    """A store as its watch leaves it: listed ``items`` and a stream open."""
    store.begin()
    for item in items:
        (keep or (lambda s, o: s.put(o)))(store, item)
    store.end()
    store.on_live(True)
    return store


def test_an_entry_is_replaced_only_by_a_newer_one():
    store = live(Store("trainjobs"), obj("a", "u1", 5, spec={"v": 5}))
    assert not store.put(obj("a", "u1", 4, spec={"v": 4}))  # a late event or page
    assert not store.put(obj("a", "u1", 5, spec={"v": "again"}))
    assert store.read("ns", "a")["spec"] == {"v": 5}
    assert store.put(obj("a", "u1", 6, spec={"v": 6}))
    assert store.read("ns", "a")["spec"] == {"v": 6}
    # Our own write's response: only when newer, and (only_held) only over an entry held.
    assert not store.offer(obj("a", "u1", 6, spec={"v": "mine"}))
    assert store.offer(obj("a", "u1", 9, spec={"v": 9}))
    assert not store.offer(obj("b", "u2", 10), only_held=True)
    assert store.entry("ns", "b") is None
    # The watch then delivers the event of our write, and an older one: neither goes back.
    assert not store.put(obj("a", "u1", 9, spec={"v": 9}))
    assert not store.put(obj("a", "u1", 7, spec={"v": 7}))
    assert store.read("ns", "a")["spec"] == {"v": 9}


def test_a_workload_no_longer_due_is_kept_as_its_uid_and_reads_as_nothing_due():
    fetch = Fetch()
    reads = Reads(fetch)
    due = workload()
    ns, name = due["metadata"]["namespace"], due["metadata"]["name"]
    live(reads.workloads, due)
    ready = copy.deepcopy(due)
    ready["metadata"]["resourceVersion"] = "501"
    reads.workloads.mark(ready)  # the watch: no check of ours is due any more
    assert reads.workloads.entry(ns, name).data is None
    assert asyncio.run(reads.workload(ns, name)) == {"metadata": {"namespace": ns, "name": name, "uid": "wl-uid"}}
    assert fetch.gets == []
    reads.workloads.mark(obj("never-held", "u", 9))  # a Workload never due on a check of ours: not kept at all
    assert len(reads.workloads) == 1
    assert reads.workloads.put(_with_meta(due, resourceVersion="502"))  # due again: whole again
    assert asyncio.run(reads.workload(ns, name))["status"] == due["status"]


def test_a_delete_removes_only_the_same_uid_and_a_list_drops_what_it_did_not_list():
    store = live(Store("jobsets"), obj("a", "u1", 5), obj("b", "u3", 5))
    store.put(obj("a", "u2", 8))  # recreated under the same name
    store.delete(obj("a", "u1", 9))  # the old object's DELETED, delivered late
    assert store.entry("ns", "a").uid == "u2"
    store.delete(obj("a", "u2", 10))
    assert store.entry("ns", "a") is None
    # A re-LIST (after 410): what it does not list is gone, what it lists is kept.
    store.begin()
    assert not store.live
    store.put(obj("c", "u4", 20))
    store.end()
    assert store.live
    assert (store.entry("ns", "b"), store.entry("ns", "c").uid) == (None, "u4")


def test_reads_come_from_memory_only_while_the_watch_is_open_and_the_list_complete():
    fetch = Fetch()
    reads = Reads(fetch)
    tj = opened()
    ns, name, uid = tj["metadata"]["namespace"], tj["metadata"]["name"], tj["metadata"]["uid"]
    fetch.objects["trainjobs", ns, name] = tj

    def read() -> Any:
        return asyncio.run(reads.trainjob(ns, name, uid))

    reads.trainjobs.begin()
    keep_trainjob(reads.trainjobs, tj)
    assert read() == tj  # listing: a GET
    reads.trainjobs.end()
    assert read() == tj  # listed, but no stream open yet: a GET
    reads.trainjobs.on_live(True)
    assert read()["metadata"]["uid"] == uid  # from memory
    reads.trainjobs.on_live(False)  # the watch ended (reconnecting): memory may be behind
    read()
    assert fetch.gets == ["trainjobs"] * 3
    assert reads.counts == {("trainjobs", "api"): 3, ("trainjobs", "cache"): 1}


def test_a_miss_or_another_uid_is_a_get_and_a_live_jobset_miss_is_none():
    fetch = Fetch()
    reads = Reads(fetch)
    tj = opened()
    ns, name = tj["metadata"]["namespace"], tj["metadata"]["name"]
    live(reads.trainjobs, {**tj, "metadata": {**tj["metadata"], "uid": "an-earlier-one"}})
    live(reads.workloads)
    live(reads.jobsets)
    asyncio.run(reads.trainjob(ns, name, tj["metadata"]["uid"]))  # held, but of another uid
    asyncio.run(reads.trainjob(ns, "dj-01arz3ndektsv4rrffq69g5fav-s9", "x"))  # not held (just created)
    asyncio.run(reads.workload(ns, "not-due"))  # no check of ours was due: not held
    assert asyncio.run(reads.jobset(ns, name)) is None  # a JobSet not yet seen: none, as a GET a moment ago
    assert asyncio.run(reads.jobset(ns, "not-a-dispatch-name")) is None  # not kept: asked of the API
    assert fetch.gets == ["trainjobs", "trainjobs", "workloads", "jobsets"]
    assert reads.counts[("jobsets", "cache")] == 1


def test_what_is_kept_of_trainjobs_and_jobsets():
    store = live(Store("trainjobs"))
    mine = {**opened(), "metadata": {**opened()["metadata"], "managedFields": MANAGED, "resourceVersion": "7"}}
    other = obj("resnet", "o1", 3, spec={"big": "x" * 10_000})
    keep_trainjob(store, mine)
    keep_trainjob(store, other)
    assert "managedFields" not in store.read(mine["metadata"]["namespace"], mine["metadata"]["name"])["metadata"]
    assert store.entry("ns", "resnet").data is None  # a marker: its uid only
    assert store.read("ns", "resnet") == {"metadata": {"namespace": "ns", "name": "resnet", "uid": "o1"}}
    jobsets = live(Store("jobsets"))
    keep_jobset(jobsets, obj("dj-01arz3ndektsv4rrffq69g5fav-s3", "j1", 4))
    keep_jobset(jobsets, obj("someone-elses", "j2", 4))
    assert len(jobsets) == 1


def test_the_handler_feeds_the_store_and_says_what_changed():
    changed: list[str] = []
    store = Store("trainjobs")
    handler = StoreHandler(store, keep_trainjob, lambda o: changed.append(o["metadata"]["name"]))
    handler.begin()
    handler.page([obj("a", "u1", 1)])
    handler.end()
    handler.event("MODIFIED", obj("a", "u1", 2))
    store.offer(obj("a", "u1", 3))  # our own write's response...
    handler.event("MODIFIED", obj("a", "u1", 3))  # ...then its event: no news, nothing to wake
    handler.event("MODIFIED", obj("a", "u1", 2))  # a late one: neither
    handler.event("DELETED", obj("a", "u1", 4))
    assert changed == ["a", "a", "a"]
    assert len(store) == 0


def _full_and_stored(tj: dict[str, Any], wl: dict[str, Any], js: dict[str, Any] | None):
    """The objects as a GET returns them, and as a pass reads them from the stores."""
    reads = Reads(Fetch())
    live(reads.trainjobs, tj, keep=keep_trainjob)
    live(reads.workloads, wl)
    live(reads.jobsets, *([js] if js else []), keep=keep_jobset)
    meta = tj["metadata"]
    stored = (
        asyncio.run(reads.trainjob(meta["namespace"], meta["name"], meta["uid"])),
        asyncio.run(reads.workload(wl["metadata"]["namespace"], wl["metadata"]["name"])),
        asyncio.run(reads.jobset(meta["namespace"], meta["name"])),
    )
    assert reads.counts[("trainjobs", "api")] == reads.counts[("workloads", "api")] == 0
    return stored


def _with_meta(o: dict[str, Any], **meta: Any) -> dict[str, Any]:
    o = copy.deepcopy(o)
    o["metadata"].update(meta)
    return o


@settings(max_examples=60, deadline=None)
@given(
    dispatch=st.booleans(),
    held=st.booleans(),
    state=st.sampled_from(["Pending", "Ready"]),
    with_jobset=st.booleans(),
)
def test_a_stored_entry_decides_as_the_full_object(dispatch, held, state, with_jobset):
    if dispatch:
        tj = opened()
        if held:
            tj["metadata"]["annotations"][ANNOTATION_HOLD_INSTANCE] = "h1"
    else:
        tj = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "spec": {"suspend": True},
              "metadata": {"name": "resnet", "namespace": "team-a", "uid": "tj-uid"}}  # fmt: skip
    tj = _with_meta(tj, managedFields=MANAGED, resourceVersion="40", namespace="team-a", uid="tj-uid")
    owner = {"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": tj["metadata"]["name"],
             "uid": "tj-uid", "controller": True}  # fmt: skip
    wl = _with_meta(workload(state=state, owner=owner), managedFields=MANAGED)
    js = (
        _with_meta(jobset(), name=tj["metadata"]["name"], namespace="team-a", resourceVersion="41")
        if with_jobset
        else None
    )
    s_tj, s_wl, s_js = _full_and_stored(tj, wl, js)

    def go(t, w, j):
        return decide(workload=w, check=CHECK, trainjob=t, jobset=j, pods=[], blockers=[], now=NOW)

    assert go(s_tj, s_wl, s_js if dispatch else None) == go(tj, wl, js if dispatch else None)
