"""Two agents at once, as real processes (``python -m agent serve``) under a least-privilege ServiceAccount:
only the Lease holder acts; killing it hands over to the other, which then acts; a clean stop releases the
Lease so the handover is quick."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.constants import LEASE_DURATION_SECONDS, RETRY_PERIOD_SECONDS
from harness.agent_process import CLUSTER_RULES, LEADER, LEASE, AgentProcess, grant, start_agent
from harness.cluster import ControlPlane
from tests.agent import kueue_double as kueue

pytestmark = pytest.mark.cluster


def start(cp: ControlPlane, namespace: str, kubeconfig: Path, identity: str, workdir: Path) -> AgentProcess:
    config = {"leaseNamespace": namespace, "leaseName": LEASE}
    name = f"dispatch-agent-{namespace}-{identity}"
    extra = ("--log-format", "json", "--log-level", "debug")
    return start_agent(cp, kubeconfig=kubeconfig, name=name, config=config, workdir=workdir, extra=extra)


def json_lines(agent: AgentProcess) -> list[dict]:
    """Every line the agent logged, each parsed as JSON (a line that is not fails the test); the supervisor's
    own first line, ``+ argv``, is not the agent's."""
    return [json.loads(line) for line in agent.log().splitlines() if line.strip() and not line.startswith("+ ")]


def holder(cp: ControlPlane, namespace: str) -> str:
    lease = cp.admin.get_or_none("coordination.k8s.io/v1", "Lease", LEASE, namespace)
    return (lease or {}).get("spec", {}).get("holderIdentity") or ""


def wait_for(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def admitted(agent: AgentProcess, wl: dict, a: int) -> bool:
    """The agent's decision line for ``wl``: admitted, the next execution to start with A ``a``, and the check
    written, as a JSON pipeline sees it."""
    key = f"{wl['metadata']['namespace']}/{wl['metadata']['name']}"
    return any(
        (line.get("workload"), line.get("outcome"), line.get("a"), line.get("result")) == (key, "admit", a, "written")
        for line in json_lines(agent)
    )


def test_only_the_leader_acts_and_a_killed_leader_hands_over(control_plane, namespace, tmp_path):
    cp = control_plane
    kubeconfig = grant(cp, namespace)
    agents = {a.name: a for a in (start(cp, namespace, kubeconfig, i, tmp_path) for i in ("agent-a", "agent-b"))}
    try:
        leader = agents[wait_for(lambda: holder(cp, namespace), 30, "a Lease holder")]
        standby = next(a for a in agents.values() if a is not leader)
        assert standby.get("/readyz") == (200, "ok (standby)")  # a standby is ready too
        wait_for(lambda: leader.get("/readyz") == (200, "ok (leader)"), 10, "the leader to say so")

        check = kueue.create_admission_check(cp)
        tj = kueue.create_dispatch_trainjob(cp, namespace)
        wl = kueue.reserve(cp, kueue.create_workload(cp, tj, [check]))
        wait_for(lambda: kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready", 30, "Ready")
        assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (0, None)  # the gate leaves A to the start
        # The decision line follows the write the API server shows: read the log once it is there.
        wait_for(lambda: admitted(leader, wl, 1), 10, "the leader's decision line")
        assert not admitted(standby, wl, 1)
        assert not [line for line in json_lines(standby) if line.get("outcome")]  # the standby decided nothing
        (decision,) = [line for line in json_lines(leader) if line.get("outcome") == "admit"]
        assert decision["trainjob"] == tj["metadata"]["name"]
        assert decision["check"] == check
        assert decision["level"] == "info"
        assert decision["logger"] == "agent.gate.reconcile"
        assert "dispatch_agent_leader 1.0" in leader.get("/metrics")[1]
        assert "dispatch_agent_leader 0.0" in standby.get("/metrics")[1]

        # Kueue starts the execution (with A 1), then the leader dies without a word, and Kueue preempts and
        # re-reserves meanwhile: the Workload waits at the Pending check (the standby does not act) until the
        # standby takes the expired Lease.
        assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (1, 1)
        leader.kill()
        killed = time.monotonic()
        kueue.readmit_cycle(cp, wl)
        time.sleep(3)
        assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"
        assert not admitted(standby, wl, 2)
        wait_for(lambda: holder(cp, namespace) == standby.name, LEASE_DURATION_SECONDS + 10, "the handover")
        handover = time.monotonic() - killed
        # The Lease's duration counts from the last renewal the standby saw (at most one retry period before
        # the kill), and the standby looks once per retry period.
        assert handover <= LEASE_DURATION_SECONDS + 2 * RETRY_PERIOD_SECONDS + 1, handover
        print(f"handover after SIGKILL: {handover:.1f}s")

        wait_for(lambda: kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready", 30, "Ready again")
        wait_for(lambda: admitted(standby, wl, 2), 10, "the new leader's decision line")
        assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (2, 2)
        # The standby's watches were warm: it read the TrainJob from memory, not by a GET.
        assert standby.metric("dispatch_agent_reads_total", 'resource="trainjobs",source="cache"') >= 1

        # A clean stop releases the Lease: a new standby takes over within a retry period or two.
        successor = start(cp, namespace, kubeconfig, "agent-c", tmp_path)
        agents[successor.name] = successor
        standby.process.stop()
        stopped = time.monotonic()
        wait_for(lambda: holder(cp, namespace) == successor.name, 3 * RETRY_PERIOD_SECONDS + 2, "the release")
        print(f"handover after SIGTERM: {time.monotonic() - stopped:.1f}s")
        assert "released Lease" in standby.log()
    finally:
        for agent in agents.values():
            agent.process.stop()


def test_without_list_and_watch_on_trainjobs_and_jobsets_every_read_is_a_get(control_plane, namespace, tmp_path):
    """The RBAC of earlier releases (get only): those two watches are refused, their stores never go live, and
    the gate works as before, each TrainJob and JobSet read a GET."""
    cp = control_plane
    old = [
        {**r, "verbs": [v for v in r["verbs"] if v not in ("list", "watch")]}
        if r["resources"] in (["trainjobs"], ["jobsets"])
        else r
        for r in CLUSTER_RULES
    ]
    assert old != CLUSTER_RULES
    agent = start_agent(
        cp,
        kubeconfig=grant(cp, namespace, old),
        name=f"dispatch-agent-{namespace}-old-rbac",
        config={"leaseNamespace": namespace, "leaseName": LEASE},
        workdir=tmp_path,
        until=LEADER,
    )
    try:
        check = kueue.create_admission_check(cp)
        tj = kueue.create_dispatch_trainjob(cp, namespace)
        wl = kueue.reserve(cp, kueue.create_workload(cp, tj, [check]))
        wait_for(lambda: kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready", 30, "Ready")
        kueue.run_execution(cp, tj)
        kueue.readmit_cycle(cp, wl)
        wait_for(lambda: kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready", 30, "Ready again")
        assert kueue.a_and_floor(kueue.run_execution(cp, tj)) == (2, 2)
        reads = "dispatch_agent_reads_total"
        for resource in ("trainjobs", "jobsets"):
            assert agent.metric(reads, f'resource="{resource}",source="api"') >= 2, resource
            assert agent.metric(reads, f'resource="{resource}",source="cache"') == 0, resource
            assert agent.metric("dispatch_agent_watch_restarts_total", f'resource="{resource}"') >= 1
        assert agent.metric(reads, 'resource="workloads",source="cache"') >= 1  # that watch is allowed
    finally:
        agent.process.stop()
