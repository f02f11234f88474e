"""The real API server calls dispatch's webhook (a real process, real TLS) on every write to dispatch's
objects; unrelated objects never reach it, even while it is down."""

from __future__ import annotations

import json
import ssl
import time
import urllib.request
from collections.abc import Iterator

import pytest

from contract.admission import admission_count, approval, raise_admission
from contract.keys import (
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_OPENED,
    GATE,
)
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.fixtures import JOB_ID, runtime, submission
from harness.kube_http import ApiError
from harness.principals import Principals, json_patch, merge_patch, principals
from harness.webhook_process import WebhookProcess, start_webhook, wait_enforced

pytestmark = pytest.mark.cluster
TRAINJOB = "trainer.kubeflow.org/v1alpha1"


@pytest.fixture(scope="module")
def setup(control_plane, tmp_path_factory) -> Iterator[tuple[str, Principals, WebhookProcess]]:
    namespace = control_plane.create_namespace("webhook")
    who = principals(control_plane, namespace)
    hook = start_webhook(control_plane, namespace, who.dispatch_username, tmp_path_factory.mktemp("webhook"))
    wait_enforced(who.stranger, namespace)
    yield namespace, who, hook
    hook.unregister()
    hook.stop()


@pytest.fixture
def ns(setup) -> str:
    return setup[0]


@pytest.fixture
def who(setup) -> Principals:
    return setup[1]


_n = iter(range(1, 999_999))


def fresh(namespace: str, **overrides):
    """A Submission with a new N, so each test's objects have their own names."""
    return submission(namespace=namespace, n=next(_n), **overrides)


def start(who: Principals, sub) -> dict:
    who.dispatch.create(build_runtime_copy(sub, runtime()))
    return who.dispatch.create(build_trainjob(sub, runtime()["spec"]))


def refused(call, status: int = 403) -> str:
    """The API server's message refusing ``call``: our denial's own code, 403, with our message."""
    with pytest.raises(ApiError) as err:
        call()
    assert err.value.status == status, err.value
    return json.loads(err.value.body)["message"]


