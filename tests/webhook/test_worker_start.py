"""The start of MultiKueue's copy on a worker, on the real API server (no webhook, no controller): in role worker the
chart's policies (the MutatingAdmissionPolicy ``record-start`` and the unsuspend policy) record A at the copy's
start and never raise it, and refuse a second start of the same copy; in one cluster alone, and for a dispatch job
that is not a copy, the same restart raises A (docs/multicluster.md, guarantee 3).

Kueue acts through impersonation with cluster-admin's RBAC, so what passes and what is refused is the policies'
doing."""

from __future__ import annotations

import copy
import json
import secrets
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from ulid import ULID

from contract.admission import (
    admission_count,
    admission_floor,
    admission_started,
    approval_ops,
    preconditions,
    raise_admission,
)
from contract.identity import epoch, r_of
from contract.keys import (
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_OPENED,
    ANNOTATION_UNVERIFIED,
    UNVERIFIED_TRUE,
)
from contract.multicluster import MULTIKUEUE_ORIGIN_LABEL, ROLE_SINGLE, ROLE_WORKER
from contract.objects import annotations
from contract.trainjob import build_trainjob
from harness.cluster import ControlPlane
from harness.fixtures import runtime, submission
from harness.kube_http import ApiError, KubeHttp
from harness.principals import bound_here
from tests.harness.kubelet import apply_json_patch
from webhook.config import Config, Principals
from webhook.policies import admission_policies

pytestmark = pytest.mark.cluster
RBAC = "rbac.authorization.k8s.io/v1"
JSON_PATCH = "application/json-patch+json"
KUEUE_USER = "dispatch-worker-test:kueue"
MULTIKUEUE_USER = "dispatch-worker-test:multikueue"


@dataclass
class Armed:
    role: str
    namespace: str
    admin: KubeHttp
    kueue: KubeHttp
    multikueue: KubeHttp
    docs: list[dict[str, Any]]


def _trainjob(cp: ControlPlane, namespace: str, *, is_copy: bool, marked: bool = False) -> dict[str, Any]:
    """A Kueue-mode dispatch TrainJob that dispatch opened and whose A was raised to 1, suspended: on a worker with
    ``is_copy``, MultiKueue's copy of the manager's (its origin label), verified by dispatch's agent unless
    ``marked``. Stored by the admin (dispatch's principal here)."""
    tj = cp.admin.create(_opened_copy(namespace, is_copy=is_copy))  # in role worker, mark-copy marks a copy
    if not marked and ANNOTATION_UNVERIFIED in annotations(tj):  # dispatch's agent verified it
        unmark = [{"op": "remove", "path": "/metadata/annotations/" + ANNOTATION_UNVERIFIED.replace("/", "~1")}]
        tj = cp.admin.request("PATCH", cp.admin.object_path(tj), unmark, content_type=JSON_PATCH)
    elif marked and ANNOTATION_UNVERIFIED not in annotations(tj):
        mark = [{"op": "add", "path": "/metadata/annotations/" + ANNOTATION_UNVERIFIED.replace("/", "~1"),
                 "value": UNVERIFIED_TRUE}]  # fmt: skip
        tj = cp.admin.request("PATCH", cp.admin.object_path(tj), mark, content_type=JSON_PATCH)
    raised = cp.admin.request("PATCH", cp.admin.object_path(tj), raise_admission(tj).patch, content_type=JSON_PATCH)
    return _approve(cp.admin, raised, admission_count(raised) or 0)


def _approve(admin: KubeHttp, tj: dict[str, Any], a: int) -> dict[str, Any]:
    """The readmission gate's approval of A ``a`` (agent/domain/decide.py; a copy on a worker needs none, and carries it
    harmlessly), written as dispatch."""
    ops = [*preconditions(tj), *approval_ops(tj, a, "wl-uid")]
    return admin.request("PATCH", admin.object_path(tj), ops, content_type=JSON_PATCH)


