"""The API's own decisions, as pure functions of what was read: the shell (service.py) reads, calls these
and the functional core (agent.domain.operations, agent.domain.start, agent.domain.status), and writes.

Also the one mapping of the API server's answers to the API's typed errors.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from pydantic import ValidationError

from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import KubeError
from agent.api.models import Capabilities, ListItem, ObjectRef
from agent.domain.operations import Hold, Refused
from agent.domain.start import readback_changes
from agent.domain.status import phase
from agent.domain.workload import condition_true, owner_trainjob
from agent.runtime.leader import Record, record_of
from contract.admission import admission_count, admission_started, preconditions
from contract.errors import ContractError
from contract.keys import (
    ADMISSION_CHECK_CONTROLLER,
    ANNOTATION_PREFLIGHT_KUEUE,
    ANNOTATION_PREFLIGHT_PLAIN,
    LABEL_JOB_COMPLETION_INDEX,
    LABEL_JOB_ID,
    LABEL_RESTART_ATTEMPT,
    LABEL_SUBMISSION,
    PROBE_NODE_SELECTOR_KEY,
    PROBE_NODE_SELECTOR_VALUE,
)
from contract.names import parse_name, validate_job_id
from contract.objects import add_op, annotations, dig, labels, parse_rfc3339, pointer
from contract.ownership import dispatch_patch_index, is_dispatch, is_kueue_mode
from contract.trainjob import Submission, build_trainjob
from contract.upstream import TRAINER_GROUP

T = TypeVar("T")

KUEUE_GROUP: Final = "kueue.x-k8s.io"
JOBSET_GROUP: Final = "jobset.x-k8s.io"
GROUPS: Final = (TRAINER_GROUP, JOBSET_GROUP, KUEUE_GROUP)
"""The API groups whose versions Preflight reports."""


# -- Errors ---------------------------------------------------------------------------------------


def contract(call: Callable[..., T], *args: Any) -> T:
    """Run a contract builder; its ContractError is an invalid request naming the field."""
    try:
        return call(*args)
    except ContractError as exc:
        raise ApiError(ErrorKind.INVALID, exc.message, field=exc.field) from None


RUNTIME_NOT_SEEN: Final = (
    "not found",  # Kueue's TrainJob webhook: "runtime '<name>' not found"
    "must be created before the TrainJob",  # Trainer's: "specified trainingRuntime must be created before ..."
)


def runtime_not_yet_seen(exc: KubeError) -> bool:
    """A webhook refused a TrainJob because it has not seen its runtime copy yet.

    Kueue's and Trainer's webhooks read runtimes from their informer caches, which lag the copy Start has
    just created by a moment: a refusal to retry briefly, not an answer.
    """
    return exc.webhook_denial and "untime" in exc.message and any(p in exc.message for p in RUNTIME_NOT_SEEN)


def refused(exc: Refused) -> ApiError:
    return ApiError(ErrorKind(exc.kind), exc.message)


def read_failed(exc: KubeError, what: str) -> ApiError:
    return ApiError(ErrorKind.UNAVAILABLE, f"cannot read {what}: {exc.describe()}")


def write_failed(exc: KubeError, what: str) -> ApiError:
    """A write (patch or delete) the API server refused.

    409 is the resourceVersion or uid precondition, 422 a JSON Patch ``test`` of the uid that failed: the
    object changed or is another one, so re-read and retry. A refusal by an admission webhook is final.
    Anything else (the agent's own RBAC, the API server failing) is the agent's problem, worth a retry.
    """
    if exc.status in (409, 422) and not exc.webhook_denial:
        return ApiError(ErrorKind.CONFLICT, f"{what}: the object is not as read ({exc.describe()}); re-read and retry")
    if exc.status == 404:
        return ApiError(ErrorKind.NOT_FOUND, f"{what}: the object is gone ({exc.describe()})")
    if exc.webhook_denial or exc.status in (400, 422):
        return ApiError(ErrorKind.REJECTED, f"{what}: the API server refused it: {exc.describe()}")
    return ApiError(ErrorKind.UNAVAILABLE, f"{what}: {exc.describe()}")


def create_failed(exc: KubeError, what: str, namespace: str) -> ApiError:
    if exc.status == 404:
        return ApiError(ErrorKind.INVALID, f"cannot create {what}: {exc.describe()}", field="namespace")
    if exc.webhook_denial or exc.status in (400, 422):
        return ApiError(ErrorKind.REJECTED, f"the API server refused {what} in {namespace}: {exc.describe()}")
    return ApiError(ErrorKind.UNAVAILABLE, f"cannot create {what}: {exc.describe()}")


# -- The object the request names -----------------------------------------------------------------


def own(trainjob: Mapping[str, Any] | None, ref: ObjectRef) -> Mapping[str, Any]:
    """The TrainJob as read, when it is dispatch's and the object the supervisor means (the same UID).

    The agent acts with its own ClusterRole, so it must never be a confused deputy: a TrainJob that is not
    dispatch's (contract/ownership.py) is refused on every route, before its uid is compared, and no refusal
    says what the uid of the object read is (it would be the one thing a caller needs to aim another route
    at an object it may not touch itself)."""
    where = f"TrainJob {ref.namespace}/{ref.name}"
    if trainjob is None:
        raise ApiError(ErrorKind.NOT_FOUND, f"{where} does not exist")
    if not is_dispatch(trainjob):
        raise not_dispatchs(where)
    if dig(trainjob, "metadata", "uid") != ref.uid:
        raise ApiError(ErrorKind.CONFLICT, f"{where} is a different object of the same name (not uid {ref.uid})")
    return trainjob


def not_dispatchs(where: str) -> ApiError:
    return ApiError(
        ErrorKind.REJECTED,
        f"{where} is not dispatch's (its name is not dj-<ULID>-s<N> and it has no runtime patch entry of "
        "dispatch's): the agent does not act on it",
    )


def excluded_namespace(namespace: str, own_namespace: str) -> ApiError | None:
    """Start refuses the namespaces the webhook and the policies exclude (so that they can never lock out
    the components that would fix them): a job there would run unpoliced."""
    if namespace in excluded_namespaces(own_namespace):
        return ApiError(
            ErrorKind.INVALID,
            f"namespace {namespace} is excluded from dispatch's admission webhook and policies (kube-system and "
            f"dispatch's own namespace {own_namespace}), so a job there would not be policed: use another",
            field="namespace",
        )
    return None


def excluded_namespaces(own_namespace: str) -> frozenset[str]:
    return frozenset({"kube-system", own_namespace})


class SeveralWorkloads(ApiError):
    """Several Workloads claim the TrainJob as their controller: the agent does not pick one (``conflict``)."""

    def __init__(self, claiming: Sequence[Mapping[str, Any]], uid: str) -> None:
        names = ", ".join(sorted(str(dig(w, "metadata", "name")) for w in claiming))
        owner = owner_trainjob(claiming[0])
        where = f"TrainJob {dig(claiming[0], 'metadata', 'namespace')}/{owner[0] if owner else '?'}"
        super().__init__(
            ErrorKind.CONFLICT,
            f"{len(claiming)} Workloads claim {where} (uid {uid}) as their controller: {names}; Kueue creates one "
            "per TrainJob and the agent does not pick one: retry once only one is left",
        )


def controlled_workloads(workloads: Iterable[Mapping[str, Any]], uid: str) -> list[Mapping[str, Any]]:
    """The Workloads (among those read) whose controller ownerReference is the TrainJob ``uid``: kind
    TrainJob, apiVersion trainer.kubeflow.org/…, ``controller: true``, as Kueue creates it for the TrainJob.
    A Workload that merely carries the job-uid label, or refers to the TrainJob without being controlled by
    it, is not the TrainJob's."""
    return [w for w in workloads if (owner := owner_trainjob(w)) is not None and owner[1] == uid]


def workload_of(workloads: Iterable[Mapping[str, Any]], uid: str) -> Mapping[str, Any] | None:
    """The Workload Kueue created for the TrainJob: the one it controls (``controlled_workloads``); None
    when there is none. Several claiming it so are refused (``SeveralWorkloads``), never picked from: which
    one Kueue admits, and which one a Hold must deactivate, would be a guess."""
    claiming = controlled_workloads(workloads, uid)
    if len(claiming) > 1:
        raise SeveralWorkloads(claiming, uid)
    return claiming[0] if claiming else None


def our_checks(admission_checks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Names of the AdmissionChecks served by dispatch's controller."""
    return sorted(
        str(dig(c, "metadata", "name"))
        for c in admission_checks
        if dig(c, "spec", "controllerName") == ADMISSION_CHECK_CONTROLLER
    )


# -- Start ----------------------------------------------------------------------------------------


def existing_problems(built: Mapping[str, Any], existing: Mapping[str, Any]) -> list[str]:
    """Why an existing TrainJob of the name is not the one this Start would create, still as created.

    Start is idempotent for a retry: the same request (JobID, N, attempt, G, the same image, command, env,
    credentials...) finds what it created and goes on from there. Anything else of the name — another
    request's object, or ours after Open or a raise of A, or one being deleted — is a conflict.
    """
    problems = readback_changes(built, existing)
    if dig(existing, "metadata", "deletionTimestamp"):
        problems.append("it is being deleted")
    return problems


def copy_problems(copy_read: Mapping[str, Any], sub: Submission) -> list[str]:
    """Why an existing TrainingRuntime of the name cannot serve as this Start's runtime copy.

    One left by an earlier Start that stopped before creating the TrainJob carries our labels and no owner
    yet; it is taken as it is (its spec is what the TrainJob is then built against).
    """
    problems = []
    have = labels(copy_read)
    if have.get(LABEL_JOB_ID) != sub.job_id or have.get(LABEL_SUBMISSION) != str(sub.n):
        problems.append("it does not carry this job's job-id and submission labels")
    if dig(copy_read, "metadata", "ownerReferences"):
        problems.append("it belongs to another (perhaps deleted) TrainJob")
    if dig(copy_read, "metadata", "deletionTimestamp"):
        problems.append("it is being deleted")
    return problems


UNCHECKED: Final = (
    "its pods request no resources, so Kueue assigns it no flavor and would admit it without dispatch's "
    "AdmissionCheck (a check applies only to the flavors a Workload is assigned): the readmission gate would "
    "not hold; give the runtime's containers resource requests"
)


def unchecked(workload: Mapping[str, Any] | None) -> str | None:
    """Why Kueue would admit this Workload past dispatch's AdmissionCheck, or None.

    Kueue (pkg/workload AdmissionChecksForWorkload) keeps only the checks whose flavors intersect the flavors
    of the admission, and a pod set that requests nothing is assigned none. So a Workload none of whose
    containers requests (or limits, which default requests) anything is admitted with no check at all.
    """
    if workload is None:
        return None
    for pod_set in dig(workload, "spec", "podSets") or []:
        pod_spec = dig(pod_set, "template", "spec") or {}
        for key in ("containers", "initContainers"):
            for container in pod_spec.get(key) or []:
                resources = container.get("resources") if isinstance(container, Mapping) else None
                if isinstance(resources, Mapping) and (resources.get("requests") or resources.get("limits")):
                    return None
    return UNCHECKED


def owner_patch(copy_read: Mapping[str, Any], owner_ref: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON Patch adding the runtime copy's ownerReference to its TrainJob; empty when it is there."""
    refs = dig(copy_read, "metadata", "ownerReferences")
    if isinstance(refs, list) and any(isinstance(r, Mapping) and r.get("uid") == owner_ref["uid"] for r in refs):
        return []
    ops = preconditions(copy_read)
    if isinstance(refs, list):
        ops.append({"op": "add", "path": "/metadata/ownerReferences/-", "value": dict(owner_ref)})
    else:
        ops.append(add_op(copy_read, ("metadata", "ownerReferences"), [dict(owner_ref)]))
    return ops


# -- List -----------------------------------------------------------------------------------------


def name_prefix(job_id: str | None) -> str | None:
    """The name prefix of a JobID's TrainJobs (``dj-<lowercase JobID>-s``): the name, not a label, says whose
    a TrainJob is, so a stripped label hides nothing."""
    if job_id is None:
        return None
    contract(validate_job_id, job_id)
    return f"dj-{job_id.lower()}-s"


UNKNOWN: Final = "Unknown"
"""List's phase of a Kueue-mode TrainJob that several Workloads claim (Status answers ``conflict``, naming them)."""


def list_items(
    trainjobs: Iterable[Mapping[str, Any]],
    workloads: Iterable[Mapping[str, Any]],
    checks: Sequence[str],
    prefix: str | None,
) -> list[ListItem]:
    """dispatch's TrainJobs among those listed (the spec's test: the name, or dispatch's runtime patch; never
    labels), with their phase as Status computes it and their orphan reference ``<namespace>/<name>``."""
    found = []
    workloads = list(workloads)
    for tj in trainjobs:
        name, ns, uid = dig(tj, "metadata", "name"), dig(tj, "metadata", "namespace"), dig(tj, "metadata", "uid")
        if not is_dispatch(tj) or not isinstance(name, str) or (prefix and not name.startswith(prefix)):
            continue
        try:
            parsed = parse_name(name)
            job_id, n = parsed.job_id, parsed.n
        except ContractError:
            job_id, n = None, None
        claiming = controlled_workloads(workloads, str(uid)) if is_kueue_mode(tj) else []
        # Several Workloads claiming it: Status answers conflict, naming them.
        state = UNKNOWN if len(claiming) > 1 else phase(tj, claiming[0] if claiming else None, checks)
        found.append(
            ListItem(
                namespace=str(ns),
                name=name,
                uid=str(uid),
                job_id=job_id,
                n=n,
                phase=state,
                orphan=f"{ns}/{name}",
                deletion_timestamp=dig(tj, "metadata", "deletionTimestamp"),
            )
        )
    return found


# -- Hold -----------------------------------------------------------------------------------------


def rfc3339(moment: dt.datetime) -> str:
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def hold_of(*, instance: str, now: dt.datetime, who: str, reason: str, until: str | None) -> Hold:
    if until is not None and parse_rfc3339(until) is None:
        raise ApiError(ErrorKind.INVALID, f"{until!r} is not an RFC 3339 date-time with an offset", field="until")
    return Hold(instance=instance, since=rfc3339(now), who=who, reason=reason, until=until)


# -- Output ---------------------------------------------------------------------------------------


def rank0(pods: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """Rank 0's pod of the latest execution: completion index 0, the highest JobSet restart, the newest."""
    candidates = [p for p in pods if labels(p).get(LABEL_JOB_COMPLETION_INDEX) == "0"]

    def order(pod: Mapping[str, Any]) -> tuple[int, str]:
        attempt = labels(pod).get(LABEL_RESTART_ATTEMPT)
        j = int(attempt) if isinstance(attempt, str) and attempt.isdigit() else -1
        return j, str(dig(pod, "metadata", "creationTimestamp") or "")

    return max(candidates, key=order, default=None)


# -- Preflight ------------------------------------------------------------------------------------


def probe_trainjob(sub: Submission, runtime_spec: Mapping[str, Any]) -> dict[str, Any]:
    """The probe: a dispatch TrainJob as Start builds it, whose trainer pods could never be scheduled.

    The node selector goes into dispatch's own runtime patch entry (its pod spec), not into the runtime copy,
    whose spec stays the source's verbatim as for every job: the probe is then exactly what Start creates,
    plus a label no node carries. With the image in a reserved TLD, a pod that appears despite the gate
    still runs nothing.
    """
    tj = build_trainjob(sub, runtime_spec)
    i = dispatch_patch_index(tj)
    assert i is not None  # build_trainjob always writes dispatch's entry
    jobs = tj["spec"]["runtimePatches"][i]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod_template = jobs[0]["template"]["spec"]["template"]
    pod_template.setdefault("spec", {})["nodeSelector"] = {PROBE_NODE_SELECTOR_KEY: PROBE_NODE_SELECTOR_VALUE}
    return tj


def probe_leaks(
    trainjob: Mapping[str, Any] | None, workload: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]
) -> list[str]:
    """What shows that the closed probe got through its gate: a pod, an admission, an unsuspended TrainJob."""
    leaks = [f"pod {dig(p, 'metadata', 'name')} appeared" for p in pods]
    if trainjob is not None and dig(trainjob, "spec", "suspend") is not True:
        leaks.append("the probe TrainJob was unsuspended")
    for condition in ("QuotaReserved", "Admitted"):
        if condition_true(workload, condition):
            leaks.append(f"its Workload has {condition}=True")
    return leaks


@dataclass(frozen=True)
class LeaseState:
    renewed: str | None
    fresh: bool
    reason: str
    settled: bool = True
    """False: not known yet; watch the Lease longer."""


def _renew_time(lease: Mapping[str, Any] | None) -> str | None:
    value = dig(lease, "spec", "renewTime")
    return value if isinstance(value, str) else None


def lease_state(
    first: Mapping[str, Any] | None, last: Mapping[str, Any] | None, watched: float, where: str
) -> LeaseState:
    """The readmission controller's heartbeat, judged as agent/runtime/leader.py judges expiry: by watching the
    Lease's record change over ``watched`` seconds of this agent's own monotonic clock, never by comparing
    the renewTime another machine wrote with this one's wall clock (clock skew would decide).

    Alive: the record (holder, renewTime, …) changed while watched and someone holds it. Dead: no Lease,
    a Lease released on shutdown (no holder), or one unchanged for its leaseDurationSeconds of watching.
    Otherwise not settled: watch longer."""
    if last is None:
        return LeaseState(None, False, f"the readmission controller's Lease {where} does not exist")
    renewed, record = _renew_time(last), record_of(last)
    if not record.holder:
        return LeaseState(
            renewed,
            False,
            f"the readmission controller is dead: its Lease {where} was released (it has no holder): the controller "
            "stopped",
        )
    if first is not None and record_of(first) != record:
        return LeaseState(renewed, True, f"the Lease {where} was renewed by {record.holder} while watched")
    if watched >= record.duration:
        return LeaseState(
            renewed,
            False,
            f"the readmission controller is dead: its Lease {where} was not renewed in {watched:.0f}s of watching, "
            f"its leaseDurationSeconds ({record.duration})",
        )
    return LeaseState(renewed, False, f"the Lease {where} has not changed yet", settled=False)


def not_watched(lease: Mapping[str, Any] | None) -> LeaseState:
    """Plain mode needs no readmission controller: its Lease is reported, not judged."""
    return LeaseState(_renew_time(lease), False, "not watched: plain mode needs no readmission controller")


# -- The verdict, shared on the Lease, one per mode -------------------------------------------------


def verdict_key(kueue: bool) -> str:
    """The Lease annotation that holds a mode's verdict: a Preflight of one mode never touches the other's."""
    return ANNOTATION_PREFLIGHT_KUEUE if kueue else ANNOTATION_PREFLIGHT_PLAIN


def mode_name(kueue: bool) -> str:
    return "kueue" if kueue else "plain"


def verdict_text(report: Capabilities, at: str) -> str:
    """The annotation's value: the report as the API answers it, and when it was made."""
    return json.dumps(
        {"at": at, "report": report.model_dump(mode="json", by_alias=True)}, separators=(",", ":"), sort_keys=True
    )


UNREADABLE_VERDICT: Final = "the Preflight verdict recorded on the Lease cannot be read"


def verdict_of(lease: Mapping[str, Any] | None, kueue: bool) -> Capabilities | None:
    """The mode's last Preflight report as recorded on the Lease; None when none is recorded. One that cannot
    be read (edited by someone) is observe-only, naming why: the gates are not proven by it."""
    text = annotations(lease).get(verdict_key(kueue))
    if text is None:
        return None
    try:
        report = Capabilities.model_validate(json.loads(text)["report"], by_alias=True)
    except (ValueError, TypeError, KeyError, ValidationError):
        return unproven(UNREADABLE_VERDICT, observe_only=True, kueue=kueue)
    return report if report.mode is not None else report.model_copy(update={"mode": mode_name(kueue)})


def latest_mode(lease: Mapping[str, Any] | None) -> bool | None:
    """The mode (True: Kueue) whose verdict was recorded last, for Capabilities; None before any. A verdict
    whose time cannot be read counts as the oldest."""
    recorded: list[tuple[dt.datetime, bool]] = []
    for kueue in (True, False):
        text = annotations(lease).get(verdict_key(kueue))
        if text is None:
            continue
        try:
            at = parse_rfc3339(json.loads(text).get("at"))
        except (ValueError, TypeError, AttributeError):
            at = None
        recorded.append((at or dt.datetime.min.replace(tzinfo=dt.UTC), kueue))
    return max(recorded)[1] if recorded else None


def lease_with_verdict(
    lease: Mapping[str, Any] | None, text: str, namespace: str, name: str, kueue: bool
) -> dict[str, Any]:
    """The Lease as read with the mode's verdict annotation set (resourceVersion kept: the PUT's precondition),
    or a new Lease that carries only the verdict (no holder: leader election takes it over as an expired one)."""
    key = verdict_key(kueue)
    if lease is None:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace, "annotations": {key: text}},
            "spec": {},
        }
    meta = dict(lease.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), key: text}
    meta.pop("managedFields", None)
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", **dict(lease), "metadata": meta}