def test_dispatch_creates_in_both_modes(who, ns):
    kueue = start(who, fresh(ns))
    assert kueue["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] == GATE
    plain = start(who, fresh(ns, queue=None))
    assert plain["spec"]["suspend"] is True


def test_mutation_closes_a_trainjob_dispatch_sent_open(who, ns):
    sub = fresh(ns)
    who.dispatch.create(build_runtime_copy(sub, runtime()))
    tj = build_trainjob(sub, runtime()["spec"])
    del tj["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY]
    created = who.dispatch.create(tj)
    assert created["metadata"]["annotations"][ANNOTATION_ADMISSION_GATED_BY] == GATE


def test_strangers_may_not_create_dispatch_trainjobs(who, ns):
    sub = fresh(ns)
    who.dispatch.create(build_runtime_copy(sub, runtime()))
    message = refused(lambda: who.stranger.create(build_trainjob(sub, runtime()["spec"])))
    assert "admission webhook" in message
    assert "[creation.principal] userInfo.username: saw 'system:serviceaccount:" in message


def test_a_non_canonical_trainjob_is_refused_naming_the_rule(who, ns):
    sub = fresh(ns)
    who.dispatch.create(build_runtime_copy(sub, runtime()))
    tj = build_trainjob(sub, runtime()["spec"])
    tj["spec"]["trainer"]["env"].insert(0, {"name": "DISPATCH_EPOCH", "value": "1"})
    message = refused(lambda: who.dispatch.create(tj))
    assert "[creation.env-reserved] spec.trainer.env[DISPATCH_EPOCH]" in message


def test_a_runtime_that_restarts_in_place_is_refused(who, ns):
    rt = runtime()
    rt["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["restartPolicy"] = (
        "OnFailure"
    )
    message = refused(lambda: who.dispatch.create(build_runtime_copy(fresh(ns), rt)))
    assert "[runtime.restart-policy]" in message
    assert "saw 'OnFailure'; must be Never" in message


def test_the_runtime_copy_never_changes(who, ns):
    sub = fresh(ns)
    copy_ = who.dispatch.create(build_runtime_copy(sub, runtime()))
    message = refused(lambda: merge_patch(who.dispatch, copy_, {"spec": {"mlPolicy": {"numNodes": 4}}}))
    assert "[runtime-copy.immutable]" in message


def test_plain_open_raises_a_and_a_strangers_unsuspend_is_refused(who, ns):
    tj = start(who, fresh(ns, queue=None))
    message = refused(lambda: merge_patch(who.stranger, tj, {"spec": {"suspend": False}}))
    assert "[update.unsuspend] spec.suspend" in message
    opened = json_patch(
        who.dispatch,
        tj,
        [*raise_admission(tj).patch, {"op": "replace", "path": "/spec/suspend", "value": False},
         {"op": "add", "path": "/metadata/annotations/dispatch.phpboyscout.uk~1opened", "value": "true"}],
    )  # fmt: skip
    assert opened["spec"]["suspend"] is False
    assert opened["metadata"]["annotations"][ANNOTATION_OPENED] == "true"


def test_strangers_may_not_remove_the_gate_and_dispatch_may(who, ns):
    tj = start(who, fresh(ns))
    message = refused(
        lambda: merge_patch(who.stranger, tj, {"metadata": {"annotations": {ANNOTATION_ADMISSION_GATED_BY: None}}})
    )
    assert "[reserved-keys.gate]" in message
    opened = merge_patch(who.dispatch, tj, {"metadata": {"annotations": {ANNOTATION_ADMISSION_GATED_BY: None}}})
    assert ANNOTATION_ADMISSION_GATED_BY not in opened["metadata"]["annotations"]


def unrelated(namespace: str, name: str) -> dict:
    return {
        "apiVersion": TRAINJOB,
        "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace, "labels": {"team": "a"}},
        "spec": {"runtimeRef": {"name": "torch-distributed"}, "suspend": True},
    }


def test_unrelated_trainjobs_do_not_wait_on_the_webhook(control_plane, who, ns, setup):
    hook = setup[2]
    who.stranger.create(unrelated(ns, "before-stop"))
    hook.stop()
    try:
        created = who.stranger.create(unrelated(ns, "while-stopped"))
        assert created["metadata"]["name"] == "while-stopped"
        sub = fresh(ns)
        # failurePolicy Fail: a dispatch object is never written unchecked.
        message = refused(lambda: who.dispatch.create(build_trainjob(sub, runtime()["spec"])), status=500)
        assert "failed calling webhook" in message
    finally:
        hook.restart()


def test_job_id_label_cannot_be_forged_onto_an_unrelated_trainjob(who, ns):
    job = who.stranger.create(unrelated(ns, "forger"))
    message = refused(
        lambda: merge_patch(who.stranger, job, {"metadata": {"labels": {"dispatch.phpboyscout.uk/job-id": JOB_ID}}})
    )
    assert "[reserved-keys] metadata.labels[dispatch.phpboyscout.uk/job-id]" in message


# -- Issue 10: the routes and the record, through the real API server ---------------------------------------

STARTED = "dispatch.phpboyscout.uk/admission-started"
MERGE = "application/merge-patch+json"


def test_the_unsuspend_is_recorded_and_a_readmission_raised_in_the_same_write(who, ns):
    tj = start(who, fresh(ns))
    opened = merge_patch(who.dispatch, tj, {"metadata": {"annotations": {
        ANNOTATION_ADMISSION_GATED_BY: None, ANNOTATION_OPENED: "true"}}})  # fmt: skip
    # Kueue's admission (here dispatch's principal plays it): the mutating webhook raises A 0 -> 1 and records it
    # in the write that starts the first execution.
    # Each start carries the readmission gate's approval of its A (agent/domain/decide.py), written before.
    unapproved = refused(lambda: merge_patch(who.dispatch, opened, {"spec": {"suspend": False}}))
    assert "[update.approval]" in unapproved
    running = merge_patch(who.dispatch, opened, _approved_start(1))
    assert (admission_count(running), running["metadata"]["annotations"][STARTED]) == (1, "1")
    evicted = merge_patch(who.dispatch, running, {"spec": {"suspend": True}})
    assert "[update.approval]" in refused(lambda: merge_patch(who.dispatch, evicted, {"spec": {"suspend": False}}))
    # re-admitted: raised in the write
    again = merge_patch(who.dispatch, evicted, _approved_start(2))
    assert (admission_count(again), again["metadata"]["annotations"][STARTED]) == (2, "2")
    assert again["metadata"]["annotations"][ANNOTATION_ADMISSION_FLOOR] == "2"


def _approved_start(a: int) -> dict:
    """A merge patch that unsuspends with the gate's approval of A ``a`` (dispatch may write both in one write)."""
    return {
        "metadata": {"annotations": {ANNOTATION_APPROVED_ADMISSION: approval(a, "wl-uid")}},
        "spec": {"suspend": False},
    }


def _owned(kind_body: dict, owner: str) -> dict:
    kind_body["metadata"]["ownerReferences"] = [
        {"apiVersion": TRAINJOB, "kind": "TrainJob", "name": owner, "uid": "0" * 8}
    ]
    return kind_body


def test_workload_status_and_jobset_routes(control_plane, who, ns):
    owner = f"dj-{JOB_ID.lower()}-s999"
    wl = who.stranger.create(_owned({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"trainjob-{owner}-1a2b3", "namespace": ns},
        "spec": {"queueName": "q", "podSets": [{"name": "node", "count": 1, "template": {"spec": {
            "containers": [{"name": "c", "image": "x"}]}}}]},
    }, owner))  # fmt: skip
    status = control_plane.admin.object_path(wl) + "/status"

    def check(state: str) -> dict:
        return {"status": {"admissionChecks": [{"name": "dispatch-admission", "state": state, "message": "",
                                                "lastTransitionTime": "2026-12-01T10:00:00Z"}]}}  # fmt: skip

    control_plane.admin.request("PATCH", status, check("Pending"), content_type=MERGE)
    message = refused(lambda: who.stranger.request("PATCH", status, check("Ready"), content_type=MERGE))
    assert "[workload-status.check] status.admissionChecks[dispatch-admission]" in message
    who.dispatch.request("PATCH", status, check("Ready"), content_type=MERGE)

    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": owner, "namespace": ns},
        "spec": {"suspend": False, "replicatedJobs": [{"name": "node", "template": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "node", "image": "x"}]}}}}}]},
    }  # fmt: skip
    message = refused(lambda: who.dispatch.create(body))  # for everyone: Trainer's recreation is the case
    assert "[jobset.create-suspended] spec.suspend: saw 'False'" in message
    body["spec"]["suspend"] = True
    js = who.stranger.create(body)
    js_status = control_plane.admin.object_path(js) + "/status"
    control_plane.admin.request("PATCH", js_status, {"status": {"restarts": 2}}, content_type=MERGE)
    message = refused(lambda: who.stranger.request("PATCH", js_status, {"status": {"restarts": 1}}, content_type=MERGE))
    assert "[jobset-status.restarts] status.restarts: saw '2 -> 1'" in message
    message = refused(lambda: who.stranger.delete("jobset.x-k8s.io/v1alpha2", "JobSet", owner, ns))
    assert "[jobset.delete]" in message
    who.dispatch.delete("jobset.x-k8s.io/v1alpha2", "JobSet", owner, ns)


