"""With the chart's policies, the writes that open executions never leave the API server: the real API server, the
chart's policies (the MutatingAdmissionPolicy included) and dispatch's webhook, a real process, registered as the
chart registers it beside them. Kueue's unsuspends of a dispatch TrainJob (A raised in the one that re-admits it),
the suspend of its eviction and a hold's refusal are decided in-process, and the webhook answers not one review
for them; a create still reaches it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.admission import admission_count, approval_ops, preconditions
from contract.keys import ANNOTATION_ADMISSION_FLOOR, ANNOTATION_ADMISSION_STARTED, ANNOTATION_HOLD_INSTANCE
from contract.objects import annotations
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.chart_admission import (
    chart_policies,
    kueue,
    opened_and_raised,
    unsuspend,
    wait_recorded,
    wait_refused,
)
from harness.fixtures import runtime, submission
from harness.kube_http import ApiError, KubeHttp
from harness.principals import Principals, merge_patch, principals
from harness.webhook_process import WebhookProcess, reviews, start_webhook, wait_enforced

pytestmark = pytest.mark.cluster


@pytest.fixture
def chart(control_plane, namespace, tmp_path) -> Iterator[tuple[Principals, KubeHttp, WebhookProcess]]:
    who = principals(control_plane, namespace)
    http, username = kueue(control_plane, namespace, [namespace])
    hook = start_webhook(control_plane, namespace, who.dispatch_username, tmp_path, policies=True, mutating_policy=True)
    # Before the policies: the owner policy would refuse the stranger's canary before the webhook saw it.
    wait_enforced(who.stranger, namespace)
    docs = chart_policies(who, username, [namespace])
    for doc in docs:
        control_plane.admin.create(doc)
    yield who, http, hook
    for doc in reversed(docs):
        control_plane.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])
    hook.unregister()
    hook.stop()


def _created(who: Principals, namespace: str, n: int) -> dict:
    sub = submission(namespace=namespace, n=n)
    who.dispatch.create(build_runtime_copy(sub, runtime()))
    return who.dispatch.create(build_trainjob(sub, runtime()["spec"]))


def test_kueues_unsuspend_makes_no_call_to_the_webhook(namespace, chart):
    who, kueue_http, hook = chart
    before_create = reviews(hook, "validate")
    tj = opened_and_raised(who, _created(who, namespace, 1))
    assert reviews(hook, "validate") == before_create + 2, "the creates (runtime copy, TrainJob) reach the webhook"
    approved = _approve(who, tj, 1)
    wait_recorded(kueue_http, approved)  # approved first: the unsuspend policy refuses an unapproved start

    before = reviews(hook)
    running = unsuspend(kueue_http, approved)
    assert annotations(running)[ANNOTATION_ADMISSION_STARTED] == "1", "recorded in-process"
    evicted = merge_patch(kueue_http, running, {"spec": {"suspend": True}})
    held = merge_patch(who.dispatch, evicted, {"metadata": {"annotations": {ANNOTATION_HOLD_INSTANCE: "h-1"}}})
    wait_refused(kueue_http, held, "a hold of dispatch's is in force")  # the validating policies load apart
    with pytest.raises(ApiError) as refused:  # the policies still judge every unsuspend
        unsuspend(kueue_http, held)
    assert refused.value.status == 403
    released = merge_patch(who.dispatch, held, {"metadata": {"annotations": {ANNOTATION_HOLD_INSTANCE: None}}})
    again = unsuspend(kueue_http, _approve(who, released, 2))  # re-admitted: numbered in the write that starts it
    assert (admission_count(again), annotations(again)[ANNOTATION_ADMISSION_FLOOR]) == (2, "2")
    assert annotations(again)[ANNOTATION_ADMISSION_STARTED] == "2"
    assert reviews(hook) == before, (
        "approvals, unsuspends, a suspend, a hold, a refused unsuspend: no review reached the webhook"
    )


def _approve(who, tj, a):
    """The readmission gate's approval of A ``a`` (agent/domain/decide.py), as dispatch, before Kueue's unsuspend."""
    return who.dispatch.request(
        "PATCH",
        who.dispatch.object_path(tj),
        [*preconditions(tj), *approval_ops(tj, a, "wl-uid")],
        content_type="application/json-patch+json",
    )
