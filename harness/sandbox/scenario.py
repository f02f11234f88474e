"""The sandbox's scenario: one dispatch job through the agent's API, as a supervisor drives it, with the
cluster around it acting as it would: a stranger tries to open the job behind dispatch's back, a
higher-priority job preempts it, Kueue re-admits it, and it finishes.

    Preflight -> Start -> (a stranger's refused writes) -> Open -> running -> preempted -> re-admitted -> finished

With a real node (tier C) the job's trainer pods run there, in the image built here: the prologue really runs
and the trainer prints what it exported, which the scenario reads with the agent's Output and sets beside
Status's account (harness/sandbox/trainer.py); the two must agree. Without one they run on kwok's nodes, which
run no containers, and the identity is only Status's.

Every supervisor call goes through `agent.api.client.AgentClient` with the token of a ServiceAccount that has
exactly the supervisor's RBAC of docs/api.md; what the table shows of each step is the agent's Status.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ulid import ULID

from agent.api.client import AgentClient, AgentError, token_from_file
from agent.api.errors import ErrorKind
from agent.api.models import ObjectRef, OutputRequest, PreflightRequest, StartRequest, StatusResponse
from contract.keys import ANNOTATION_ADMISSION_GATED_BY, LABEL_JOBSET_NAME, LABEL_WORKLOAD_JOB_UID
from harness.cluster import ControlPlane
from harness.kube_http import ApiError, KubeHttp
from harness.processes import wait_until
from harness.real_node import real_node_pod_spec
from harness.sandbox import site, trainer
from harness.sandbox.install import TOKEN_SECONDS
from harness.sandbox.steps import StepFailed
from harness.tier_b import KWOK_COMPLETE_ANNOTATION, TierB

T = TypeVar("T")
IMAGE = "registry.invalid/dispatch-sandbox/train:1"
PREEMPTOR = "someone-elses-job"


@dataclass(frozen=True)
class RealNodeJob:
    """Tier C: the dispatch job's trainer pods run on this real node, in this image (imported, never pulled)."""

    node: str
    image: str


@dataclass
class Setup:
    """What the scenario drives: the agent's API, and the cluster's admin and stranger for the rest."""

    admin: KubeHttp
    stranger: KubeHttp
    stranger_name: str
    namespace: str
    local_queue: str
    low: str
    high: str
    runtime: str
    upstream_runtime: str
    job_cpu: str
    preemptor_cpu: str
    api_url: str
    ca_file: Path
    resolve: Mapping[str, str]
    """Host names of ``api_url`` → addresses (the Service's name → its ClusterIP on a real node), else empty."""
    check: str
    """The name of dispatch's AdmissionCheck (the chart's)."""
    token_file: Path
    logs: Sequence[Path]
    record: Path
    """Every Status the scenario read, as JSON lines (the table is made from these)."""
    real: RealNodeJob | None = None
    """Where the job's trainer really runs; None: on kwok's nodes."""


@dataclass
class Row:
    step: str
    status: StatusResponse | None = None
    note: str = ""


@dataclass
class Refusal:
    who: str
    what: str
    by: str
    message: str


@dataclass
class Result:
    ref: ObjectRef | None = None
    preflight: str = ""
    rows: list[Row] = field(default_factory=list)
    refusals: list[Refusal] = field(default_factory=list)
    done: list[str] = field(default_factory=list)
    printed: list[trainer.Printed] = field(default_factory=list)
    """On a real node: what each execution's container printed, in order (empty on kwok)."""