def _opened_copy(namespace: str, *, is_copy: bool = True) -> dict[str, Any]:
    tj = build_trainjob(submission(namespace=namespace, job_id=str(ULID())), runtime()["spec"])
    tj["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY, None)
    tj["metadata"]["annotations"][ANNOTATION_OPENED] = "true"
    if is_copy:
        tj["metadata"]["labels"][MULTIKUEUE_ORIGIN_LABEL] = "manager"
    return tj


def _with_suspend(tj: dict[str, Any], suspend: bool) -> dict[str, Any]:
    new = copy.deepcopy(tj)
    new["spec"]["suspend"] = suspend
    return new


def _refusal(call: Callable[[], Any]) -> str | None:
    try:
        call()
    except ApiError as err:
        if err.status not in (403, 422):
            raise
        return json.loads(err.body)["message"]
    return None


@pytest.fixture(params=[ROLE_WORKER, ROLE_SINGLE])
def armed(request: pytest.FixtureRequest, control_plane: ControlPlane) -> Iterator[Armed]:
    """The role's field rules and ``record-start`` (not the owner policies), bound to a namespace of the test's own,
    in force once an unsuspend is recorded and a never-opened job's unsuspend refused."""
    role = request.param
    cp = control_plane
    namespace = cp.create_namespace(f"worker-start-{role or 'single'}")
    canary = _trainjob(cp, namespace, is_copy=False)
    closed = cp.admin.create(build_trainjob(submission(namespace=namespace, job_id=str(ULID())), runtime()["spec"]))
    suffix = secrets.token_hex(3)
    binding = f"worker-start-{suffix}"
    cp.admin.create({
        "apiVersion": RBAC, "kind": "ClusterRoleBinding", "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
                     for user in (KUEUE_USER, MULTIKUEUE_USER)],
    })  # fmt: skip
    # The admin plays dispatch (it creates, opens and raises the jobs, and MultiKueue's copies, as those would).
    config = Config(
        dispatch=Principals(groups=("system:masters",)),
        kueue=Principals(usernames=(KUEUE_USER,)),
        multiclusterRole=role,
        multikueue=Principals(usernames=(MULTIKUEUE_USER,)) if role == ROLE_WORKER else Principals(),
    )
    docs = bound_here(admission_policies(config, namespace="dispatch-system", owners_too=False), namespace, suffix)
    for doc in docs:
        cp.admin.create(doc)
    kueue = KubeHttp(cp.admin_credentials, impersonate=(KUEUE_USER, None))
    dry = {"dryRun": "All"}
    deadline = time.monotonic() + 60
    while True:
        try:
            recorded = kueue.request("PUT", kueue.object_path(canary), _with_suspend(canary, False), query=dry)
            refused = _refusal(
                lambda: kueue.request("PUT", kueue.object_path(closed), _with_suspend(closed, False), query=dry)
            )
            if ANNOTATION_ADMISSION_STARTED in annotations(recorded) and refused is not None:
                break
        except ApiError as err:
            if err.status not in (403, 503):  # the policies load one by one; a mutating one needs the CRD's schema
                raise
        assert time.monotonic() < deadline, "the policies were not in force within 60 s"
        time.sleep(0.3)
    multikueue = KubeHttp(cp.admin_credentials, impersonate=(MULTIKUEUE_USER, None))
    yield Armed(role, namespace, cp.admin, kueue, multikueue, docs)
    for doc in reversed(docs):
        cp.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
    cp.admin.delete(RBAC, "ClusterRoleBinding", binding)
    cp.delete_namespace(namespace)


def _kueue_sets(armed: Armed, tj: dict[str, Any], suspend: bool) -> dict[str, Any]:
    """Kueue's update of ``suspend`` (its admission unsuspends, its eviction suspends): the object as stored."""
    return armed.kueue.request("PUT", armed.kueue.object_path(tj), _with_suspend(tj, suspend))


def _identity(tj: dict[str, Any]) -> tuple[int, int]:
    """(A, R) of the execution the stored unsuspend starts: J is 0 in the JobSet a start creates."""
    a = admission_count(tj)
    assert a is not None
    return a, epoch(0, 3, r_of(a, 0))


@pytest.mark.parametrize("is_copy", [True, False], ids=["copy", "not-a-copy"])
def test_a_restart_of_a_copy_on_a_worker_is_refused_and_raised_elsewhere(armed: Armed, control_plane, is_copy):
    tj = _trainjob(control_plane, armed.namespace, is_copy=is_copy)
    a = admission_count(tj)
    started = _kueue_sets(armed, tj, suspend=False)
    # The first start is recorded with the A it carries, in every role (it was raised since the last start).
    assert (admission_count(started), admission_floor(started), admission_started(started)) == (a, a, a)
    executions = [_identity(started)]
    evicted = _kueue_sets(armed, started, suspend=True)  # Kueue's eviction: the pods go
    if armed.role == ROLE_WORKER and is_copy:
        # Re-admitted on the worker: the copy would run again under the same A, J at 0 in a new JobSet.
        refusal = _refusal(lambda: _kueue_sets(armed, evicted, suspend=False))
        assert refusal is not None
        assert f"A {a} is not above {a}, the A the previous execution started with" in refusal
        stored = armed.admin.get(tj["apiVersion"], "TrainJob", tj["metadata"]["name"], armed.namespace)
        assert stored["spec"]["suspend"] is True
        assert (admission_count(stored), admission_started(stored)) == (a, a)  # nothing raised
        # Nor may Kueue's start raise A itself on a worker: the manager numbers each dispatch.
        raised = _with_suspend(evicted, False)
        raised_tj = _apply(raised, raise_admission(evicted).patch)
        refusal = _refusal(lambda: armed.kueue.request("PUT", armed.kueue.object_path(evicted), raised_tj))
        assert refusal is not None
        assert "records A and never raises it" in refusal
    else:
        again = _kueue_sets(armed, _approve(armed.admin, evicted, a + 1), suspend=False)  # the gate approved A + 1
        assert (admission_count(again), admission_floor(again), admission_started(again)) == (a + 1, a + 1, a + 1)
        executions.append(_identity(again))
    # No two executions share an identity, and R only rises.
    assert len({x for x, _ in executions}) == len(executions)
    assert [r for _, r in executions] == sorted({r for _, r in executions})


