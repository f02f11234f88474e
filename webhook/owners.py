"""Default deny by principal: every object of a dispatch job is written only by the parties that own it.

A dispatch job's objects are its TrainJob, its runtime copy, its JobSet, the JobSet's Jobs, their pods, its
Workload, and the prologue's ConfigMap its pods mount (shared by the namespace's dispatch jobs). For each kind,
``OWNERS`` names every write (an operation on the object or on one of its subresources) and the roles that may
make it; every other write, by anyone, is refused, whatever field it touches. This is the perimeter; the field
rules of docs/webhook.md and the other policies then say what each owner may change. Kubernetes'
NodeRestriction is the model: a principal writes only what is its own.

Belonging is judged on the old and the new object (``belongs``), by names, labels, owner references and
dispatch's finalizer, so a write cannot escape the rule by removing the marks in the same write, and a create
that claims to belong is refused unless its principal is the kind's creator.

The table is data: ``webhook.rules.owners`` renders it as one ValidatingAdmissionPolicy per kind (the API server
enforces it in-process, with or without the webhook), and charts/generate.py writes docs/security.md's allowlist
from it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from contract import upstream
from contract.keys import (
    KIND_TRAINJOB,
    LABEL_JOBSET_NAME,
    LABEL_REPLICA_OF,
    POD_FINALIZER,
    PREFIX,
    PROLOGUE_CONFIGMAP_PREFIX,
    RUNTIME_PATCH_MANAGER,
)
from contract.multicluster import MULTIKUEUE_MANAGED_BY
from webhook.cel import is_multikueue_copy, mentions_gate, q

BELONGS: Final = "belongs to a dispatch job"
"""In every refusal of an owner policy (dispatch-webhook selftest recognises it)."""

# -- Roles -----------------------------------------------------------------------------------------
DISPATCH: Final = "dispatch"
KUEUE: Final = "kueue"
TRAINER: Final = "trainer"
JOBSET: Final = "jobset"
JOB_CONTROLLER: Final = "jobController"
GARBAGE_COLLECTOR: Final = "garbageCollector"
POD_GARBAGE_COLLECTOR: Final = "podGarbageCollector"
NODE_LIFECYCLE: Final = "nodeLifecycle"
SCHEDULER: Final = "scheduler"
KUBELET: Final = "kubelet"
BREAK_GLASS: Final = "breakGlass"
EVERYONE: Final = "everyone"
MULTIKUEUE: Final = "multikueue"
"""The manager's MultiKueue on a worker (the user of its MultiKueueCluster's kubeconfig): a principal only in
role worker, and there only on the copies it made, the objects carrying its origin label (``ONLY_ON``)."""
MULTIKUEUE_STATUS: Final = "multikueueStatus"
"""Kueue's MultiKueue on a manager, as Kueue's own principals: it copies the worker's TrainJob status to the
manager's TrainJob, and only on the TrainJobs it manages (``ONLY_ON``: ``spec.managedBy`` is MultiKueue's, on the
old and the new object; Trainer's CRD makes the field immutable). ``managedBy`` is upstream's word for who owns a
job's status."""

DISPATCH_STATUS: Final = "dispatchStatus"
"""dispatch's agent on a manager, as dispatch's own principals: it clears the active Jobs MultiKueue copied into a
TrainJob's status from a lost worker, once no execution may run on any worker, so that Kueue releases the quota of
the evicted job (docs/multicluster.md, "A lost worker's quota"); only on the TrainJobs MultiKueue manages
(``ONLY_ON``, as ``MULTIKUEUE_STATUS``)."""

MANAGER_AGENT: Final = "managerAgent"
"""The manager's dispatch agent on a worker (the user of its credential there, ``multicluster.managerAgent``): a
principal only in role worker, and there only on the replicas of runtime copies it makes (``LABEL_REPLICA_OF``)
and the prologue's ConfigMap (docs/multicluster.md, "The runtime copy on the workers")."""

ROLE_TITLES: Final = {
    DISPATCH: "dispatch",
    KUEUE: "Kueue",
    TRAINER: "Trainer",
    JOBSET: "JobSet",
    JOB_CONTROLLER: "the Job controller",
    GARBAGE_COLLECTOR: "the garbage collector",
    POD_GARBAGE_COLLECTOR: "the pod garbage collector",
    NODE_LIFECYCLE: "the node lifecycle controllers",
    SCHEDULER: "the scheduler",
    KUBELET: "the kubelet of the pod's node",
    BREAK_GLASS: "break-glass",
    EVERYONE: "anyone",
    MULTIKUEUE: "MultiKueue (on a worker, its copies)",
    MULTIKUEUE_STATUS: "Kueue's MultiKueue (the TrainJobs it manages)",
    DISPATCH_STATUS: "dispatch (the TrainJobs MultiKueue manages)",
    MANAGER_AGENT: "the manager's dispatch agent (on a worker: its replicas, the prologue's ConfigMap)",
}