class Scenario:
    def __init__(self, setup: Setup, on_step: Callable[[str], None]) -> None:
        self.s = setup
        self.on_step = on_step
        self.result = Result()
        self.statuses: list[StatusResponse] = []
        self.waiting = ""
        """What the step is waiting for, and what it last saw: said when the step runs out of time."""
        self.followers: list[asyncio.Task[trainer.Printed]] = []

    # -- plumbing ---------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def step(self, name: str, seconds: float) -> AsyncIterator[None]:
        """A bounded step of the scenario; its failure names it and the logs to read."""
        self.waiting = ""
        try:
            async with asyncio.timeout(seconds):
                yield
        except StepFailed:
            raise
        except TimeoutError:
            detail = f" {self.waiting}" if self.waiting else ""
            raise StepFailed(f"scenario, {name}", f"not done within {seconds:.0f}s:{detail}", self.s.logs) from None
        except Exception as exc:
            raise StepFailed(f"scenario, {name}", f"{type(exc).__name__}: {exc}", self.s.logs) from exc
        self.result.done.append(name)
        self.on_step(name)

    async def status(self, agent: AgentClient) -> StatusResponse:
        assert self.result.ref is not None
        st = await agent.status(self.result.ref)
        if not self.statuses or st != self.statuses[-1]:
            self.statuses.append(st)
            with self.s.record.open("a") as f:
                f.write(json.dumps({"t": time.time(), **st.model_dump(by_alias=True)}) + "\n")
        return st

    async def until(self, agent: AgentClient, predicate: Callable[[StatusResponse], bool], what: str) -> StatusResponse:
        """Polls Status until ``predicate``; the enclosing step bounds it."""
        self.waiting = f"waiting for {what}; Status said nothing yet"
        while True:
            st = await self.status(agent)
            if predicate(st):
                return st
            self.waiting = f"waiting for {what}; Status last said {_brief(st)}"
            await asyncio.sleep(0.5)

    async def admin_until(self, probe: Callable[[], T | None], what: str) -> T:
        self.waiting = f"waiting for {what}"
        while True:
            try:
                found = probe()
            except ApiError as exc:
                self.waiting = f"waiting for {what}; last read: {exc}"
                found = None
            if found:
                return found
            await asyncio.sleep(0.5)

    def follow(self, agent: AgentClient, st: StatusResponse, a: int) -> None:
        """On a real node: reads the log of the execution of A = ``a`` (its pod Running in ``st``) with the
        agent's Output, followed to the container's end, in the background; the "logs" step collects it."""
        if self.s.real is None:
            return
        pod = next(p for p in st.pods if p.phase == "Running" and p.a == a)
        printed = trainer.Printed(a=a, j=pod.j or 0, pod=pod.name, node=pod.node)
        self.followers.append(asyncio.create_task(self._follow(agent, printed), name=f"output of A={a}"))

    async def _follow(self, agent: AgentClient, printed: trainer.Printed) -> trainer.Printed:
        ref = self.result.ref
        assert ref is not None
        req = OutputRequest(namespace=ref.namespace, name=ref.name, uid=ref.uid, follow=True)
        while True:
            text = b""
            try:
                async for chunk in agent.output(req):
                    text += chunk
            except AgentError as exc:
                # The container has not started yet (conflict), or the stream broke: the whole log again.
                if exc.kind not in (ErrorKind.CONFLICT, ErrorKind.UNAVAILABLE):
                    raise
                await asyncio.sleep(0.5)
                continue
            if text:
                printed.lines = text.decode(errors="replace").splitlines()
                return printed
            await asyncio.sleep(0.5)

    async def collect(self) -> list[trainer.Printed]:
        """Every followed log, once its container has ended; the enclosing step bounds the wait."""
        self.waiting = "waiting for the containers' logs to end (Output, followed)"
        return [await task for task in self.followers]

    def refused(self, who: KubeHttp, what: str, method: str, path: str, body: Any, content_type: str) -> Refusal:
        try:
            who.request(method, path, body, content_type=content_type)
        except ApiError as exc:
            message = _message(exc)
            if exc.status not in (400, 403, 422):
                raise RuntimeError(f"the stranger's write failed for another reason: {exc}") from None
            by = "API server"
            if "admission webhook" in message:
                by = "webhook"
            elif "ValidatingAdmissionPolicy" in message:
                by = "policy"
            refusal = Refusal(self.s.stranger_name, what, by, message)
            self.result.refusals.append(refusal)
            return refusal
        raise RuntimeError(f"a stranger's write was admitted: {what}")

    def pods(self, jobset: str) -> list[dict[str, Any]]:
        return self.s.admin.list("v1", "Pod", self.s.namespace, label_selector=f"{LABEL_JOBSET_NAME}={jobset}")

    def complete(self, pod_names: Sequence[str]) -> None:
        """kwok completes a pod once it carries the harness's completion annotation (exit code 0)."""
        for name in pod_names:
            self.s.admin.merge_patch(
                "v1", "Pod", name, {"metadata": {"annotations": {KWOK_COMPLETE_ANNOTATION: "true"}}}, self.s.namespace
            )

    # -- the story --------------------------------------------------------------------------------

    async def run(self) -> Result:
        s = self.s
        async with AgentClient(
            s.api_url, token_from_file(s.token_file), ca_file=s.ca_file, timeout=60, resolve=s.resolve
        ) as agent:
            try:
                await self._run(agent)
            finally:
                for task in self.followers:
                    task.cancel()
        return self.result

    async def _run(self, agent: AgentClient) -> None:
        s, result = self.s, self.result
        kueue = {"localQueue": s.local_queue}

        async with self.step("Preflight", 60):
            caps = await agent.preflight(
                PreflightRequest.model_validate(
                    {"namespace": s.namespace, "runtime": {"name": s.runtime}, "kueue": kueue}
                )
            )
            if caps.observe_only or not caps.start_gate or not caps.readmission_gate:
                raise RuntimeError(
                    f"the gates are not proven: start gate: {caps.start_gate_reason}; "
                    f"readmission gate: {caps.readmission_gate_reason}; observe-only: {caps.observe_only_reason}"
                )
            result.preflight = caps.readmission_gate_reason

        async with self.step("Start", 90):
            started = await agent.start(
                StartRequest.model_validate(
                    {
                        "jobId": str(ULID()),
                        "n": 1,
                        "attempt": 1,
                        "namespace": s.namespace,
                        "runtime": {"name": s.runtime},
                        "image": s.real.image if s.real else IMAGE,
                        "command": ["python", "-c", trainer.TRAIN] if s.real else ["python", "train.py"],
                        "kueue": {**kueue, "priorityClass": s.low},
                    }
                )
            )
            result.ref = ObjectRef(namespace=started.namespace, name=started.name, uid=started.uid)
            st = await self.until(agent, lambda st: st.phase == "Gated", "the TrainJob Gated (closed)")
            result.rows.append(Row("Start", st, f"created closed (dispatch's gate on it); priority {s.low}"))

        ref = result.ref
        async with self.step("stranger", 30):
            meta = {"namespace": ref.namespace, "name": ref.name}
            trainjob = s.admin.object_path({"apiVersion": site.TRAINER_V, "kind": "TrainJob", "metadata": meta})
            ungate = {"metadata": {"annotations": {ANNOTATION_ADMISSION_GATED_BY: None}}}
            self.refused(s.stranger, "removes dispatch's gate from the TrainJob", "PATCH", trainjob, ungate,
                         "application/merge-patch+json")  # fmt: skip
            workload = await self.admin_until(lambda: self._workload(ref.uid), "the TrainJob's Workload")
            self.refused(s.stranger, "removes dispatch's gate from its Workload", "PATCH",
                         s.admin.object_path(workload), ungate, "application/merge-patch+json")  # fmt: skip
            # Trainer made the JobSet, suspended: resuming it directly would run the job past the TrainJob's
            # unsuspend, the choke point. Nobody but its owners writes it (the owner policy).
            jobset = await self.admin_until(
                lambda: s.admin.get_or_none(site.JOBSET_V, "JobSet", ref.name, ref.namespace), "the TrainJob's JobSet"
            )
            self.refused(s.stranger, "resumes its JobSet directly", "PATCH", s.admin.object_path(jobset),
                         {"spec": {"suspend": False}}, "application/merge-patch+json")  # fmt: skip
            st = await self.status(agent)
            if st.phase != "Gated":
                raise RuntimeError(f"the TrainJob is no longer Gated after the stranger's writes: {_brief(st)}")

        async with self.step("Open", 120):
            opened = await agent.open(ref)
            st = await self.until(agent, lambda st: _running_with(st, 1), "the pods of A = 1 Running")
            result.rows.append(Row("Open: running", st, f"{opened.outcome}; {st.check_message}"))
            self.follow(agent, st, 1)

        async with self.step("preempted", 120):
            s.admin.create(
                site.preemptor(PREEMPTOR, s.namespace, queue=s.local_queue, priority_class=s.high,
                               runtime=s.upstream_runtime, cpu=s.preemptor_cpu)
            )  # fmt: skip
            await self.until(agent, lambda st: st.phase in ("Queued", "Admitting"), "the dispatch job suspended")
            other = await self.admin_until(
                lambda: [p for p in self.pods(PREEMPTOR) if p["status"].get("phase") == "Running"],
                f"{PREEMPTOR}'s pods Running",
            )
            evicted = _condition(self._workload(ref.uid), "Evicted")
            why = evicted.get("reason", "?") if evicted.get("status") == "True" else "not evicted?"
            st = await self.status(agent)
            note = f"{PREEMPTOR} ({s.high}) took the quota; Workload evicted: {why}"
            result.rows.append(Row(f"preempted by {PREEMPTOR}", st, note))
            # Kueue reset dispatch's check to Pending on the eviction: a forged Ready would re-admit the job
            # with the A it last ran with.
            workload = self._workload(ref.uid) or {}
            checks = (workload.get("status") or {}).get("admissionChecks") or []
            forged = [{**c, "state": "Ready"} if c.get("name") == s.check else c for c in checks]
            self.refused(s.stranger, "sets dispatch's admission check Ready on the Workload", "PATCH",
                         s.admin.object_path(workload) + "/status", {"status": {"admissionChecks": forged}},
                         "application/merge-patch+json")  # fmt: skip

        async with self.step("held", 120):
            # The preemptor finishes and the quota comes back, while the preempted pod may still be in its
            # termination grace period: the gate holds the readmission until it is gone.
            self.complete([p["metadata"]["name"] for p in other])
            st = await self.until(agent, lambda st: _held(st) or _running_with(st, 2), "the quota back")
            if _held(st):
                note = f"{PREEMPTOR} finished; {(st.check_message or '').split(':')[0]}"
                result.rows.append(Row("quota back, gate holds", st, note))

        async with self.step("re-admitted", 120):
            st = await self.until(agent, lambda st: _running_with(st, 2), "the pods of A = 2 Running")
            result.rows.append(Row("re-admitted", st, st.check_message or ""))
            self.follow(agent, st, 2)

        async with self.step("finished", 90 + trainer.WORK_SECONDS):
            if s.real is None:
                self.complete([p.name for p in st.pods if p.phase == "Running"])
            st = await self.until(agent, lambda st: st.phase == "Complete", "the TrainJob Complete")
            note = f"its trainer exited 0 after {trainer.WORK_SECONDS}s of work" if s.real else "its pods completed"
            result.rows.append(Row("finished", st, note))

        if s.real is not None:
            async with self.step("logs", 60):
                result.printed = await self.collect()
                # Status showed each execution while its pods ran; Status's account of it is the one to check.
                problems = trainer.disagreements(trainer.executions(self.statuses), result.printed)
                if problems:
                    raise RuntimeError("the containers' logs and Status disagree: " + "; ".join(problems))

    def _workload(self, uid: str) -> dict[str, Any] | None:
        selector = f"{LABEL_WORKLOAD_JOB_UID}={uid}"
        items = self.s.admin.list(site.KUEUE_V, "Workload", self.s.namespace, label_selector=selector)
        return items[0] if len(items) == 1 else None


