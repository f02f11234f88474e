"""Preflight's proof of each worker on a MultiKueue manager (docs/multicluster.md, "Plumbing"), decided. Pure
functions of the objects as read; agent/multicluster/worker_reads.py ``WorkerClients.prove`` reads them.

A dispatch job queued to a MultiKueue queue runs on whichever worker MultiKueue picks among its
MultiKueueConfig's clusters, so Preflight proves every one the manager's gate would read (agent/multicluster/workers.py
``plan_workers``: a fenced worker is not read, one without a credential is named). A worker is proven when:

- the manager agent's credential for it works and holds every right the agent uses there (``WORKER_RULES``: the
  gate's, Preflight's, Status's and Output's, and ``CONTACT_RULES``, the contact Lease's, in the worker agents'
  Lease namespace; asked one by one with SelfSubjectAccessReviews, so a missing right is named before a dispatch
  needs it), and the contact Lease it renews there was renewed within its duration (agent/multicluster/contact.py: a
  worker out of contact starts no copy);
- it serves the job's LocalQueue (MultiKueue creates the copy's Workload in the queue of the same name there),
  and that queue's ClusterQueue lists dispatch's AdmissionCheck (the worker-side gate, guarantee 3), Active
  (Kueue's Active condition on it says dispatch's agent on the worker serves it), and no MultiKueue check (a
  worker that dispatches again is not a worker).

Kueue's version is not proven through the API (no object states it); docs/install.md states the minimum.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

from agent.domain.admission_check import active_condition, is_ours
from agent.multicluster.contact_lease import contact_epoch, contact_origin
from agent.multicluster.workers import WorkerPlan
from contract.claims import DEFAULT_ORIGIN
from contract.keys import ADMISSION_CHECK_CONTROLLER, LEASE_MANAGER_CONTACT
from contract.multicluster import MULTIKUEUE_CONTROLLER
from contract.objects import dig, parse_rfc3339

CLUSTER_SCOPED: Final = frozenset({"nodes", "clusterqueues", "admissionchecks"})
ALL_NAMESPACES: Final = frozenset({("trainingruntimes", "list")})
"""Rights the gate uses across every namespace: the sweep lists the replicas of every namespace at once."""


@dataclass(frozen=True)
class Access:
    """One right the manager's agent uses on a worker, as a SelfSubjectAccessReview's resourceAttributes."""

    group: str
    resource: str
    verb: str
    namespace: str | None = None
    name: str | None = None

    def describe(self) -> str:
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        if self.namespace:
            scope = f" in {self.namespace}"
        else:
            scope = "" if self.resource in CLUSTER_SCOPED else " in every namespace"
        return f"{self.verb} {what}{f' {self.name}' if self.name else ''}{scope}"

    def attributes(self) -> dict[str, str]:
        resource, _, subresource = self.resource.partition("/")  # RBAC's "pods/log": resource and subresource
        attrs = {"group": self.group, "resource": resource, "verb": self.verb}
        if subresource:
            attrs["subresource"] = subresource
        if self.namespace:
            attrs["namespace"] = self.namespace
        if self.name:
            attrs["name"] = self.name
        return attrs


def accesses(rules: Sequence[Mapping[str, Any]], namespace: str) -> list[Access]:
    """Each (group, resource, verb, name) of ``rules`` (RBAC rules), scoped as the agent uses it for a job in
    ``namespace``."""
    found = []
    for rule in rules:
        for group in rule.get("apiGroups") or [""]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    scoped = resource not in CLUSTER_SCOPED and (resource, verb) not in ALL_NAMESPACES
                    for name in rule.get("resourceNames") or [None]:
                        found.append(Access(group, resource, verb, namespace if scoped else None, name))
    return found


@dataclass(frozen=True)
class WorkerProof:
    """What one worker showed Preflight, as read with the manager agent's credential for it."""

    localqueue: Mapping[str, Any] | None
    """The job's LocalQueue there (None: not found)."""
    clusterqueue: Mapping[str, Any] | None
    """Its ClusterQueue (None: not found, or no LocalQueue)."""
    checks: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)
    """The AdmissionChecks the ClusterQueue lists, by name (None: not found)."""
    denied: Sequence[tuple[Access, str]] = ()
    """The rights the credential lacks there, each with the API server's reason."""
    unread: str | None = None
    """Why the queue's objects could not be read (the API server's refusal), or None: read."""
    contact: Mapping[str, Any] | None = None
    """The contact Lease the manager's agent renews there (None: not found)."""


def listed_checks(clusterqueue: Mapping[str, Any] | None) -> list[str]:
    """The AdmissionChecks a ClusterQueue lists: ``admissionChecksStrategy`` or the older ``admissionChecks``."""
    strategy = dig(clusterqueue, "spec", "admissionChecksStrategy", "admissionChecks") or []
    names = [s.get("name") for s in strategy if isinstance(s, Mapping)]
    names += list(dig(clusterqueue, "spec", "admissionChecks") or [])
    return [n for n in dict.fromkeys(names) if isinstance(n, str)]