# The principals of the roles other than dispatch and Kueue (webhook.config's own): one per component, as one
# upstream install runs it, never an alternative. A cluster runs each component under one name; every other name
# named here would be free for whoever may create that ServiceAccount (or its namespace), and would hold the
# component's writes (docs/security.md, "a principal named but not present"). kube-controller-manager's
# controllers as kubeadm runs them (--use-service-account-credentials: each under its own ServiceAccount).
KCM: Final = "system:kube-controller-manager"
"""kube-controller-manager's own user, which every controller acts as without --use-service-account-credentials:
never a default (docs/install.md says when to set it)."""


def _kcm(*controllers: str) -> tuple[str, ...]:
    return tuple(f"system:serviceaccount:kube-system:{c}" for c in controllers)


DEFAULT_USERNAMES: Final = {
    TRAINER: ("system:serviceaccount:kubeflow-system:kubeflow-trainer-controller-manager",),
    # JobSet's standalone manifests (Trainer's install it in kubeflow-system instead: docs/install.md).
    JOBSET: ("system:serviceaccount:jobset-system:jobset-controller-manager",),
    JOB_CONTROLLER: _kcm("job-controller"),
    # The namespace controller and the TTL-after-finished controller delete too: a namespace's deletion, a
    # finished Job's TTL.
    GARBAGE_COLLECTOR: _kcm("generic-garbage-collector", "namespace-controller", "ttl-after-finished-controller"),
    POD_GARBAGE_COLLECTOR: _kcm("pod-garbage-collector"),
    # The node lifecycle controller marks a lost node's pods not ready, and its taint-eviction controller (under
    # the same ServiceAccount) adds the DisruptionTarget condition before it deletes them; the disruption
    # controller resets a stale DisruptionTarget.
    NODE_LIFECYCLE: _kcm("node-controller", "disruption-controller"),
    SCHEDULER: ("system:kube-scheduler",),
    BREAK_GLASS: (),
}
DEFAULT_GROUPS: Final = {role: () for role in DEFAULT_USERNAMES}
"""No role is a group by default: a group says nothing of which objects its members' writes are about, and a site
may add anyone to one (system:nodes holds any node credential, whatever its name)."""

POD_DEPENDENT_MAKERS: Final = _kcm("ephemeral-volume-controller", "resource-claim-controller")
"""kube-controller-manager's controllers that make a pod's dependents, beside the Job controller: the PVC of a
generic ephemeral volume and the ResourceClaim of a claim template, each with a blocking owner reference to the pod
(webhook/dependents.py)."""

NODE_USER_PREFIX: Final = "system:node:"
"""A node's user is ``system:node:<its name>``, as Kubernetes' node authorizer and NodeRestriction know it."""
KUBERNETES_PRINCIPALS: Final = {KUBELET: f"request.userInfo.username.startsWith({json.dumps(NODE_USER_PREFIX)})"}
"""Roles whose principals Kubernetes defines, not a site (CEL over the request; webhook.config has no value for
them): a kubelet is a node's user, and only its own node's (``ONLY_ON``)."""


def _managed_by_multikueue(o: str) -> str:
    return f"{o}.?spec.?managedBy.orValue('') == {q(MULTIKUEUE_MANAGED_BY)}"


def _replica_or_prologue(o: str) -> str:
    return (
        f"{o}.metadata.?labels[?{q(LABEL_REPLICA_OF)}].orValue('') != '' || "
        f"{o}.metadata.?name.orValue('').startsWith({q(PROLOGUE_CONFIGMAP_PREFIX)})"
    )


def _on_its_node(o: str) -> str:
    # Equal to the user's whole name, so no name but system:node:<nodeName> passes; an unbound pod is nobody's.
    node = f"{o}.?spec.?nodeName.orValue('')"
    return f"{node} != '' && request.userInfo.username == {q(NODE_USER_PREFIX)} + {node}"


