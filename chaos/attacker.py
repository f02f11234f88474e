"""The campaign's attacker: a stranger's hostile writes on live dispatch jobs, each answer classified.

docs/security.md is the threat model. A stranger holds the built-in `edit` role and every right on Trainer's,
Kueue's and JobSet's kinds in the jobs' namespace (``stranger``); on a dispatch job's objects it may do nothing
but delete or evict a pod. Each round (``Attacker.round``) picks a live dispatch job and an attack of ``CATALOG``
with the campaign's seed, builds the write from the job's objects as the admin reads them at that moment, sends
it as the stranger, and records what answered (``classify``):

* ``refused``: admission refused it: a ValidatingAdmissionPolicy (``by`` "policy <name>"), a webhook's denial
  ("webhook <name>"), or a webhook that could not be called while its failure policy is Fail ("webhook-down
  (fail closed)");
* ``allowed-by-design``: it succeeded, and the threat model lets anyone make it (a trainer pod deleted or evicted);
* ``got-through``: any other write that succeeded: a breach;
* ``invalid``: refused before admission or for another reason (RBAC, schema validation, the object gone, a
  conflict): the write tested nothing, so the catalog builds its writes to avoid these;
* ``error``: no answer from admission at all (connection refused, a timeout, a 5xx) while a fault is injected.

The core (the catalog, ``pick_job``, ``pick_attack``, ``classify``) is pure over plain objects; ``Attacker`` is
the shell that reads and writes.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import random
import re
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from contract.admission import admission_path
from contract.errors import ContractError
from contract.gates import gates_of, without_dispatch_gate
from contract.keys import (
    ADMISSION_CHECK_CONTROLLER,
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_OPENED,
    ENV_EPOCH,
    GATE,
    HOLD_ANNOTATIONS,
    LABEL_JOB_COMPLETION_INDEX,
    LABEL_JOB_ID,
    LABEL_JOBSET_NAME,
    LABEL_QUEUE_NAME,
    LABEL_REPLICATED_JOB_NAME,
    LABEL_RESTART_ATTEMPT,
    LABEL_WORKLOAD_JOB_UID,
    OPENED_TRUE,
    POD_FINALIZER,
    TRAINER_CONTAINER,
)
from contract.names import is_dispatch_name
from contract.objects import add_op, annotations, dig, labels, pointer
from harness.cluster import ControlPlane
from harness.kube_http import ApiError, KubeHttp
from harness.sandbox.site import JOBSET_V, KUEUE_V, TRAINER_V

REFUSED: Final = "refused"
ALLOWED: Final = "allowed-by-design"
GOT_THROUGH: Final = "got-through"
INVALID: Final = "invalid"
ERROR: Final = "error"
OUTCOMES: Final = (REFUSED, ALLOWED, GOT_THROUGH, INVALID, ERROR)

MERGE: Final = "application/merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
JSON: Final = "application/json"

FORGED_A: Final = "999999"
"""A pushed to its bound (attack 7): no later raise would fit."""
ALLOWED_RATE: Final = 0.05
"""How often a round makes one of the writes a stranger may make (a trainer pod deleted or evicted): rarely, since
each makes JobSet restart the job."""
TOKEN_SECONDS: Final = 2 * 24 * 3600
"""The stranger's token outlives any campaign."""

# -- the stranger --------------------------------------------------------------------------------------------

RBAC_V: Final = "rbac.authorization.k8s.io/v1"
STRANGER_GROUPS: Final = ("trainer.kubeflow.org", "kueue.x-k8s.io", "jobset.x-k8s.io")
STATUS_RIGHTS: Final = (("", "pods/status"), ("batch", "jobs/status"))
"""What `edit` leaves out and a stranger "whatever their RBAC" may hold: without them the forged pod phase and the
forged Job status would be refused by RBAC and test nothing of dispatch's."""


def stranger_rules() -> list[dict[str, Any]]:
    """Every verb on every resource and subresource of Trainer's, Kueue's and JobSet's groups, and the writes of
    pods' and Jobs' status (beside `edit`, bound separately)."""
    rules: list[dict[str, Any]] = [{"apiGroups": [g], "resources": ["*"], "verbs": ["*"]} for g in STRANGER_GROUPS]
    rules += [{"apiGroups": [g], "resources": [r], "verbs": ["update", "patch"]} for g, r in STATUS_RIGHTS]
    return rules


def _require_edit(admin: KubeHttp, within: float = 60) -> None:
    """The built-in ClusterRole `edit` exists (the API server's bootstrap RBAC makes it) and has its rules: they
    are aggregated into it by kube-controller-manager's clusterrole-aggregation controller, so on an API server
    without it (tier A) the role is empty."""
    deadline = time.monotonic() + within
    while True:
        try:
            role = admin.request("GET", "/apis/rbac.authorization.k8s.io/v1/clusterroles/edit")
        except ApiError as exc:
            if exc.status == 404:
                raise RuntimeError("the API server has no built-in ClusterRole `edit` (bootstrap RBAC off?)") from None
            raise
        if role.get("rules"):
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                "the built-in ClusterRole `edit` has no rules: nothing aggregated them "
                "(kube-controller-manager's clusterrole-aggregation controller is not running)"
            )
        time.sleep(1)