def _apply(obj: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """``patch`` on ``obj`` less its preconditions (the uid test and the resourceVersion written back)."""
    return apply_json_patch(
        obj, [op for op in patch if op["path"] not in ("/metadata/uid", "/metadata/resourceVersion")]
    )


def test_on_a_worker_the_origin_label_of_a_copy_never_changes(armed: Armed, control_plane):
    tj = _trainjob(control_plane, armed.namespace, is_copy=True)
    unlabelled = copy.deepcopy(tj)
    del unlabelled["metadata"]["labels"][MULTIKUEUE_ORIGIN_LABEL]
    refusal = _refusal(
        lambda: armed.kueue.request("PUT", armed.kueue.object_path(tj), unlabelled, query={"dryRun": "All"})
    )
    if armed.role == ROLE_WORKER:
        assert refusal is not None
        assert "origin label" in refusal
    else:
        assert refusal is None


def test_on_a_worker_a_copy_does_not_start_while_marked_unverified(armed: Armed, control_plane):
    """The mark dispatch's mutating webhook puts on MultiKueue's copy at its creation: the copy starts only once
    dispatch's agent has matched its A to its dispatch's stamp and removed the mark (docs/multicluster.md, "The
    stale copy"), and nobody else removes it."""
    tj = _trainjob(control_plane, armed.namespace, is_copy=True, marked=True)
    refusal = _refusal(lambda: _kueue_sets(armed, tj, suspend=False))
    if armed.role != ROLE_WORKER:
        assert refusal is None  # the mark means nothing outside a worker (nobody but dispatch writes it)
        return
    assert refusal is not None
    assert ANNOTATION_UNVERIFIED in refusal
    # Kueue (or anyone but dispatch) removing the mark is refused: a key of dispatch's.
    unmarked = copy.deepcopy(tj)
    del unmarked["metadata"]["annotations"][ANNOTATION_UNVERIFIED]
    assert _refusal(lambda: armed.kueue.request("PUT", armed.kueue.object_path(tj), unmarked)) is not None
    # dispatch's agent removes it (the admin plays dispatch), and the start passes, recording A.
    verified = armed.admin.request("PUT", armed.admin.object_path(tj), unmarked)
    started = _kueue_sets(armed, verified, suspend=False)
    assert admission_started(started) == admission_count(tj)


def test_on_a_worker_multikueue_s_copy_is_created_marked_and_suspended_or_refused(armed: Armed):
    """The MutatingAdmissionPolicy mark-copy (role worker) marks MultiKueue's copy unverified and suspends it at its
    creation; without it (and without the webhook, which does the same), the reserved-keys policy refuses the copy
    unmarked: it could start with an earlier dispatch's A."""
    plain = _opened_copy(armed.namespace)
    plain["spec"]["suspend"] = False
    if armed.role != ROLE_WORKER:
        # One cluster alone knows no MultiKueue principal: its create of a dispatch TrainJob is a stranger's.
        refusal = _refusal(lambda: _dry_create(armed.multikueue, plain))
        assert refusal is not None
        assert "only dispatch adds, changes or removes" in refusal
        return
    created = _dry_create(armed.multikueue, plain)
    assert annotations(created)[ANNOTATION_UNVERIFIED] == UNVERIFIED_TRUE
    assert created["spec"]["suspend"] is True
    # Without the mutation: refused.
    mark = next(
        d for d in armed.docs if d["kind"] == "MutatingAdmissionPolicyBinding" and "mark-copy" in d["metadata"]["name"]
    )
    armed.admin.delete(mark["apiVersion"], mark["kind"], mark["metadata"]["name"])
    try:
        deadline = time.monotonic() + 60
        while (refusal := _refusal(lambda: _dry_create(armed.multikueue, plain))) is None:
            assert time.monotonic() < deadline, "the mark-copy binding still acted 60 s after its deletion"
            time.sleep(0.3)
        assert f"marked {ANNOTATION_UNVERIFIED}" in refusal
        marked = copy.deepcopy(plain)
        marked["metadata"]["annotations"][ANNOTATION_UNVERIFIED] = UNVERIFIED_TRUE
        assert _refusal(lambda: _dry_create(armed.multikueue, marked)) is not None  # unsuspended
        marked["spec"]["suspend"] = True
        assert _refusal(lambda: _dry_create(armed.multikueue, marked)) is None
    finally:
        armed.admin.create(mark)


def _dry_create(client: KubeHttp, obj: dict[str, Any]) -> Any:
    path = client.collection_path(obj["apiVersion"], obj["kind"], obj["metadata"]["namespace"])
    return client.request("POST", path, obj, query={"dryRun": "All"})
