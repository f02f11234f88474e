"""Start, Stop and Status on a MultiKueue manager read the workers for what a job left there (docs/multicluster.md,
"Stop across clusters"), through the API (real sockets, real TLS) over fake API servers: the manager's, and one
per worker, read with the agent's own credential for it. The decisions are agent/multicluster/worker_remains.py's (its units);
here, that the API reads every worker, names each, and answers in the documented shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
import pytest_asyncio
from kubernetes_asyncio import client

from agent.api.app import ApiServer, serving
from agent.api.client import AgentClient, AgentError
from agent.api.errors import ErrorKind
from agent.api.kube import Kube
from agent.api.models import ObjectRef, StartResponse
from agent.domain.operations import plan_open
from agent.multicluster.worker_reads import WorkerClients
from contract.admission import admission_path
from contract.keys import ANNOTATION_FENCED, FENCED_POWERED_OFF, LABEL_JOBSET_NAME
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL
from contract.upstream import JOBS, MULTIKUEUE_CLUSTERS, PODS, TRAINING_RUNTIMES, TRAINJOBS
from harness import fixtures
from harness.multicluster import MULTIKUEUE_CONTROLLER
from serving.tls import ReloadingServerContext
from tests.agent.api import controllers as c
from tests.agent.api.conftest import HOST, NAMESPACE, SUPERVISOR_TOKEN, TEST_SETTINGS, Tls
from tests.agent.api.fake_kube import FakeKube, running
from tests.agent.api.objects import apply_patch
from tests.agent.api.requests import start_request

pytestmark = pytest.mark.asyncio
WORKERS = ("worker-1", "worker-2")


class FakeWorkers(WorkerClients):
    """The agent's credential for each worker (agent/multicluster/worker_reads.py ``WorkerClients``, its reads as they are): a
    client of that worker's fake API server, or a failure for a worker ``down``."""

    def __init__(self, clients: dict[str, client.ApiClient]) -> None:
        super().__init__({})
        self.clients = clients
        self.down: set[str] = set()

    @property
    def names(self) -> frozenset[str]:
        return frozenset(self.clients)

    async def _client(self, worker: str) -> client.ApiClient:
        if worker in self.down:
            raise OSError(f"connect to {worker}: connection refused")
        return self.clients[worker]


@dataclass
class Manager:
    url: str
    fake: FakeKube
    workers: dict[str, FakeKube]
    credentials: FakeWorkers
    tls: Tls

    def client(self) -> AgentClient:
        return AgentClient(self.url, SUPERVISOR_TOKEN, ssl_context=self.tls.client_context())


@pytest_asyncio.fixture
async def manager(fake: FakeKube, tls: Tls) -> AsyncIterator[Manager]:
    c.readmission_controller(fake)
    workers = {w: FakeKube(namespaces={NAMESPACE}) for w in WORKERS}
    for w in WORKERS:
        fake.put(MULTIKUEUE_CLUSTERS.path(), {"metadata": {"name": w}})
    async with (
        running(fake) as url,
        running(workers["worker-1"]) as url_1,
        running(workers["worker-2"]) as url_2,
        client.ApiClient(fake.configuration(url)) as api,
        client.ApiClient(workers["worker-1"].configuration(url_1)) as api_1,
        client.ApiClient(workers["worker-2"].configuration(url_2)) as api_2,
    ):
        credentials = FakeWorkers({"worker-1": api_1, "worker-2": api_2})
        server = ApiServer(Kube(api, timeout=10, workers=credentials), TEST_SETTINGS)  # type: ignore[arg-type]
        context = ReloadingServerContext(tls.cert_file, tls.key_file)
        async with serving(server.app(), HOST, 0, context) as port:
            yield Manager(f"https://{HOST}:{port}", fake, workers, credentials, tls)


def ref(started: StartResponse) -> ObjectRef:
    return ObjectRef(namespace=started.namespace, name=started.name, uid=started.uid)