def stranger(cp: ControlPlane, namespace: str, name: str = "attacker") -> KubeHttp:
    """A ServiceAccount ``name`` of ``namespace`` bound to `edit` and to a Role of ``stranger_rules()`` there
    (idempotent), and a client holding a token of it, once its rights are in force."""
    admin = cp.admin
    _require_edit(admin)
    cp.ensure_service_account(namespace, name)
    subject = [{"kind": "ServiceAccount", "name": name, "namespace": namespace}]
    role = f"{name}-dispatch-kinds"
    admin.apply({"apiVersion": RBAC_V, "kind": "Role", "metadata": {"name": role, "namespace": namespace},
                 "rules": stranger_rules()})  # fmt: skip
    for binding, kind, ref in ((f"{name}-edit", "ClusterRole", "edit"), (role, "Role", role)):
        admin.apply({"apiVersion": RBAC_V, "kind": "RoleBinding",
                     "metadata": {"name": binding, "namespace": namespace}, "subjects": subject,
                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": ref}})  # fmt: skip
    client = KubeHttp(cp.service_account_credentials(namespace, name, expiration_seconds=TOKEN_SECONDS), timeout=15)
    deadline = time.monotonic() + 30
    for path in (_collection("TrainJob", namespace), _collection("Pod", namespace)):  # RBAC's caches catch up
        while True:
            try:
                client.request("GET", path, query={"limit": "1"})
                break
            except ApiError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
    return client


# -- paths -------------------------------------------------------------------------------------------------

KINDS: Final[dict[str, tuple[str, str]]] = {
    "TrainJob": (TRAINER_V, "trainjobs"),
    "TrainingRuntime": (TRAINER_V, "trainingruntimes"),
    "JobSet": (JOBSET_V, "jobsets"),
    "Job": ("batch/v1", "jobs"),
    "Pod": ("v1", "pods"),
    "Workload": (KUEUE_V, "workloads"),
    "LocalQueue": (KUEUE_V, "localqueues"),
}
"""The namespaced kinds the attacker reads and writes, at the versions it reads them."""


def _collection(kind: str, namespace: str) -> str:
    api_version, plural = KINDS[kind]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{base}/namespaces/{namespace}/{plural}"


def _path(kind: str, obj: Mapping[str, Any], sub: str = "") -> str:
    meta = obj["metadata"]
    return f"{_collection(kind, meta['namespace'])}/{meta['name']}" + (f"/{sub}" if sub else "")


# -- what a round reads -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Objects:
    """One dispatch job's objects as the admin read them for this round."""

    namespace: str
    trainjob: dict[str, Any]
    workload: dict[str, Any] | None = None
    jobset: dict[str, Any] | None = None
    jobs: tuple[dict[str, Any], ...] = ()
    pods: tuple[dict[str, Any], ...] = ()
    """The job's live trainer pods: labelled with its JobSet, a Job their controller, not being deleted."""
    runtime_copy: dict[str, Any] | None = None
    checks: frozenset[str] = frozenset()
    """The names of the AdmissionChecks dispatch's controller serves (the chart names its own; the name is not the
    controller's)."""
    queues: tuple[str, ...] = ()
    """The namespace's LocalQueues."""
    own_pod: dict[str, Any] | None = None
    """The stranger's own pod (no mark of dispatch's), for dispatch's finalizer put on it."""

    @property
    def name(self) -> str:
        return str(self.trainjob["metadata"]["name"])


@dataclass(frozen=True)
class Write:
    method: str
    path: str
    body: Any
    content_type: str
    target: str
    """What the write aims at, as `<Kind>/<name>[/<subresource>]`."""


@dataclass(frozen=True)
class Attack:
    name: str
    threat: str
    """What it tries, in the threat model's words (its attack number where it has one)."""
    applies: Callable[[Objects], bool]
    build: Callable[[Objects, random.Random], Write]
    allowed: bool = False
    """The threat model lets anyone make this write."""


def _hex(rng: random.Random, digits: int = 6) -> str:
    return f"{rng.getrandbits(4 * digits):0{digits}x}"


def _target(kind: str, obj: Mapping[str, Any], sub: str = "") -> str:
    return f"{kind}/{obj['metadata']['name']}" + (f"/{sub}" if sub else "")


def _patch(kind: str, obj: Mapping[str, Any], body: Any, *, sub: str = "", content_type: str = MERGE) -> Write:
    return Write("PATCH", _path(kind, obj, sub), body, content_type, _target(kind, obj, sub))


def _delete(kind: str, obj: Mapping[str, Any]) -> Write:
    return Write("DELETE", _path(kind, obj), None, JSON, _target(kind, obj))


def _pick(rng: random.Random, objs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    return rng.choice(sorted(objs, key=lambda o: str(o["metadata"]["name"])))


def _suspended(obj: object) -> bool:
    return dig(obj, "spec", "suspend") is True


def _held(obj: object) -> bool:
    return any(key in annotations(obj) for key in HOLD_ANNOTATIONS)


def _a(o: Objects) -> int | None:
    """A in dispatch's entry, or None when the entry is not where the contract puts it."""
    try:
        value = dig(o.trainjob, *admission_path(o.trainjob))
    except ContractError:
        return None
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _floor(o: Objects) -> int | None:
    value = annotations(o.trainjob).get(ANNOTATION_ADMISSION_FLOOR)
    return int(value) if isinstance(value, str) and value.isdigit() else None


def _trainer_replicated_job(o: Objects) -> str:
    """The replicated job dispatch's entry patches (the trainer's)."""
    try:
        path = admission_path(o.trainjob)
    except ContractError:
        return TRAINER_CONTAINER
    name = dig(o.trainjob, *path[:-6], "name")
    return str(name) if isinstance(name, str) else TRAINER_CONTAINER


def _check_entry(o: Objects) -> dict[str, Any] | None:
    for entry in dig(o.workload, "status", "admissionChecks") or []:
        if isinstance(entry, dict) and entry.get("name") in o.checks:
            return entry
    return None


def _with_check(o: Objects, change: Mapping[str, Any]) -> dict[str, Any]:
    """``workloads/status`` with dispatch's check entry changed: a merge patch replaces the whole list, so every
    other entry is sent as read."""
    entries = [
        {**e, **change} if e.get("name") in o.checks else e for e in dig(o.workload, "status", "admissionChecks") or []
    ]
    return {"status": {"admissionChecks": entries}}


def _quota_reserved(obj: object) -> bool:
    return any(
        c.get("type") == "QuotaReserved" and c.get("status") == "True"
        for c in dig(obj, "status", "conditions") or []
        if isinstance(c, Mapping)
    )


# -- the Workload's check, the TrainJob ------------------------------------------------------------------


def _forge_ready(o: Objects, rng: random.Random) -> Write:
    body = _with_check(o, {"state": "Ready", "message": "admission count A raised (forged)"})
    return _patch("Workload", o.workload or {}, body, sub="status")


def _forge_pod_set_updates(o: Objects, rng: random.Random) -> Write:
    podset = dig(o.workload, "spec", "podSets", 0, "name") or TRAINER_CONTAINER
    update: dict[str, Any] = rng.choice(
        (
            {"annotations": {ANNOTATION_ADMISSION: FORGED_A}},
            {"labels": {LABEL_JOB_ID: "forged"}},
            {"labels": {LABEL_RESTART_ATTEMPT: "0"}},
        )
    )
    return _patch("Workload", o.workload or {}, _with_check(o, {"podSetUpdates": [{"name": podset, **update}]}),
                  sub="status")  # fmt: skip


def _remove_gate(kind: str) -> Callable[[Objects, random.Random], Write]:
    def build(o: Objects, rng: random.Random) -> Write:
        obj = o.trainjob if kind == "TrainJob" else o.workload or {}
        value = without_dispatch_gate(annotations(obj).get(ANNOTATION_ADMISSION_GATED_BY))
        return _patch(kind, obj, {"metadata": {"annotations": {ANNOTATION_ADMISSION_GATED_BY: value}}})

    return build


def _forge_open(o: Objects, rng: random.Random) -> Write:
    """Open as dispatch writes it, by someone else: the gate gone, the opened mark, and (plain mode) unsuspended."""
    value = without_dispatch_gate(annotations(o.trainjob).get(ANNOTATION_ADMISSION_GATED_BY))
    body: dict[str, Any] = {"metadata": {"annotations": {ANNOTATION_OPENED: OPENED_TRUE}}}
    if GATE in gates_of(o.trainjob):
        body["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] = value
    if not labels(o.trainjob).get(LABEL_QUEUE_NAME):
        body["spec"] = {"suspend": False}
    return _patch("TrainJob", o.trainjob, body)


FOREIGN_POD_PATCHES: Final[dict[str, dict[str, Any]]] = {
    "A": {"metadata": {"annotations": {ANNOTATION_ADMISSION: FORGED_A}}},
    "J": {"metadata": {"labels": {LABEL_RESTART_ATTEMPT: "0"}}},
    "job-id": {"metadata": {"labels": {LABEL_JOB_ID: "forged"}}},
    "epoch": {"spec": {"containers": [{"name": TRAINER_CONTAINER, "env": [{"name": ENV_EPOCH, "value": "1"}]}]}},
    "shell": {
        "spec": {
            "containers": [{"name": TRAINER_CONTAINER, "volumeMounts": [{"name": "shell", "mountPath": "/bin"}]}],
            "volumes": [{"name": "shell", "emptyDir": {}}],
        }
    },
}
"""Another runtime-patch entry's pod template, each deciding the identity an execution sees (attack 2): A, J, the
job's id, the epoch the prologue exports, or a volume over the prologue's shell."""


def _foreign_runtime_patch(o: Objects, rng: random.Random) -> Write:
    pod = FOREIGN_POD_PATCHES[rng.choice(sorted(FOREIGN_POD_PATCHES))]
    entry = {
        "manager": f"example.com/attacker-{_hex(rng)}",
        "trainingRuntimeSpec": {
            "template": {
                "spec": {
                    "replicatedJobs": [{"name": _trainer_replicated_job(o), "template": {"spec": {"template": pod}}}]
                }
            }
        },
    }
    ops = [{"op": "add", "path": "/spec/runtimePatches/-", "value": entry}]
    if not isinstance(dig(o.trainjob, "spec", "runtimePatches"), list):
        ops = [{"op": "add", "path": "/spec/runtimePatches", "value": [entry]}]
    return _patch("TrainJob", o.trainjob, ops, content_type=JSON_PATCH)


def _unsuspend(o: Objects, rng: random.Random) -> Write:
    return _patch("TrainJob", o.trainjob, {"spec": {"suspend": False}})


def _remove_hold_record(o: Objects, rng: random.Random) -> Write:
    found = {key: None for key in HOLD_ANNOTATIONS if key in annotations(o.trainjob)}
    return _patch("TrainJob", o.trainjob, {"metadata": {"annotations": found}})


def _other_queue(o: Objects, current: str | None, rng: random.Random) -> str:
    others = sorted(q for q in o.queues if q != current)
    return rng.choice(others) if others else f"attacker-{_hex(rng)}"


def _switch_queue(o: Objects, rng: random.Random) -> Write:
    queue = _other_queue(o, labels(o.trainjob).get(LABEL_QUEUE_NAME), rng)
    return _patch("TrainJob", o.trainjob, {"metadata": {"labels": {LABEL_QUEUE_NAME: queue}}})


def _a_op(o: Objects, value: str) -> Write:
    path = pointer(*admission_path(o.trainjob))
    return _patch("TrainJob", o.trainjob, [{"op": "replace", "path": path, "value": value}], content_type=JSON_PATCH)


def _raise_a(o: Objects, rng: random.Random) -> Write:
    return _a_op(o, rng.choice((FORGED_A, str(max(_a(o) or 0, _floor(o) or 0) + 1))))


def _lower_a(o: Objects, rng: random.Random) -> Write:
    return _a_op(o, str((_a(o) or 1) - 1))


def _floor_patch(o: Objects, value: str | None) -> Write:
    return _patch("TrainJob", o.trainjob, {"metadata": {"annotations": {ANNOTATION_ADMISSION_FLOOR: value}}})


def _raise_floor(o: Objects, rng: random.Random) -> Write:
    return _floor_patch(o, rng.choice((FORGED_A, str(max(_a(o) or 0, _floor(o) or 0) + 1))))


def _lower_floor(o: Objects, rng: random.Random) -> Write:
    floor = _floor(o) or 0
    return _floor_patch(o, rng.choice((str(floor - 1), None)) if floor >= 1 else None)


def _forge_finished(o: Objects, rng: random.Random) -> Write:
    since = o.trainjob["metadata"].get("creationTimestamp") or "2025-01-01T00:00:00Z"
    kind = rng.choice(("Complete", "Failed"))
    forged = {"type": kind, "status": "True", "reason": "Forged", "message": "forged", "lastTransitionTime": since}
    kept = [c for c in dig(o.trainjob, "status", "conditions") or [] if c.get("type") != kind]
    return _patch("TrainJob", o.trainjob, {"status": {"conditions": [*kept, forged]}}, sub="status")


# -- the Workload --------------------------------------------------------------------------------------------


def _workload_patch(body: dict[str, Any]) -> Callable[[Objects, random.Random], Write]:
    return lambda o, rng: _patch("Workload", o.workload or {}, body)


def _switch_workload_queue(o: Objects, rng: random.Random) -> Write:
    queue = _other_queue(o, dig(o.workload, "spec", "queueName"), rng)
    return _patch("Workload", o.workload or {}, {"spec": {"queueName": queue}})


# -- the runtime copy, the JobSet, its Jobs --------------------------------------------------------------------


def _trainer_index(o: Objects, spec: object) -> int:
    jobs = dig(spec, "replicatedJobs") or []
    want = _trainer_replicated_job(o)
    return next((i for i, j in enumerate(jobs) if isinstance(j, Mapping) and j.get("name") == want), 0)


def _edit_runtime_copy(o: Objects, rng: random.Random) -> Write:
    """The copy's trainer Job template made to rerun pods without a new A or J: a Job backoff, a kubelet restart in
    place, or A written into the template. (Its failurePolicy is immutable in Trainer's schema: a change there
    would test the schema, not admission.)"""
    copy_ = o.runtime_copy or {}
    base: tuple[str | int, ...] = ("spec", "template", "spec", "replicatedJobs")
    i = _trainer_index(o, dig(copy_, "spec", "template", "spec"))
    job = (*base, i, "template", "spec")
    path, value = rng.choice(
        (
            ((*job, "backoffLimit"), 6),
            ((*job, "template", "spec", "restartPolicy"), "OnFailure"),
            ((*job, "template", "metadata", "annotations", ANNOTATION_ADMISSION), FORGED_A),
        )
    )
    return _patch("TrainingRuntime", copy_, [add_op(copy_, path, value)], content_type=JSON_PATCH)


def _jobset(o: Objects) -> dict[str, Any]:
    return o.jobset or {}


def _pin_j(o: Objects, rng: random.Random) -> Write:
    """J pinned through the JobSet's template: JobSet merges its labels over each Job's when it resumes."""
    i = _trainer_index(o, dig(o.jobset, "spec"))
    path = ("spec", "replicatedJobs", i, "template", "spec", "template", "metadata", "labels", LABEL_RESTART_ATTEMPT)
    return _patch("JobSet", _jobset(o), [add_op(o.jobset, path, "0")], content_type=JSON_PATCH)


def _restarts(o: Objects) -> int:
    value = dig(o.jobset, "status", "restarts")
    return value if isinstance(value, int) else 0


def _lower_restarts(o: Objects, rng: random.Random) -> Write:
    return _patch("JobSet", _jobset(o), {"status": {"restarts": _restarts(o) - 1}}, sub="status")


def _raise_restarts(o: Objects, rng: random.Random) -> Write:
    return _patch("JobSet", _jobset(o), {"status": {"restarts": _restarts(o) + rng.choice((1, 999))}}, sub="status")


def _job_attack(change: Callable[[Mapping[str, Any]], Write]) -> Callable[[Objects, random.Random], Write]:
    return lambda o, rng: change(_pick(rng, o.jobs))


def _running_jobs(o: Objects) -> list[dict[str, Any]]:
    return [j for j in o.jobs if not _suspended(j)]


def _suspended_jobs(o: Objects) -> list[dict[str, Any]]:
    return [j for j in o.jobs if _suspended(j)]


def _suspend_job(o: Objects, rng: random.Random) -> Write:
    return _patch("Job", _pick(rng, _running_jobs(o)), {"spec": {"suspend": True}})


def _resume_job(o: Objects, rng: random.Random) -> Write:
    return _patch("Job", _pick(rng, _suspended_jobs(o)), {"spec": {"suspend": False}})


def _job_status(job: Mapping[str, Any]) -> Write:
    failed = dig(job, "status", "failed")
    return _patch("Job", job, {"status": {"failed": (failed if isinstance(failed, int) else 0) + 1}}, sub="status")


# -- pods ------------------------------------------------------------------------------------------------------


def _pod_attack(
    change: Callable[[Mapping[str, Any], random.Random], Write],
) -> Callable[[Objects, random.Random], Write]:
    return lambda o, rng: change(_pick(rng, o.pods), rng)


def _finalized_pods(o: Objects) -> list[dict[str, Any]]:
    return [p for p in o.pods if POD_FINALIZER in (p["metadata"].get("finalizers") or [])]


def _unfinished_pods(o: Objects) -> list[dict[str, Any]]:
    return [p for p in o.pods if dig(p, "status", "phase") not in ("Succeeded", "Failed")]


def _strip_finalizer(o: Objects, rng: random.Random) -> Write:
    pod = _pick(rng, _finalized_pods(o))
    rest = [f for f in pod["metadata"].get("finalizers") or [] if f != POD_FINALIZER]
    return _patch("Pod", pod, {"metadata": {"finalizers": rest or None}})


def _forge_phase(o: Objects, rng: random.Random) -> Write:
    pod = _pick(rng, _unfinished_pods(o))
    return _patch("Pod", pod, {"status": {"phase": rng.choice(("Failed", "Succeeded"))}}, sub="status")


def _relabel(pod: Mapping[str, Any], rng: random.Random) -> Write:
    """Out of the gate's list (its JobSet's label stripped), J forged, or dispatch's job id stripped."""
    changes: list[dict[str, Any]] = [{LABEL_JOBSET_NAME: None}, {LABEL_RESTART_ATTEMPT: "999"}]
    if LABEL_JOB_ID in labels(pod):
        changes.append({LABEL_JOB_ID: None})
    change = rng.choice(changes)
    return _patch("Pod", pod, {"metadata": {"labels": change}})


def _evict(pod: Mapping[str, Any], rng: random.Random) -> Write:
    meta = pod["metadata"]
    body = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": meta["name"], "namespace": meta["namespace"]},
    }
    return Write("POST", _path("Pod", pod, "eviction"), body, JSON, _target("Pod", pod, "eviction"))


UNSCHEDULABLE: Final = {"attacker.invalid/nowhere": "true"}
"""The stranger's pods select no node: they stay Pending, on no node, running nothing."""


def pod_spec() -> dict[str, Any]:
    return {"restartPolicy": "Never", "nodeSelector": dict(UNSCHEDULABLE),
            "containers": [{"name": TRAINER_CONTAINER, "image": "registry.invalid/attacker:1"}]}  # fmt: skip


def _fake_pod(o: Objects, rng: random.Random) -> Write:
    """A pod claiming the job (attack 8): its JobSet's labels as rank 0 of a later restart, a Job of it as its
    controller, dispatch's finalizer, or a name of its children. Each claim alone, on a name that claims nothing
    but in the last."""
    claims = ["labels", "finalizer", "name"] + (["owner"] if o.jobs else [])
    claim = rng.choice(claims)
    meta: dict[str, Any] = {"name": f"attacker-fake-{_hex(rng)}", "namespace": o.namespace}
    if claim == "labels":
        meta["labels"] = {LABEL_JOBSET_NAME: o.name, LABEL_REPLICATED_JOB_NAME: _trainer_replicated_job(o),
                          LABEL_RESTART_ATTEMPT: "999", LABEL_JOB_COMPLETION_INDEX: "0"}  # fmt: skip
        meta["annotations"] = {ANNOTATION_ADMISSION: FORGED_A}
    elif claim == "finalizer":
        meta["finalizers"] = [POD_FINALIZER]
    elif claim == "name":
        meta["name"] = f"{o.name}-{_trainer_replicated_job(o)}-0-0-{_hex(rng, 5)}"
    else:
        job = _pick(rng, o.jobs)["metadata"]
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job["name"], "uid": job["uid"],
                                    "controller": True}]  # fmt: skip
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec()}
    return Write("POST", _collection("Pod", o.namespace), body, JSON, f"Pod/{meta['name']}")