# -- Observe-only now: the mode's verdict, and in Kueue mode the controller's heartbeat -----------------


@dataclass(frozen=True)
class Sighting:
    """The Lease's record as this replica last read it, and since when (its own monotonic clock) it has
    read that same record."""

    record: Record
    since: float


def sighted(previous: Sighting | None, lease: Mapping[str, Any] | None, clock: float) -> Sighting | None:
    """The sighting after one more read of the Lease at ``clock``: kept while the record is unchanged."""
    if lease is None:
        return None
    record = record_of(lease)
    if previous is not None and previous.record == record:
        return previous
    return Sighting(record, clock)


@dataclass(frozen=True)
class Heartbeat:
    alive: bool
    reason: str
    renewed: str | None


CONTROLLER_DOWN: Final = "the readmission controller is down"


def heartbeat(
    lease: Mapping[str, Any] | None, sighting: Sighting | None, *, now: dt.datetime, clock: float, where: str
) -> Heartbeat:
    """Is the readmission controller running, from one read of its Lease (it runs in the agent's leader)?
    Alive while the leader renews the Lease within its leaseDurationSeconds: someone holds it, its renewTime
    plus the duration lies ahead of ``now``, and this replica has not read the very same record for a whole
    duration of its own monotonic ``clock`` (``sighting``). The last catches a renewTime written by a clock
    that runs ahead, which ``now`` alone would call fresh: it expires after one duration of watching."""
    if lease is None:
        return Heartbeat(False, f"its Lease {where} does not exist", None)
    record = record_of(lease)
    if not record.holder:
        return Heartbeat(False, f"its Lease {where} was released (it has no holder)", record.renew_time)
    renewed = parse_rfc3339(record.renew_time)
    if renewed is None:
        return Heartbeat(False, f"its Lease {where} has no readable renewTime", record.renew_time)
    age = (now - renewed).total_seconds()
    if age >= record.duration:
        return Heartbeat(
            False,
            f"its Lease {where} was last renewed at {record.renew_time}, {age:.0f}s ago, longer than its "
            f"leaseDurationSeconds ({record.duration})",
            record.renew_time,
        )
    if sighting is not None and sighting.record == record and clock - sighting.since >= record.duration:
        return Heartbeat(
            False,
            f"its Lease {where} has not been renewed in {clock - sighting.since:.0f}s of watching, longer than its "
            f"leaseDurationSeconds ({record.duration})",
            record.renew_time,
        )
    return Heartbeat(
        True, f"the Lease {where} is held by {record.holder}, renewed at {record.renew_time}", record.renew_time
    )