def leave_a_copy(worker: FakeKube, name: str) -> None:
    """MultiKueue's copy of the job on ``worker``, running: the copy (origin label), a Job of its JobSet and a
    Running pod of it (no Node object: the node-loss classification keeps such a pod as may still run)."""
    labels = {MULTIKUEUE_ORIGIN_LABEL: "manager"}
    worker.put(TRAINJOBS.path(NAMESPACE), {"metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                                           "spec": {"suspend": False}})  # fmt: skip
    owner = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": name, "uid": "js", "controller": True}
    job = f"{name}-node-0"
    worker.put(JOBS.path(NAMESPACE), {"metadata": {"name": job, "namespace": NAMESPACE, "uid": "job-uid",
                                                   "labels": {LABEL_JOBSET_NAME: name}, "ownerReferences": [owner]},
                                      "spec": {}})  # fmt: skip
    by_job = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "job-uid", "controller": True}
    pod: dict[str, Any] = {
        "metadata": {"name": f"{job}-0-x", "namespace": NAMESPACE, "labels": {LABEL_JOBSET_NAME: name},
                     "ownerReferences": [by_job]},
        "spec": {"nodeName": "node-1"},
        "status": {"phase": "Running"},
    }  # fmt: skip
    worker.put(PODS.path(NAMESPACE), pod)


def clear(worker: FakeKube) -> None:
    for collection in (TRAINJOBS.path(NAMESPACE), JOBS.path(NAMESPACE), PODS.path(NAMESPACE)):
        worker.objects.get(collection, {}).clear()


async def test_stop_and_status_after_it_name_what_a_worker_still_holds_and_ceased_waits_for_every_worker(
    manager: Manager,
):
    async with manager.client() as api:
        started = await api.start(start_request(NAMESPACE))
        name = started.name
        leave_a_copy(manager.workers["worker-1"], name)
        stopped = await api.stop(ref(started))
        assert stopped.outcome == "stopping"
        assert stopped.workers == []  # a plain-mode TrainJob runs on this cluster: no worker is read for it
        again = await api.stop(ref(started))  # gone here: what ran of it may be on a worker
        assert again.outcome == "already gone"
        on = {w.cluster: w for w in again.workers}
        assert on["worker-1"].orphans == [f"{NAMESPACE}/trainjob/{name}", f"{NAMESPACE}/job/{name}-node-0",
                                          f"{NAMESPACE}/pod/{name}-node-0-0-x"]  # fmt: skip
        assert (on["worker-1"].read, on["worker-1"].may_still_run) == (True, True)
        assert (on["worker-2"].orphans, on["worker-2"].may_still_run) == ([], False)

        with pytest.raises(AgentError) as held:
            await api.status(ref(started))
        assert held.value.kind is ErrorKind.NOT_FOUND
        assert held.value.ceased is False
        assert (held.value.ceased_reason or "").startswith(
            "the TrainJob is gone, but something of it may still run on a worker: worker worker-1: 1 pod(s) may "
            f"still run: {name}-node-0-0-x"
        )
        assert [w.cluster for w in held.value.workers or []] == list(WORKERS)

        # The copy goes, but a worker cannot be read: not Ceased, and that worker is named.
        clear(manager.workers["worker-1"])
        manager.credentials.down.add("worker-2")
        with pytest.raises(AgentError) as unread:
            await api.status(ref(started))
        assert unread.value.ceased is False
        assert "worker worker-2: cannot be read: OSError: connect to worker-2: connection refused" in (
            unread.value.ceased_reason or ""
        )

        # An administrator fences the unreadable worker: taken at its word; every other worker read and empty.
        manager.fake.objects[MULTIKUEUE_CLUSTERS.path()]["worker-2"]["metadata"]["annotations"] = {
            ANNOTATION_FENCED: FENCED_POWERED_OFF
        }
        with pytest.raises(AgentError) as done:
            await api.status(ref(started))
        assert done.value.ceased is True, done.value.ceased_reason
        assert done.value.ceased_reason == (
            "the TrainJob is gone, and nothing of it may run on any worker (read: worker-1; fenced: worker-2)"
        )


async def test_start_on_a_manager_refuses_while_a_worker_holds_something_of_an_earlier_trainjob_of_the_name(
    manager: Manager,
):
    req = start_request(NAMESPACE)
    async with manager.client() as api:
        started = await api.start(req)
        await api.stop(ref(started))
        manager.fake.objects[TRAINJOBS.path(NAMESPACE)].pop(started.name, None)  # and its dependents collected
        manager.fake.objects[TRAINING_RUNTIMES.path(NAMESPACE)].pop(started.name, None)
        leave_a_copy(manager.workers["worker-2"], started.name)
        writes = len(manager.fake.writes)
        with pytest.raises(AgentError) as held:
            await api.start(req)
        assert held.value.kind is ErrorKind.CONFLICT
        assert f"(worker worker-2: {NAMESPACE}/trainjob/{started.name}, " in held.value.message
        assert "nothing was written" in held.value.message
        assert [w.cluster for w in held.value.workers or [] if w.orphans] == ["worker-2"]
        assert len(manager.fake.writes) == writes

        # A worker that cannot be read: unavailable, naming it.
        clear(manager.workers["worker-2"])
        manager.credentials.down.add("worker-1")
        with pytest.raises(AgentError) as unread:
            await api.start(req)
        assert unread.value.kind is ErrorKind.UNAVAILABLE
        assert (
            "worker worker-1: cannot be read: OSError: connect to worker-1: connection refused" in unread.value.message
        )
        assert len(manager.fake.writes) == writes

        # Every worker read and empty: Start goes.
        manager.credentials.down.clear()
        assert (await api.start(req)).name == started.name


def ended_on_a_manager(fake: FakeKube, a: int) -> dict[str, Any]:
    """A dispatch TrainJob MultiKueue ran (on a manager), opened, dispatched with A ``a``, and Complete."""
    tj = fixtures.trainjob(namespace=NAMESPACE)
    tj = apply_patch(tj, plan_open(tj).patch)
    tj["spec"]["managedBy"] = MULTIKUEUE_CONTROLLER
    annotations = tj
    for key in admission_path(tj)[:-1]:
        annotations = annotations[key]
    annotations[admission_path(tj)[-1]] = str(a)
    tj["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    return fake.put(TRAINJOBS.path(NAMESPACE), tj)


async def test_status_of_an_ended_job_on_a_manager_is_ceased_only_once_no_worker_holds_anything_that_may_run(
    manager: Manager,
):
    """It starts nothing more by itself, but its copies' pods are on the workers: Status reads every worker, as
    after a Stop, and says Ceased only when every one was read and holds nothing of it that may run."""
    tj = ended_on_a_manager(manager.fake, 4)
    meta = tj["metadata"]
    job = ObjectRef(namespace=NAMESPACE, name=meta["name"], uid=meta["uid"])
    leave_a_copy(manager.workers["worker-1"], meta["name"])
    async with manager.client() as api:
        running = await api.status(job)
        assert (running.phase, running.ceased) == ("Complete", False)
        assert (running.ceased_reason or "").startswith(
            "it ended (Complete), but something of it may still run on a worker: worker worker-1: 1 pod(s) may "
        ), running.ceased_reason
        clear(manager.workers["worker-1"])
        done = await api.status(job)
        assert done.ceased is True, done.ceased_reason
        assert done.ceased_reason == (
            "it ended (Complete), and nothing of it may run on any worker (read: worker-1, worker-2)"
        )
