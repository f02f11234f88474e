"""Every name, label, annotation, environment variable and fixed value of the spec, once.

The tables of the spec's "Annotations, labels and names" page, in its own words. Nothing else in the
project spells these strings; it imports them from here.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "dispatch.phpboyscout.uk/"
FIELD_MANAGER: Final = "dispatch.phpboyscout.uk/adapter"

# -- Names ----------------------------------------------------------------------------------------
TRAINJOB_NAME_PREFIX: Final = "dj-"
TRAINJOB_NAME_MAX: Final = 37
RUNTIME_PATCH_MANAGER: Final = FIELD_MANAGER
GATE: Final = "dispatch.phpboyscout.uk/gate"
ADMISSION_CHECK_CONTROLLER: Final = "dispatch.phpboyscout.uk/admission"
# The AdmissionCheck object the chart installs carries the controller's name.
ADMISSION_CHECK_NAME: Final = "dispatch-admission"

# -- Labels on the TrainJob (and, through the runtime patch, on its pods) -------------------------
LABEL_JOB_ID: Final = "dispatch.phpboyscout.uk/job-id"
LABEL_SUBMISSION: Final = "dispatch.phpboyscout.uk/submission"
LABEL_QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"
LABEL_PRIORITY_CLASS: Final = "kueue.x-k8s.io/priority-class"

# -- Annotations on the TrainJob -----------------------------------------------------------------
ANNOTATION_COMMENT: Final = "dispatch.phpboyscout.uk/comment"
ANNOTATION_ADMISSION_GATED_BY: Final = "kueue.x-k8s.io/admission-gated-by"
ANNOTATION_OPENED: Final = "dispatch.phpboyscout.uk/opened"
ANNOTATION_ADMISSION_FLOOR: Final = "dispatch.phpboyscout.uk/admission-floor"
ANNOTATION_JOBSET_UID: Final = "dispatch.phpboyscout.uk/jobset-uid"
ANNOTATION_ADMISSION_STARTED: Final = "dispatch.phpboyscout.uk/admission-started"
"""A of the last execution started: recorded by the webhook in every write that unsuspends the TrainJob, so
that the next unsuspend can be refused unless A was raised since (docs/security.md)."""
ANNOTATION_APPROVED_ADMISSION: Final = "dispatch.phpboyscout.uk/approved-admission"
"""The readmission gate's approval, on the TrainJob: ``<A>/<Workload uid>``, the A of the one execution it approved
and the Workload it approved it on, written (by dispatch alone) before it sets its check Ready. In Kueue mode every
start must carry the approval of exactly the A it starts with (contract/admission.py ``approval_problem``), so no
queue configuration can start a dispatch job without the gate's wait (docs/security.md, "The start carries the
gate's approval")."""
ANNOTATION_HOLD_INSTANCE: Final = "dispatch.phpboyscout.uk/hold-instance"
ANNOTATION_HOLD_SINCE: Final = "dispatch.phpboyscout.uk/hold-since"
ANNOTATION_HOLD_WHO: Final = "dispatch.phpboyscout.uk/hold-who"
ANNOTATION_HOLD_UNTIL: Final = "dispatch.phpboyscout.uk/hold-until"
ANNOTATION_HOLD_REASON: Final = "dispatch.phpboyscout.uk/hold-reason"
HOLD_ANNOTATIONS: Final = (
    ANNOTATION_HOLD_INSTANCE,
    ANNOTATION_HOLD_SINCE,
    ANNOTATION_HOLD_WHO,
    ANNOTATION_HOLD_UNTIL,
    ANNOTATION_HOLD_REASON,
)
OPENED_TRUE: Final = "true"

# -- Annotations on a Workload -------------------------------------------------------------------
ANNOTATION_WORKER_ADMITTED: Final = "dispatch.phpboyscout.uk/worker-admitted"
"""On a MultiKueue worker, on the remote Workload (MultiKueue's copy): written by the worker's readmission gate
before it approves the copy's first admission there, so that every later admission of the same copy is held and
goes back through the manager, which numbers a new dispatch (docs/multicluster.md, guarantee 3). Its value is
the time of that approval."""

