"""A manager's agent writes nothing on a worker whose contact Lease another manager renews (agent/multicluster/worker_reads.py
``WorkerClients``), against the real API server: it lists no claim there to renew or delete, its sweep lists no
replica there (so deletes none of the other manager's), and it makes neither the job's replica nor the prologue's
ConfigMap there; the manager whose origin the Lease carries lists its own as before (docs/multicluster.md, "The
claim", two managers)."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from agent.multicluster.contact_lease import contact_lease
from agent.multicluster.worker_reads import WorkerClients
from contract.claims import Want, claim_lease, claim_name
from contract.keys import LABEL_REPLICA_OF
from contract.prologue import PROLOGUE_CONFIGMAP
from harness.cluster import ControlPlane
from tests.agent.gate import kit
from tests.agent.gate.kit import TRAINER_V

pytestmark = pytest.mark.cluster
WORKER = "w-1"
REFUSED = r"renewed by another manager \(MultiKueue origin other\)"


def _runtime(namespace: str, name: str, trainjob_uid: str) -> dict[str, Any]:
    """A replica of a runtime copy (a namespaced TrainingRuntime labelled with its TrainJob's uid)."""
    runtime = kit.training_runtime(name, cpu="1")
    runtime["kind"] = "TrainingRuntime"
    runtime["metadata"] = {"name": name, "namespace": namespace, "labels": {LABEL_REPLICA_OF: trainjob_uid}}
    return runtime


def _with(cp: ControlPlane, namespace: str, origin: str, call: Callable[[WorkerClients], Awaitable[Any]]) -> Any:
    async def run() -> Any:
        clients = WorkerClients({WORKER: cp.admin_kubeconfig}, lease_namespace=namespace, origin=origin)
        try:
            return await call(clients)
        finally:
            await clients.close()

    return asyncio.run(run())


def test_a_worker_another_manager_renews_gets_no_claim_replica_or_sweep_of_this_manager(
    control_plane: ControlPlane, namespace: str
) -> None:
    cp, now = control_plane, dt.datetime.now(dt.UTC)
    cp.admin.create(contact_lease(None, namespace=namespace, now=now, duration=30, origin="other")[1])
    want = Want(WORKER, claim_name(str(uuid.uuid4())), "3/u", f"{namespace}/j")
    theirs = cp.admin.create(claim_lease(None, want, namespace=namespace, origin="other", now=now, duration=30)[1])
    replica = cp.admin.create(_runtime(namespace, "theirs", "their-trainjob"))
    mine = _runtime(namespace, "mine", "my-trainjob")

    for call in (
        lambda c: c.claims(WORKER, "mine"),
        lambda c: c.replicas(WORKER),
        lambda c: c.prepare(WORKER, mine),
    ):
        with pytest.raises(RuntimeError, match=REFUSED):
            _with(cp, namespace, "mine", call)
    assert cp.admin.get_or_none(TRAINER_V, "TrainingRuntime", "mine", namespace) is None, "a replica made"
    assert cp.admin.get_or_none("v1", "ConfigMap", PROLOGUE_CONFIGMAP, namespace) is None, "the ConfigMap made"

    # The manager whose origin the contact Lease carries: its claims and every replica, as before.
    claims = _with(cp, namespace, "other", lambda c: c.claims(WORKER, "other"))
    assert [c["metadata"]["uid"] for c in claims] == [theirs["metadata"]["uid"]]
    replicas = _with(cp, namespace, "other", lambda c: c.replicas(WORKER))
    assert [r["metadata"]["uid"] for r in replicas if r["metadata"]["namespace"] == namespace] == [
        replica["metadata"]["uid"]
    ]