ONLY_ON: Final[dict[str, Callable[[str], str]]] = {
    KUBELET: _on_its_node,
    MULTIKUEUE: is_multikueue_copy,
    MULTIKUEUE_STATUS: _managed_by_multikueue,
    DISPATCH_STATUS: _managed_by_multikueue,
    MANAGER_AGENT: _replica_or_prologue,
}
"""Roles that own their writes only on some of a kind's objects: CEL over the object named, which must hold of
the object and of its old version (a kubelet's pods are bound to its node, which a binding sets once and nothing
changes after; MultiKueue's copies on a worker carry its origin label from their creation;
dispatch's own objects never do; a TrainJob's managedBy never changes; the manager agent's replicas carry
``LABEL_REPLICA_OF`` from their creation and are never updated)."""


# -- What each kind's owners may write ---------------------------------------------------------------
Write = tuple[str, str]
"""(operation, subresource): ``("UPDATE", "status")``; ``""`` is the object itself."""


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    resource: str
    writes: dict[Write, tuple[str, ...]]
    """Each write allowed on a dispatch job's object of this kind, and who may make it. Anything else is
    refused to everyone but break-glass."""
    belongs: Callable[[str], str]
    """CEL over the object named (``object`` or ``oldObject``, never null): it is, or claims to be, a dispatch
    job's."""
    parent: tuple[str, str] | None = None
    """(kind, name pattern) of the controller every created object of this kind that belongs must have: only a
    dispatch job's own children carry dispatch's finalizer and keys."""


# A superset of dispatch's TrainJob names (dj-<ULID>-s<N>; the webhook parses exactly): the JobSet is named as
# its TrainJob, its Jobs and their pods start with that name and a dash.
NAME_PATTERN: Final = "^dj-[0-9a-z]{26}-s[0-9]+$"
CHILD_NAME_PATTERN: Final = "^dj-[0-9a-z]{26}-s[0-9]+-"
# Kueue names a TrainJob's Workload trainjob-<name>-<hash>.
WORKLOAD_NAME_PATTERN: Final = "^trainjob-dj-[0-9a-z]{26}-s[0-9]+-"


def _named(o: str, pattern: str = NAME_PATTERN) -> str:
    return f"{o}.metadata.?name.orValue('').matches({q(pattern)})"


def _meta(o: str, where: str) -> str:
    """``o``'s metadata, or its pod template's (``where="spec.template.metadata"``), as an optional chain."""
    return o + "".join(f".?{part}" for part in where.split("."))


def _keys(o: str, where: str = "metadata") -> str:
    """Labels or annotations under dispatch.phpboyscout.uk/."""
    m = _meta(o, where)
    return (
        f"{m}.?labels.orValue({{}}).exists(k, k.startsWith({q(PREFIX)})) || "
        f"{m}.?annotations.orValue({{}}).exists(k, k.startsWith({q(PREFIX)}))"
    )


def _owner(o: str, kind: str, pattern: str) -> str:
    return (
        f"{o}.metadata.?ownerReferences.orValue([]).exists(r, r.?kind.orValue('') == {q(kind)} && "
        f"r.?name.orValue('').matches({q(pattern)}))"
    )


def _finalized(o: str, where: str = "metadata") -> str:
    return f"{q(POD_FINALIZER)} in {_meta(o, where)}.?finalizers.orValue([])"


def _jobset_label(o: str, where: str = "metadata") -> str:
    return f"{_meta(o, where)}.?labels[?{q(LABEL_JOBSET_NAME)}].orValue('').matches({q(NAME_PATTERN)})"


def _dispatch_patch(o: str) -> str:
    return f"{o}.?spec.?runtimePatches.orValue([]).exists(p, p.?manager.orValue('') == {q(RUNTIME_PATCH_MANAGER)})"


def _any(*parts: str) -> str:
    return " || ".join(f"({p})" for p in parts)


_POD_TEMPLATE = "spec.template.metadata"
"""A Job's pod template's metadata, as a path under the object."""

