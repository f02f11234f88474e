"""Stop and Status on a MultiKueue manager follow the job to the workers (docs/multicluster.md, "Stop across
clusters"), against the real MultiKueue of harness.multicluster, with the manager fixture of test_numbering.py.

The manager's TrainJob holds no pods, so Stop deletes it at once; MultiKueue deletes the worker's copy only while
its connection to that worker works. With Kueue's connection to the worker broken (the agent's own credential still
works), Stop's answer and every Status after it name the copy and its pod still on that worker, and the job is not
Ceased; once the connection is back, MultiKueue deletes the orphaned copy, its pods go, and Status says nothing is
left anywhere: Ceased."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import pytest

from agent.api.client import AgentClient, AgentError
from agent.api.errors import ErrorKind
from agent.api.models import ObjectRef
from agent.api.settings import ApiSettings
from agent.multicluster.worker_reads import WorkerClients
from contract.keys import LABEL_JOBSET_NAME
from tests.agent.api.cluster import allowed, running_agent, supervisors
from tests.agent.gate import kit
from tests.agent.gate.kit import TRAINER_V, eventually
from tests.agent.multicluster import test_numbering
from tests.agent.multicluster.test_numbering import K, Manager, _copy, _free, _running, _true

pytestmark = [pytest.mark.e2e, pytest.mark.multicluster]

T = TypeVar("T")
manager = test_numbering.manager  # the fixture: dispatch's agent on the manager, its check beside MultiKueue's


def _through_the_api(m: Manager, directory: Path, token: str, call: Callable[[AgentClient], Awaitable[T]]) -> T:
    """``call`` as the supervisor makes it: the agent's API on the manager (its own ServiceAccount, with the
    documented RBAC, and its credential for each worker), over real TLS."""
    cp = m.mc.manager.control_plane
    workers = WorkerClients(m.credentials)

    async def run() -> T:
        try:
            async with running_agent(cp, directory, ApiSettings(), workers) as agent:
                await allowed(agent, token, m.namespace)
                async with agent.client(token) as api:
                    return await call(api)
        finally:
            await workers.close()

    return asyncio.run(run())


def _pods_seen(m: Manager, namespace: str, name: str) -> dict[str, tuple[int, int]]:
    """Every pod of the job's JobSet name on every worker, by worker/pod, with its (A, J)."""
    selector = f"{LABEL_JOBSET_NAME}={name}"
    return {
        f"{w.name}/{p['metadata']['name']}": kit.pod_a_j(p)
        for w in m.mc.workers
        for p in w.admin.list("v1", "Pod", namespace, label_selector=selector)
    }


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine
def test_stop_on_the_manager_names_the_copy_a_worker_still_runs_and_ceased_waits_until_it_is_gone(
    manager: Manager, tmp_path: Path
) -> None:
    m = manager
    broken: str | None = None
    seen: dict[str, tuple[int, int]] = {}
    try:
        tj, ran_on, other, pod = _running(m)
        ns, name, uid = m.namespace, tj["metadata"]["name"], tj["metadata"]["uid"]
        there = m.mc.worker(ran_on)
        ref = ObjectRef(namespace=ns, name=name, uid=uid)
        cp = m.mc.manager.control_plane
        token = supervisors(cp, ns, cp.create_namespace(f"mc-api-{secrets.token_hex(3)}")).tokens["supervisor"]
        seen.update(_pods_seen(m, ns, name))

        # Kueue's connection to the worker breaks (the agent's own credential keeps working): MultiKueue can no
        # longer delete the copy there.
        m.mc.break_connection(ran_on)
        broken = ran_on
        eventually(lambda: _true((m.mc.cluster_active(ran_on) or {}).get("status") == "False"), 120,
                   f"MultiKueue's connection to {ran_on} lost")  # fmt: skip

        # Stop through the agent's API: the manager's TrainJob goes at once, and the answer names what of the job
        # is still on the worker, with the worker.
        stopped = _through_the_api(m, tmp_path, token, lambda api: api.stop(ref))
        assert stopped.outcome in ("stopping", "already gone"), stopped
        on = {w.cluster: w for w in stopped.workers}
        assert set(on) == set(m.mc.cluster_names), stopped.workers
        assert (on[ran_on].read, on[ran_on].may_still_run) == (True, True), on[ran_on]
        assert f"{ns}/trainjob/{name}" in on[ran_on].orphans, on[ran_on]
        assert f"{ns}/pod/{pod}" in on[ran_on].orphans, on[ran_on]
        assert (on[other].read, on[other].orphans, on[other].may_still_run) == (True, [], False), on[other]
        eventually(lambda: _true(m.admin.get_or_none(TRAINER_V, "TrainJob", name, ns) is None), 60,
                   "the manager's TrainJob gone")  # fmt: skip
        assert _copy(there, tj) is not None, "the copy went without MultiKueue's connection"

        # Status after Stop: the TrainJob is gone (not_found), and what is left on the worker is named; not Ceased.
        async def status(api: AgentClient) -> AgentError:
            with pytest.raises(AgentError) as gone:
                await api.status(ref)
            return gone.value

        left = _through_the_api(m, tmp_path, token, status)
        assert left.kind is ErrorKind.NOT_FOUND, left
        assert left.ceased is False, left.ceased_reason
        assert f"worker {ran_on}" in (left.ceased_reason or ""), left.ceased_reason
        on = {w.cluster: w for w in left.workers or []}
        assert f"{ns}/trainjob/{name}" in on[ran_on].orphans, on
        assert f"{ns}/pod/{pod}" in on[ran_on].orphans, on
        assert on[ran_on].may_still_run, on[ran_on]
        assert on[other].orphans == [], on[other]
        seen.update(_pods_seen(m, ns, name))

        # Kueue's connection comes back: MultiKueue deletes the orphaned copy there. No dispatch agent runs on these
        # workers to release dispatch's pod finalizer once the pods' processes are gone, so the test does.
        m.mc.restore_connection(ran_on)
        broken = None
        eventually(lambda: _true(_copy(there, tj) is None), 180, f"MultiKueue deleting the orphaned copy on {ran_on}")
        seen.update(_pods_seen(m, ns, name))

        def ceased() -> AgentError:
            _free(there, ns)
            answer = _through_the_api(m, tmp_path, token, status)
            assert answer.kind is ErrorKind.NOT_FOUND, answer
            assert answer.ceased is True, (answer.ceased_reason, answer.workers)
            assert all(w.read and not w.orphans and not w.may_still_run for w in answer.workers or []), answer
            return answer

        done = eventually(ceased, 180, "Status reporting nothing left on any worker: Ceased")
        assert {w.cluster for w in done.workers or []} == set(m.mc.cluster_names), done.workers

        # One execution ran, on one worker: every pod of the job either worker ever showed carries A = K, J = 0.
        assert seen, "no pod of the job seen on any worker"
        assert set(seen.values()) == {(K, 0)}, seen
        assert all(key.startswith(f"{ran_on}/") for key in seen), seen
    finally:
        if broken is not None:
            m.mc.restore_connection(broken)
        for w in m.mc.workers:
            _free(w, m.namespace)
