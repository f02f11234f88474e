"""The RBAC the API needs, as data: the agent's own (least) and what a cluster admin grants a supervisor.

The chart renders these; the cluster tests run the agent under exactly ``AGENT_RULES`` and a supervisor
under exactly ``SUPERVISOR_RULES``, so the lists cannot drift from what the code does. docs/api.md shows
them as YAML.
"""

from __future__ import annotations

from typing import Any, Final

from agent.api.auth import API_GROUP, LOG, PREFLIGHTS, TRAINJOBS
from contract.keys import LEASE_NAME
from contract.upstream import (
    ADMISSION_CHECKS,
    BATCH_GROUP,
    CLUSTER_TRAINING_RUNTIMES,
    CONFIG_MAPS,
    COORDINATION_GROUP,
    JOBS,
    JOBSET_GROUP,
    JOBSETS,
    KUEUE_GROUP,
    LEASES,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    NAMESPACES,
    NODES,
    PODS,
    SERVICE_ACCOUNTS,
    SUBJECT_ACCESS_REVIEWS,
    TOKEN_REVIEWS,
    TRAINER_GROUP,
    TRAINING_RUNTIMES,
    WORKLOADS,
)
from contract.upstream import TRAINJOBS as UPSTREAM_TRAINJOBS

Rule = dict[str, Any]

AGENT_RULES: Final[list[Rule]] = [
    # Start creates the copy and the TrainJob, adds the copy's ownerReference (patch), reads them back, and
    # deletes what it refuses; Open/Hold/Release patch the TrainJob; Stop deletes it; Preflight's probe.
    # List: dispatch's TrainJobs in a namespace. Watch: the change feed's streams (agent/api/feed.py) of the
    # TrainJobs, Workloads and AdmissionChecks, in every namespace.
    {
        "apiGroups": [TRAINER_GROUP],
        "resources": [UPSTREAM_TRAINJOBS.plural],
        "verbs": ["get", "list", "watch", "create", "patch", "delete"],
    },
    {
        "apiGroups": [TRAINER_GROUP],
        "resources": [TRAINING_RUNTIMES.plural],
        "verbs": ["get", "create", "patch", "delete"],
    },
    # The prologue's ConfigMap Start makes sure of in the TrainJob's namespace (read, created when missing).
    {"apiGroups": [""], "resources": [CONFIG_MAPS.plural], "verbs": ["get", "create"]},
    # The source runtime Start copies.
    {"apiGroups": [TRAINER_GROUP], "resources": [CLUSTER_TRAINING_RUNTIMES.plural], "verbs": ["get"]},
    # The TrainJob's Workload (found by label, so list); Hold/Release patch it. Dispatch's AdmissionChecks.
    {"apiGroups": [KUEUE_GROUP], "resources": [WORKLOADS.plural], "verbs": ["list", "watch", "patch"]},
    # Hold on a MultiKueue manager sets dispatch's own check Retry (Kueue then evicts through MultiKueue).
    {"apiGroups": [KUEUE_GROUP], "resources": [f"{WORKLOADS.plural}/status"], "verbs": ["patch"]},
    {"apiGroups": [KUEUE_GROUP], "resources": [ADMISSION_CHECKS.plural], "verbs": ["list", "watch"]},
    # Preflight through a MultiKueue queue: the MultiKueueConfigs its MultiKueue checks name and the
    # MultiKueueClusters' fences, which say the workers to prove (agent/multicluster/worker_proof.py).
    {"apiGroups": [KUEUE_GROUP], "resources": [MULTIKUEUE_CONFIGS.plural], "verbs": ["get"]},
    {"apiGroups": [KUEUE_GROUP], "resources": [MULTIKUEUE_CLUSTERS.plural], "verbs": ["list"]},
    # Status; and Preflight, which lists the pods of the namespaces the owners' ServiceAccounts are in.
    {"apiGroups": [JOBSET_GROUP], "resources": [JOBSETS.plural], "verbs": ["get"]},
    {"apiGroups": [""], "resources": [PODS.plural], "verbs": ["list"]},
    # Preflight: each owner's ServiceAccount and its namespace, read, never assumed (agent/api/principals.py).
    {"apiGroups": [""], "resources": [NAMESPACES.plural, SERVICE_ACCOUNTS.plural], "verbs": ["get"]},
    # Each pod's Job, the link to its JobSet (agent/domain/pod_owners.py): a labelled pod is not proof of ownership.
    {"apiGroups": [BATCH_GROUP], "resources": [JOBS.plural], "verbs": ["get"]},
    {"apiGroups": [""], "resources": [NODES.plural], "verbs": ["get"]},
    # Output.
    {"apiGroups": [""], "resources": [f"{PODS.plural}/log"], "verbs": ["get"]},
    # The readmission controller's heartbeat (its Lease, renewed by the agent's leader), read by Preflight and
    # by every call that may let something run (Kueue mode is observe-only while it is stale), and each mode's
    # verdict (observe-only or not) recorded on that Lease by Preflight; created if the controller has not yet.
    # The agent's own Role on its one Lease grants the same (the chart folds these into it).
    {
        "apiGroups": [COORDINATION_GROUP],
        "resources": [LEASES.plural],
        "verbs": ["get", "update"],
        "resourceNames": [LEASE_NAME],
    },
    {"apiGroups": [COORDINATION_GROUP], "resources": [LEASES.plural], "verbs": ["create"]},
    # Every call: who is calling, and may they (the same two rules as system:auth-delegator).
    {"apiGroups": [TOKEN_REVIEWS.group], "resources": [TOKEN_REVIEWS.plural], "verbs": ["create"]},
    {"apiGroups": [SUBJECT_ACCESS_REVIEWS.group], "resources": [SUBJECT_ACCESS_REVIEWS.plural], "verbs": ["create"]},
]
"""A ClusterRole: the agent acts in whichever namespaces its supervisors use. API discovery (``GET /apis``,
for Preflight's versions) is every authenticated user's through the default ``system:discovery``."""

SUPERVISOR_RULES: Final[list[Rule]] = [
    {
        "apiGroups": [API_GROUP],
        "resources": [TRAINJOBS],
        "verbs": ["create", "update", "delete", "get", "list", "watch"],
    },
    {"apiGroups": [API_GROUP], "resources": [f"{TRAINJOBS}/{LOG}"], "verbs": ["get"]},
]
"""A Role in each namespace the supervisor runs jobs in (``resourceNames`` may narrow it further: Start is
checked against the name it will create)."""

PREFLIGHT_RULES: Final[list[Rule]] = [
    {"apiGroups": [API_GROUP], "resources": [PREFLIGHTS], "verbs": ["create", "get"]},
]
"""A ClusterRole: Preflight decides whether the agent is observe-only for everyone."""