def _condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return c
    return {}


def _held(st: StatusResponse) -> bool:
    """Quota reserved, and dispatch's check held Pending because a pod of the previous execution may run."""
    return st.phase == "Admitting" and st.check_state == "Pending" and (st.check_message or "").startswith("waiting")


def _running_with(st: StatusResponse, a: int) -> bool:
    live = [p for p in st.pods if p.phase == "Running"]
    return st.phase == "Running" and st.a == a and bool(live) and all(p.a == a for p in live)


def _message(exc: ApiError) -> str:
    try:
        return str(json.loads(exc.body).get("message", "")).strip() or exc.body.strip()
    except ValueError:
        return exc.body.strip()


def _brief(st: StatusResponse | None) -> str:
    if st is None:
        return "nothing yet"
    pods = ", ".join(f"{p.name} {p.phase} (A={p.a})" for p in st.pods) or "no pods"
    return f"phase {st.phase}, gate {st.gate}, check {st.check_state} ({st.check_message}), A={st.a}, J={st.j}; {pods}"


async def run(setup: Setup, on_step: Callable[[str], None]) -> Result:
    return await Scenario(setup, on_step).run()


def run_sync(setup: Setup, on_step: Callable[[str], None]) -> Result:
    return asyncio.run(run(setup, on_step))


