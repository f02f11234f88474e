"""Preflight's proof that every principal the owner policies name is there, run by the component it is named for.

The owner policies (webhook/owners.py) let a component's principals write a dispatch job's objects. A name no
component runs as is free: whoever may create that ServiceAccount (rights in its namespace), or its namespace
(where the namespace does not exist), holds that component's writes, and the real component's own writes would
still pass the probe. So each configured name must be read, never assumed (docs/security.md, "a principal named
but not present"):

* ``system:serviceaccount:<ns>:<name>``: the namespace and the ServiceAccount exist; for a component that runs as a
  Deployment (Kueue, Trainer, JobSet), and for a ServiceAccount outside ``kube-system``, a running pod there runs as
  it. kube-controller-manager's controllers act through tokens it requests for their ServiceAccounts in
  ``kube-system``, with no pod of their own.
* any other username (a certificate's, as ``system:kube-scheduler``) cannot be read from the API; it is taken as
  configured: only whoever holds the cluster's CA, or may approve client certificates, can mint it.
* a group: its members cannot be read, and some groups take in anyone who may create a ServiceAccount
  (``system:serviceaccounts:<ns>``), so a group on a component's role fails.

On a MultiKueue worker two more roles are named (the chart's ``multicluster.multikueue`` and
``multicluster.managerAgent``): the manager's MultiKueue and the manager's dispatch agent, which act here from the
manager with a credential (a kubeconfig there), never from a pod here. So for them:

* a ServiceAccount's namespace and the ServiceAccount must exist (as above), and no pod is asked for;
* a user's name (a certificate's, an identity provider's) cannot be read from the API: it is taken as configured,
  and Preflight says so in its report (``principal_notes``), naming the value key;
* a group fails, as on any role;
* one name in both fails: the manager agent's credential would then be Kueue's, and whoever holds Kueue's
  kubeconfig would also renew the contact Lease and make the replicas (docs/multicluster.md, "Credentials and
  principals").

That the manager's credentials really are the ones named cannot be read here at all (a token or certificate held
on another cluster). On the manager, Preflight's proof of each worker (agent/multicluster/worker_proof.py) asks for a
fresh contact Lease of the manager's origin there, which the worker's policy lets only ``managerAgent`` (and
break-glass) renew: so some principal the worker names ``managerAgent`` renews it for this manager. It does not prove
that the manager's credential is the only one so named, nor which name MultiKueue's kubeconfig holds.

Break-glass (a site's admins) and dispatch (the agent's own ServiceAccount) are not components and not proven here,
nor the kubelets, whose principal Kubernetes defines (``system:node:<name>``, webhook/owners.py).
The decision is pure; agent/api/service/preflight.py reads what ``wanted`` names and passes it in as ``Seen``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from contract.objects import dig

SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
KUBE_SYSTEM: Final = "kube-system"
GUIDE: Final = 'docs/install.md, "Who may write a dispatch job\'s objects"'
REMOTE_GUIDE: Final = 'docs/install.md, "Several clusters"'


class Principals(BaseModel):
    """A role's principals, as the chart's values name them (``webhook.owners.<role>`` and the others)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usernames: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


class OwnerPrincipals(BaseModel):
    """The principals the owner policies name for each component (the chart passes its values here). A role left
    out names nobody."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kueue: Principals = Field(default_factory=Principals)
    controllers: Principals = Field(default_factory=Principals)
    trainer: Principals = Field(default_factory=Principals)
    jobset: Principals = Field(default_factory=Principals)
    job_controller: Principals = Field(default_factory=Principals, alias="jobController")
    garbage_collector: Principals = Field(default_factory=Principals, alias="garbageCollector")
    pod_garbage_collector: Principals = Field(default_factory=Principals, alias="podGarbageCollector")
    node_lifecycle: Principals = Field(default_factory=Principals, alias="nodeLifecycle")
    scheduler: Principals = Field(default_factory=Principals)
    multikueue: Principals = Field(default_factory=Principals)
    """Role worker only: the manager's MultiKueue here (the chart's multicluster.multikueue)."""
    manager_agent: Principals = Field(default_factory=Principals, alias="managerAgent")
    """Role worker only: the manager's dispatch agent here (the chart's multicluster.managerAgent)."""


ROLES: Final = {
    # field: (the chart's value key, whose principals)
    "kueue": ("webhook.kueue", "Kueue"),
    "controllers": ("webhook.controllers", "the controllers that may delete a dispatch job's JobSet"),
    "trainer": ("webhook.owners.trainer", "Trainer"),
    "jobset": ("webhook.owners.jobset", "JobSet"),
    "job_controller": ("webhook.owners.jobController", "the Job controller"),
    "garbage_collector": ("webhook.owners.garbageCollector", "the garbage collector"),
    "pod_garbage_collector": ("webhook.owners.podGarbageCollector", "the pod garbage collector"),
    "node_lifecycle": ("webhook.owners.nodeLifecycle", "the node lifecycle controllers"),
    "scheduler": ("webhook.owners.scheduler", "the scheduler"),
    "multikueue": ("multicluster.multikueue", "the manager's MultiKueue"),
    "manager_agent": ("multicluster.managerAgent", "the manager's dispatch agent"),
}
DEPLOYED: Final = frozenset({"kueue", "trainer", "jobset"})
"""Components that run as Deployments: their ServiceAccount must be a running pod's."""
REMOTE: Final = frozenset({"multikueue", "manager_agent"})
"""A MultiKueue worker's principals that act from the manager with a credential: no pod here runs as them."""


