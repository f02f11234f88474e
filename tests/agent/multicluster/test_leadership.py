"""The worker's contact watch across a change of leader (docs/multicluster.md, "Contact with the manager", step 2,
and "The claim", step 3) against the real MultiKueue of harness.multicluster, with dispatch's agent on the manager
and on both workers (test_worker_gate's ``armed``).

A worker's agent that leads again did not watch while another replica led: a renewal of the contact Lease (or of a
claim) it finds changed at its first look may have happened long ago. So that first look is a baseline, as after a
restart, and no copy starts on that worker until a renewal is seen while it leads."""

from __future__ import annotations

import datetime as dt
import time
from typing import Any

import pytest
from ulid import ULID

from agent.constants import REASON_OUT_OF_CONTACT, REASON_UNCLAIMED
from agent.domain.decide import WORKER_OUT_OF_CONTACT_MESSAGE
from agent.domain.operations import plan_open
from agent.multicluster.worker_reads import CONTACT_RULES, WORKER_RULES
from contract.admission import admission_started
from contract.keys import ANNOTATION_UNVERIFIED, LABEL_JOBSET_NAME, LEASE_MANAGER_CONTACT, UNVERIFIED_TRUE
from contract.objects import annotations, micro_time
from contract.trainjob import Submission
from harness.jobs import write_as_the_api
from harness.kube_http import ApiError
from harness.multicluster import KUEUE_V, MANAGER_AGENT_ROLE, Worker
from tests.agent.gate import kit
from tests.agent.gate.kit import TRAINER_V, eventually
from tests.agent.multicluster.test_claims import Story
from tests.agent.multicluster.test_numbering import QUEUE, K, _trainer_pod, _true
from tests.agent.multicluster.test_worker_gate_across_clusters import CONTACT_SECONDS, Armed, _worker_events
from tests.agent.multicluster.test_worker_gate_across_clusters import armed as armed_clusters

pytestmark = [pytest.mark.e2e, pytest.mark.multicluster]
armed = armed_clusters  # test_worker_gate's fixture: the agents on the manager and both workers
LEADER_LEASE = "dispatch-admission"
"""The leader Lease of the armed agents, in the armed system namespace (test_worker_gate's ``_start_agent``)."""
STANDBY = "dispatch-test-other-replica"
"""The holder the test puts in a worker agent's leader Lease: another replica, as far as that agent can tell."""
COORDINATION = "coordination.k8s.io/v1"
READ_LEASES = {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "list"]}
"""The manager agent's Lease rights on a worker cut off from renewing: what its gate reads there, no write."""


def _agent_log(worker: Worker, system: str) -> str:
    """The worker's agent's log (it says when it starts and stops leading)."""
    return worker.control_plane.supervisor.get(f"dispatch-agent-{system}").log_path.read_text(errors="replace")


def _set_holder(worker: Worker, system: str, holder: str, duration: int) -> None:
    """Puts ``holder`` in the agent's leader Lease on ``worker`` (a PUT preconditioned on the Lease as read; read
    again when the agent renewed in between)."""

    def put() -> bool:
        lease = worker.admin.get(COORDINATION, "Lease", LEADER_LEASE, system)
        now = micro_time(dt.datetime.now(dt.UTC))
        lease["spec"].update(holderIdentity=holder, leaseDurationSeconds=duration, acquireTime=now, renewTime=now)
        try:
            worker.admin.request("PUT", worker.admin.object_path(lease), lease)
        except ApiError as err:
            if err.status != 409:
                raise
            return False
        return True

    eventually(put, 30, f"the leader Lease on {worker.name} written")


def _take(worker: Worker, system: str) -> None:
    """Another replica holds the worker agent's leader Lease (for an hour, unless given back): the agent stops
    leading, as a stalled leader does once its Lease is taken."""
    stepped_down = _agent_log(worker, system).count("not leading any more")
    _set_holder(worker, system, STANDBY, 3600)
    eventually(lambda: _true(_agent_log(worker, system).count("not leading any more") > stepped_down), 30,
               f"the agent on {worker.name} no longer leading")  # fmt: skip


def _give_back(worker: Worker, system: str) -> int:
    """The other replica releases the Lease (holder cleared, as a clean shutdown does): the agent leads again. How
    many times the agent has said it leads, before this."""
    led = _agent_log(worker, system).count("leading: ")
    _set_holder(worker, system, "", 1)
    return led


