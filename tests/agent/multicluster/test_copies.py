"""The verification of MultiKueue's copies on a worker (agent/multicluster/copies.py), against the real API server: the agent runs
in role worker, the test plays MultiKueue (the remote Workload stamped with its dispatch's A, and the copy, marked
unverified as dispatch's mutating webhook leaves it). A copy whose A is the stamp is let start (its uid recorded on
the Workload, then the mark removed); a copy made from a stale view of the manager's TrainJob is deleted; a second
copy under the same Workload stays marked (docs/multicluster.md, "The stale copy"). The test plays the manager's agent
too, renewing the contact Lease: no copy starts without it (nor, after the agent leads again, before it sees a renewal
while it leads), and a copy let start is deleted once the renewals stop or a new epoch shows (docs/multicluster.md,
"Contact with the manager")."""

from __future__ import annotations

import datetime as dt
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ulid import ULID

from agent.config import AgentConfig
from agent.constants import REASON_COPY_UNVERIFIED, REASON_OUT_OF_CONTACT, REASON_STALE_COPY, REASON_UNCLAIMED
from agent.multicluster.contact_lease import contact_lease
from contract.admission import admission_count, raise_to
from contract.claims import Want, claim_lease, copy_claim
from contract.keys import (
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_DISPATCHED,
    ANNOTATION_UNVERIFIED,
    ANNOTATION_VERIFIED_CONTACT,
    ANNOTATION_VERIFIED_COPY,
    LEASE_MANAGER_CONTACT,
    UNVERIFIED_TRUE,
)
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL, PREBUILT_WORKLOAD, ROLE_WORKER
from contract.objects import annotations, micro_time
from harness.cluster import ControlPlane
from harness.kube_http import ApiError
from tests.agent import kueue_double as kueue
from tests.agent.gate.test_controller import eventually
from tests.agent.running import RunningController

pytestmark = pytest.mark.cluster
JSON_PATCH = "application/json-patch+json"


CONTACT_SECONDS = 6
"""The contact Lease's duration here: short, so a loss of contact is seen within the test."""


def lease_changed(cp: ControlPlane, name: str, namespace: str, change: Callable[[dict[str, Any]], None]) -> bool:
    """The Lease read, changed by ``change`` and written back; False when another writer (the agent, the play's
    renewal thread) wrote it in between (409), so that the caller reads it again."""
    lease = cp.admin.get("coordination.k8s.io/v1", "Lease", name, namespace)
    change(lease)
    try:
        cp.admin.request("PUT", cp.admin.object_path(lease), lease)
    except ApiError as err:
        if err.status != 409:
            raise
        return False
    return True


class ManagerPlay:
    """The manager's agent, as far as this worker sees it: it renews the contact Lease every second
    (agent/multicluster/contact_lease.py ``contact_lease``, the function the manager's agent renews with) until stopped."""

    def __init__(self, cp: ControlPlane, namespace: str) -> None:
        self.cp, self.namespace = cp, namespace
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.contact = True
        """Whether it renews the contact Lease (False: only its claims, as a manager whose contact loop stalled)."""
        self._claims: dict[str, str] = {}
        self._lock = threading.Lock()
        """The claims it renews with the contact Lease (contract/claims.py): name -> the approval it names."""

    def unclaim(self, copy: dict[str, Any]) -> None:
        """Renew ``copy``'s claim no more (the manager no longer wants it here); the Lease stays, and lapses."""
        needs = copy_claim(copy)
        assert needs is not None
        self._claims.pop(needs[0], None)

    def claim(self, copy: dict[str, Any]) -> None:
        """Claim ``copy`` from now on, as the manager's agent does for the copy it wants running here."""
        needs = copy_claim(copy)
        assert needs is not None, "the copy carries the gate's approval"
        self._claims[needs[0]] = needs[1]
        self.renew_claims()

    def renew_claims(self) -> None:
        with self._lock:  # the test's own claim() and the renewal thread: one writer at a time, as one agent
            self._renew_claims()

    def _renew_claims(self) -> None:
        admin = self.cp.admin
        for name, approval in list(self._claims.items()):
            lease = admin.get_or_none("coordination.k8s.io/v1", "Lease", name, self.namespace)
            create, body = claim_lease(lease, Want("worker", name, approval, "a/job"), namespace=self.namespace,
                                       origin="manager", now=dt.datetime.now(dt.UTC), duration=CONTACT_SECONDS)  # fmt: skip
            admin.create(body) if create else admin.request("PUT", admin.object_path(body), body)

    def renew(self) -> dict[str, Any]:
        admin = self.cp.admin
        lease = admin.get_or_none("coordination.k8s.io/v1", "Lease", LEASE_MANAGER_CONTACT, self.namespace)
        create, body = contact_lease(lease, namespace=self.namespace, now=dt.datetime.now(dt.UTC),
                                     duration=CONTACT_SECONDS)  # fmt: skip
        return admin.create(body) if create else admin.request("PUT", admin.object_path(body), body)

    def start(self) -> None:
        self._stop.clear()

        def loop() -> None:
            while not self._stop.wait(1.0):
                try:
                    if self.contact:
                        self.renew()
                    self.renew_claims()
                except ApiError as err:  # the test wrote the Lease in between (409): renew on the next turn
                    if err.status != 409:
                        raise

        self.renew()
        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