def no_verdict(require_preflight: bool, kueue: bool | None = None) -> Capabilities:
    """The report while no Preflight of the mode has recorded a verdict in the cluster."""
    if require_preflight:
        return unproven("no Preflight has passed yet", observe_only=True, kueue=kueue)
    return unproven("no Preflight has run yet", observe_only=False, kueue=kueue)


def in_force(verdict: Capabilities | None, beat: Heartbeat, *, kueue: bool, require_preflight: bool) -> Capabilities:
    """What holds now for the calls of one mode: its last Preflight's verdict (before any, what
    ``requirePreflight`` says), and in Kueue mode only while the readmission controller's Lease is renewed.
    A passing verdict does not outlive the controller: while its Lease is stale the mode is observe-only,
    and once it is renewed again the verdict holds again. Plain mode needs no readmission controller."""
    report = verdict or no_verdict(require_preflight, kueue)
    if not kueue or beat.alive:
        return report
    down = f"{CONTROLLER_DOWN}: {beat.reason}"
    trouble = [down] + ([report.observe_only_reason] if report.observe_only and report.observe_only_reason else [])
    return report.model_copy(
        update={
            "readmission_gate": False,
            "readmission_gate_reason": down,
            "lease_renewed": beat.renewed,
            "observe_only": True,
            "observe_only_reason": "; ".join(trouble),
        }
    )