def _mutate_reviews(hook: WebhookProcess) -> float:
    context = ssl.create_default_context(cadata=hook.ca_pem.decode())
    with urllib.request.urlopen(f"https://127.0.0.1:{hook.port}/metrics", context=context, timeout=5) as resp:
        lines = resp.read().decode().splitlines()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in lines
        if line.startswith("dispatch_webhook_reviews_total{") and 'endpoint="mutate"' in line
    )


def test_a_trainjob_created_closed_is_not_sent_to_mutate_and_an_open_one_is(who, ns, setup):
    hook = setup[2]
    before = _mutate_reviews(hook)
    start(who, fresh(ns))  # Kueue mode, created gated
    start(who, fresh(ns, queue=None))  # plain mode, created suspended
    assert _mutate_reviews(hook) == before
    sub = fresh(ns, queue=None)
    who.dispatch.create(build_runtime_copy(sub, runtime()))
    tj = build_trainjob(sub, runtime()["spec"])
    tj["spec"]["suspend"] = False
    assert who.dispatch.create(tj)["spec"]["suspend"] is True  # still closed by /mutate
    assert _mutate_reviews(hook) == before + 1


def _dry_run_create(who: Principals, body: dict) -> str | None:
    """A dry-run create (admission runs, nothing is stored): None when allowed, else the refusal."""
    path = who.dispatch.collection_path(body["apiVersion"], body["kind"], body["metadata"]["namespace"])
    try:
        who.dispatch.request("POST", path, body, query={"dryRun": "All"})
    except ApiError as err:
        return json.loads(err.body)["message"]
    return None


def test_a_deleted_runtime_copy_is_refused_once_the_watch_saw_it_gone(who, ns):
    """The webhook keeps copies in memory from a watch. Once the watch delivered a delete, a create that names
    the copy is refused, as a fresh read would refuse it, and stays refused until a copy of that name exists
    again. (Polled with dry runs: the watch's delivery takes milliseconds.)"""

    sub = fresh(ns)
    copy_ = who.dispatch.create(build_runtime_copy(sub, runtime()))
    body = build_trainjob(sub, runtime()["spec"])
    assert _dry_run_create(who, body) is None
    who.dispatch.delete(copy_["apiVersion"], copy_["kind"], copy_["metadata"]["name"], ns)
    deadline = time.monotonic() + 10
    while (message := _dry_run_create(who, body)) is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert message is not None
    assert "[creation.runtime-copy]" in message
    for _ in range(20):  # and it stays refused: nothing brings the old copy back
        assert _dry_run_create(who, body) is not None
    who.dispatch.create(build_runtime_copy(sub, runtime()))  # recreated: a new uid, allowed again
    deadline = time.monotonic() + 10
    while _dry_run_create(who, body) is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dry_run_create(who, body) is None
