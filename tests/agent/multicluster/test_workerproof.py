"""Preflight's proof of each worker on a MultiKueue manager, decided (agent/multicluster/worker_proof.py): the rights asked,
the worker's queue and dispatch's worker-side check there, and the report's line per worker."""

from __future__ import annotations

import datetime as dt
from typing import Any

from agent.domain.decide import Blocker
from agent.multicluster.worker_proof import (
    Access,
    WorkerProof,
    accesses,
    all_proven,
    listed_checks,
    proof_problems,
    worker_lines,
)
from agent.multicluster.worker_reads import CONTACT_RULES, WORKER_RULES
from agent.multicluster.workers import WorkerPlan
from contract.keys import ADMISSION_CHECK_CONTROLLER, CONTACT_HOLDER, LEASE_MANAGER_CONTACT
from contract.multicluster import MULTIKUEUE_CONTROLLER
from contract.prologue import PROLOGUE_CONFIGMAP

NS, QUEUE, CQ = "team-a", "train", "worker-cq"
NOW = dt.datetime(2026, 12, 5, 9, 0, 0, tzinfo=dt.UTC)


def admission_check(name: str, controller: str = ADMISSION_CHECK_CONTROLLER, active: str | None = "True") -> Any:
    ac: dict[str, Any] = {"metadata": {"name": name}, "spec": {"controllerName": controller}}
    if active is not None:
        ac["status"] = {"conditions": [{"type": "Active", "status": active}]}
    return ac


def proof(**kw: Any) -> WorkerProof:
    base: dict[str, Any] = {
        "localqueue": {"metadata": {"name": QUEUE}, "spec": {"clusterQueue": CQ}},
        "clusterqueue": {
            "metadata": {"name": CQ},
            "spec": {"admissionChecksStrategy": {"admissionChecks": [{"name": "dispatch"}]}},
        },
        "checks": {"dispatch": admission_check("dispatch")},
        "contact": contact_lease_at(NOW - dt.timedelta(seconds=10)),
    }
    return WorkerProof(**(base | kw))