def _renewals(worker: Worker, allowed: bool) -> None:
    """Lets the manager agent's credential for ``worker`` write Leases there, or only read them (its ClusterRole
    there, from harness.multicluster's ``agent_kubeconfigs``): reading only, it renews neither the contact Lease nor
    a claim on that worker, while its gate still reads the worker (so it may dispatch there)."""
    rules = (*WORKER_RULES, *CONTACT_RULES) if allowed else (*WORKER_RULES, READ_LEASES)
    worker.admin.apply({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                        "metadata": {"name": MANAGER_AGENT_ROLE}, "rules": [dict(r) for r in rules]})  # fmt: skip


def _cut(worker: Worker, system: str) -> None:
    """No renewal reaches ``worker`` any more: one under way lands, then the contact Lease there stays as it is."""
    _renewals(worker, False)
    time.sleep(CONTACT_SECONDS / 2)  # a renewal under way lands
    last = _renew_time(worker, system)
    time.sleep(CONTACT_SECONDS / 2)  # two rounds of the manager's renewals
    assert _renew_time(worker, system) == last, f"the manager's agent still renews on {worker.name}"


def _renew_time(worker: Worker, system: str) -> str | None:
    lease = worker.admin.get_or_none(COORDINATION, "Lease", LEASE_MANAGER_CONTACT, system)
    return (lease or {}).get("spec", {}).get("renewTime")


def _held_out_of_contact(worker: Worker, namespace: str, workload: str, check: str) -> None:
    """The job's remote Workload on ``worker`` (MultiKueue's, named as the manager's ``workload``) held by the
    worker's gate, out of contact with the manager."""
    entry = kit.check_entry(worker.admin.get(KUEUE_V, "Workload", workload, namespace), check)
    assert (entry["state"], entry.get("message")) == ("Pending", WORKER_OUT_OF_CONTACT_MESSAGE), entry


def _job_pods(story: Story, worker: Worker, name: str) -> list[dict[str, Any]]:
    """Every pod of the job seen on ``worker`` so far (the recorder's history), gone or not."""
    return [pod for _, _, pod in story.pods[worker.name].lifetimes().values()
            if (pod["metadata"].get("labels") or {}).get(LABEL_JOBSET_NAME) == name]  # fmt: skip