def refusal(verdict: Capabilities | None, beat: Heartbeat, *, kueue: bool, require_preflight: bool) -> str | None:
    """Why a call that may let something run (Start, Open, Release) is refused in this mode, saying how each
    cause ends; None when it may go on."""
    parts = []
    if kueue and not beat.alive:
        parts.append(f"{CONTROLLER_DOWN} ({beat.reason}) until its leader renews the Lease")
    report = verdict or no_verdict(require_preflight, kueue)
    if report.observe_only:
        mode = "Kueue" if kueue else "plain"
        parts.append(
            f"until a {mode}-mode Preflight passes: {report.observe_only_reason or 'the gates are not proven'}"
        )
    if not parts:
        return None
    return f"observe-only in {'Kueue' if kueue else 'plain'} mode: " + "; ".join(parts)


def api_versions(discovery: Any) -> dict[str, list[str]]:
    """Versions served of the groups dispatch uses, from ``GET /apis``; preferred first."""
    found: dict[str, list[str]] = {group: [] for group in GROUPS}
    for group in (discovery or {}).get("groups") or []:
        name = group.get("name")
        if name in found:
            versions = [v.get("version") for v in group.get("versions") or [] if v.get("version")]
            preferred = dig(group, "preferredVersion", "version")
            found[name] = sorted(versions, key=lambda v: v != preferred)
    return found