@pytest.fixture
def manager(control_plane, namespace) -> Iterator[ManagerPlay]:
    play = ManagerPlay(control_plane, namespace)
    play.start()
    try:
        yield play
    finally:
        play.stop()


@pytest.fixture
def worker_agent(control_plane, namespace) -> Iterator[RunningController]:
    config = AgentConfig(leaseNamespace=namespace, multiclusterRole=ROLE_WORKER)
    running = RunningController(control_plane, config, f"in-test-{namespace}")
    running.start()
    try:
        yield running
    finally:
        running.stop()


def remote_workload(cp: ControlPlane, namespace: str, stamp: str) -> dict[str, Any]:
    """The remote Workload as MultiKueue clones it from the manager's: its origin label and the gate's stamp."""
    return cp.admin.create({
        "apiVersion": kueue.KUEUE_V, "kind": "Workload",
        "metadata": {"name": f"trainjob-dj-copy-{secrets.token_hex(3)}", "namespace": namespace,
                     "labels": {MULTIKUEUE_ORIGIN_LABEL: "manager"}, "annotations": {ANNOTATION_DISPATCHED: stamp}},
        "spec": kueue.workload_spec(),
    })  # fmt: skip


def a_copy(cp: ControlPlane, namespace: str, workload: dict[str, Any], a: int, **overrides: Any) -> dict[str, Any]:
    """MultiKueue's copy of a dispatch TrainJob carrying A ``a``, marked unverified and suspended."""
    tj = kueue.create_dispatch_trainjob(cp, namespace, **overrides)
    tj = cp.admin.request("PATCH", cp.admin.object_path(tj), raise_to(tj, a).patch, content_type=JSON_PATCH)
    ops = [
        {"op": "add", "path": f"/metadata/labels/{MULTIKUEUE_ORIGIN_LABEL.replace('/', '~1')}", "value": "manager"},
        {"op": "add", "path": f"/metadata/labels/{PREBUILT_WORKLOAD.replace('/', '~1')}",
         "value": workload["metadata"]["name"]},
        {"op": "add", "path": f"/metadata/annotations/{ANNOTATION_UNVERIFIED.replace('/', '~1')}",
         "value": UNVERIFIED_TRUE},
        # The gate's approval on the manager, which MultiKueue copies: the manager's claim names it.
        {"op": "add", "path": f"/metadata/annotations/{ANNOTATION_APPROVED_ADMISSION.replace('/', '~1')}",
         "value": f"{a}/wl-{secrets.token_hex(4)}"},
    ]  # fmt: skip
    return cp.admin.request("PATCH", cp.admin.object_path(tj), ops, content_type=JSON_PATCH)


