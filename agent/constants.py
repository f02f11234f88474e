"""The agent's own names and numbers, in one place (as Kueue's check controllers keep theirs in constants.go).

The spec's names (keys, field manager, controller name, the Lease's default) are contract.keys; these are
the ones only the agent uses: API coordinates, Event reasons, the Active condition, timings.
"""

from __future__ import annotations

from typing import Final

from contract import upstream

# -- API coordinates: plurals, as kubernetes_asyncio's calls take them (contract/upstream.py names them) -----
WORKLOADS: Final = upstream.WORKLOADS.plural
ADMISSION_CHECKS: Final = upstream.ADMISSION_CHECKS.plural
MULTIKUEUE_CONFIGS: Final = upstream.MULTIKUEUE_CONFIGS.plural
MULTIKUEUE_CLUSTERS: Final = upstream.MULTIKUEUE_CLUSTERS.plural
LOCAL_QUEUES: Final = upstream.LOCAL_QUEUES.plural
CLUSTER_QUEUES: Final = upstream.CLUSTER_QUEUES.plural
TRAINJOBS: Final = upstream.TRAINJOBS.plural
TRAINING_RUNTIMES: Final = upstream.TRAINING_RUNTIMES.plural
JOBSETS: Final = upstream.JOBSETS.plural

# -- Events on the TrainJob -----------------------------------------------------------------------
EVENT_COMPONENT: Final = "dispatch-admission"
"""``source.component`` (and ``reportingComponent``) of the agent's Events: cmd/dispatch-admission's name."""
REASON_HELD: Final = "ReadmissionHeld"
"""The check stays Pending; the message says why (e.g. the pods that may still run)."""
REASON_FOREIGN: Final = "Foreign"
"""A reset of the execution identity was detected; the message is the spec's wording."""
REASON_QUOTA_KEPT: Final = "QuotaKept"
"""On a MultiKueue manager: Kueue evicted the job but keeps its quota for the active Jobs MultiKueue copied from a
worker, and dispatch cannot release it yet (agent/multicluster/lost_quota.py)."""
REASON_QUOTA_RELEASED: Final = "QuotaReleased"
"""On a MultiKueue manager: dispatch cleared those copied active counts, so that Kueue releases the quota."""
REASON_COPY_UNVERIFIED: Final = "CopyUnverified"
"""On a MultiKueue worker: MultiKueue's copy stays marked unverified and does not start
(agent/multicluster/copies.py)."""
REASON_STALE_COPY: Final = "StaleCopyDeleted"
"""On a MultiKueue worker: MultiKueue's copy carried an A other than its dispatch's stamp, and was deleted."""
REASON_OUT_OF_CONTACT: Final = "CopyDeletedOutOfContact"
"""On a MultiKueue worker: a copy dispatch's agent let start outlived a loss of contact with the manager, and was
deleted (agent/multicluster/contact.py)."""
REASON_UNCLAIMED: Final = "CopyDeletedUnclaimed"
"""On a MultiKueue worker: a copy ran, or waited to start, without a live claim of the manager's for it, and was
deleted (agent/multicluster/contact.py, contract/claims.py)."""
EVENT_MESSAGE_MAX: Final = 1024
"""Bytes; events.k8s.io limits a note to 1 kB. The check's message carries the full text."""

# -- The AdmissionCheck's Active condition --------------------------------------------------------
CONDITION_ACTIVE: Final = "Active"
ACTIVE_REASON: Final = "Active"
ACTIVE_MESSAGE: Final = "dispatch's readmission gate is serving"

# -- Leader election (client-go's defaults are 15/10/2; the renew period is the spec's 5 s) -------
LEASE_DURATION_SECONDS: Final = 15
"""How long a Lease is honoured after its last renewal as observed by another replica."""
RENEW_PERIOD_SECONDS: Final = 5.0
"""How often the leader renews."""
RENEW_DEADLINE_SECONDS: Final = 10.0
"""The leader steps down when it has not renewed for this long, before the others may take over."""
RETRY_PERIOD_SECONDS: Final = 2.0
"""How often a standby tries, and a leader retries a failed renewal."""

# -- The work queue and the watches ---------------------------------------------------------------
DEFAULT_WORKERS: Final = 16
"""Passes at once. Concurrent passes share one consistent LIST of pods (agent/runtime/pod_lists.py), so a burst of
readmissions is bound by the API server, not by a per-pass LIST wait (docs/performance.md, issue 13)."""
DEFAULT_HEALTH_PORT: Final = 8081
REQUEST_TIMEOUT_SECONDS: Final = 30.0
"""Every request but a watch; the client's default is no timeout at all."""
WORKER_ROUND_SECONDS: Final = 60.0
CONTACT_SECONDS: Final = 60
"""On a MultiKueue manager: the duration of the contact Lease it renews on each worker (renewed every quarter of
it). A worker that sees no renewal for this long deletes the copies it let start (agent/multicluster/contact.py)."""
CONTACT_ADMIT_FRACTION: Final = 0.75
"""On a MultiKueue worker: the gate admits a copy only while a renewal of the contact Lease was seen within this part
of its duration, a quarter less than the agent keeps a copy it let start: a copy admitted later could not start
before the loss, and a dispatch that follows a copy deleted for want of contact finds this worker admitting nothing
already, so the race with the other workers is not a tie (docs/multicluster.md, "The gate: a copy's first admission
only")."""
CONTACT_POLL_SECONDS: Final = 2.0
"""On a MultiKueue worker: how often the agent reads the contact Lease (a GET of one object)."""
CONTACT_SWEEP_SECONDS: Final = 10.0
"""On a MultiKueue worker out of contact: how often the agent looks for copies to delete again (a LIST of
MultiKueue's TrainJobs): copies MultiKueue made just before the loss are deleted too."""
"""On a MultiKueue manager, how often the leader goes round its workers: it deletes the replicas of runtime copies
whose TrainJob is gone, and releases the quota Kueue keeps for a job evicted from a lost worker."""