def active(admission_checks: Iterable[Mapping[str, Any]], names: Iterable[str]) -> list[str]:
    named = set(names)
    return [
        str(dig(c, "metadata", "name"))
        for c in admission_checks
        if dig(c, "metadata", "name") in named and condition_true(c, "Active")
    ]


@dataclass(frozen=True)
class ProbeResult:
    seconds: float
    leaks: tuple[str, ...] = ()
    workload_problems: tuple[str, ...] = ()
    """Kueue mode: why the probe's Workload shows that Kueue does not manage it as dispatch needs."""
    error: str | None = None
    """The probe could not be run (created, watched) at all."""
    open_refused: str | None = None
    """Plain mode: why the API server refused Open's write on the probe (a dry run), or None."""
    unnumbered: str | None = None
    """Kueue mode: why the probe's start (opened and unsuspended, a dry run) was refused or not numbered by
    dispatch's admission, or None."""
    unapproved: str | None = None
    """Kueue mode: why the probe's start without the gate's approval was not refused (a dry run), or None."""
    owner_problems: tuple[str, ...] = ()
    """Which of the owners that build a job's objects wrote nothing for the probe (``owner_problems``)."""


def unnumbered(answer: Mapping[str, Any]) -> str | None:
    """Why the API server's answer to the probe's start (a dry run) shows that no admission numbered it: A not
    raised above 0, or not recorded as ``admission-started``. None when numbered."""
    try:
        a, started = admission_count(answer), admission_started(answer)
    except ContractError as exc:
        return f"the answer's A is unreadable: {exc}"
    if not a or started != a:
        return (
            f"the start was not numbered (A {a}, recorded {started}): neither dispatch's MutatingAdmissionPolicy "
            "record-start nor its mutating webhook raised A in the write, so Kueue's admissions would all run with "
            "one A"
        )
    return None