def _gone(cp: ControlPlane, tj: dict[str, Any]) -> bool:
    try:
        return kueue.get_trainjob(cp, tj)["metadata"]["uid"] != tj["metadata"]["uid"]
    except ApiError as err:
        if err.status != 404:
            raise
        return True


def test_a_copy_carrying_its_dispatch_s_stamp_starts_and_a_second_one_never(
    control_plane, namespace, manager, worker_agent
):
    cp = control_plane
    kueue.create_admission_check(cp)  # the controller's readiness waits for a listed AdmissionCheck watch
    wl = remote_workload(cp, namespace, stamp="4")
    first = a_copy(cp, namespace, wl, 4)
    manager.claim(first)
    eventually(
        lambda: ANNOTATION_UNVERIFIED not in annotations(kueue.get_trainjob(cp, first)),
        what="the copy's mark to be removed",
    )
    verified = kueue.get_trainjob(cp, first)
    assert admission_count(verified) == 4
    assert annotations(kueue.get_workload(cp, wl))[ANNOTATION_VERIFIED_COPY] == first["metadata"]["uid"]
    # MultiKueue makes the copy again under the same Workload (the first one deleted): it would start a second
    # execution with A 4, J at 0 in a new JobSet. It stays marked.
    cp.admin.delete(first["apiVersion"], "TrainJob", first["metadata"]["name"], namespace)
    eventually(lambda: _gone(cp, first), what="the first copy to go")
    second = a_copy(cp, namespace, wl, 4, job_id=str(ULID()))  # another name: the runtime copy stays
    manager.claim(second)
    said = eventually(
        lambda: [e for e in kueue.events_about(cp, second) if e["reason"] == REASON_COPY_UNVERIFIED],
        what="an Event on the second copy",
    )
    assert f"another copy (uid {first['metadata']['uid']})" in said[0]["message"]
    time.sleep(2)
    assert annotations(kueue.get_trainjob(cp, second))[ANNOTATION_UNVERIFIED] == UNVERIFIED_TRUE
    assert worker_agent.call(lambda c: c.copies.verified) == 1


def test_a_copy_made_from_a_stale_view_of_the_manager_s_trainjob_is_deleted(
    control_plane, namespace, manager, worker_agent
):
    cp = control_plane
    kueue.create_admission_check(cp)
    wl = remote_workload(cp, namespace, stamp="8")
    stale = a_copy(cp, namespace, wl, 4)  # the previous dispatch's A: MultiKueue's cache lagged the raise to 8
    eventually(lambda: _gone(cp, stale), what="the stale copy to be deleted")
    # The agent counts its delete once the API server answered it, which may be after the copy is seen gone.
    eventually(lambda: worker_agent.call(lambda c: c.copies.deleted) == 1, what="the agent's count of its delete")
    said = eventually(
        lambda: [e for e in kueue.events_about(cp, stale) if e["reason"] == REASON_STALE_COPY], what="an Event"
    )
    assert "carries A 4, its dispatch was stamped 8" in said[0]["message"]
    assert ANNOTATION_VERIFIED_COPY not in annotations(kueue.get_workload(cp, wl))