@pytest.mark.timeout(900)  # three control planes on a shared 2-core machine, a dispatch, a change of leader
def test_a_worker_agent_that_leads_again_lets_no_copy_start_before_it_sees_a_renewal(armed: Armed) -> None:
    """The manager's agent renews nothing on worker w (its credential there may read Leases, not write them), so w's
    agent sees no contact, and the other worker's agent does not lead (another replica holds its leader Lease): w's
    gate holds the job's remote Workload, so no copy is made there. Then w's agent stops leading too, and while it
    does not lead the manager's agent renews its contact Lease (and its claims) on w again, then is cut off from w
    once more. w's agent leads again and finds the Lease changed since it last looked; that change happened while it
    did not watch, so it is no renewal seen now: its gate admits nothing and no copy on w is let start (no trainer
    is made) for longer than the Lease's duration. Once renewals reach w again the job starts. Then the same change of leader
    where the copy runs, renewals cut off from that worker: leading again, its agent stops the running copy, and the
    job starts again, A raised, only once renewals return. Across both workers no two executions overlapped and R
    only rose."""
    s = Story(armed)
    system = armed.system
    w, other = s.mc.workers
    taken: list[Worker] = []
    cut: Worker | None = None
    try:
        _take(other, system)
        taken.append(other)
        lost = _agent_log(w, system).count(", lost")
        _cut(w, system)
        cut = w
        eventually(lambda: _true(_agent_log(w, system).count(", lost") > lost), CONTACT_SECONDS + 30,
                   f"the agent on {w.name} out of contact")  # fmt: skip

        sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0, namespace=s.ns, queue=QUEUE,
                         image="registry.invalid/dispatch-mc/train:1", command=["python", "train.py"])  # fmt: skip
        tj = kit.create_as_start(s.m.admin, sub, s.m.runtime)
        name, uid = tj["metadata"]["name"], tj["metadata"]["uid"]
        eventually(lambda: kit.workload_of(s.m.admin, s.ns, uid), 30, "the Workload created")
        write_as_the_api(s.m.admin, tj, lambda t, _wl: plan_open(t).writes)
        # w's gate holds the copy's admission while w sees no renewal: MultiKueue makes no copy of the TrainJob there.
        workload = kit.workload_of(s.m.admin, s.ns, uid)["metadata"]["name"]
        eventually(lambda: _held_out_of_contact(w, s.ns, workload, armed.worker_check), 180,
                   f"the job's remote Workload held on {w.name}, out of contact")  # fmt: skip

        # While w's agent does not lead, the manager's agent renews on w; then it is cut off again.
        _take(w, system)
        taken.append(w)
        before = _renew_time(w, system)
        _renewals(w, True)
        cut = None
        eventually(lambda: _true(_renew_time(w, system) != before), CONTACT_SECONDS + 30, f"a renewal on {w.name}")
        _cut(w, system)
        cut = w

        # w's agent leads again (the other worker's still does not: the job may go nowhere else).
        led = _give_back(w, system)
        taken.remove(w)
        eventually(lambda: _true(_agent_log(w, system).count("leading: ") > led), 30,
                   f"the agent on {w.name} leading again")  # fmt: skip
        time.sleep(CONTACT_SECONDS + 2)  # longer than the Lease's duration: a change it counted would have served

        # No copy on w was admitted or let start: the gate, leading again, counted no change it saw while it did not
        # lead, so the remote Workload is still held; any version of a copy of the job there (none is expected) is
        # marked and suspended; and no pod of the job was made there.
        _held_out_of_contact(w, s.ns, workload, armed.worker_check)
        for version in s.copies[w.name].versions(name):
            assert annotations(version).get(ANNOTATION_UNVERIFIED) == UNVERIFIED_TRUE, (
                f"a copy on {w.name} let start before a renewal was seen since its agent leads again",
                version["metadata"],
            )
            assert version["spec"].get("suspend") is not False, f"a copy started on {w.name} out of contact"
        assert not _job_pods(s, w, name), f"a pod of the job made on {w.name} out of contact"

        # Renewals reach w again and the other worker's agent leads: the job starts, on either worker.
        _renewals(w, True)
        cut = None
        for worker in taken:
            _give_back(worker, system)
        taken.clear()

        def running(above: int) -> tuple[Worker, int]:
            cluster = kit.workload_of(s.m.admin, s.ns, uid)["status"].get("clusterName")
            assert cluster in s.mc.cluster_names, "not dispatched yet"
            there = s.mc.worker(cluster)
            copy = there.admin.get(TRAINER_V, "TrainJob", name, s.ns)
            assert copy["spec"].get("suspend") is False, "not started yet"
            a = kit.a_of(copy)
            assert a is not None
            assert a > above, a
            assert admission_started(copy) == a
            return there, a

        there, a_first = eventually(lambda: running(0), 420, "the job running once renewals reach the worker again")
        pod = eventually(lambda: _trainer_pod(there, tj), 120, f"the trainer pod Running on {there.name}")

        # The copy now runs on a worker whose agent stops leading; renewals stop reaching that worker; its agent
        # leads again. It has seen no renewal since, so it stops the copy it let start, and says so.
        running_uid = there.admin.get(TRAINER_V, "TrainJob", name, s.ns)["metadata"]["uid"]
        _take(there, system)
        taken.append(there)
        _cut(there, system)
        cut = there
        led = _give_back(there, system)
        taken.remove(there)
        eventually(lambda: _true(_agent_log(there, system).count("leading: ") > led), 30,
                   f"the agent on {there.name} leading again")  # fmt: skip

        def stopped() -> list[dict[str, Any]]:
            copy = there.admin.get_or_none(TRAINER_V, "TrainJob", name, s.ns)
            assert copy is None or copy["metadata"]["uid"] != running_uid, "the running copy still there"
            # Out of contact, or unclaimed: the contact Lease and the copy's claim stop together here.
            said = [*_worker_events(there, s.ns, running_uid, REASON_OUT_OF_CONTACT),
                    *_worker_events(there, s.ns, running_uid, REASON_UNCLAIMED)]  # fmt: skip
            assert said, "no Event on the copy"
            return said

        said = eventually(stopped, CONTACT_SECONDS + 60, f"the running copy stopped by the agent on {there.name}")
        assert any(m in said[0]["message"] for m in ("has not renewed its contact Lease", "does not claim this copy"))
        eventually(lambda: _true(there.admin.get_or_none("v1", "Pod", pod, s.ns) is None), 120,
                   f"the trainer pod gone from {there.name}")  # fmt: skip

        # Renewals reach that worker again: the job is dispatched again, A raised, and runs on either worker.
        _renewals(there, True)
        cut = None
        moved, a_final = eventually(lambda: running(a_first), 420, "the job running again, A raised")
        eventually(lambda: _trainer_pod(moved, tj), 120, f"the trainer pod Running on {moved.name}")
        dispatched = kit.assert_a_rises_before_each_admission(s.trainjobs.versions(name))
        assert (dispatched[0], dispatched[-1]) == (K, a_final), dispatched
        s.assert_one_at_a_time(name, [a_first, a_final], dispatched)
    finally:
        if cut is not None:
            _renewals(cut, True)
        for worker in taken:
            _give_back(worker, system)
        s.stop()