def _finalizer_on_own_pod(o: Objects, rng: random.Random) -> Write:
    pod = o.own_pod or {}
    return _patch("Pod", pod, {"metadata": {"finalizers": [*(pod["metadata"].get("finalizers") or []), POD_FINALIZER]}})


# -- the catalog ---------------------------------------------------------------------------------------------


def _has_workload(o: Objects) -> bool:
    return o.workload is not None


def _has_jobset(o: Objects) -> bool:
    return o.jobset is not None


CATALOG: Final[tuple[Attack, ...]] = (
    # The TrainJob.
    Attack("forge-open", "attack 4: open a never-opened job (the gate removed, the opened mark, plain: unsuspended)",
           lambda o: annotations(o.trainjob).get(ANNOTATION_OPENED) != OPENED_TRUE, _forge_open),
    Attack("remove-gate-trainjob", "Open by a stranger: dispatch's gate removed from the TrainJob",
           lambda o: GATE in gates_of(o.trainjob), _remove_gate("TrainJob")),
    Attack("foreign-runtime-patch", "attack 2: another runtime-patch entry deciding identity",
           lambda o: True, _foreign_runtime_patch),
    Attack("unsuspend-held-trainjob", "attack 6: a held job unsuspended",
           lambda o: _held(o.trainjob) and _suspended(o.trainjob), _unsuspend),
    Attack("unsuspend-trainjob", "the choke point: a suspended job unsuspended without dispatch or Kueue",
           lambda o: not _held(o.trainjob) and _suspended(o.trainjob), _unsuspend),
    Attack("remove-hold-record", "attack 6: dispatch's hold record removed from the TrainJob",
           lambda o: _held(o.trainjob), _remove_hold_record),
    Attack("switch-queue", "attack 3: the TrainJob moved to another LocalQueue",
           lambda o: bool(labels(o.trainjob).get(LABEL_QUEUE_NAME)), _switch_queue),
    Attack("queue-plain-job", "attack 4: the queue label put on a plain-mode job",
           lambda o: not labels(o.trainjob).get(LABEL_QUEUE_NAME), _switch_queue),
    Attack("raise-a", "attack 7: A raised (to the bound, or by one, without the gate)",
           lambda o: _a(o) is not None, _raise_a),
    Attack("lower-a", "A lowered: an old identity again", lambda o: (_a(o) or 0) >= 1, _lower_a),
    Attack("raise-floor", "attack 7: the admission floor raised", lambda o: True, _raise_floor),
    Attack("lower-floor", "the admission floor lowered or removed", lambda o: _floor(o) is not None, _lower_floor),
    Attack("forge-trainjob-finished", "the TrainJob's status forged Complete or Failed", lambda o: True,
           _forge_finished),
    Attack("delete-trainjob", "the TrainJob deleted", lambda o: True, lambda o, rng: _delete("TrainJob", o.trainjob)),
    # The Workload.
    Attack("forge-check-ready", "attack 1: dispatch's AdmissionCheck set Ready on the Workload",
           lambda o: (_check_entry(o) or {}).get("state", "Ready") != "Ready", _forge_ready),
    Attack("forge-pod-set-updates", "attack 1/2: dispatch's check's podSetUpdates carrying identity keys",
           lambda o: _check_entry(o) is not None, _forge_pod_set_updates),
    Attack("remove-gate-workload", "dispatch's gate removed from the Workload",
           lambda o: GATE in gates_of(o.workload), _remove_gate("Workload")),
    Attack("reactivate-held-workload", "attack 6: a Workload dispatch holds reactivated",
           lambda o: dig(o.workload, "spec", "active") is False, _workload_patch({"spec": {"active": True}})),
    Attack("deactivate-workload", "a hold forged: the Workload deactivated",
           lambda o: _has_workload(o) and dig(o.workload, "spec", "active") is not False,
           _workload_patch({"spec": {"active": False}})),
    Attack("switch-workload-queue", "attack 3 on the Workload: its queue changed",
           lambda o: _has_workload(o) and not _quota_reserved(o.workload), _switch_workload_queue),
    Attack("orphan-workload", "the Workload's owner references removed",
           lambda o: bool(dig(o.workload, "metadata", "ownerReferences")),
           _workload_patch({"metadata": {"ownerReferences": None}})),
    Attack("delete-workload", "the Workload deleted", _has_workload,
           lambda o, rng: _delete("Workload", o.workload or {})),
    # The runtime copy.
    Attack("edit-runtime-copy", "attack 10: the runtime copy made to rerun pods without a new A or J",
           lambda o: o.runtime_copy is not None, _edit_runtime_copy),
    # The JobSet.
    Attack("resume-jobset", "the JobSet resumed behind the TrainJob's unsuspend",
           lambda o: _suspended(o.jobset), lambda o, rng: _patch("JobSet", _jobset(o), {"spec": {"suspend": False}})),
    Attack("delete-jobset", "attack 5: the JobSet deleted (recreated with J = 0)", _has_jobset,
           lambda o, rng: _delete("JobSet", _jobset(o))),
    Attack("orphan-jobset", "attack 5: the JobSet handed to the garbage collector",
           lambda o: bool(dig(o.jobset, "metadata", "ownerReferences")),
           lambda o, rng: _patch("JobSet", _jobset(o), {"metadata": {"ownerReferences": None}})),
    Attack("pin-j-in-jobset-template", "attack 5: J pinned through the JobSet's pod template", _has_jobset, _pin_j),
    Attack("lower-jobset-restarts", "attack 5: jobsets/status restarts lowered",
           lambda o: _restarts(o) >= 1, _lower_restarts),
    Attack("raise-jobset-restarts", "jobsets/status restarts forged upwards", _has_jobset, _raise_restarts),
    # Its Jobs.
    Attack("delete-job", "a Job deleted (recreated with the same A and J)", lambda o: bool(o.jobs),
           _job_attack(lambda job: _delete("Job", job))),
    Attack("suspend-job", "a Job suspended behind its owners' backs", lambda o: bool(_running_jobs(o)), _suspend_job),
    Attack("resume-job", "a Job resumed behind the TrainJob's unsuspend", lambda o: bool(_suspended_jobs(o)),
           _resume_job),
    Attack("write-job-status", "jobs/status written", lambda o: bool(o.jobs), _job_attack(_job_status)),
    # Pods.
    Attack("fake-pod", "attack 8: a pod claiming the job", lambda o: True, _fake_pod),
    Attack("finalizer-on-own-pod", "dispatch's finalizer on one's own pod (blocking its controllers)",
           lambda o: o.own_pod is not None, _finalizer_on_own_pod),
    Attack("remove-pod-finalizer", "attack 11: dispatch's finalizer stripped from a trainer pod",
           lambda o: bool(_finalized_pods(o)), _strip_finalizer),
    Attack("forge-pod-phase", "pods/status forged terminal: the finalizer dropped while processes run",
           lambda o: bool(_unfinished_pods(o)), _forge_phase),
    Attack("relabel-pod", "a trainer pod relabelled out of the gate's list", lambda o: bool(o.pods),
           _pod_attack(_relabel)),
    Attack("orphan-pod", "a trainer pod orphaned, to read as foreign", lambda o: bool(o.pods),
           _pod_attack(lambda pod, rng: _patch("Pod", pod, {"metadata": {"ownerReferences": None}}))),
    # What a stranger may do.
    Attack("delete-pod", "a trainer pod deleted: anyone's right (dispatch's finalizer keeps the evidence)",
           lambda o: bool(o.pods), _pod_attack(lambda pod, rng: _delete("Pod", pod)), allowed=True),
    Attack("evict-pod", "a trainer pod evicted: anyone's right", lambda o: bool(o.pods), _pod_attack(_evict),
           allowed=True),
)  # fmt: skip
BY_NAME: Final = {a.name: a for a in CATALOG}


