"""The shared consistent LIST of pods (agent/runtime/pod_lists.py): a pass is never served a LIST issued before it asked.

The LIST here is a stand-in that records when it was issued on a logical clock and answers when the test
lets it; what is tested is the coalescing logic, not the API server (the agent's cluster tests run the
real LIST through it).
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.runtime.pod_lists import SharedPodLists
from contract.keys import LABEL_JOBSET_NAME


def pod(namespace: str, jobset: str, name: str) -> dict[str, Any]:
    return {"metadata": {"namespace": namespace, "name": name, "labels": {LABEL_JOBSET_NAME: jobset}}}


@dataclass
class Lister:
    """A LIST that records its issue time on ``clock`` and the selector, and returns ``pods`` filtered by it."""

    clock: itertools.count[int]
    pods: list[dict[str, Any]] = field(default_factory=list)
    issued: list[tuple[int, str | None, str]] = field(default_factory=list)
    gate: asyncio.Event | None = None
    fail: Exception | None = None
    delays: list[int] = field(default_factory=list)

    async def __call__(self, namespace: str | None, selector: str) -> list[dict[str, Any]]:
        at = next(self.clock)
        self.issued.append((at, namespace, selector))
        if self.gate is not None:
            await self.gate.wait()
        for _ in range(self.delays.pop(0) if self.delays else 0):
            await asyncio.sleep(0)
        if self.fail is not None:
            raise self.fail
        key, _, value = selector.partition(" in (")
        names = set(value.rstrip(")").split(",")) if value else {selector.partition("=")[2]}
        key = key.partition("=")[0]
        assert key == LABEL_JOBSET_NAME
        # The answer carries its issue time, so a pass can tell which LIST served it.
        return [
            {**p, "issued": at}
            for p in self.pods
            if p["metadata"]["labels"][LABEL_JOBSET_NAME] in names
            and (namespace is None or p["metadata"]["namespace"] == namespace)
        ]


def test_a_request_made_while_a_list_is_in_flight_waits_for_the_next_list() -> None:
    async def scenario() -> None:
        clock = itertools.count()
        lister = Lister(clock, pods=[pod("ns", "a", "a-0"), pod("ns", "b", "b-0")], gate=asyncio.Event())
        lists = SharedPodLists(lister)
        first = asyncio.create_task(lists.get("ns", "a"))
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(lister.issued) == 1  # the first LIST is in flight
        asked = next(clock)  # the second pass's Workload read returned now, after the first LIST was issued
        second = asyncio.create_task(lists.get("ns", "b"))
        third = asyncio.create_task(lists.get("ns", "a"))
        await asyncio.sleep(0)
        lister.gate.set()
        a, b, a2 = await first, await second, await third
        assert [p["metadata"]["name"] for p in a] == ["a-0"]
        assert [p["metadata"]["name"] for p in b] == ["b-0"]
        assert b[0]["issued"] > asked
        assert a2[0]["issued"] > asked
        assert len(lister.issued) == 2  # and the second and third passes shared one
        assert lister.issued[1][2] == f"{LABEL_JOBSET_NAME} in (a,b)"

    asyncio.run(scenario())


def test_concurrent_requests_share_one_list_and_each_gets_only_its_own_pods() -> None:
    async def scenario() -> None:
        lister = Lister(
            itertools.count(),
            pods=[pod("ns1", "a", "a-0"), pod("ns2", "a", "other-a"), pod("ns1", "b", "b-0"), pod("ns1", "b", "b-1")],
        )
        lists = SharedPodLists(lister)
        got = await asyncio.gather(lists.get("ns1", "a"), lists.get("ns1", "b"), lists.get("ns1", "c"))
        assert [[p["metadata"]["name"] for p in pods] for pods in got] == [["a-0"], ["b-0", "b-1"], []]
        assert len(lister.issued) == 1
        assert lister.issued[0][1] == "ns1"  # one namespace: a namespaced LIST
        both = await asyncio.gather(lists.get("ns1", "a"), lists.get("ns2", "a"))
        assert [[p["metadata"]["name"] for p in pods] for pods in both] == [["a-0"], ["other-a"]]
        assert lister.issued[1][1:] == (None, f"{LABEL_JOBSET_NAME}=a")  # two namespaces: all, then filtered

    asyncio.run(scenario())


def test_a_failed_list_fails_every_pass_it_serves_and_the_next_list_is_fresh() -> None:
    async def scenario() -> None:
        lister = Lister(itertools.count(), pods=[pod("ns", "a", "a-0")], fail=RuntimeError("HTTP 500"))
        lists = SharedPodLists(lister)
        results = await asyncio.gather(lists.get("ns", "a"), lists.get("ns", "b"), return_exceptions=True)
        assert all(isinstance(r, RuntimeError) for r in results)
        lister.fail = None
        assert [p["metadata"]["name"] for p in await lists.get("ns", "a")] == ["a-0"]
        assert len(lister.issued) == 2

    asyncio.run(scenario())


def test_a_cancelled_pass_does_not_hold_up_the_others() -> None:
    async def scenario() -> None:
        lister = Lister(itertools.count(), pods=[pod("ns", "a", "a-0")], gate=asyncio.Event())
        lists = SharedPodLists(lister)
        gone = asyncio.create_task(lists.get("ns", "b"))
        kept = asyncio.create_task(lists.get("ns", "a"))
        await asyncio.sleep(0)
        gone.cancel()
        lister.gate.set()
        assert [p["metadata"]["name"] for p in await kept] == ["a-0"]
        with pytest.raises(asyncio.CancelledError):
            await gone

    asyncio.run(scenario())


def test_many_names_are_listed_in_chunks_and_a_name_no_selector_can_hold_alone() -> None:
    async def scenario() -> None:
        lister = Lister(itertools.count(), pods=[pod("ns", f"j{i}", f"p{i}") for i in range(5)])
        lists = SharedPodLists(lister, max_names=2)
        got = await asyncio.gather(*(lists.get("ns", f"j{i}") for i in range(5)))
        assert [[p["metadata"]["name"] for p in pods] for pods in got] == [[f"p{i}"] for i in range(5)]
        assert len(lister.issued) == 3
        assert await lists.get("ns", "a,b") == []
        assert lister.issued[-1][2] == f"{LABEL_JOBSET_NAME}=a,b"

    asyncio.run(scenario())


@settings(max_examples=200, deadline=None)
@given(
    passes=st.lists(st.tuples(st.integers(0, 6), st.sampled_from(["a", "b", "c"])), min_size=1, max_size=12),
    delays=st.lists(st.integers(0, 5), max_size=12),
)
def test_no_pass_is_ever_served_a_list_issued_before_its_workload_read(
    passes: list[tuple[int, str]], delays: list[int]
) -> None:
    """Passes read their Workload at arbitrary points while LISTs of arbitrary length are in flight."""

    async def scenario() -> None:
        clock = itertools.count()
        lister = Lister(clock, pods=[pod("ns", n, f"{n}-0") for n in "abc"], delays=list(delays))
        lists = SharedPodLists(lister)

        async def one(wait: int, name: str) -> tuple[int, int]:
            for _ in range(wait):
                await asyncio.sleep(0)
            read = next(clock)  # the Workload read returned
            pods = await lists.get("ns", name)
            assert [p["metadata"]["name"] for p in pods] == [f"{name}-0"]
            return read, pods[0]["issued"]

        for read, issued in await asyncio.gather(*(one(w, n) for w, n in passes)):
            assert issued > read

    asyncio.run(scenario())