OWNERS_NOT_GIVEN: Final = (
    "the owners' principals were not given to the agent (api.owners), so Preflight did not prove them (the chart "
    "gives them)"
)


PROBE_APPROVAL: Final = "preflight-dry-run"
"""The Workload uid in the approval Preflight's dry-run start carries: the probe is never admitted."""
UNAPPROVED_START: Final = (
    "the probe's start without the readmission gate's approval (no approved-admission of its A) was accepted: "
    "neither the unsuspend policy nor dispatch's webhook refuses it, so a queue that admits without dispatch's "
    "check (a LocalQueue re-pointed or drained) would start a job without the gate's wait. Upgrade the chart's "
    "policies and webhook configurations to this version"
)


def owner_problems(jobset: Mapping[str, Any] | None, job: Mapping[str, Any] | None, seconds: float) -> list[str]:
    """The probe's objects the owners must have made within ``seconds``, though it stays closed: Trainer its JobSet,
    JobSet that JobSet's first Job (suspended). Either missing means that component cannot write a dispatch job's
    objects: most often it runs under a principal the owner policies do not name (docs/install.md, "Who may write a
    dispatch job's objects"), so every dispatch job would stall there."""
    if jobset is None:
        return [
            f"Trainer made no JobSet for the probe within {seconds:g}s: does it run as a principal of the chart's "
            "webhook.owners.trainer? The owner policies refuse a dispatch job's JobSet to anyone else"
        ]
    if job is None:
        return [
            f"JobSet made no Job for the probe's JobSet within {seconds:g}s: does it run as a principal of the chart's "
            "webhook.owners.jobset? The owner policies refuse a dispatch job's Jobs to anyone else"
        ]
    return []


