"""Tier B: Watch, the change feed (agent/api/feed.py), as a supervisor calls it: a snapshot, then each change as
it happens (a long-poll that returns when a job changes, or empty at its timeout), a deleted job reported gone,
a version the agent never answered refused as expired, other namespaces and strangers kept out, and waiting
callers per user bounded."""

from __future__ import annotations

import asyncio
import time

import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from agent.api.models import WatchRequest
from tests.agent.api import test_e2e as base
from tests.agent.api.test_e2e import E2E, TRAINER, kueue_request, ref
from tests.agent.api.test_operations_e2e import plain_request

controller = base.controller
e2e = base.e2e

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]


async def _until(api, ns: str, version: str, name: str, phase: str, within: float = 60) -> str:
    """Watch from ``version`` until ``name`` is reported in ``phase``; the version after it."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        answer = await api.watch(WatchRequest(namespace=ns, version=version, timeout_seconds=10))
        version = answer.version
        if any(i.name == name and i.phase == phase for i in answer.items):
            return version
    raise AssertionError(f"{name} never reported {phase} within {within:g}s")


async def test_a_snapshot_then_each_change_as_it_happens(e2e: E2E):
    async with e2e.client() as api:
        plain = await api.start(plain_request(e2e))
        queued = await api.start(kueue_request(e2e))
        snapshot = await api.watch(WatchRequest(namespace=e2e.ns))
        assert {i.name: i.phase for i in snapshot.items} == {plain.name: "Gated", queued.name: "Gated"}
        assert snapshot.items[0].model_dump(by_alias=True).keys() == {
            "namespace", "name", "uid", "jobId", "n", "phase", "orphan", "deletionTimestamp"
        }  # fmt: skip

        # Nothing changes: the call waits its timeout and answers nothing new.
        started = time.monotonic()
        quiet = await api.watch(WatchRequest(namespace=e2e.ns, version=snapshot.version, timeout_seconds=2))
        assert quiet.items == []
        assert time.monotonic() - started >= 1.9

        # A waiting call returns when a job changes, with that job as it is now.
        waiting = asyncio.create_task(
            api.watch(WatchRequest(namespace=e2e.ns, version=quiet.version, timeout_seconds=50))
        )
        await asyncio.sleep(1)
        assert not waiting.done()
        await api.open(ref(plain))
        answer = await asyncio.wait_for(waiting, 30)
        assert plain.name in {i.name for i in answer.items}
        version = await _until(api, e2e.ns, quiet.version, plain.name, "Running")

        await api.open(ref(queued))
        version = await _until(api, e2e.ns, version, queued.name, "Running", within=120)

        # Stopped: reported with its deletionTimestamp, then gone.
        await api.stop(ref(plain))
        version = await _until(api, e2e.ns, version, plain.name, "Deleted", within=120)
        after = await api.watch(WatchRequest(namespace=e2e.ns))
        assert plain.name not in {i.name for i in after.items}
        await api.stop(ref(queued))

        # The client's loop: a snapshot, then each change, until the queued job too is gone.
        async def until_gone() -> None:
            async for item in api.changes(e2e.ns, wait=10):
                if item.name == queued.name and item.phase == "Deleted":
                    return

        await asyncio.wait_for(until_gone(), 120)


async def test_a_version_not_answered_here_is_expired_and_strangers_and_other_namespaces_see_nothing(e2e: E2E):
    async with e2e.client() as api:
        mine = await api.start(plain_request(e2e))
        with pytest.raises(AgentError) as err:
            await api.watch(WatchRequest(namespace=e2e.ns, version="not-a-version"))
        assert (err.value.kind, err.value.status, err.value.field) == (ErrorKind.EXPIRED, 410, "version")
        with pytest.raises(AgentError) as err:
            await api.watch(WatchRequest(namespace="api-e2e-other"))
        assert err.value.kind is ErrorKind.FORBIDDEN
        # Another namespace's jobs (one of dispatch's there too) never show in this one's answers.
        e2e.cp.admin.create({"apiVersion": TRAINER, "kind": "TrainJob",
                             "metadata": {"name": "someone-elses", "namespace": e2e.ns},
                             "spec": {"runtimeRef": {"name": base.RUNTIME}, "suspend": True}})  # fmt: skip
        snapshot = await api.watch(WatchRequest(namespace=e2e.ns))
        assert [i.name for i in snapshot.items] == [mine.name]
        await api.stop(ref(mine))
        e2e.cp.admin.delete(TRAINER, "TrainJob", "someone-elses", e2e.ns)

    async with e2e.agent.client(e2e.who.tokens["stranger"]) as stranger:
        with pytest.raises(AgentError) as err:
            await stranger.watch(WatchRequest(namespace=e2e.ns))
        assert err.value.kind is ErrorKind.FORBIDDEN
        assert "watch trainjobs.dispatch.phpboyscout.uk" in err.value.message


async def test_one_user_may_hold_max_watches_calls_waiting(e2e: E2E):
    async with e2e.client() as api:
        first = await api.watch(WatchRequest(namespace=e2e.ns))
        most = base.SETTINGS.max_watches
        waiting = [
            asyncio.create_task(api.watch(WatchRequest(namespace=e2e.ns, version=first.version, timeout_seconds=8)))
            for _ in range(most)
        ]
        await asyncio.sleep(2)
        with pytest.raises(AgentError) as err:
            await api.watch(WatchRequest(namespace=e2e.ns, version=first.version, timeout_seconds=1))
        assert err.value.kind is ErrorKind.RATE_LIMITED
        assert "maxWatches" in err.value.message
        for answer in await asyncio.gather(*waiting):
            assert answer.items == []
        assert (await api.watch(WatchRequest(namespace=e2e.ns, version=first.version, timeout_seconds=0))).items == []
