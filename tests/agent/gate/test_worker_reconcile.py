"""One pass of the gate in role worker (agent.gate.reconcile) against the real API server, the test playing Kueue's and
MultiKueue's parts: MultiKueue's copy of a Workload is approved at its first admission on the worker, with the
record ``worker-admitted`` written first, and held at every later one (docs/multicluster.md, guarantee 3)."""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from agent.config import AgentConfig
from agent.domain.decide import WORKER_FIRST_MESSAGE, WORKER_OUT_OF_CONTACT_MESSAGE, Action, worker_held_message
from agent.gate.context import Pass, WorkloadKey
from agent.gate.reconcile import reconcile
from agent.runtime.kube import Kube
from contract.keys import ANNOTATION_WORKER_ADMITTED, FIELD_MANAGER
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL, ROLE_WORKER
from harness.cluster import ControlPlane
from tests.agent import kueue_double as kueue

pytestmark = [pytest.mark.cluster, pytest.mark.asyncio(loop_scope="function")]

WORKER = AgentConfig(multiclusterRole=ROLE_WORKER)
SINGLE = AgentConfig()


def key(wl: dict[str, Any]) -> WorkloadKey:
    return WorkloadKey(wl["metadata"]["namespace"], wl["metadata"]["name"])


@pytest.fixture
def kube(api_client) -> Kube:
    return Kube(api_client, instance="test")


def remote_workload(cp: ControlPlane, namespace: str, check: str) -> dict[str, Any]:
    """MultiKueue's copy of a dispatch job's Workload as it creates it on a worker (same name, labels and
    annotations as the manager's, its origin label, no owner: the TrainJob comes only after the admission), with
    quota reserved and the worker's checks Pending."""
    wl = cp.admin.create(
        {
            "apiVersion": kueue.KUEUE_V,
            "kind": "Workload",
            "metadata": {
                "name": f"trainjob-dj-01arz3ndektsv4rrffq69g5fav-s1-{secrets.token_hex(3)[:5]}",
                "namespace": namespace,
                "labels": {MULTIKUEUE_ORIGIN_LABEL: "manager"},
            },
            "spec": kueue.workload_spec(),
        }
    )
    wl = kueue.write_status(cp, wl, checks={check: ("Pending", "")}, reserved=False)
    return kueue.reserve(cp, wl)


async def test_a_copys_first_admission_is_recorded_then_approved_and_a_later_one_held(control_plane, namespace, kube):
    cp = control_plane
    check = kueue.create_admission_check(cp)
    wl = remote_workload(cp, namespace, check)
    writes: list[str] = []
    patch_workload, apply_status = kube.patch_workload, kube.apply_workload_status

    async def spy_patch(namespace_: str, name: str, ops: list[Any]) -> Any:
        writes.append("record")
        return await patch_workload(namespace_, name, ops)

    async def spy_status(body: Any) -> Any:
        writes.append("check")
        return await apply_status(body)

    kube.patch_workload, kube.apply_workload_status = spy_patch, spy_status  # the real writes, in order
    outcome = await reconcile(Pass.fresh(kube, WORKER), key(wl))
    assert (outcome.action, outcome.ready, outcome.conflict) == (Action.ADMIT, True, None)
    assert writes == ["record", "check"]
    now = kueue.get_workload(cp, wl)
    recorded = now["metadata"]["annotations"][ANNOTATION_WORKER_ADMITTED]
    assert (kueue.entry(now, check)["state"], kueue.entry(now, check)["message"]) == ("Ready", WORKER_FIRST_MESSAGE)
    by = {(m["manager"], m.get("subresource", "")) for m in now["metadata"]["managedFields"]}
    assert {(FIELD_MANAGER, ""), (FIELD_MANAGER, "status")} <= by

    # Evicted on the worker and admitted there again: held, the record kept.
    kueue.readmit_cycle(cp, wl)
    writes.clear()
    held = await reconcile(Pass.fresh(kube, WORKER), key(wl))
    assert (held.action, held.ready) == (Action.HOLD, False)
    assert writes == ["check"]
    now = kueue.get_workload(cp, wl)
    entry = kueue.entry(now, check)
    assert (entry["state"], entry["message"]) == ("Pending", worker_held_message(recorded))
    assert now["metadata"]["annotations"][ANNOTATION_WORKER_ADMITTED] == recorded


async def test_out_of_contact_a_copy_waits_unrecorded_and_is_admitted_once_contact_is_seen(
    control_plane, namespace, kube
):
    cp = control_plane
    check = kueue.create_admission_check(cp)
    wl = remote_workload(cp, namespace, check)
    contact = [False]  # the worker's view of the manager's contact Lease: no recent renewal seen

    held = await reconcile(Pass.fresh(kube, WORKER, contact=lambda: contact[0]), key(wl))
    assert (held.action, held.ready, held.requeue) == (Action.HOLD, False, True)  # nothing else wakes it: a backoff
    now = kueue.get_workload(cp, wl)
    assert (kueue.entry(now, check)["state"], kueue.entry(now, check)["message"]) == (
        "Pending",
        WORKER_OUT_OF_CONTACT_MESSAGE,
    )
    assert ANNOTATION_WORKER_ADMITTED not in (now["metadata"].get("annotations") or {})

    contact[0] = True  # a renewal seen
    admitted = await reconcile(Pass.fresh(kube, WORKER, contact=lambda: contact[0]), key(wl))
    assert (admitted.action, admitted.ready) == (Action.ADMIT, True)
    now = kueue.get_workload(cp, wl)
    assert kueue.entry(now, check)["state"] == "Ready"
    assert ANNOTATION_WORKER_ADMITTED in now["metadata"]["annotations"]


async def test_a_ready_refused_after_the_record_leaves_the_copy_held(control_plane, namespace, kube):
    cp = control_plane
    check = kueue.create_admission_check(cp)
    wl = remote_workload(cp, namespace, check)
    patch_workload = kube.patch_workload

    async def kueue_writes_between(namespace_: str, name: str, ops: list[Any]) -> Any:
        recorded = await patch_workload(namespace_, name, ops)
        kueue.readmit_cycle(cp, wl)  # Kueue evicts and reserves again before the Ready
        return recorded

    kube.patch_workload = kueue_writes_between
    outcome = await reconcile(Pass.fresh(kube, WORKER), key(wl))
    assert (outcome.action, outcome.ready, outcome.conflict) == (Action.ADMIT, False, "workload")
    kube.patch_workload = patch_workload
    again = await reconcile(Pass.fresh(kube, WORKER), key(wl))
    assert again.action is Action.HOLD
    assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"


async def test_outside_a_worker_the_copy_is_approved_as_not_a_trainjob_and_nothing_recorded(
    control_plane, namespace, kube
):
    cp = control_plane
    check = kueue.create_admission_check(cp)
    wl = remote_workload(cp, namespace, check)
    outcome = await reconcile(Pass.fresh(kube, SINGLE), key(wl))
    assert (outcome.action, outcome.ready) == (Action.APPROVE, True)
    assert ANNOTATION_WORKER_ADMITTED not in (kueue.get_workload(cp, wl)["metadata"].get("annotations") or {})