# -- the world around the job -------------------------------------------------------------------------

NAMESPACE = "team-a"
QUEUE = "sandbox"
LOW, HIGH = "sandbox-low", "sandbox-high"
RUNTIME = "sandbox-train"
JOB_CPU = "3"
STOP_SECONDS = "20s"
QUOTA = {"cpu": "4", "memory": "16Gi"}
"""Room for one job at a time: the dispatch job and the preemptor each ask for JOB_CPU (on a real node the
dispatch job asks for REAL_JOB_CPU)."""
REAL_JOB_CPU = "1500m"
"""The dispatch job's trainer on a real node, which has the machine's CPUs (2 on CI): still more than the quota
leaves beside the preemptor's JOB_CPU, so Kueue preempts it."""
STRANGER_RULES: list[dict[str, Any]] = [
    {"apiGroups": ["trainer.kubeflow.org"], "resources": ["trainjobs"], "verbs": ["get", "list", "patch", "update"]},
    {
        "apiGroups": ["kueue.x-k8s.io"],
        "resources": ["workloads", "workloads/status"],
        "verbs": ["get", "list", "patch", "update"],
    },
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "list", "patch", "update"]},
]
"""What a colleague with edit rights in the namespace may do to TrainJobs, Workloads and JobSets (RBAC allows the
writes; only dispatch's admission rules refuse them)."""
RBAC_V = "rbac.authorization.k8s.io/v1"