TRAINJOBS: Final = Kind(
    KIND_TRAINJOB,
    upstream.TRAINJOBS.group,
    upstream.TRAINJOBS.plural,
    {
        # MultiKueue creates the remote TrainJob on a worker, a copy of the manager's, and deletes it.
        ("CREATE", ""): (DISPATCH, MULTIKUEUE),
        # Kueue suspends, unsuspends and fills its runtime-patch entry; the garbage collector removes the
        # finalizers of a foreground or orphaning delete. Trainer writes the status only, and on a MultiKueue
        # manager Kueue copies it from the worker's TrainJob to the one it manages, and dispatch clears the active
        # Jobs a lost worker's copy left there.
        ("UPDATE", ""): (DISPATCH, KUEUE, GARBAGE_COLLECTOR),
        ("UPDATE", "status"): (TRAINER, MULTIKUEUE_STATUS, DISPATCH_STATUS),
        # Kueue too, where a site sets its workloadRetentionPolicy: a deleted TrainJob leaves its pods, held
        # by dispatch's finalizer until their processes are proven gone.
        ("DELETE", ""): (DISPATCH, KUEUE, GARBAGE_COLLECTOR, MULTIKUEUE),
    },
    lambda o: _any(_named(o), _dispatch_patch(o), _keys(o), mentions_gate(o)),
)
RUNTIME_COPIES: Final = Kind(
    "TrainingRuntime",
    upstream.TRAINING_RUNTIMES.group,
    upstream.TRAINING_RUNTIMES.plural,
    {
        # On a worker, the manager's agent makes the replica of the manager's copy before a dispatch, and
        # deletes it once the manager's TrainJob is gone.
        ("CREATE", ""): (DISPATCH, MANAGER_AGENT),
        # dispatch ties it to its TrainJob (an owner reference, once the TrainJob exists); Trainer's finalizer
        # trainer.kubeflow.org/resource-in-use while a TrainJob refers to it.
        ("UPDATE", ""): (DISPATCH, TRAINER, GARBAGE_COLLECTOR),
        ("DELETE", ""): (DISPATCH, GARBAGE_COLLECTOR, MANAGER_AGENT),
    },
    lambda o: _any(_named(o), _keys(o)),
)
WORKLOADS: Final = Kind(
    "Workload",
    upstream.WORKLOADS.group,
    upstream.WORKLOADS.plural,
    {
        # MultiKueue creates the remote Workload on a worker and deletes it, removing Kueue's resource-in-use
        # finalizer first (an UPDATE); it updates its priority as the manager's changes, and opens its
        # preemption gate (status). The reserved-keys and workloads policies still bind it there.
        ("CREATE", ""): (KUEUE, MULTIKUEUE),
        ("UPDATE", ""): (KUEUE, DISPATCH, GARBAGE_COLLECTOR, MULTIKUEUE),
        ("UPDATE", "status"): (KUEUE, DISPATCH, MULTIKUEUE),
        ("DELETE", ""): (KUEUE, GARBAGE_COLLECTOR, MULTIKUEUE),
    },
    # Kueue names a TrainJob's Workload trainjob-<name>-<hash>, with a controller reference to it.
    lambda o: _any(
        _owner(o, KIND_TRAINJOB, NAME_PATTERN),
        _named(o, WORKLOAD_NAME_PATTERN),
        _keys(o),
        mentions_gate(o),
    ),
)
JOBSETS: Final = Kind(
    "JobSet",
    upstream.JOBSETS.group,
    upstream.JOBSETS.plural,
    {
        # Trainer applies it (server-side apply) while it or its TrainJob is suspended; Kueue suspends it as a
        # child of the TrainJob it manages.
        ("CREATE", ""): (TRAINER,),
        ("UPDATE", ""): (TRAINER, KUEUE, GARBAGE_COLLECTOR),
        ("UPDATE", "status"): (JOBSET,),
        # Trainer at activeDeadlineSeconds, JobSet's TTL, the garbage collector after the TrainJob.
        ("DELETE", ""): (DISPATCH, TRAINER, JOBSET, GARBAGE_COLLECTOR),
    },
    lambda o: _any(_named(o), _owner(o, KIND_TRAINJOB, NAME_PATTERN), _keys(o)),
)
JOBS: Final = Kind(
    "Job",
    upstream.JOBS.group,
    upstream.JOBS.plural,
    {
        # JobSet suspends and resumes them (clearing a resumed Job's status.startTime); Kueue suspends them as
        # children of the TrainJob it manages.
        ("CREATE", ""): (JOBSET,),
        ("UPDATE", ""): (JOBSET, KUEUE, GARBAGE_COLLECTOR),
        ("UPDATE", "status"): (JOB_CONTROLLER, JOBSET),
        ("DELETE", ""): (JOBSET, GARBAGE_COLLECTOR),
    },
    lambda o: _any(
        _named(o, CHILD_NAME_PATTERN),
        _owner(o, "JobSet", NAME_PATTERN),
        _jobset_label(o),
        _keys(o),
        # A Job whose pods would carry dispatch's finalizer or keys is one of dispatch's, whoever made it.
        _finalized(o, _POD_TEMPLATE),
        _keys(o, _POD_TEMPLATE),
    ),
    parent=("JobSet", NAME_PATTERN),
)
PODS: Final = Kind(
    "Pod",
    upstream.PODS.group,
    upstream.PODS.plural,
    {
        ("CREATE", ""): (JOB_CONTROLLER,),
        # The Job controller removes its tracking finalizer, dispatch its own once the processes are proven
        # gone, the garbage collector owner references.
        ("UPDATE", ""): (JOB_CONTROLLER, DISPATCH, GARBAGE_COLLECTOR),
        # JobSet marks the followers it evicts under exclusive placement.
        ("UPDATE", "status"): (KUBELET, SCHEDULER, NODE_LIFECYCLE, POD_GARBAGE_COLLECTOR, JOBSET),
        ("CREATE", "binding"): (SCHEDULER,),
        # Deleting or evicting a pod never loses evidence: dispatch's finalizer keeps it listed until the
        # processes are proven gone. (The kubelet's final delete, the scheduler's of a preempted pod, ...)
        ("CREATE", "eviction"): (EVERYONE,),
        ("DELETE", ""): (EVERYONE,),
    },
    # A binding carries the pod's name only.
    lambda o: _any(
        _named(o, CHILD_NAME_PATTERN),
        _jobset_label(o),
        _owner(o, "Job", CHILD_NAME_PATTERN),
        _finalized(o),
        _keys(o),
    ),
    parent=("Job", CHILD_NAME_PATTERN),
)
PROLOGUES: Final = Kind(
    "ConfigMap",
    upstream.CONFIG_MAPS.group,
    upstream.CONFIG_MAPS.plural,
    {
        # Start creates it before a namespace's first TrainJob of a prologue version. Nobody updates it (it is
        # immutable, and its labels name it for people only). The namespace controller (a role of the garbage
        # collector) deletes it with its namespace, which is never blocked. On a worker, the manager's agent
        # creates it before a dispatch.
        ("CREATE", ""): (DISPATCH, MANAGER_AGENT),
        ("DELETE", ""): (DISPATCH, GARBAGE_COLLECTOR),
    },
    lambda o: f"{o}.metadata.?name.orValue('').startsWith({q(PROLOGUE_CONFIGMAP_PREFIX)})",
)
"""The prologue's ConfigMap (contract/prologue.py), one per namespace and prologue version: shared by the
namespace's dispatch jobs, so a job's object only in that the runtime patch mounts it. webhook.policies adds to
its policy what it must hold when created, whoever creates it."""
KINDS: Final = (TRAINJOBS, RUNTIME_COPIES, JOBSETS, JOBS, PODS, WORKLOADS, PROLOGUES)


