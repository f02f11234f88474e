"""The webhook's runtime copies in memory (webhook/kube.py RuntimeCopies): memory answers only with a copy
the watch has shown while the watch is open; everything else is a fresh read, and memory never allows what
a fresh read of the same object would refuse.

The watch loop itself (list, watch, resume, re-list) is serving/watch.py's, tested in tests/serving/test_watch.py;
here the cache is driven through the handler calls that loop makes. Every answer, memory's or a GET's, is the
copy's facts (webhook/runtime_facts.py); tests/webhook/test_webhook_runtime_facts.py shows the rules answer on
them as on the whole copy."""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contract.trainjob import build_runtime_copy, build_trainjob
from harness.fixtures import runtime, submission
from webhook.config import Config
from webhook.kube import LIST_PAGE, RuntimeCopies
from webhook.rules.creation import creation_problems
from webhook.runtime_facts import RuntimeFacts, runtime_facts


class Store:
    """What a fresh read returns: the copies as they are now."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.reads = 0
        self.sources: list[str] = []

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return self.objects.get((namespace, name))


def _broken() -> dict[str, Any]:
    spec = runtime()["spec"]
    spec["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    return spec


SPECS = {"good": runtime()["spec"], "bad": _broken(), "none": None}


def copy(name: str, uid: str, spec: str = "good") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": name, "uid": uid, "resourceVersion": "1"}, "spec": SPECS[spec]}


def cache(store: Store) -> RuntimeCopies:
    return RuntimeCopies(_NoApi(), store.get, store.sources.append)  # type: ignore[arg-type]  # handler calls drive it


class _NoApi:
    """kubernetes_asyncio's CustomObjectsApi wants a client; nothing here calls it."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no API call expected: {name}")


def lookup(copies: RuntimeCopies, name: str) -> RuntimeFacts | None:
    return asyncio.run(copies("ns", name))


def facts(obj: dict[str, Any] | None) -> RuntimeFacts | None:
    return None if obj is None else runtime_facts(obj)


def test_memory_answers_only_while_the_watch_is_open_and_the_list_complete():
    store = Store()
    copies = cache(store)
    store.objects["ns", "a"] = copy("a", "u1")
    copies.begin()
    copies.page([copy("a", "u1")])
    assert lookup(copies, "a") == facts(store.objects["ns", "a"])  # listing: not live, a GET, reduced alike
    copies.end()
    assert store.reads == 1
    assert lookup(copies, "a").uid == "u1"
    assert store.reads == 2  # the list is complete but no watch is open yet: still a GET
    copies._on_live(True)
    assert lookup(copies, "a").uid == "u1"
    assert store.reads == 2  # now from memory
    copies._on_live(False)  # the watch ended (reconnecting): memory may be behind
    lookup(copies, "a")
    assert store.reads == 3
    assert store.sources == ["api", "api", "memory", "api"]  # what the webhook's metrics count


def test_a_miss_is_a_fresh_read_and_is_not_remembered():
    store = Store()
    copies = cache(store)
    copies.begin()
    copies.end()
    copies._on_live(True)
    assert lookup(copies, "b") is None
    store.objects["ns", "b"] = copy("b", "u2")
    assert lookup(copies, "b").uid == "u2"
    assert lookup(copies, "b").uid == "u2"
    assert store.reads == 3  # never served from memory: only the watch writes it


def test_a_delete_removes_only_the_same_object_and_a_recreation_replaces_it():
    store = Store()
    copies = cache(store)
    copies.begin()
    copies.page([copy("a", "old")])
    copies.end()
    copies._on_live(True)
    copies.event("ADDED", copy("a", "new", spec="bad"))
    copies.event("DELETED", copy("a", "old"))  # an old object's delete, delivered late: not the new one's
    assert lookup(copies, "a") == facts(copy("a", "new", spec="bad"))
    copies.event("DELETED", copy("a", "new"))
    store.objects["ns", "a"] = copy("a", "newer", spec="none")
    assert lookup(copies, "a") == facts(store.objects["ns", "a"])  # gone from memory: a fresh read
    assert store.reads == 1


def test_a_relist_drops_what_is_gone():
    store = Store()
    copies = cache(store)
    copies.begin()
    copies.page([copy("a", "u1"), copy("b", "u2")])
    copies.end()
    copies._on_live(True)
    copies._on_live(False)
    copies.begin()  # 410 Gone: listed again
    copies.page([copy("b", "u2")])
    copies.end()
    copies._on_live(True)
    assert lookup(copies, "a") is None
    assert store.reads == 1
    assert lookup(copies, "b").uid == "u2"
    assert store.reads == 1