# -- choosing ------------------------------------------------------------------------------------------------


def live(trainjob: Mapping[str, Any]) -> bool:
    """A dispatch job still in play: a dispatch name, not being deleted, not ended."""
    meta = trainjob.get("metadata") or {}
    ended = any(
        c.get("type") in ("Complete", "Failed") and c.get("status") == "True"
        for c in dig(trainjob, "status", "conditions") or []
        if isinstance(c, Mapping)
    )
    return is_dispatch_name(meta.get("name")) and not meta.get("deletionTimestamp") and not ended


def pick_job(rng: random.Random, trainjobs: Sequence[Mapping[str, Any]]) -> str | None:
    names = sorted(str(t["metadata"]["name"]) for t in trainjobs if live(t))
    return rng.choice(names) if names else None


def pick_attack(rng: random.Random, o: Objects, allowed_rate: float = ALLOWED_RATE) -> tuple[Attack, Write] | None:
    """An attack that applies to the job as read (a write a stranger may make, with ``allowed_rate``), and its
    write; None when nothing applies."""
    allowed = [a for a in CATALOG if a.allowed and a.applies(o)]
    hostile = [a for a in CATALOG if not a.allowed and a.applies(o)]
    pool = allowed if allowed and rng.random() < allowed_rate else hostile
    if not pool:
        return None
    attack = rng.choice(pool)
    return attack, attack.build(o, rng)