def contact_problem(lease: Mapping[str, Any] | None, now: dt.datetime, origin: str = DEFAULT_ORIGIN) -> str | None:
    """Why the manager's agent is not in contact with the worker, judged on the Lease it renews there (by the
    manager's clock, which wrote its renewTime); None: renewed within its duration. A Lease another manager renews
    (another MultiKueue ``origin``) refuses the worker: one worker serves one manager."""
    what = f"the manager agent's contact Lease {LEASE_MANAGER_CONTACT} there"
    if contact_epoch(lease) is None:
        return f"{what} is not there (yet): no copy starts there until it is renewed (agent/multicluster/contact.py)"
    other = contact_origin(lease)
    if other is not None and other != origin:
        return f"{what} is renewed by another manager (MultiKueue origin {other}, this one's is {origin}): {SHARED}"
    renewed = dig(lease, "spec", "renewTime")
    duration = dig(lease, "spec", "leaseDurationSeconds")
    at = parse_rfc3339(renewed)
    if at is None:
        return f"{what} shows no renewal time ({renewed!r})"
    if not isinstance(duration, int) or (now - at).total_seconds() > duration:
        return f"{what} was last renewed at {renewed}, longer ago than its duration ({duration} s): copies there stop"
    return None


SHARED: Final = (
    "a worker shared by two managers is not supported: the claims are kept apart by origin, but the contact epoch and "
    "the sweep of the runtime copies' replicas are one per worker, so each manager's would stop or delete the other's"
)


def proof_problems(
    namespace: str, queue: str, proof: WorkerProof, now: dt.datetime, origin: str = DEFAULT_ORIGIN
) -> list[str]:
    """Why the worker is not proven for a job of ``namespace`` queued to ``queue`` at ``now``; empty: proven."""
    problems = [f"the manager agent's credential may not {a.describe()} ({why})" for a, why in proof.denied]
    if not proof.denied and (trouble := contact_problem(proof.contact, now, origin)):
        problems.append(trouble)
    if proof.unread is not None:
        problems.append(f"its queue could not be read: {proof.unread}")
        return problems
    if proof.localqueue is None:
        problems.append(f"no LocalQueue {namespace}/{queue} (MultiKueue creates the job's Workload in it)")
        return problems
    cq = dig(proof.localqueue, "spec", "clusterQueue")
    if proof.clusterqueue is None:
        problems.append(f"LocalQueue {namespace}/{queue} names ClusterQueue {cq}, which is not found")
        return problems
    ours = [n for n, c in proof.checks.items() if is_ours(c)]
    if not ours:
        problems.append(
            f"ClusterQueue {cq} lists no AdmissionCheck of controller {ADMISSION_CHECK_CONTROLLER}: a copy would "
            "be admitted there without dispatch's worker-side gate"
        )
    for name in ours:
        if (active_condition(proof.checks[name]) or {}).get("status") != "True":
            problems.append(
                f"dispatch's AdmissionCheck {name} on ClusterQueue {cq} is not Active (dispatch's agent on the "
                "worker does not serve it)"
            )
    missing = [n for n, c in proof.checks.items() if c is None]
    if missing:
        problems.append(f"ClusterQueue {cq} lists AdmissionCheck(s) not found: {', '.join(missing)}")
    nested = [n for n, c in proof.checks.items() if dig(c, "spec", "controllerName") == MULTIKUEUE_CONTROLLER]
    if nested:
        listed = ", ".join(nested)
        problems.append(f"ClusterQueue {cq} lists the MultiKueue check {listed}: a worker dispatches no further")
    return problems


def fenced_apart(plan: WorkerPlan) -> WorkerPlan:
    """Preflight's plan: every fenced worker set apart, not proven (the gate still reads one fenced without being
    declared powered off; Preflight does not count a fenced worker as ready for jobs)."""
    fenced = plan.trusted | plan.untrusted
    return replace(plan, read=tuple(w for w in plan.read if w not in fenced),
                   fenced=tuple(sorted({*plan.fenced, *fenced})))  # fmt: skip


def all_proven(plan: WorkerPlan, proven: Mapping[str, Sequence[str]]) -> bool:
    """Every worker the gate would read was read and proven, and none is fenced or unreadable before a read."""
    return bool(proven) and not plan.blockers and not plan.fenced and not any(proven.values())


def worker_lines(plan: WorkerPlan, proven: Mapping[str, Sequence[str]]) -> list[str]:
    """One line per worker for Preflight's report: what holds before any is read (no credential, a config that
    cannot be read), the fenced ones (not proven: an administrator declared them lost), and each one read, with
    its problems (``proven``: by worker, from ``proof_problems`` or why it could not be read) or "proven"."""
    lines = [f"{b.worker}: {b.why}" if b.worker else b.why for b in plan.blockers]
    lines += [f"{w}: fenced (not read, not proven)" for w in plan.fenced]
    lines += [f"{w}: {'; '.join(problems)}" if problems else f"{w}: proven" for w, problems in proven.items()]
    return lines
