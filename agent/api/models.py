"""The API's requests and responses. The OpenAPI document is generated from these models."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from agent.api.errors import ErrorKind
from agent.domain.status import Status
from agent.multicluster.worker_remains import Remains
from contract.runtime_patch import Credential, Publish
from contract.trainjob import Submission

Name = Annotated[str, StringConstraints(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-.a-z0-9]*[a-z0-9])?$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)


class RuntimeRef(_Model):
    kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = "ClusterTrainingRuntime"
    name: Name
    namespace: Name | None = Field(None, description="for a TrainingRuntime; the TrainJob's namespace by default")


class CredentialSpec(_Model):
    secret: Name
    mount_path: str = Field(alias="mountPath")


class PublishSpec(_Model):
    via: Literal["image", "initContainer"]
    image: str | None = Field(None, description="with via: image, the image mounted at /opt/dispatch")
    init_container: str | None = Field(None, alias="initContainer", description="with via: initContainer, its name")


class KueueSpec(_Model):
    local_queue: Name = Field(alias="localQueue")
    priority_class: Name | None = Field(None, alias="priorityClass")


class StartRequest(_Model):
    job_id: str = Field(alias="jobId", description="the JobID, a ULID in canonical upper case")
    n: int = Field(ge=0, lt=1_000_000, description="the submission number N")
    g: int = Field(0, ge=0, description="the job's generation G")
    attempt: int = Field(ge=0)
    namespace: Name
    runtime: RuntimeRef
    image: str = Field(min_length=1)
    command: list[str] = Field(min_length=1)
    args: list[str] = []
    env: dict[str, str] = {}
    work_dir: str | None = Field(None, alias="workDir")
    credentials: list[CredentialSpec] = []
    publish: PublishSpec | None = None
    active_deadline_seconds: int | None = Field(None, alias="activeDeadlineSeconds", ge=1)
    kueue: KueueSpec | None = Field(None, description="Kueue mode; absent is plain mode")

    def submission(self, site_labels: dict[str, str], site_annotations: dict[str, str]) -> Submission:
        publish = None
        if self.publish is not None:
            publish = (
                Publish(image=self.publish.image)
                if self.publish.via == "image"
                else Publish(init_container=self.publish.init_container)
            )
        return Submission(
            job_id=self.job_id,
            n=self.n,
            g=self.g,
            attempt=self.attempt,
            namespace=self.namespace,
            image=self.image,
            command=tuple(self.command),
            args=tuple(self.args),
            env=dict(self.env),
            workdir=self.work_dir,
            credentials=tuple(Credential(c.secret, c.mount_path) for c in self.credentials),
            publish=publish,
            active_deadline_seconds=self.active_deadline_seconds,
            queue=self.kueue.local_queue if self.kueue else None,
            priority_class=self.kueue.priority_class if self.kueue else None,
            site_labels=site_labels,
            site_annotations=site_annotations,
        )


class ObjectRef(_Model):
    namespace: Name
    name: Name
    uid: str = Field(
        min_length=1, description="the UID Start returned: an object of the same name but another UID is refused"
    )


class StartResponse(_Model):
    namespace: str
    name: str
    uid: str


class OpenResponse(_Model):
    outcome: str
    held_by: list[str] = Field(alias="heldBy", description="other parties' gates: held by an administrator")
    a: int | None = None


class HoldRequest(ObjectRef):
    who: str = Field(min_length=1)
    reason: str = Field(min_length=1)
    until: str | None = Field(None, description="RFC 3339; a hold until released when absent")


class WorkerRemainsModel(_Model):
    """On a MultiKueue manager: what of a job is left on one worker (agent/multicluster/worker_remains.py)."""

    cluster: str = Field(description="the worker (its MultiKueueCluster's name)")
    read: bool = Field(description="the worker was read with the agent's credential for it")
    fenced: bool = Field(
        False,
        description="not read, and an administrator fenced it: taken at the fence's word that nothing of the job runs "
        "there (a fenced worker that is read is reported as read)",
    )
    orphans: list[str] = Field(
        description="what of the job is there, as orphan references: MultiKueue's copy "
        "(`<namespace>/trainjob/<name>`), its JobSet, its Jobs (`…/job/…`), and its pods that may still run"
    )
    may_still_run: bool = Field(
        alias="mayStillRun",
        description="something of the job may still run or start there; true for a worker that cannot be read",
    )
    reason: str = Field(description="why, or why the worker was not read")

    @classmethod
    def of(cls, r: Remains) -> WorkerRemainsModel:
        return cls(cluster=r.cluster, read=r.read, fenced=r.fenced, orphans=list(r.orphans),
                   may_still_run=r.may_still_run, reason=r.reason)  # fmt: skip


class OutcomeResponse(_Model):
    outcome: str
    a: int | None = None
    workers: list[WorkerRemainsModel] = Field(
        [],
        description="Stop on a MultiKueue manager: what of the job is still on each worker the agent reads, once the "
        "manager's TrainJob is deleted (MultiKueue deletes a worker's copy only while it can reach that worker)",
    )


class PodStatusModel(_Model):
    name: str
    node: str | None
    phase: str | None
    verdict: str
    may_still_run: bool = Field(alias="mayStillRun")
    reason: str
    a: int | None
    j: int | None


class ExecutionModel(_Model):
    a: int
    j: int
    r: int | None
    epoch: int | None = Field(description="DISPATCH_EPOCH")
    attempt: str | None = Field(description="DISPATCH_ATTEMPT")
    pods: list[str]


class HoldModel(_Model):
    instance: str | None
    since: str | None
    who: str | None
    reason: str | None
    until: str | None = Field(description="reported, never acted on: the agent does not release a hold by itself")
    expired: bool = Field(description="until has passed; the hold stays until Release")


class StatusResponse(_Model):
    namespace: str
    name: str
    uid: str
    phase: str
    mode: Literal["kueue", "plain"]
    gate: Literal["open", "closed"]
    held_by: list[str] = Field(alias="heldBy")
    check_state: str | None = Field(alias="checkState")
    check_message: str | None = Field(alias="checkMessage")
    a: int | None
    floor: int | None
    j: int | None
    r: int | None
    executions: list[ExecutionModel]
    pods: list[PodStatusModel]
    ceased: bool = Field(
        description="every process of the TrainJob is certainly gone and none can start without a dispatch call "
        "(docs/api.md, Ceased)"
    )
    ceased_reason: str = Field("", alias="ceasedReason", description="why ceased is true or false")
    hold: HoldModel | None = Field(None, description="dispatch's hold, when there is one")
    foreign: list[str]
    orphans: list[str]
    deletion_timestamp: str | None = Field(
        None,
        alias="deletionTimestamp",
        description="set once the TrainJob is being deleted (Stop): it goes when its pods are gone",
    )
    cluster: str | None = Field(
        None,
        description="on a MultiKueue manager: the worker MultiKueue runs the job on (its Workload's "
        "status.clusterName), whose pods, executions and J this Status reports",
    )
    cluster_reason: str = Field(
        "",
        alias="clusterReason",
        description="why the pods on that worker are not reported (no credential for it, unreadable, or no copy "
        "of the job there); empty when they are",
    )
    workers: list[WorkerRemainsModel] = Field(
        [],
        description="on a MultiKueue manager, while the TrainJob is being deleted (Stop): what of the job is left on "
        "each worker the agent reads; ceased then holds only once every one was read and nothing may run on any",
    )

    @classmethod
    def of(cls, ref: ObjectRef, s: Status) -> StatusResponse:
        return cls(
            namespace=ref.namespace,
            name=ref.name,
            uid=ref.uid,
            phase=s.phase,
            mode=s.mode,
            gate=s.gate,
            held_by=list(s.held_by),
            check_state=s.check_state,
            check_message=s.check_message,
            a=s.a,
            floor=s.floor,
            j=s.j,
            r=s.r,
            executions=[ExecutionModel(**vars(e) | {"pods": list(e.pods)}) for e in s.executions],
            pods=[PodStatusModel(**vars(p)) for p in s.pods],
            ceased=s.ceased,
            ceased_reason=s.ceased_reason,
            hold=HoldModel(**vars(s.hold)) if s.hold is not None else None,
            foreign=list(s.foreign),
            orphans=list(s.orphans),
            cluster=s.cluster,
            cluster_reason=s.cluster_reason,
            workers=[WorkerRemainsModel.of(w) for w in s.workers],
        )


class Capabilities(_Model):
    trainer: bool = Field(
        description="the served Trainer is one dispatch works with (spec.runtimePatches served; in plain mode, "
        "Open's write accepted): v2.2.1 or later"
    )
    trainer_reason: str = Field(alias="trainerReason")
    start_gate: bool = Field(alias="startGate", description="the probe proved that nothing runs before Open")
    start_gate_reason: str = Field(alias="startGateReason")
    readmission_gate: bool = Field(alias="readmissionGate")
    readmission_gate_reason: str = Field(alias="readmissionGateReason")
    lease_renewed: str | None = Field(alias="leaseRenewed", description="the readmission controller's last heartbeat")
    versions: dict[str, list[str]] = Field(description="API versions found, by group")
    observe_only: bool = Field(
        alias="observeOnly",
        description="calls of this mode that may let something run (Start, Open, Release) are refused",
    )
    observe_only_reason: str | None = Field(None, alias="observeOnlyReason")
    mode: Literal["kueue", "plain"] | None = Field(
        None, description="the mode this report is about (each mode has its own verdict); null before any Preflight"
    )


class OutputRequest(ObjectRef):
    follow: bool = Field(False, description="keep streaming until the container ends or the caller goes")
    tail_lines: int | None = Field(None, alias="tailLines", ge=0, description="only the last lines")


class PreflightRequest(_Model):
    namespace: Name = Field(description="where the probe TrainJob is created (and removed again)")
    runtime: RuntimeRef = Field(description="the runtime the probe is copied from, as Start would")
    kueue: KueueSpec | None = Field(None, description="Kueue mode, through this LocalQueue; absent is plain mode")


class ListRequest(_Model):
    namespace: Name = Field(description="where to list dispatch's TrainJobs")
    job_id: str | None = Field(None, alias="jobId", description="only this JobID's TrainJobs (every submission N)")
    limit: int | None = Field(None, ge=1, le=500, description="TrainJobs read per page (the API server's limit)")
    continue_: str | None = Field(
        None, alias="continue", min_length=1, description="the continue token of the previous page"
    )


class ListItem(_Model):
    namespace: str
    name: str
    uid: str
    job_id: str | None = Field(alias="jobId", description="from the name; None for a TrainJob dispatch's by its patch")
    n: int | None = Field(description="the submission number N, from the name")
    phase: str
    orphan: str = Field(description="the TrainJob as an orphan reference: <namespace>/<name>")
    deletion_timestamp: str | None = Field(None, alias="deletionTimestamp")


class ListResponse(_Model):
    items: list[ListItem] = Field(description="dispatch's TrainJobs of this page, by name")
    continue_: str | None = Field(
        None, alias="continue", description="pass it back for the next page; absent on the last page"
    )


class WatchRequest(_Model):
    namespace: Name = Field(description="whose dispatch TrainJobs to watch")
    version: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="the version of the previous answer; absent: a snapshot of every dispatch TrainJob now, "
        "answered at once",
    )
    timeout_seconds: int = Field(
        30, alias="timeoutSeconds", ge=0, le=60, description="with version: how long to wait for a change"
    )


class WatchResponse(_Model):
    items: list[ListItem] = Field(
        description="each TrainJob whose phase or deletionTimestamp changed after version, as it is now (phase "
        "Deleted: gone), by name; empty when the wait ended without a change. An item may repeat a phase "
        "already seen."
    )
    version: str = Field(description="pass it back as version to wait for what changes next")


class ErrorResponse(_Model):
    error: str = Field(description="the kind: " + ", ".join(kind.value for kind in ErrorKind))
    message: str
    field: str | None = Field(None, description="with invalid: the request field that was wrong")
    orphans: list[str] | None = Field(
        None, description="with not_found from Status: objects the TrainJob left behind (`<namespace>/jobset/<name>`…)"
    )
    workers: list[WorkerRemainsModel] | None = Field(
        None,
        description="on a MultiKueue manager, with not_found from Status and with Start's refusals: what of the job "
        "(or of an earlier TrainJob of the name) is left on each worker",
    )
    ceased: bool | None = Field(
        None,
        description="on a MultiKueue manager, with not_found from Status: every worker not fenced was read and "
        "nothing of the job may run or start on any",
    )
    ceased_reason: str | None = Field(None, alias="ceasedReason", description="why ceased is true or false")