# -- classifying ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    outcome: str
    by: str
    status: int | None
    message: str


MESSAGE_LIMIT: Final = 600
_POLICY = re.compile(r"ValidatingAdmissionPolicy '([^']+)'")
_WEBHOOK_DENIED = re.compile(r'admission webhook "([^"]+)" denied')
_WEBHOOK_FAILED = re.compile(r'failed calling webhook "([^"]+)"')
_RBAC = re.compile(r'User "[^"]*" cannot [a-z]+ resource')


def message_of(body: str) -> str:
    try:
        decoded = json.loads(body)
    except ValueError:
        return body.strip()[:MESSAGE_LIMIT]
    message = decoded.get("message") if isinstance(decoded, dict) else None
    return (str(message) if message else body).strip()[:MESSAGE_LIMIT]


def classify(status: int | None, body: str, *, allowed: bool, principal: str = "") -> Verdict:
    """What answered a write: ``status`` None for a success (``body`` ignored), else the API's status and body."""
    if status is None:
        return Verdict(ALLOWED, "", None, "accepted") if allowed else Verdict(GOT_THROUGH, "", None, "accepted")
    message = message_of(body)
    if m := _POLICY.search(message):
        return Verdict(REFUSED, f"policy {m.group(1)}", status, message)
    if m := _WEBHOOK_DENIED.search(message):
        return Verdict(REFUSED, f"webhook {m.group(1)}", status, message)
    if m := _WEBHOOK_FAILED.search(message):
        return Verdict(REFUSED, "webhook-down (fail closed)", status, message)
    if status == 403 and (_RBAC.search(message) or (principal and f'User "{principal}" cannot' in message)):
        return Verdict(INVALID, "rbac", status, message)
    if status == 429 and "disruption budget" in message:
        return Verdict(INVALID, "api", status, message)
    if status >= 500 or status == 429:
        return Verdict(ERROR, "api", status, message)
    return Verdict(INVALID, "api", status, message)


