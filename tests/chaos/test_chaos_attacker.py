"""The chaos campaign's attacker without a cluster: every attack of the catalog builds a well-formed write that
changes what it aims at, from objects shaped as the API returns them; what answered a write is classified right;
the same seed makes the same attacks; and a round of the shell reads, attacks and records as it should."""

from __future__ import annotations

import copy
import json
import random
from collections import Counter
from typing import Any

import pytest

from chaos import attacker
from chaos.attacker import (
    ALLOWED,
    CATALOG,
    ERROR,
    GOT_THROUGH,
    INVALID,
    JSON,
    JSON_PATCH,
    MERGE,
    REFUSED,
    Attacker,
    Objects,
    classify,
    classify_transport,
    pick_attack,
    pick_job,
)
from contract.keys import (
    ADMISSION_CHECK_CONTROLLER,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_HOLD_INSTANCE,
    ANNOTATION_OPENED,
    GATE,
    LABEL_JOBSET_NAME,
    LABEL_WORKLOAD_JOB_UID,
    POD_FINALIZER,
)
from contract.objects import dig
from harness import fixtures
from harness.kube_http import ApiError
from tests.agent.api.objects import apply_patch

NS = "team-a"
CHECK = "dispatch-admission"
"""The chart's AdmissionCheck: a name that is not its controller's."""


# -- objects as the admin reads them -----------------------------------------------------------------------------


def _meta(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    obj["metadata"].update({"namespace": NS, "uid": uid, "creationTimestamp": "2026-11-29T09:00:00Z"})
    return obj


def _trainjob(*, kueue: bool, opened: bool, a: int, held: bool, suspended: bool) -> dict[str, Any]:
    tj = fixtures.trainjob(queue="team-a-queue" if kueue else None)
    _meta(tj, "tj-uid")
    ann = tj["metadata"].setdefault("annotations", {})
    if kueue and not opened:
        ann[ANNOTATION_ADMISSION_GATED_BY] = GATE
    else:
        ann.pop(ANNOTATION_ADMISSION_GATED_BY, None)
    if opened:
        ann[ANNOTATION_OPENED] = "true"
    if a:
        ann[ANNOTATION_ADMISSION_FLOOR] = str(a)
        path = ("trainingRuntimeSpec", "template", "spec", "replicatedJobs", 0, "template", "spec", "template")
        dig(tj["spec"]["runtimePatches"][0], *path)["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission"] = (
            str(a)
        )
    if held:
        ann[ANNOTATION_HOLD_INSTANCE] = "h-1"
    tj["spec"]["suspend"] = suspended
    return tj


def _workload(tj: dict[str, Any], *, state: str, active: bool, reserved: bool) -> dict[str, Any]:
    name = tj["metadata"]["name"]
    wl = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"trainjob-{name}-1a2b3",
            "namespace": NS,
            "uid": "wl-uid",
            "labels": {LABEL_WORKLOAD_JOB_UID: tj["metadata"]["uid"]},
            # Kueue copies the gate onto the Workload
            "annotations": {
                k: v for k, v in tj["metadata"]["annotations"].items() if k == ANNOTATION_ADMISSION_GATED_BY
            },
            "ownerReferences": [
                {
                    "apiVersion": "trainer.kubeflow.org/v1alpha1",
                    "kind": "TrainJob",
                    "name": name,
                    "uid": tj["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {"active": active, "queueName": "team-a-queue", "podSets": [{"name": "node", "count": 1}]},
        "status": {
            "admissionChecks": [
                {"name": "other-check", "state": "Ready", "message": "", "lastTransitionTime": "2026-11-29T09:00:01Z"},
                {"name": CHECK, "state": state, "message": "", "lastTransitionTime": "2026-11-29T09:00:01Z"},
            ],
            "conditions": [{"type": "QuotaReserved", "status": "True" if reserved else "False"}],
        },
    }
    return wl


def _jobset(name: str, *, suspended: bool, restarts: int) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": NS, "uid": "js-uid",
                     "ownerReferences": [{"kind": "TrainJob", "name": name, "uid": "tj-uid", "controller": True}]},
        "spec": {"suspend": suspended, "replicatedJobs": [
            {"name": "node", "template": {"spec": {"template": {"spec": {"containers": [{"name": "node"}]}}}}}]},
        "status": {"restarts": restarts},
    }  # fmt: skip


def _job(name: str, *, suspended: bool) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{name}-node-0", "namespace": NS, "uid": "job-uid", "labels": {LABEL_JOBSET_NAME: name}},
        "spec": {"suspend": suspended},
        "status": {"active": 0 if suspended else 1},
    }


