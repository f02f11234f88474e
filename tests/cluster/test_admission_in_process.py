"""With the chart's policies, the writes that open executions never leave the API server: the real API server, the
chart's policies (the MutatingAdmissionPolicy included) and dispatch's webhook, a real process, registered as the
chart registers it beside them. Kueue's unsuspends of a dispatch TrainJob, and the suspend of its eviction, are
admitted and recorded in-process, and the webhook answers not one review for them; a create still reaches it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contract.admission import raise_admission
from contract.keys import ANNOTATION_ADMISSION_STARTED
from contract.objects import annotations
from contract.trainjob import build_runtime_copy, build_trainjob
from harness.kube_http import ApiError, KubeHttp
from tests.cluster.chart_admission import (
    chart_policies,
    kueue,
    opened_and_raised,
    unsuspend,
    wait_recorded,
    wait_refused,
)
from tests.cluster.principals import Principals, json_patch, merge_patch, principals
from tests.cluster.webhook_process import WebhookProcess, reviews, start_webhook, wait_enforced
from tests.unit.fixtures import runtime, submission

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
    wait_recorded(kueue_http, tj)

    before = reviews(hook)
    running = unsuspend(kueue_http, tj)
    assert annotations(running)[ANNOTATION_ADMISSION_STARTED] == "1", "recorded in-process"
    evicted = merge_patch(kueue_http, running, {"spec": {"suspend": True}})
    wait_refused(kueue_http, evicted, "is not above 1")  # the validating policies may load after the mutating one
    with pytest.raises(ApiError) as refused:  # re-admitted without a raise: the policies still judge
        unsuspend(kueue_http, evicted)
    assert refused.value.status == 403
    assert "is not above 1" in refused.value.body
    raised = json_patch(who.dispatch, evicted, raise_admission(evicted).patch)
    again = unsuspend(kueue_http, raised)
    assert annotations(again)[ANNOTATION_ADMISSION_STARTED] == "2"
    assert reviews(hook) == before, "unsuspends, a suspend, a refused unsuspend, a raise: no review reached the webhook"