def classify_transport(exc: BaseException) -> Verdict:
    return Verdict(ERROR, "", None, f"{type(exc).__name__}: {exc}"[:MESSAGE_LIMIT])


TRANSPORT_ERRORS: Final = (OSError, http.client.HTTPException)
"""What urllib raises when the API server is not there to answer: refused, reset, timed out, cut off."""


# -- the shell ------------------------------------------------------------------------------------------------


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    by_attack: dict[str, Counter[str]] = field(default_factory=dict)
    invalid: Counter[str] = field(default_factory=Counter)
    """Each invalid write, by attack and why: what the catalog should build better."""
    skipped: Counter[str] = field(default_factory=Counter)


class Attacker:
    """Run in a thread (``run``): every ``interval`` seconds one attack on one live dispatch job of ``namespace``,
    as ``stranger``, recorded with ``record(attack=, target=, outcome=, by=, status=, message=)``. ``principal`` is
    the stranger's username (an RBAC refusal names it)."""

    def __init__(self, admin: KubeHttp, stranger: KubeHttp, namespace: str, seed: int, record: Callable[..., None],
                 principal: str, *, allowed_rate: float = ALLOWED_RATE) -> None:  # fmt: skip
        self.admin, self.stranger, self.namespace = admin, stranger, namespace
        self.rng = random.Random(seed)
        self.record, self.principal, self.allowed_rate = record, principal, allowed_rate
        self._lock = threading.Lock()
        self._tally = Tally()
        self._checks: frozenset[str] = frozenset()
        self._own_pod: str | None = None
        self._fakes: list[str] = []

    # -- results

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._tally.outcomes)

    def by_attack(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {a: dict(c) for a, c in sorted(self._tally.by_attack.items())}

    def invalid(self) -> dict[str, int]:
        with self._lock:
            return dict(self._tally.invalid)

    def skipped(self) -> dict[str, int]:
        with self._lock:
            return dict(self._tally.skipped)

    # -- the loop

    def run(self, stop: threading.Event, interval: float = 1.0) -> None:
        try:
            while not stop.is_set():
                try:
                    attacked = self.round()
                except Exception as exc:  # a bug of the catalog's must not end the campaign's attacks: shown, counted
                    traceback.print_exc()
                    attacked = self._skip(f"crashed: {type(exc).__name__}: {exc}"[:200])
                # With nothing to attack, wait a little even at interval 0: the jobs come and go.
                wait = interval if attacked else max(interval, 0.5)
                if wait > 0:
                    stop.wait(wait)
        finally:
            self.clean_up()

    def round(self) -> bool:
        """One attack, recorded; False when nothing was attacked (no live job, or the reads failed)."""
        try:
            trainjobs = self._list("TrainJob")
            name = pick_job(self.rng, trainjobs)
            if name is None:
                return self._skip("no live dispatch job")
            objects = self.read(next(t for t in trainjobs if t["metadata"]["name"] == name))
        except (ApiError, *TRANSPORT_ERRORS) as exc:
            return self._skip(f"reading: {type(exc).__name__}")
        chosen = pick_attack(self.rng, objects, self.allowed_rate)
        if chosen is None:
            return self._skip("no attack applies")
        attack, write = chosen
        verdict = self.send(attack, write)
        with self._lock:
            self._tally.outcomes[verdict.outcome] += 1
            self._tally.by_attack.setdefault(attack.name, Counter())[verdict.outcome] += 1
            if verdict.outcome == INVALID:
                self._tally.invalid[f"{attack.name}: {verdict.status} {verdict.by}"] += 1
        self.record(attack=attack.name, target=write.target, outcome=verdict.outcome, by=verdict.by,
                    status=verdict.status, message=verdict.message)  # fmt: skip
        return True

    def send(self, attack: Attack, write: Write) -> Verdict:
        try:
            self.stranger.request(write.method, write.path, write.body, content_type=write.content_type)
        except ApiError as exc:
            return classify(exc.status, exc.body, allowed=attack.allowed, principal=self.principal)
        except TRANSPORT_ERRORS as exc:
            return classify_transport(exc)
        if write.method == "POST" and write.target.startswith("Pod/") and attack.name == "fake-pod":
            self._fakes.append(write.target.removeprefix("Pod/"))  # a breach: not left to hold the job's gate
        return classify(None, "", allowed=attack.allowed)

    def _skip(self, why: str) -> bool:
        with self._lock:
            self._tally.skipped[why] += 1
        return False

    # -- reading, as the admin

    def _list(self, kind: str, selector: str | None = None) -> list[dict[str, Any]]:
        query = {"labelSelector": selector} if selector else None
        items = self.admin.request("GET", _collection(kind, self.namespace), query=query)["items"]
        api_version = KINDS[kind][0]
        return [{"apiVersion": api_version, "kind": kind, **item} for item in items]

    def _get(self, kind: str, name: str) -> dict[str, Any] | None:
        try:
            return self.admin.request("GET", f"{_collection(kind, self.namespace)}/{name}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _dispatch_checks(self) -> frozenset[str]:
        """The AdmissionChecks dispatch's controller serves, by their names (read once, again when none)."""
        if not self._checks:
            items = self.admin.request("GET", f"/apis/{KUEUE_V}/admissionchecks")["items"]
            self._checks = frozenset(
                str(ac["metadata"]["name"])
                for ac in items
                if dig(ac, "spec", "controllerName") == ADMISSION_CHECK_CONTROLLER
            )
        return self._checks

    def read(self, trainjob: dict[str, Any]) -> Objects:
        name, uid = trainjob["metadata"]["name"], trainjob["metadata"]["uid"]
        workloads = self._list("Workload", f"{LABEL_WORKLOAD_JOB_UID}={uid}")
        jobs = [
            j for j in self._list("Job", f"{LABEL_JOBSET_NAME}={name}") if not j["metadata"].get("deletionTimestamp")
        ]
        job_names = {j["metadata"]["name"] for j in jobs}
        pods = [
            p
            for p in self._list("Pod", f"{LABEL_JOBSET_NAME}={name}")
            if not p["metadata"].get("deletionTimestamp")
            and any(r.get("kind") == "Job" and r.get("controller") and r.get("name") in job_names
                    for r in p["metadata"].get("ownerReferences") or [])
        ]  # fmt: skip
        runtime = dig(trainjob, "spec", "runtimeRef") or {}
        copy_ = self._get("TrainingRuntime", runtime["name"]) if runtime.get("kind") == "TrainingRuntime" else None
        return Objects(
            namespace=self.namespace,
            trainjob=trainjob,
            workload=workloads[0] if len(workloads) == 1 else None,
            jobset=self._get("JobSet", name),
            jobs=tuple(jobs),
            pods=tuple(pods),
            runtime_copy=copy_,
            checks=self._dispatch_checks(),
            queues=tuple(sorted(q["metadata"]["name"] for q in self._list("LocalQueue"))),
            own_pod=self._ensure_own_pod(),
        )

    # -- the stranger's own objects

    def _ensure_own_pod(self) -> dict[str, Any] | None:
        """The stranger's own pod (its to create: it claims nothing of dispatch's), made once."""
        if self._own_pod is not None:
            found = self._get("Pod", self._own_pod)
            if found is not None and not found["metadata"].get("deletionTimestamp"):
                return found
        name = f"attacker-own-{_hex(random.Random(self.namespace))}"
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": self.namespace},
                "spec": pod_spec()}  # fmt: skip
        try:
            created = self.stranger.request("POST", _collection("Pod", self.namespace), body)
        except ApiError as exc:
            if exc.status != 409:
                return None
            created = self._get("Pod", name)
        except TRANSPORT_ERRORS:
            return None
        self._own_pod = name
        return created

    def clean_up(self) -> None:
        """The stranger's own pod, and any fake pod that got through, deleted (best effort)."""
        for name in [*self._fakes, *([self._own_pod] if self._own_pod else [])]:
            with contextlib.suppress(ApiError, *TRANSPORT_ERRORS):
                self.stranger.request("DELETE", f"{_collection('Pod', self.namespace)}/{name}")