def service_account(username: str) -> tuple[str, str] | None:
    """(namespace, name) of a ServiceAccount's username, or None for any other username."""
    if not username.startswith(SERVICE_ACCOUNT_PREFIX):
        return None
    namespace, colon, name = username.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    return (namespace, name) if colon and namespace and name and ":" not in name else None


def _needs_pod(role: str, namespace: str) -> bool:
    return role not in REMOTE and (role in DEPLOYED or namespace != KUBE_SYSTEM)


@dataclass(frozen=True)
class Wanted:
    """What Preflight must read to decide: namespaces, ServiceAccounts (namespace, name), and the namespaces whose
    running pods' ServiceAccounts it must list."""

    namespaces: frozenset[str]
    service_accounts: frozenset[tuple[str, str]]
    pod_namespaces: frozenset[str]


def _roles(owners: OwnerPrincipals) -> Iterable[tuple[str, Principals]]:
    return ((role, getattr(owners, role)) for role in ROLES)


def wanted(owners: OwnerPrincipals) -> Wanted:
    accounts = {(role, sa) for role, p in _roles(owners) for u in p.usernames if (sa := service_account(u)) is not None}
    return Wanted(
        namespaces=frozenset(ns for _, (ns, _) in accounts),
        service_accounts=frozenset(sa for _, sa in accounts),
        pod_namespaces=frozenset(ns for role, (ns, _) in accounts if _needs_pod(role, ns)),
    )


@dataclass(frozen=True)
class Seen:
    """What Preflight read: the namespaces and ServiceAccounts of ``Wanted`` that exist, and (namespace,
    serviceAccountName) of every running pod (phase Running, not being deleted) in its pod namespaces."""

    namespaces: frozenset[str]
    service_accounts: frozenset[tuple[str, str]]
    running: frozenset[tuple[str, str]]


def running_as(pods: Iterable[Mapping[str, Any]]) -> frozenset[tuple[str, str]]:
    """(namespace, serviceAccountName) of the pods that run: phase Running and not being deleted."""
    return frozenset(
        (str(dig(pod, "metadata", "namespace")), str(dig(pod, "spec", "serviceAccountName") or "default"))
        for pod in pods
        if dig(pod, "status", "phase") == "Running" and not dig(pod, "metadata", "deletionTimestamp")
    )


def principal_problems(owners: OwnerPrincipals, seen: Seen) -> list[str]:
    """Each configured principal Preflight cannot prove is the component's, naming the value key and what to set."""
    problems: list[str] = []
    for role, principals in _roles(owners):
        key, whose = ROLES[role]
        fix = (
            f"set {key}.usernames to the user of {whose}'s credential for this cluster ({REMOTE_GUIDE})"
            if role in REMOTE
            else f"set {key}.usernames to the ServiceAccount {whose} runs as on this cluster ({GUIDE})"
        )
        for username in principals.usernames:
            sa = service_account(username)
            if sa is None:
                continue  # a certificate's user: not readable, and not creatable by a namespace's users
            namespace, name = sa
            if namespace not in seen.namespaces:
                why = f"namespace {namespace} does not exist, so whoever may create namespaces could take the name"
            elif sa not in seen.service_accounts:
                why = (
                    f"ServiceAccount {namespace}/{name} does not exist, so whoever may create ServiceAccounts in "
                    f"{namespace} could take the name"
                )
            elif _needs_pod(role, namespace) and sa not in seen.running:
                why = f"no running pod in {namespace} runs as ServiceAccount {name}, so it is not {whose}'s"
            else:
                continue
            problems.append(f"{key}.usernames names {username}, but {why}: {fix}")
        problems += [
            f"{key}.groups names group {group}, whose members cannot be read from the API, so that only {whose} is "
            f"in it cannot be proven: name its {'user' if role in REMOTE else 'ServiceAccount'} in {key}.usernames "
            f"instead ({REMOTE_GUIDE if role in REMOTE else GUIDE})"
            for group in principals.groups
        ]
    shared = sorted(set(owners.multikueue.usernames) & set(owners.manager_agent.usernames))
    problems += [
        f"multicluster.multikueue.usernames and multicluster.managerAgent.usernames both name {username}: the "
        "manager agent's credential here must not be Kueue's, or whoever holds Kueue's kubeconfig for this worker "
        "also renews the contact Lease and makes the replicas; give the manager's agent a credential of its own "
        f"({REMOTE_GUIDE})"
        for username in shared
    ]
    return problems


def principal_notes(owners: OwnerPrincipals) -> list[str]:
    """What Preflight takes as configured on a MultiKueue worker, said in its report rather than passed over: each
    user's name (not a ServiceAccount's) that ``multicluster.multikueue`` or ``multicluster.managerAgent`` names,
    which no read of the API can show to be the manager's."""
    notes = []
    for role in sorted(REMOTE):
        key, whose = ROLES[role]
        notes += [
            f"{key}.usernames names the user {username}, whose name cannot be read from the API: that only "
            f"{whose} presents it is taken as configured (whoever holds this cluster's CA, may approve client "
            "certificates, or runs its identity provider could present it too)"
            for username in getattr(owners, role).usernames
            if service_account(username) is None
        ]
    return notes