TRAINJOB_KIND: Final = {"group": TRAINER_GROUP, "version": "v1alpha1", "kind": "TrainJob"}
MINIMUM_TRAINER: Final = "v2.2.1"


def trainjob_schema_problems(document: Mapping[str, Any] | None) -> list[str]:
    """What the served TrainJob schema (OpenAPI v3 of trainer.kubeflow.org/v1alpha1) lacks that dispatch
    writes. ``spec.runtimePatches`` (where A lives) and ``spec.activeDeadlineSeconds`` came with Trainer
    v2.2.0; an API server prunes fields its schema does not know, silently, so an older Trainer would store
    a TrainJob without A."""
    schemas = dig(document, "components", "schemas")
    for schema in schemas.values() if isinstance(schemas, Mapping) else []:
        kinds = schema.get("x-kubernetes-group-version-kind") if isinstance(schema, Mapping) else None
        if isinstance(kinds, list) and TRAINJOB_KIND in kinds:
            spec = dig(schema, "properties", "spec", "properties") or {}
            missing = [f for f in ("runtimePatches", "activeDeadlineSeconds") if f not in spec]
            return [
                f"the served TrainJob has no spec.{f}: Trainer is older than v2.2.0; dispatch needs "
                f"Trainer {MINIMUM_TRAINER} or later"
                for f in missing
            ]
    return [f"the API server serves no TrainJob schema in {TRAINER_GROUP}/v1alpha1 (is Trainer installed?)"]