def _pod(name: str, phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-node-0-0-abcde", "namespace": NS, "uid": "pod-uid",
                     "labels": {LABEL_JOBSET_NAME: name, "jobset.sigs.k8s.io/restart-attempt": "1",
                                "dispatch.phpboyscout.uk/job-id": "01ARZ3NDEKTSV4RRFFQ69G5FAV"},
                     "finalizers": [POD_FINALIZER, "example.com/other"],
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"{name}-node-0",
                                          "uid": "job-uid", "controller": True}]},
        "spec": {"containers": [{"name": "node", "image": "x"}]},
        "status": {"phase": phase},
    }  # fmt: skip


def _own_pod() -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "attacker-own-1", "namespace": NS},
            "spec": attacker.pod_spec()}  # fmt: skip


def _copy(tj: dict[str, Any]) -> dict[str, Any]:
    return _meta(fixtures.runtime_copy(queue=None), "copy-uid") | {"kind": "TrainingRuntime"}


def gated() -> Objects:
    """Kueue mode, never opened: gated, suspended, its JobSet and Job suspended, no pod."""
    tj = _trainjob(kueue=True, opened=False, a=0, held=False, suspended=True)
    name = tj["metadata"]["name"]
    return Objects(NS, tj, _workload(tj, state="Pending", active=True, reserved=False),
                   _jobset(name, suspended=True, restarts=0), (_job(name, suspended=True),), (), _copy(tj),
                   frozenset({CHECK}), ("team-a-queue", "other-queue"), _own_pod())  # fmt: skip


def running() -> Objects:
    """Kueue mode, opened, admitted with A = 1, J = 1: its pods run."""
    tj = _trainjob(kueue=True, opened=True, a=1, held=False, suspended=False)
    name = tj["metadata"]["name"]
    return Objects(NS, tj, _workload(tj, state="Ready", active=True, reserved=True),
                   _jobset(name, suspended=False, restarts=1), (_job(name, suspended=False),), (_pod(name),),
                   _copy(tj), frozenset({CHECK}), ("team-a-queue",), _own_pod())  # fmt: skip


def held_kueue() -> Objects:
    """Kueue mode, held by dispatch: its Workload inactive, evicted (check Pending), the TrainJob suspended."""
    tj = _trainjob(kueue=True, opened=True, a=1, held=True, suspended=True)
    name = tj["metadata"]["name"]
    return Objects(NS, tj, _workload(tj, state="Pending", active=False, reserved=False),
                   _jobset(name, suspended=True, restarts=0), (), (), _copy(tj), frozenset({CHECK}),
                   ("team-a-queue",), None)  # fmt: skip


def held_plain() -> Objects:
    """Plain mode, opened and held: suspended, no Workload."""
    tj = _trainjob(kueue=False, opened=True, a=2, held=True, suspended=True)
    return Objects(NS, tj, None, None, (), (), None, frozenset({CHECK}), (), None)


STATES = {"gated": gated, "running": running, "held-kueue": held_kueue, "held-plain": held_plain}


# -- the catalog --------------------------------------------------------------------------------------------------