def test_a_copy_starts_only_in_contact_and_is_deleted_once_contact_is_lost(control_plane, namespace, worker_agent):
    """No copy starts before a renewal of the contact Lease is seen; the copy let start records the epoch; when the
    renewals stop, the worker's agent deletes it within the Lease's duration and says so."""
    cp = control_plane
    kueue.create_admission_check(cp)
    wl = remote_workload(cp, namespace, stamp="4")
    copy = a_copy(cp, namespace, wl, 4)
    time.sleep(4)  # two looks of the agent: no Lease, so no contact
    assert annotations(kueue.get_trainjob(cp, copy))[ANNOTATION_UNVERIFIED] == UNVERIFIED_TRUE
    play = ManagerPlay(cp, namespace)
    play.start()
    try:
        play.claim(copy)
        eventually(lambda: ANNOTATION_UNVERIFIED not in annotations(kueue.get_trainjob(cp, copy)),
                   what="the copy let start once the manager is in contact")  # fmt: skip
        assert annotations(kueue.get_workload(cp, wl))[ANNOTATION_VERIFIED_CONTACT] == "0"
        time.sleep(CONTACT_SECONDS + 2)  # renewed all along: it runs on
        assert not _gone(cp, copy)
        play.contact = False  # the contact Lease ages; the claim is still renewed
        lost_at = time.monotonic()
        eventually(lambda: _gone(cp, copy), timeout=CONTACT_SECONDS + 15, what="the copy deleted once contact is lost")
    finally:
        play.stop()
    assert time.monotonic() - lost_at >= CONTACT_SECONDS - 2  # not before the Lease's duration (one renewal late)
    said = eventually(
        lambda: [e for e in kueue.events_about(cp, copy) if e["reason"] == REASON_OUT_OF_CONTACT], what="an Event"
    )
    assert "has not renewed its contact Lease" in said[0]["message"]
    assert worker_agent.call(lambda c: c.contact.deleted) >= 1  # copies other tests left may go too


def test_a_copy_started_before_contact_was_lost_and_regained_is_deleted(control_plane, namespace, worker_agent):
    """The manager renews after a gap its Lease's duration did not cover (the worker's agent may not have watched
    it: restarted, or the gap fell between its looks): the new epoch deletes the copy let start under the old
    one, and a copy made in the new epoch starts and runs on."""
    cp = control_plane
    kueue.create_admission_check(cp)
    play = ManagerPlay(cp, namespace)
    play.start()
    try:
        wl = remote_workload(cp, namespace, stamp="4")
        old = a_copy(cp, namespace, wl, 4)
        play.claim(old)
        eventually(lambda: ANNOTATION_UNVERIFIED not in annotations(kueue.get_trainjob(cp, old)),
                   what="the copy let start")  # fmt: skip

        def new_epoch(lease: dict[str, Any]) -> None:
            lease["spec"]["leaseTransitions"] += 1  # as the manager's renewal after a gap writes it

        eventually(lambda: lease_changed(cp, LEASE_MANAGER_CONTACT, namespace, new_epoch), timeout=10,
                   what="a new epoch written")  # fmt: skip
        eventually(lambda: _gone(cp, old), what="the copy of the earlier epoch deleted")
        said = eventually(
            lambda: [e for e in kueue.events_about(cp, old) if e["reason"] == REASON_OUT_OF_CONTACT], what="an Event"
        )
        assert "started under contact epoch 0" in said[0]["message"]
        assert "shows 1" in said[0]["message"]
        wl2 = remote_workload(cp, namespace, stamp="8")
        new = a_copy(cp, namespace, wl2, 8, job_id=str(ULID()))
        play.claim(new)
        eventually(lambda: ANNOTATION_UNVERIFIED not in annotations(kueue.get_trainjob(cp, new)),
                   what="the next copy let start")  # fmt: skip
        assert annotations(kueue.get_workload(cp, wl2))[ANNOTATION_VERIFIED_CONTACT] == "1"
        time.sleep(4)
        assert not _gone(cp, new)
    finally:
        play.stop()