def capabilities(
    *,
    kueue: bool,
    probe: ProbeResult,
    lease: LeaseState,
    versions: Mapping[str, list[str]],
    checks: Sequence[str],
    active_checks: Sequence[str],
    trainer_problems: Sequence[str] = (),
    records_in_process: bool = True,
    owners_proven: bool = True,
    owner_notes: Sequence[str] = (),
) -> Capabilities:
    """The capabilities report, and whether the adapter must be observe-only (and why). ``records_in_process``:
    the API server serves MutatingAdmissionPolicy, so the chart's policy records A at every unsuspend even while
    dispatch's webhook is down; without it the gates hold still (an unrecorded unsuspend is refused), but an outage
    of the webhook then stops every execution, which the start gate's reason says. ``owner_notes``: what the
    proof of the principals took as configured (agent/api/principals.py ``principal_notes``), said in the trainer's
    reason whatever the verdict, never a reason to be observe-only."""
    if probe.error is not None:
        start_gate, start_reason = False, f"the probe could not be run: {probe.error}"
    elif probe.leaks:
        start_gate, start_reason = False, "the start gate leaks: " + "; ".join(probe.leaks)
    else:
        start_gate, start_reason = True, f"the closed probe stayed closed for {probe.seconds:g}s"
        if not records_in_process:
            start_reason += (
                "; the API server serves no MutatingAdmissionPolicy, so dispatch's webhook alone records A at each "
                "unsuspend: while it is down, every unsuspend is refused (fail closed)"
            )
    if not kueue:
        readmission, readmission_reason = False, "not needed: nothing re-admits a plain-mode TrainJob"
        trouble = [] if start_gate else [start_reason]
    else:
        problems = []
        if not versions.get(KUEUE_GROUP):
            problems.append(f"the API server serves no {KUEUE_GROUP} API")
        if not checks:
            problems.append(f"no AdmissionCheck has controllerName {ADMISSION_CHECK_CONTROLLER}")
        elif not active_checks:
            problems.append(f"dispatch's AdmissionCheck ({', '.join(checks)}) is not Active")
        problems += list(probe.workload_problems)
        if probe.unapproved is not None:
            problems.append(probe.unapproved)
        if not lease.fresh:
            problems.append(lease.reason)
        readmission = not problems
        readmission_reason = (
            f"dispatch's AdmissionCheck {', '.join(active_checks)} is Active and listed on the probe's Workload; "
            + lease.reason
            if readmission
            else "; ".join(problems)
        )
        trouble = ([] if start_gate else [start_reason]) + ([] if readmission else [readmission_reason])
    trainer = [*trainer_problems, *probe.owner_problems]
    if probe.unnumbered is not None:
        trainer.append(
            "the probe's start (opened and unsuspended in one update, a dry run) was not numbered by dispatch's "
            f"admission: {probe.unnumbered}; Kueue-mode executions are numbered in the write that starts them "
            f"(install the chart's admission; Trainer's webhook accepts A changing in it from {MINIMUM_TRAINER} on)"
        )
    if probe.open_refused is not None:
        trainer.append(
            "the API server refuses Open's own write on the probe (raise A and unsuspend in one update, a dry run): "
            f"{probe.open_refused}; Trainer's webhook accepts it from {MINIMUM_TRAINER} on (v2.2.0 refuses a runtime "
            "patch change unless the TrainJob stays suspended), so plain-mode Open and Release could not raise A"
        )
    trainer_reason = "; ".join(trainer) or (
        "the served TrainJob has spec.runtimePatches and spec.activeDeadlineSeconds"
        + (
            "; a start is numbered in its own write (a dry run on the probe)"
            if kueue
            else "; Open's write (raise A, unsuspend) is accepted (a dry run on the probe)"
        )
        + ("" if owners_proven else f"; {OWNERS_NOT_GIVEN}")
    )
    trainer_reason = "; ".join([trainer_reason, *owner_notes])
    trouble += trainer
    return Capabilities(
        trainer=not trainer,
        trainer_reason=trainer_reason,
        start_gate=start_gate,
        start_gate_reason=start_reason,
        readmission_gate=readmission,
        readmission_gate_reason=readmission_reason,
        lease_renewed=lease.renewed,
        versions=dict(versions),
        observe_only=bool(trouble),
        observe_only_reason="; ".join(trouble) or None,
        mode=mode_name(kueue),
    )


def unproven(reason: str, observe_only: bool, kueue: bool | None = None) -> Capabilities:
    """The report of a mode (None: of no mode) while no verdict proves the gates."""
    return Capabilities(
        trainer=False,
        trainer_reason=reason,
        start_gate=False,
        start_gate_reason=reason,
        readmission_gate=False,
        readmission_gate_reason=reason,
        lease_renewed=None,
        versions={},
        observe_only=observe_only,
        observe_only_reason=reason if observe_only else None,
        mode=None if kueue is None else mode_name(kueue),
    )


def after_own_write(patch: list[dict[str, Any]], version: str | None) -> list[dict[str, Any]]:
    """``patch``, preconditioned on ``version`` instead of the resourceVersion read, when the plan's write before
    it to the same object left ``version`` (a Workload's metadata, then its status). That write was preconditioned
    on the read, so nothing else was written between: the object is still the one read, plus our own write."""
    if version is None:
        return patch
    at = pointer("metadata", "resourceVersion")
    return [{**op, "value": version} if op.get("path") == at and op.get("op") == "replace" else op for op in patch]