def _object_written(o: Objects, write: attacker.Write) -> dict[str, Any]:
    """The object the write aims at, found among the job's objects by its path."""
    candidates = [o.trainjob, o.workload, o.jobset, *o.jobs, *o.pods, o.runtime_copy, o.own_pod]
    for obj in candidates:
        if obj is None:
            continue
        base = attacker._path(obj["kind"], obj)
        if write.path == base or write.path.startswith(base + "/"):
            return obj
    raise AssertionError(f"{write.path} is none of the job's objects")


def _merge(doc: Any, patch: Any) -> Any:
    """RFC 7386, as the API server applies a merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value)
    return out


SUBRESOURCES = {"", "status", "eviction"}


def check_well_formed(o: Objects, write: attacker.Write, attack: attacker.Attack) -> None:
    json.dumps(write.body)  # what the client sends
    assert write.method in ("PATCH", "POST", "DELETE"), write
    assert write.path.startswith((f"/api/v1/namespaces/{NS}/", "/apis/")), write.path
    assert f"/namespaces/{NS}/" in write.path, "never a write outside the jobs' namespace"
    if write.method == "POST" and write.path.endswith("/pods"):  # a create claiming the job
        assert write.content_type == JSON
        meta = write.body["metadata"]
        assert (write.body["apiVersion"], write.body["kind"], meta["namespace"]) == ("v1", "Pod", NS)
        assert write.target == f"Pod/{meta['name']}"
        assert write.body["spec"]["containers"][0]["image"]
        return
    target = _object_written(o, write)
    base = attacker._path(target["kind"], target)
    sub = write.path.removeprefix(base).lstrip("/")
    assert sub in SUBRESOURCES, write.path
    assert write.target == f"{target['kind']}/{target['metadata']['name']}" + (f"/{sub}" if sub else "")
    if write.method == "DELETE":
        assert write.body is None
        return
    if write.method == "POST":  # an eviction
        assert sub == "eviction", write
        assert write.body["metadata"]["name"] == target["metadata"]["name"], write
        return
    if write.content_type == JSON_PATCH:
        assert all(op["op"] in ("add", "replace", "remove") and op["path"].startswith("/") for op in write.body)
        after = apply_patch(target, write.body)  # every path resolves: the API server would apply it
    else:
        assert write.content_type == MERGE
        assert isinstance(write.body, dict)
        assert write.body
        if sub == "status":
            assert set(write.body) == {"status"}, "a status write carries the status only"
        after = _merge(target, write.body)
    assert after != target, f"{attack.name}: the write changes nothing"


@pytest.mark.parametrize("attack", CATALOG, ids=lambda a: a.name)
def test_every_attack_builds_a_well_formed_write_that_changes_its_target(attack: attacker.Attack) -> None:
    applied = [state for state, make in STATES.items() if attack.applies(make())]
    assert applied, f"{attack.name} applies to none of the job's states"
    for state in applied:
        for seed in range(12):  # the variants the seed chooses among
            o = STATES[state]()
            check_well_formed(o, attack.build(o, random.Random(seed)), attack)


def test_the_writes_a_stranger_may_make_are_a_trainer_pods_deletion_and_eviction() -> None:
    assert {a.name for a in CATALOG if a.allowed} == {"delete-pod", "evict-pod"}
    o = running()
    for a in (attacker.BY_NAME["delete-pod"], attacker.BY_NAME["evict-pod"]):
        write = a.build(o, random.Random(1))
        assert write.target.startswith(f"Pod/{o.pods[0]['metadata']['name']}")


def test_the_threat_models_attacks_are_in_the_catalog() -> None:
    names = {a.name for a in CATALOG}
    wanted = {
        "forge-check-ready", "remove-gate-trainjob", "remove-gate-workload", "foreign-runtime-patch",
        "unsuspend-held-trainjob", "reactivate-held-workload", "switch-queue", "queue-plain-job", "resume-jobset",
        "delete-jobset", "delete-job", "suspend-job", "resume-job", "write-job-status", "fake-pod",
        "finalizer-on-own-pod", "remove-pod-finalizer", "delete-workload", "edit-runtime-copy", "raise-a",
        "lower-a", "raise-floor", "lower-floor", "delete-trainjob", "forge-pod-phase", "lower-jobset-restarts",
    }  # fmt: skip
    assert wanted <= names, wanted - names
    assert len(names) == len(CATALOG)


def test_forged_ready_names_dispatchs_check_by_the_name_read_not_the_controller() -> None:
    o = gated()
    write = attacker.BY_NAME["forge-check-ready"].build(o, random.Random(0))
    entries = {e["name"]: e for e in write.body["status"]["admissionChecks"]}
    assert entries[CHECK]["state"] == "Ready"
    assert entries["other-check"] == o.workload["status"]["admissionChecks"][0], "the others sent as read"
    assert ADMISSION_CHECK_CONTROLLER not in entries
    assert not attacker.BY_NAME["forge-check-ready"].applies(running()), "already Ready: nothing to forge"


def test_the_held_jobs_are_unheld_in_both_modes() -> None:
    assert attacker.BY_NAME["unsuspend-held-trainjob"].applies(held_plain())
    assert attacker.BY_NAME["reactivate-held-workload"].applies(held_kueue())
    write = attacker.BY_NAME["reactivate-held-workload"].build(held_kueue(), random.Random(0))
    assert write.body == {"spec": {"active": True}}
    assert not attacker.BY_NAME["unsuspend-held-trainjob"].applies(running())


def test_the_fake_pods_each_claim_the_job_and_run_nowhere() -> None:
    o = running()
    claims = Counter()
    for seed in range(60):
        meta = attacker.BY_NAME["fake-pod"].build(o, random.Random(seed)).body["metadata"]
        if meta.get("labels", {}).get(LABEL_JOBSET_NAME) == o.name:
            claims["labels"] += 1
        elif meta.get("finalizers") == [POD_FINALIZER]:
            claims["finalizer"] += 1
        elif meta.get("ownerReferences"):
            assert meta["ownerReferences"][0]["uid"] == "job-uid"
            claims["owner"] += 1
        else:
            assert meta["name"].startswith(o.name + "-node-"), meta
            claims["name"] += 1
    assert set(claims) == {"labels", "finalizer", "owner", "name"}, claims
    assert attacker.pod_spec()["nodeSelector"] == attacker.UNSCHEDULABLE


# -- classification -------------------------------------------------------------------------------------------


def _status(code: int, message: str, reason: str = "Forbidden") -> str:
    return json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
                       "reason": reason, "code": code})  # fmt: skip


POLICY = ('trainjobs.trainer.kubeflow.org "dj-x-s1" is forbidden: ValidatingAdmissionPolicy '
          "'dispatch-k8s-owners-trainjobs' with binding 'dispatch-k8s-owners-trainjobs' denied request: TrainJob "
          "dj-x-s1 belongs to a dispatch job")  # fmt: skip
WEBHOOK = ('admission webhook "validate-mirrored.trainjobs.dispatch.phpboyscout.uk" denied the request: '
           "update.queue: kueue.x-k8s.io/queue-name is chosen at Start")  # fmt: skip
WEBHOOK_DOWN = ('Internal error occurred: failed calling webhook "validate.trainjobs.dispatch.phpboyscout.uk": '
                'failed to call webhook: Post "https://127.0.0.1:1/validate": dial tcp: connect: connection refused')  # fmt: skip
RBAC = ('pods "p" is forbidden: User "system:serviceaccount:team-a:attacker" cannot patch resource "pods/status" '
        'in API group "" in the namespace "team-a"')  # fmt: skip


@pytest.mark.parametrize(
    ("status", "body", "allowed", "outcome", "by"),
    [
        (403, _status(403, POLICY), False, REFUSED, "policy dispatch-k8s-owners-trainjobs"),
        (422, _status(422, POLICY, "Invalid"), False, REFUSED, "policy dispatch-k8s-owners-trainjobs"),
        (403, _status(403, WEBHOOK), False, REFUSED, "webhook validate-mirrored.trainjobs.dispatch.phpboyscout.uk"),
        (500, _status(500, WEBHOOK_DOWN, "InternalError"), False, REFUSED, "webhook-down (fail closed)"),
        (403, _status(403, RBAC), False, INVALID, "rbac"),
        (422, _status(422, 'Pod "p" is invalid: spec: Forbidden: pod updates may not change fields', "Invalid"),
         False, INVALID, "api"),
        (404, _status(404, 'trainjobs.trainer.kubeflow.org "dj-x-s1" not found', "NotFound"), False, INVALID, "api"),
        (409, _status(409, "the object has been modified", "Conflict"), False, INVALID, "api"),
        (503, _status(503, "etcdserver: request timed out", "ServiceUnavailable"), False, ERROR, "api"),
        (504, "<html>gateway timeout</html>", False, ERROR, "api"),
        (403, _status(403, POLICY), True, REFUSED, "policy dispatch-k8s-owners-trainjobs"),
    ],
)  # fmt: skip
def test_classification_of_answers(status: int, body: str, allowed: bool, outcome: str, by: str) -> None:
    verdict = classify(status, body, allowed=allowed, principal="system:serviceaccount:team-a:attacker")
    assert (verdict.outcome, verdict.by, verdict.status) == (outcome, by, status)
    assert verdict.message
    assert not verdict.message.startswith("{"), "the API's message, not its Status object"


def test_a_success_is_allowed_by_design_or_got_through() -> None:
    assert classify(None, "", allowed=True).outcome == ALLOWED
    assert classify(None, "", allowed=False).outcome == GOT_THROUGH


def test_transport_errors_are_errors() -> None:
    verdict = classify_transport(ConnectionRefusedError(111, "Connection refused"))
    assert (verdict.outcome, verdict.status) == (ERROR, None)
    assert "ConnectionRefusedError" in verdict.message


# -- the seed ---------------------------------------------------------------------------------------------------


def _sequence(seed: int, rounds: int = 300) -> list[tuple[str, str, str, str]]:
    rng = random.Random(seed)
    jobs = {state: make() for state, make in STATES.items()}
    for state, o in jobs.items():  # distinct names, so the job drawn is part of the sequence
        o.trainjob["metadata"]["name"] = o.trainjob["metadata"]["name"][:-2] + f"s{list(STATES).index(state) + 1}"
    out = []
    for _ in range(rounds):
        name = pick_job(rng, [o.trainjob for o in jobs.values()])
        o = next(o for o in jobs.values() if o.trainjob["metadata"]["name"] == name)
        chosen = pick_attack(rng, o)
        assert chosen is not None
        attack, write = chosen
        out.append((str(name), attack.name, write.path, json.dumps(write.body, sort_keys=True)))
    return out


def test_the_same_seed_makes_the_same_attacks() -> None:
    first = _sequence(7)
    assert first == _sequence(7)
    assert first != _sequence(8)
    assert len({a for _, a, _, _ in first}) > 25, "the rounds spread over the catalog"


def test_the_writes_a_stranger_may_make_are_rare() -> None:
    rng = random.Random(3)
    allowed = sum(pick_attack(rng, running())[0].allowed for _ in range(2000))  # type: ignore[index]
    assert 40 <= allowed <= 160, allowed


def test_no_live_job_no_attack() -> None:
    ended = copy.deepcopy(running().trainjob)
    ended["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    deleting = copy.deepcopy(running().trainjob)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    someone_elses = copy.deepcopy(running().trainjob)
    someone_elses["metadata"]["name"] = "someone-elses-job"
    assert pick_job(random.Random(0), [ended, deleting, someone_elses]) is None


# -- one round of the shell ---------------------------------------------------------------------------------------


class FakeApi:
    """Answers the admin's reads from one job's objects; records the stranger's writes and answers them with
    ``answer``."""

    def __init__(self, o: Objects, answer: ApiError | None) -> None:
        self.o, self.answer = o, answer
        self.writes: list[tuple[str, str]] = []
        self.own: dict[str, dict[str, Any]] = {}

    def request(self, method: str, path: str, body: Any = None, *, query: Any = None,
                content_type: str = "application/json") -> Any:  # fmt: skip
        o = self.o
        if method != "GET":
            if path.endswith("/pods") and body["metadata"]["name"].startswith("attacker-own-"):
                self.own[body["metadata"]["name"]] = body
                return body
            self.writes.append((method, path))
            if self.answer is not None:
                raise self.answer
            return {}
        listing: dict[str, list[dict[str, Any]]] = {
            "/admissionchecks": [{"metadata": {"name": CHECK}, "spec": {"controllerName": ADMISSION_CHECK_CONTROLLER}},
                                 {"metadata": {"name": "other-check"}, "spec": {"controllerName": "example.com/x"}}],
            "/trainjobs": [o.trainjob],
            "/workloads": [o.workload] if o.workload else [],
            "/jobs": list(o.jobs),
            "/pods": list(o.pods),
            "/localqueues": [{"metadata": {"name": q}} for q in o.queues],
        }  # fmt: skip
        for suffix, items in listing.items():
            if path.endswith(suffix):
                return {"items": copy.deepcopy(items)}
        for obj in (o.jobset, o.runtime_copy, *self.own.values()):
            if obj and path == attacker._path(obj["kind"], obj):
                return copy.deepcopy(obj)
        raise ApiError(404, method, path, _status(404, "not found", "NotFound"))


@pytest.mark.parametrize(
    ("answer", "outcomes"),
    [(ApiError(403, "PATCH", "/x", _status(403, POLICY)), {REFUSED}), (None, {GOT_THROUGH, ALLOWED})],
    ids=["refused", "accepted"],
)
def test_a_round_reads_the_job_attacks_it_as_the_stranger_and_records_it(
    answer: ApiError | None, outcomes: set[str]
) -> None:
    o = running()
    o.trainjob["spec"]["runtimeRef"] = {"kind": "TrainingRuntime", "name": o.runtime_copy["metadata"]["name"],
                                        "apiGroup": "trainer.kubeflow.org"}  # fmt: skip
    admin, stranger = FakeApi(o, None), FakeApi(o, answer)
    admin.own = stranger.own  # one API server
    records: list[dict[str, Any]] = []
    att = Attacker(admin, stranger, NS, 5, lambda **f: records.append(f), "system:serviceaccount:team-a:attacker")  # type: ignore[arg-type]
    for _ in range(40):
        assert att.round()
    assert admin.writes == [], "the admin only reads"
    assert len(stranger.writes) == len(records) == 40
    assert {r["outcome"] for r in records} <= outcomes
    assert all(set(r) == {"attack", "target", "outcome", "by", "status", "message"} for r in records)
    assert sum(att.counts().values()) == 40
    assert len(stranger.own) == 1, "the stranger's own pod, made once"
    read = att.read(copy.deepcopy(o.trainjob))
    # dispatch's check found by its controller's name: the chart names the check otherwise
    assert read.checks == frozenset({CHECK})
    assert (read.workload, read.jobset, read.runtime_copy) == (o.workload, o.jobset, o.runtime_copy)
    assert (read.pods, read.jobs, read.queues) == (o.pods, o.jobs, o.queues)
    assert read.own_pod is not None
    assert read.own_pod["metadata"]["name"] in stranger.own


def test_the_strangers_rights_are_the_threat_models_and_the_status_writes() -> None:
    rules = attacker.stranger_rules()
    for group in ("trainer.kubeflow.org", "kueue.x-k8s.io", "jobset.x-k8s.io"):
        assert {"apiGroups": [group], "resources": ["*"], "verbs": ["*"]} in rules
    status = {(r["apiGroups"][0], res) for r in rules for res in r["resources"] if res.endswith("/status")}
    assert status == {("", "pods/status"), ("batch", "jobs/status")}, "the forged phase and Job status reach admission"