def contact_lease_at(renewed: dt.datetime, duration: int = 60) -> dict[str, Any]:
    return {"metadata": {"name": LEASE_MANAGER_CONTACT}, "spec": {
        "holderIdentity": CONTACT_HOLDER, "leaseDurationSeconds": duration, "leaseTransitions": 0,
        "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}}  # fmt: skip


def test_a_worker_the_manager_agent_is_not_in_contact_with_is_not_proven() -> None:
    # No copy starts on a worker that sees no renewal of the contact Lease (agent/multicluster/contact.py).
    (absent,) = proof_problems(NS, QUEUE, proof(contact=None), NOW)
    assert absent.startswith(f"the manager agent's contact Lease {LEASE_MANAGER_CONTACT} there is not there")
    (old,) = proof_problems(NS, QUEUE, proof(contact=contact_lease_at(NOW - dt.timedelta(seconds=61))), NOW)
    assert "was last renewed at" in old
    assert "longer ago than its duration (60 s)" in old
    assert proof_problems(NS, QUEUE, proof(contact=contact_lease_at(NOW - dt.timedelta(seconds=59))), NOW) == []
    someone_else = contact_lease_at(NOW)
    someone_else["spec"]["holderIdentity"] = "someone-else"
    assert "is not there" in proof_problems(NS, QUEUE, proof(contact=someone_else), NOW)[0]


def test_every_proven_worker_and_nothing_else_proves_the_queue() -> None:
    plan = WorkerPlan(read=("w1", "w2"), fenced=(), blockers=())
    assert all_proven(plan, {"w1": [], "w2": []})
    assert not all_proven(plan, {"w1": [], "w2": ["a"]})
    assert not all_proven(WorkerPlan(read=(), fenced=(), blockers=()), {})  # no worker at all
    assert not all_proven(WorkerPlan(read=("w1",), fenced=("w2",), blockers=()), {"w1": []})
    blocked = WorkerPlan(read=("w1",), fenced=(), blockers=(Blocker("", "no credential", "w2"),))
    assert not all_proven(blocked, {"w1": []})


def test_a_worker_with_the_queue_and_dispatch_s_active_check_and_every_right_is_proven() -> None:
    assert proof_problems(NS, QUEUE, proof(), NOW) == []


def test_each_missing_piece_is_named() -> None:
    assert proof_problems(NS, QUEUE, proof(localqueue=None, clusterqueue=None, checks={}), NOW) == [
        f"no LocalQueue {NS}/{QUEUE} (MultiKueue creates the job's Workload in it)"
    ]
    (gone,) = proof_problems(NS, QUEUE, proof(clusterqueue=None, checks={}), NOW)
    assert f"names ClusterQueue {CQ}, which is not found" in gone
    (none,) = proof_problems(NS, QUEUE, proof(checks={"other": admission_check("other", "example.com/other")}), NOW)
    assert f"ClusterQueue {CQ} lists no AdmissionCheck of controller {ADMISSION_CHECK_CONTROLLER}" in none
    (inactive,) = proof_problems(NS, QUEUE, proof(checks={"dispatch": admission_check("dispatch", active=None)}), NOW)
    assert "dispatch's AdmissionCheck dispatch on ClusterQueue worker-cq is not Active" in inactive
    nested = proof_problems(NS, QUEUE, proof(checks={"dispatch": admission_check("dispatch"),
                                                     "mk": admission_check("mk", MULTIKUEUE_CONTROLLER)}), NOW)  # fmt: skip
    assert nested == [f"ClusterQueue {CQ} lists the MultiKueue check mk: a worker dispatches no further"]
    missing = proof_problems(NS, QUEUE, proof(checks={"dispatch": admission_check("dispatch"), "lost": None}), NOW)
    assert missing == [f"ClusterQueue {CQ} lists AdmissionCheck(s) not found: lost"]


def test_a_right_the_credential_lacks_is_named_with_the_api_server_s_reason() -> None:
    denied = (Access("", "pods", "list", NS), "no RBAC policy matched")
    assert proof_problems(NS, QUEUE, proof(denied=[denied]), NOW) == [
        f"the manager agent's credential may not list pods in {NS} (no RBAC policy matched)"
    ]


def test_a_queue_the_credential_may_not_read_is_reported_unread_not_missing() -> None:
    denied = (Access("kueue.x-k8s.io", "localqueues", "get", NS), "no RBAC policy matched")
    unread = WorkerProof(None, None, {}, [denied], unread="HTTP 403 Forbidden: localqueues is forbidden")
    assert proof_problems(NS, QUEUE, unread, NOW) == [
        f"the manager agent's credential may not get localqueues.kueue.x-k8s.io in {NS} (no RBAC policy matched)",
        "its queue could not be read: HTTP 403 Forbidden: localqueues is forbidden",
    ]


def test_every_right_of_the_worker_rules_is_asked_scoped_as_the_gate_uses_it() -> None:
    asked = {(a.group, a.resource, a.verb, a.namespace, a.name) for a in accesses(WORKER_RULES, NS)}
    assert ("", "pods", "list", NS, None) in asked
    assert ("", "nodes", "get", None, None) in asked  # cluster-scoped
    assert ("trainer.kubeflow.org", "trainingruntimes", "list", None, None) in asked  # the sweep: every namespace
    assert ("trainer.kubeflow.org", "trainingruntimes", "create", NS, None) in asked
    assert ("", "configmaps", "get", NS, PROLOGUE_CONFIGMAP) in asked
    assert ("kueue.x-k8s.io", "localqueues", "get", NS, None) in asked
    assert ("kueue.x-k8s.io", "clusterqueues", "get", None, None) in asked
    every = sum(len(r.get("apiGroups") or [""]) * len(r["resources"]) * len(r["verbs"]) for r in WORKER_RULES)
    assert len(asked) == every
    contact = {(a.resource, a.verb, a.namespace, a.name) for a in accesses(CONTACT_RULES, "dispatch-system")}
    assert contact == {
        ("leases", verb, "dispatch-system", None) for verb in ("get", "list", "create", "update", "delete")
    }
    assert Access("", "configmaps", "get", NS, "x").attributes() == {
        "group": "", "resource": "configmaps", "verb": "get", "namespace": NS, "name": "x"}  # fmt: skip
    assert Access("", "pods/log", "get", NS).attributes() == {
        "group": "", "resource": "pods", "subresource": "log", "verb": "get", "namespace": NS}  # fmt: skip
    assert Access("", "nodes", "get").describe() == "get nodes"
    assert Access("trainer.kubeflow.org", "trainingruntimes", "list").describe() == (
        "list trainingruntimes.trainer.kubeflow.org in every namespace"
    )


def test_the_checks_a_clusterqueue_lists_in_either_field() -> None:
    assert listed_checks({"spec": {"admissionChecks": ["a"], "admissionChecksStrategy": {"admissionChecks": [
        {"name": "b"}, {"name": "a"}]}}}) == ["b", "a"]  # fmt: skip
    assert listed_checks(None) == []


def test_one_line_per_worker() -> None:
    plan = WorkerPlan(read=("w1", "w2"), fenced=("w3",),
                      blockers=(Blocker("", "the agent has no credential to read it (workerKubeconfigs)", "w4"),
                                Blocker("", "the MultiKueue check mk names no MultiKueueConfig", "")))  # fmt: skip
    assert worker_lines(plan, {"w1": [], "w2": ["a", "b"]}) == [
        "w4: the agent has no credential to read it (workerKubeconfigs)",
        "the MultiKueue check mk names no MultiKueueConfig",
        "w3: fenced (not read, not proven)",
        "w1: proven",
        "w2: a; b",
    ]
