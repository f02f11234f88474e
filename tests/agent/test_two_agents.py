"""Two agents at once, as real processes (``python -m agent serve``) under a least-privilege ServiceAccount:
only the Lease holder acts; killing it hands over to the other, which then acts; a clean stop releases the
Lease so the handover is quick."""

from __future__ import annotations

import os
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from agent.constants import LEASE_DURATION_SECONDS, RETRY_PERIOD_SECONDS
from harness.cluster import ControlPlane, free_port
from harness.processes import ManagedProcess
from tests.agent import kueue_double as kueue

pytestmark = pytest.mark.cluster

LEASE = "dispatch-admission"

# What the agent needs, and nothing more: the chart's ClusterRole should say the same.
CLUSTER_RULES = [
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["admissionchecks"], "verbs": ["list", "watch"]},
    {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads/status", "admissionchecks/status"], "verbs": ["patch"]},
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get", "patch"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create"]},
]
LEASE_RULES = [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]}]


@dataclass
class Agent:
    identity: str
    process: ManagedProcess
    port: int

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as resp:
                return resp.status, resp.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()
        except OSError as err:
            return 0, str(err)

    def log(self) -> str:
        return self.process.log_path.read_text(errors="replace")

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)  # the process group this test started
        self.process.popen.wait(10)


def grant(cp: ControlPlane, namespace: str) -> Path:
    """A ServiceAccount with the agent's RBAC; the Lease rights only in the Lease's namespace."""
    name = f"dispatch-agent-{namespace}"
    cp.ensure_service_account(namespace, "dispatch-agent")
    subject = [{"kind": "ServiceAccount", "name": "dispatch-agent", "namespace": namespace}]
    rbac = "rbac.authorization.k8s.io/v1"
    cp.admin.create({"apiVersion": rbac, "kind": "ClusterRole", "metadata": {"name": name}, "rules": CLUSTER_RULES})
    cp.admin.create({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": {"name": name},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
                     "subjects": subject})  # fmt: skip
    cp.admin.create({"apiVersion": rbac, "kind": "Role", "metadata": {"name": "lease", "namespace": namespace},
                     "rules": LEASE_RULES})  # fmt: skip
    cp.admin.create({"apiVersion": rbac, "kind": "RoleBinding", "metadata": {"name": "lease", "namespace": namespace},
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "lease"},
                     "subjects": subject})  # fmt: skip
    return cp.service_account_kubeconfig(namespace, "dispatch-agent")


def start(cp: ControlPlane, namespace: str, kubeconfig: Path, identity: str, workdir: Path) -> Agent:
    config = workdir / "agent.yaml"
    config.write_text(yaml.safe_dump({"leaseNamespace": namespace, "leaseName": LEASE}))
    port = free_port()
    argv = [sys.executable, "-m", "agent", "serve", "--kubeconfig", kubeconfig, "--config", config,
            "--health-port", str(port), "--bind-address", "127.0.0.1", "--identity", identity]  # fmt: skip
    agent = Agent(identity, cp.supervisor.start(f"dispatch-agent-{namespace}-{identity}", argv), port)
    deadline = time.monotonic() + 60
    while agent.get("/readyz")[0] != 200:
        if not agent.process.alive() or time.monotonic() > deadline:
            raise AssertionError(agent.process.describe_exit())
        time.sleep(0.2)
    return agent


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


def raised(agent: Agent, wl: dict, a: int) -> bool:
    return f"{wl['metadata']['namespace']}/{wl['metadata']['name']}: raised A to {a} " in agent.log()


def test_only_the_leader_acts_and_a_killed_leader_hands_over(control_plane, namespace, tmp_path):
    cp = control_plane
    kubeconfig = grant(cp, namespace)
    agents = {i: start(cp, namespace, kubeconfig, i, tmp_path) for i in ("agent-a", "agent-b")}
    try:
        leader = agents[wait_for(lambda: holder(cp, namespace), 30, "a Lease holder")]
        standby = next(a for a in agents.values() if a is not leader)
        assert standby.get("/readyz") == (200, "ok (standby)")  # a standby is ready too
        wait_for(lambda: leader.get("/readyz") == (200, "ok (leader)"), 10, "the leader to say so")

        check = kueue.create_admission_check(cp)
        tj = kueue.create_dispatch_trainjob(cp, namespace)
        wl = kueue.reserve(cp, kueue.create_workload(cp, tj, [check]))
        wait_for(lambda: kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready", 30, "Ready")
        assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (1, 1)
        assert raised(leader, wl, 1)
        assert not raised(standby, wl, 1)
        assert "dispatch_agent_leader 1" in leader.get("/metrics")[1]
        assert "dispatch_agent_leader 0" in standby.get("/metrics")[1]

        # The leader dies without a word, and Kueue preempts and re-reserves meanwhile: the Workload waits at
        # the Pending check (the standby does not act) until the standby takes the expired Lease.
        leader.kill()
        killed = time.monotonic()
        kueue.readmit_cycle(cp, wl)
        time.sleep(3)
        assert kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Pending"
        assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (1, 1)
        wait_for(lambda: holder(cp, namespace) == standby.identity, LEASE_DURATION_SECONDS + 10, "the handover")
        handover = time.monotonic() - killed
        # The Lease's duration counts from the last renewal the standby saw (at most one retry period before
        # the kill), and the standby looks once per retry period.
        assert handover <= LEASE_DURATION_SECONDS + 2 * RETRY_PERIOD_SECONDS + 1, handover
        print(f"handover after SIGKILL: {handover:.1f}s")

        wait_for(lambda: kueue.entry(kueue.get_workload(cp, wl), check)["state"] == "Ready", 30, "Ready again")
        assert kueue.a_and_floor(kueue.get_trainjob(cp, tj)) == (2, 2)
        assert raised(standby, wl, 2)

        # A clean stop releases the Lease: a new standby takes over within a retry period or two.
        successor = start(cp, namespace, kubeconfig, "agent-c", tmp_path)
        agents["agent-c"] = successor
        standby.process.stop()
        stopped = time.monotonic()
        wait_for(lambda: holder(cp, namespace) == successor.identity, 3 * RETRY_PERIOD_SECONDS + 2, "the release")
        print(f"handover after SIGTERM: {time.monotonic() - stopped:.1f}s")
        assert "released Lease" in standby.log()
    finally:
        for agent in agents.values():
            agent.process.stop()