def test_the_list_asks_for_pages_of_copies_not_of_workloads():
    """serving/watch.py asks for 500 a page; a copy is ten times a Workload, and the page bounds the memory."""
    asked: list[dict[str, Any]] = []

    class Body:
        status = 200

        async def read(self) -> bytes:
            return b'{"items": []}'

        def release(self) -> None:
            pass

    async def call(**kwargs: Any) -> Body:
        asked.append(kwargs)
        return Body()

    copies = cache(Store())
    asyncio.run(copies.list_page(call, limit=500, _continue="x"))
    asyncio.run(copies.list_page(call, limit=10))
    assert [(k["limit"], k.get("_continue")) for k in asked] == [(LIST_PAGE, "x"), (10, None)]
    assert LIST_PAGE <= 100


Op = tuple[str, str, str]


@settings(max_examples=300, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["create", "delete"]), st.sampled_from(["a", "b"]), st.sampled_from(["good", "bad", "none"])
        ),
        max_size=12,
    ),
    lag=st.integers(0, 12),
    live=st.booleans(),
)
def test_memory_never_allows_what_a_fresh_read_of_the_same_object_refuses(ops: list[Op], lag: int, live: bool):
    """Copies are created and deleted (a name reused gets a new uid, possibly another spec); the watch has
    delivered all but the last ``lag`` events. Whatever memory answers is the object a fresh read returned
    for that uid, spec and all; and once the watch has caught up, memory and a fresh read agree."""
    store = Store()
    copies = cache(store)
    copies.begin()
    copies.end()
    copies._on_live(live)
    events: list[tuple[str, dict[str, Any]]] = []
    ever: dict[str, dict[str, Any]] = {}  # uid -> the object as created: what any fresh read of it returned
    for i, (op, name, spec) in enumerate(ops):
        if op == "create" and ("ns", name) not in store.objects:
            obj = copy(name, f"u{i}", spec=spec)
            store.objects["ns", name] = obj
            ever[f"u{i}"] = obj
            events.append(("ADDED", obj))
        elif op == "delete" and ("ns", name) in store.objects:
            events.append(("DELETED", store.objects.pop(("ns", name))))
    for kind, obj in events[: max(0, len(events) - lag)]:
        copies.event(kind, obj)
    for name in ("a", "b"):
        got = lookup(copies, name)
        if got is not None:
            assert got == facts(ever[got.uid])
    for kind, obj in events[max(0, len(events) - lag) :]:
        copies.event(kind, obj)
    for name in ("a", "b"):
        assert lookup(copies, name) == facts(store.objects.get(("ns", name)))


def test_the_rules_read_nothing_of_a_copy_that_memory_does_not_keep():
    """Memory keeps a copy's uid and facts only: the creation rules answer the same on them."""
    sub = submission(namespace="ns", n=7)
    full = build_runtime_copy(sub, runtime())
    full["metadata"].update({"uid": "u", "resourceVersion": "5", "creationTimestamp": "2026-01-01T00:00:00Z"})
    store = Store()
    copies = cache(store)
    copies.begin()
    copies.page([full])
    copies.end()
    copies._on_live(True)
    kept = lookup(copies, full["metadata"]["name"])
    assert store.reads == 0
    trainjob = build_trainjob(sub, runtime()["spec"])
    config = Config()
    for rt in (full, kept):
        assert creation_problems(trainjob, rt, allow_spec_prologue=False, allow_rank_restart=False) == (
            creation_problems(trainjob, full, allow_spec_prologue=False, allow_rank_restart=False)
        )
    broken = runtime()
    broken["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["restartPolicy"] = (
        "OnFailure"
    )
    bad = build_runtime_copy(sub, broken)
    bad["metadata"]["uid"] = "u2"
    copies.event("ADDED", bad)
    refused, _ = creation_problems(
        trainjob,
        lookup(copies, full["metadata"]["name"]),
        allow_spec_prologue=False,
        allow_rank_restart=config.allow_rank_restart,
    )
    assert refused == creation_problems(trainjob, bad, allow_spec_prologue=False, allow_rank_restart=False)[0]
    assert refused