ANNOTATION_DISPATCHED: Final = "dispatch.phpboyscout.uk/dispatched-admission"
"""On a MultiKueue manager's Workload of a dispatch job: the A its readmission gate raised for the dispatch it is
about to approve, written before its Ready (the stamp). MultiKueue clones the Workload's annotations into the
remote Workload it creates on a worker, from the cache entry that shows the Ready, so the remote Workload carries
the A of its own dispatch, whatever A the copy of the TrainJob carries (docs/multicluster.md, "The stale copy").
The gate removes it from a Workload it holds, so a stale stamp never outlives its dispatch."""
ANNOTATION_DISPATCHED_SPENT: Final = "dispatch.phpboyscout.uk/dispatched-spent"
"""On a MultiKueue manager's Workload of a dispatch job: the highest A its readmission gate ever stamped on it
(``ANNOTATION_DISPATCHED``), written with each stamp and kept when the stamp is removed. The gate reuses a raise
whose stamp never landed, and never an A this record shows stamped (docs/multicluster.md, "Numbering each
dispatch")."""
ANNOTATION_UNVERIFIED: Final = "dispatch.phpboyscout.uk/unverified"
"""On a MultiKueue worker, on MultiKueue's copy of a dispatch TrainJob: set at its creation (dispatch's mutating
policy or webhook), removed only by dispatch's agent there once the copy's A equals its remote Workload's stamp
(``ANNOTATION_DISPATCHED``) and no other copy ran under that Workload. The copy does not start while it is set."""
ANNOTATION_VERIFIED_COPY: Final = "dispatch.phpboyscout.uk/verified-copy"
"""On a MultiKueue worker, on the remote Workload: the uid of the one TrainJob copy dispatch's agent let start
under it, written before the copy's mark ``ANNOTATION_UNVERIFIED`` is removed. A copy MultiKueue creates again
under the same Workload is never verified: it would start a second execution with the dispatch's A."""
ANNOTATION_VERIFIED_CONTACT: Final = "dispatch.phpboyscout.uk/verified-contact"
"""On a MultiKueue worker, on the remote Workload, written with ``ANNOTATION_VERIFIED_COPY``: the contact epoch
(``leaseTransitions`` of the Lease ``LEASE_MANAGER_CONTACT``) under which the copy was let start. A copy let start
under an earlier epoch than the Lease shows now outlived a loss of contact with the manager, which may have
dispatched the job elsewhere since: dispatch's agent there deletes it (docs/multicluster.md, "Contact with the
manager")."""
UNVERIFIED_TRUE: Final = "true"

# -- Annotations on a MultiKueueCluster (on a MultiKueue manager) ------------------------------------
ANNOTATION_FENCED: Final = "dispatch.phpboyscout.uk/fenced"
"""On a manager's MultiKueueCluster, set to ``FENCED_TRUE`` by an administrator: the worker is shut down, so
nothing of a previous execution still runs there, and the manager's readmission gate stops waiting on it (the
cross-cluster analogue of the ``out-of-service`` taint; docs/multicluster.md, guarantee 4). Any other value is
no fence."""
FENCED_TRUE: Final = "true"
FENCED_POWERED_OFF: Final = "powered-off"
"""The fence that states more: the worker is shut down. Trusted even when the worker cannot be read; a fence
``FENCED_TRUE`` is trusted only where the job was never dispatched or the last look found nothing of it there
(``ANNOTATION_DISPATCHED_TO``)."""
ANNOTATION_DISPATCHED_TO: Final = "dispatch.phpboyscout.uk/dispatched-to"
"""On a MultiKueue manager's dispatch TrainJob: the workers (MultiKueueCluster names, comma-separated, sorted)
the job was dispatched to and that no look has since proven empty of it. The manager's agent adds a worker before
it first claims a copy there (a copy starts only under a claim), and the gate removes it once its look there
found nothing of the job. The gate reads every worker listed, whatever the MultiKueueConfig says now."""
CLAIM_PREFIX: Final = "dispatch-claim-"
"""On a MultiKueue worker, in the agent's Lease namespace: the claim Lease ``dispatch-claim-<manager Workload
uid>`` by which the manager's agent says it wants the copy its ``holderIdentity`` names (the gate's approval
``<A>/<Workload uid>``, which the copy carries) to run there now. Renewed only while the Workload is admitted
with ``status.clusterName`` naming that worker and its MultiKueueCluster is Active and not fenced; a copy starts,
and keeps running, only under a claim seen renewed within its duration (docs/multicluster.md, "The claim")."""
LABEL_CLAIM: Final = "dispatch.phpboyscout.uk/claim"
"""On a claim Lease: the MultiKueue origin of the manager that wrote it (Kueue's ``multiKueue.origin``), so two
managers sharing a worker each keep to their own claims."""
ANNOTATION_CLAIM_JOB: Final = "dispatch.phpboyscout.uk/claim-job"
"""On a claim Lease: ``<namespace>/<name>`` of the job, for people and Status."""

