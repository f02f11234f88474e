"""The manager's renewal of the contact Lease on a worker (agent/multicluster/worker_reads.py ``WorkerClients.renew_contact``),
against the real API server: it renews a Lease of its own origin, and refuses, writing nothing, a Lease another
manager's origin renews, so a worker shared by two managers is not kept in contact by either
(docs/multicluster.md, "The claim", two managers)."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from agent.multicluster.contact_lease import contact_lease
from agent.multicluster.worker_reads import WorkerClients
from contract.keys import LABEL_CLAIM, LEASE_MANAGER_CONTACT

pytestmark = pytest.mark.cluster
LEASE = "coordination.k8s.io/v1"


def _renew(cp, namespace: str, origin: str) -> int | None:
    async def run() -> int | None:
        clients = WorkerClients({"w-1": cp.admin_kubeconfig}, lease_namespace=namespace, origin=origin)
        try:
            return await clients.renew_contact("w-1", 30)
        finally:
            await clients.close()

    return asyncio.run(run())


def test_the_contact_lease_is_renewed_by_its_own_origin_and_refused_when_another_renews_it(control_plane, namespace):
    cp = control_plane
    _, body = contact_lease(None, namespace=namespace, now=dt.datetime.now(dt.UTC), duration=30, origin="other")
    made = cp.admin.create(body)
    assert made["metadata"]["labels"][LABEL_CLAIM] == "other"

    with pytest.raises(RuntimeError, match=r"renewed by another manager \(MultiKueue origin other\)"):
        _renew(cp, namespace, "mine")
    after = cp.admin.get(LEASE, "Lease", LEASE_MANAGER_CONTACT, namespace)
    assert after["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]  # nothing written

    _renew(cp, namespace, "other")  # its own origin renews it
    renewed = cp.admin.get(LEASE, "Lease", LEASE_MANAGER_CONTACT, namespace)
    assert renewed["metadata"]["resourceVersion"] != made["metadata"]["resourceVersion"]
    assert renewed["metadata"]["labels"][LABEL_CLAIM] == "other"


def test_a_contact_lease_no_one_renews_yet_is_created_with_the_managers_origin(control_plane, namespace):
    cp = control_plane
    _renew(cp, namespace, "mine")
    lease = cp.admin.get(LEASE, "Lease", LEASE_MANAGER_CONTACT, namespace)
    assert lease["metadata"]["labels"][LABEL_CLAIM] == "mine"
    with pytest.raises(RuntimeError, match=r"MultiKueue origin mine"):
        _renew(cp, namespace, "other")