def real_node_runtime(name: str, real: RealNodeJob) -> dict[str, Any]:
    """The sandbox's runtime with its trainer on the real node ``real.node`` (its selector, its taint tolerated),
    in the image ``real.image`` (imported into the node's containerd, so never pulled), given the time to save
    a checkpoint when it is stopped."""
    runtime = site.training_runtime(name, cpu=REAL_JOB_CPU, image=real.image)
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod.update(real_node_pod_spec(real.node))
    pod["terminationGracePeriodSeconds"] = trainer.GRACE_SECONDS
    pod["containers"][0]["imagePullPolicy"] = "Never"
    return runtime


def _active(admin: KubeHttp, kind: str, name: str, namespace: str | None = None) -> bool:
    obj = admin.get(site.KUEUE_V, kind, name, namespace)
    return _condition(obj, "Active").get("status") == "True"


def prepare(
    cp: ControlPlane, tb: TierB, *, check: str, roles: tuple[str, str], api_url: str, ca_file: Path, work: Path,
    logs: Sequence[Path], resolve: Mapping[str, str] | None = None, real: RealNodeJob | None = None,
    stop_seconds: str = STOP_SECONDS,
) -> Setup:  # fmt: skip
    """What a site does around dispatch: a ClusterQueue gated by dispatch's AdmissionCheck (``check``, the
    chart's) with room for one job, two WorkloadPriorityClasses, a runtime that meets the runtime
    requirements, a namespace with a LocalQueue; a supervisor's ServiceAccount bound to the chart's
    ClusterRoles for supervisors (``roles``: the supervisor's and Preflight's), its token in a file; and a
    stranger with edit rights on TrainJobs and Workloads. With ``real`` the runtime's trainer runs on that real
    node, in that image. On kwok, a deleted pod of the job is confirmed gone ``stop_seconds`` after its deletion
    (a duration), as a trainer taking that long to stop. Returns once Kueue shows the queues Active, i.e. once
    the agent serves the check."""
    admin = cp.admin
    supervisor_role, preflight_role = roles
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
    # The trainer takes a while to stop once deleted, so the gate's hold after preemption is there to see: the
    # quota comes back before the preempted pod is gone. On a real node the trainer itself does, saving a
    # checkpoint on SIGTERM (trainer.STOP_SECONDS). On kwok the harness's kubelet stage writes the deleted pod
    # Failed at once (harness/tier_b.py), so the hold may not be seen; KWOK_DELETE_DELAY only delays the
    # pod's removal after that.
    if real is None:
        admin.apply(site.training_runtime(RUNTIME, cpu=JOB_CPU, pod_annotations={site.KWOK_DELETE_DELAY: stop_seconds}))
    else:
        admin.apply(real_node_runtime(RUNTIME, real))
    admin.apply(site.priority_class(LOW, 10, "the dispatch job"))
    admin.apply(site.priority_class(HIGH, 1000, "someone else's urgent job"))
    admin.apply(site.gated_cluster_queue(QUEUE, check=check, flavor=tb.resource_flavor, quota=QUOTA))
    admin.apply(site.local_queue(NAMESPACE, QUEUE, QUEUE))

    cp.ensure_service_account(NAMESPACE, "supervisor")
    subject = {"kind": "ServiceAccount", "name": "supervisor", "namespace": NAMESPACE}
    admin.apply(site.binding("RoleBinding", "supervisor", "ClusterRole", supervisor_role, subject, NAMESPACE))
    admin.apply(
        site.binding("ClusterRoleBinding", f"{NAMESPACE}-supervisor-preflight", "ClusterRole", preflight_role, subject)
    )
    token_file = work / "supervisor.token"
    token_file.write_text(cp.service_account_token(NAMESPACE, "supervisor", expiration_seconds=TOKEN_SECONDS) + "\n")
    token_file.chmod(0o600)

    cp.ensure_service_account(NAMESPACE, "stranger")
    admin.apply({"apiVersion": RBAC_V, "kind": "Role", "metadata": {"name": "edit-trainjobs", "namespace": NAMESPACE},
                 "rules": STRANGER_RULES})  # fmt: skip
    stranger_subject = {"kind": "ServiceAccount", "name": "stranger", "namespace": NAMESPACE}
    admin.apply(
        site.binding("RoleBinding", "stranger-edit-trainjobs", "Role", "edit-trainjobs", stranger_subject, NAMESPACE)
    )
    stranger = KubeHttp(cp.service_account_credentials(NAMESPACE, "stranger", expiration_seconds=TOKEN_SECONDS))

    why = f"Kueue waits for the agent to set AdmissionCheck {check} Active"
    wait_until(lambda: _active(admin, "ClusterQueue", QUEUE), 60, what=f"ClusterQueue {QUEUE} Active ({why})")
    wait_until(lambda: _active(admin, "LocalQueue", QUEUE, NAMESPACE), 30, what=f"LocalQueue {QUEUE} Active")
    return Setup(
        admin=admin,
        stranger=stranger,
        stranger_name=f"system:serviceaccount:{NAMESPACE}:stranger",
        namespace=NAMESPACE,
        local_queue=QUEUE,
        low=LOW,
        high=HIGH,
        runtime=RUNTIME,
        upstream_runtime=tb.training_runtime,
        job_cpu=JOB_CPU if real is None else REAL_JOB_CPU,
        preemptor_cpu=JOB_CPU,
        api_url=api_url,
        ca_file=ca_file,
        resolve=dict(resolve or {}),
        check=check,
        token_file=token_file,
        logs=logs,
        record=work / "status.jsonl",
        real=real,
    )