# -- Labels on a runtime copy's replica (on a MultiKueue worker) -------------------------------------
LABEL_REPLICA_OF: Final = "dispatch.phpboyscout.uk/replica-of"
"""On a worker's replica of a dispatch job's runtime copy, the uid of the manager's TrainJob it was made for: the
manager's agent creates the replica before a dispatch (MultiKueue's copy of the TrainJob names it there) and
deletes it once that TrainJob is gone (docs/multicluster.md, "The runtime copy on the workers")."""

# -- The runtime patch: on the trainer replicated job's pod template -----------------------------
ANNOTATION_ADMISSION: Final = "dispatch.phpboyscout.uk/admission"
ADMISSION_AT_CREATION: Final = "0"
CREDENTIAL_VOLUME_PREFIX: Final = "dispatch-credential-"
CREDENTIAL_DEFAULT_MODE: Final = 0o400
PUBLISH_VOLUME: Final = "dispatch-publish"
PUBLISH_MOUNT_PATH: Final = "/opt/dispatch"
PUBLISH_IMAGE_PULL_POLICY: Final = "IfNotPresent"

POD_FINALIZER: Final = "dispatch.phpboyscout.uk/may-still-run"
"""On every trainer pod, from the runtime patch's pod template: a pod removed from the API while its
processes may still run (a force delete, the pod garbage collector after its Node was deleted) stays
visible, Terminating, until the agent removes this; it does so only when the node-loss classification
proves the processes gone (the kubelet's terminal phase, never bound, or out-of-service)."""

# -- On the runtime copy -------------------------------------------------------------------------
ANNOTATION_RUNTIME_SOURCE: Final = "dispatch.phpboyscout.uk/runtime-source"

# -- Environment variables -----------------------------------------------------------------------
ENV_RESERVED_PREFIX: Final = "DISPATCH_"
ENV_JOB_ID: Final = "DISPATCH_JOB_ID"
ENV_SUBMISSION: Final = "DISPATCH_SUBMISSION"
ENV_EPOCH: Final = "DISPATCH_EPOCH"
ENV_ATTEMPT: Final = "DISPATCH_ATTEMPT"
ENV_K8S_EPOCH_PREFIX: Final = "DISPATCH_K8S_EPOCH_PREFIX"
ENV_K8S_TOKEN_PREFIX: Final = "DISPATCH_K8S_TOKEN_PREFIX"
ENV_K8S_ADMISSION: Final = "DISPATCH_K8S_ADMISSION"
ENV_K8S_RESTART: Final = "DISPATCH_K8S_RESTART"
ENV_K8S_WORKDIR: Final = "DISPATCH_K8S_WORKDIR"
ENV_PUBLISH_DEST: Final = "DISPATCH_PUBLISH_DEST"

# -- What the adapter reads from others ----------------------------------------------------------
LABEL_WORKLOAD_JOB_UID: Final = "kueue.x-k8s.io/job-uid"
LABEL_JOBSET_NAME: Final = "jobset.sigs.k8s.io/jobset-name"
LABEL_REPLICATED_JOB_NAME: Final = "jobset.sigs.k8s.io/replicatedjob-name"
LABEL_RESTART_ATTEMPT: Final = "jobset.sigs.k8s.io/restart-attempt"
LABEL_JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
LABEL_ANCESTOR_STEP: Final = "trainer.kubeflow.org/trainjob-ancestor-step"
ANCESTOR_TRAINER: Final = "trainer"
KUEUE_RUNTIME_PATCH_MANAGER: Final = "kueue.x-k8s.io/manager"
TAINT_UNREACHABLE: Final = "node.kubernetes.io/unreachable"
TAINT_NOT_READY: Final = "node.kubernetes.io/not-ready"
TAINT_OUT_OF_SERVICE: Final = "node.kubernetes.io/out-of-service"
NODE_LOSS_TAINTS: Final = (TAINT_UNREACHABLE, TAINT_NOT_READY, TAINT_OUT_OF_SERVICE)
"""The node-loss taints the spec names; a site's ``nodeLossTaints`` add to them."""