def allowed_roles(kind: Kind, operation: str, subresource: str) -> tuple[str, ...]:
    """Who may make this write on a dispatch job's object of ``kind``: the owners, and break-glass always."""
    return (*kind.writes.get((operation, subresource), ()), BREAK_GLASS)


def write_name(operation: str, subresource: str) -> str:
    return f"{operation} {subresource}" if subresource else operation


_OBJECTS: Final = {
    "trainjobs": "the TrainJob",
    "trainingruntimes": "the runtime copy",
    "jobsets": "the JobSet",
    "jobs": "the JobSet's Jobs",
    "pods": "their pods",
    "workloads": "the Workload",
    "configmaps": "the prologue's ConfigMap",
}


_ELSE_SUB: Final = "ephemeralcontainers, resize, ..."
_ELSE: Final = {"configmaps": "UPDATE, even of its labels"}


def allowlist_table() -> str:
    """docs/security.md's allowlist, from the table the policies are rendered from (charts/generate.py writes it
    there between its markers, and its --check fails when the page differs)."""
    rows = ["| object | write | who may make it |", "|---|---|---|"]
    for kind in KINDS:
        for (operation, subresource), roles in kind.writes.items():
            who = ", ".join(ROLE_TITLES[r] for r in roles)
            rows.append(f"| {_OBJECTS[kind.resource]} | {write_name(operation, subresource)} | {who} |")
        rows.append(f"| {_OBJECTS[kind.resource]} | anything else ({_ELSE.get(kind.resource, _ELSE_SUB)}) | nobody |")
    return "\n".join(rows) + "\n"