def test_a_worker_agent_that_leads_again_starts_no_copy_before_it_sees_a_renewal(control_plane, namespace):
    """The worker's agent leads and sees renewals, loses its leadership, and the Lease is renewed while it does not
    lead; leading again, it has seen no renewal yet (it did not watch meanwhile), so a marked copy starts only once it
    sees one, as after a restart."""
    cp = control_plane
    kueue.create_admission_check(cp)
    config = AgentConfig(leaseNamespace=namespace, multiclusterRole=ROLE_WORKER, leaseDurationSeconds=6,
                         renewDeadlineSeconds=4, renewPeriodSeconds=1, retryPeriodSeconds=1)  # fmt: skip
    agent = RunningController(cp, config, f"in-test-{namespace}").start()
    play = ManagerPlay(cp, namespace)
    try:
        play.start()
        agent.wait(lambda c: c.contact.verifiable() is not None, 10, "a renewal seen")
        play.stop()

        # Another replica takes the agent's Lease for 4 s (as if this one had stalled past its deadline).
        def take(lease: dict[str, Any]) -> None:
            lease["spec"].update(holderIdentity="another-replica", leaseDurationSeconds=4,
                                 renewTime=micro_time(dt.datetime.now(dt.UTC)))  # fmt: skip

        eventually(lambda: lease_changed(cp, config.lease_name, namespace, take), timeout=5,
                   what="the agent's Lease taken")  # fmt: skip
        agent.wait(lambda c: not c.leading, 5, "the agent to stop leading")
        play.renew()  # the manager renews while the agent does not lead
        agent.wait(lambda c: c.leading, 10, "the agent to lead again")
        wl = remote_workload(cp, namespace, stamp="4")
        copy = a_copy(cp, namespace, wl, 4)
        play.claim(copy)
        time.sleep(4)  # two looks of the Lease, and the copy's: no renewal seen since it leads again
        marked = annotations(kueue.get_trainjob(cp, copy)).get(ANNOTATION_UNVERIFIED)
        assert marked == UNVERIFIED_TRUE, "the copy was let start before a renewal was seen since leading again"
        play.start()
        eventually(lambda: ANNOTATION_UNVERIFIED not in annotations(kueue.get_trainjob(cp, copy)),
                   what="the copy let start once a renewal is seen")  # fmt: skip
        # Under the epoch the Lease shows now (a new one if the renewals paused longer than its duration).
        contact = cp.admin.get("coordination.k8s.io/v1", "Lease", LEASE_MANAGER_CONTACT, namespace)
        recorded = annotations(kueue.get_workload(cp, wl))[ANNOTATION_VERIFIED_CONTACT]
        assert recorded == str(contact["spec"]["leaseTransitions"])
    finally:
        play.stop()
        agent.stop()


def test_a_copy_runs_only_while_the_manager_claims_it_and_one_never_claimed_goes_back(
    control_plane, namespace, worker_agent
):
    """In contact all along: a copy starts once the manager claims it; when the manager stops renewing its claim (it
    no longer wants it here: evicted, stopped, Kueue cut off from this worker) the worker's agent deletes it within
    the claim's duration and says so. A copy the manager never claims is deleted after that long too: its remote
    Workload goes with it and the job goes back through the manager."""
    cp = control_plane
    kueue.create_admission_check(cp)
    play = ManagerPlay(cp, namespace)
    play.start()
    try:
        wl = remote_workload(cp, namespace, stamp="4")
        copy = a_copy(cp, namespace, wl, 4)
        time.sleep(3)  # in contact, no claim: it waits
        assert annotations(kueue.get_trainjob(cp, copy))[ANNOTATION_UNVERIFIED] == UNVERIFIED_TRUE
        play.claim(copy)
        eventually(lambda: ANNOTATION_UNVERIFIED not in annotations(kueue.get_trainjob(cp, copy)),
                   what="the copy let start once claimed")  # fmt: skip
        play.unclaim(copy)
        unclaimed_at = time.monotonic()
        eventually(lambda: _gone(cp, copy), timeout=CONTACT_SECONDS + 15, what="the unclaimed copy deleted")
        assert time.monotonic() - unclaimed_at >= CONTACT_SECONDS - 2  # not before the claim's duration
        said = eventually(
            lambda: [e for e in kueue.events_about(cp, copy) if e["reason"] == REASON_UNCLAIMED], what="an Event"
        )
        assert "does not claim this copy here now" in said[0]["message"]
        wl2 = remote_workload(cp, namespace, stamp="8")
        never = a_copy(cp, namespace, wl2, 8, job_id=str(ULID()))
        eventually(lambda: _gone(cp, never), timeout=CONTACT_SECONDS + 15, what="the never-claimed copy deleted")
        assert ANNOTATION_VERIFIED_COPY not in annotations(kueue.get_workload(cp, wl2))
    finally:
        play.stop()