# -- Prefixes a site may not use -----------------------------------------------------------------
RESERVED_KEY_PREFIXES: Final = (
    "dispatch.phpboyscout.uk/",
    "kueue.x-k8s.io/",
    "trainer.kubeflow.org/",
    "jobset.sigs.k8s.io/",
)

# -- Other fixed names ---------------------------------------------------------------------------
NAME: Final = "dispatch-k8s"
"""The name of dispatch's webhook configurations and Service, and their ``app.kubernetes.io/name`` label: the
certificate controller injects its CA into the configurations so named and labelled."""
TRAINER_CONTAINER: Final = "node"
LEASE_NAMESPACE: Final = "dispatch-system"
LEASE_NAME: Final = "dispatch-admission"
LEASE_MANAGER_CONTACT: Final = "dispatch-manager-contact"
"""On a MultiKueue worker, in the agent's Lease namespace: renewed by the manager's dispatch agent with its
credential there (the only principal that may write it), read by the worker's agent. Its ``leaseTransitions`` is
the contact epoch: the manager raises it when it renews after a gap longer than the Lease's duration
(docs/multicluster.md, "Contact with the manager")."""
CONTACT_HOLDER: Final = "dispatch-manager"
"""The ``holderIdentity`` of ``LEASE_MANAGER_CONTACT``: every replica of the manager's agent renews as one."""
ANNOTATION_PREFLIGHT_KUEUE: Final = "dispatch.phpboyscout.uk/preflight-kueue"
"""On the Lease: the last Kueue-mode Preflight's verdict (observe-only or not), cluster state every replica reads."""
ANNOTATION_PREFLIGHT_PLAIN: Final = "dispatch.phpboyscout.uk/preflight-plain"
"""On the Lease: the last plain-mode Preflight's verdict. Each mode has its own, so a Preflight of one mode
never clears (or sets) the other's observe-only."""
PROBE_IMAGE: Final = "dispatch.invalid/never:probe"
PROBE_NODE_SELECTOR_KEY: Final = "dispatch.phpboyscout.uk/probe"
PROBE_NODE_SELECTOR_VALUE: Final = "never"

# -- The prologue's command line -----------------------------------------------------------------
PROLOGUE_SHELL: Final = "/bin/sh"
PROLOGUE_ARGV0: Final = "dispatch-prologue"
PROLOGUE_REFUSAL_EXIT: Final = 125

# -- The prologue's ConfigMap: in the TrainJob's namespace, mounted by the runtime patch ------------
PROLOGUE_CONFIGMAP_PREFIX: Final = "dispatch-k8s-prologue-"
"""Followed by the first PROLOGUE_HASH_LENGTH hex digits of the text's sha256: a new text is a new name, so a
job of an older version keeps the text it was started with."""
PROLOGUE_HASH_LENGTH: Final = 10
PROLOGUE_KEY: Final = "prologue.sh"
PROLOGUE_VOLUME: Final = "dispatch-prologue"
PROLOGUE_MOUNT_DIR: Final = "/var/run/dispatch-k8s/prologue"
PROLOGUE_DEFAULT_MODE: Final = 0o444
PROLOGUE_CONFIGMAP_LABELS: Final = {
    "app.kubernetes.io/name": "dispatch-k8s",
    "app.kubernetes.io/component": "prologue",
    "app.kubernetes.io/managed-by": "dispatch-k8s",
}

# -- Kinds and groups of the objects the webhook polices besides the TrainJob ---------------------
KIND_WORKLOAD: Final = "Workload"

# -- API groups and kinds the contract builds or reads --------------------------------------------
KIND_TRAINJOB: Final = "TrainJob"
KIND_TRAINING_RUNTIME: Final = "TrainingRuntime"
KIND_CLUSTER_TRAINING_RUNTIME: Final = "ClusterTrainingRuntime"
