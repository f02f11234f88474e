"""`dispatch-webhook selftest`'s reading of the API server's answers (the chart's `helm test`)."""

import pytest

from contract.names import is_dispatch_name
from contract.ownership import is_dispatch
from webhook.selftest import Result, judge, probe

OURS = (
    'HTTP 403 Forbidden: admission webhook "validate.trainjobs.dispatch.phpboyscout.uk" denied the request: '
    "dispatch-k8s denied this CREATE of TrainJob default/dj-x-s1: only dispatch creates dispatch TrainJobs"
)


POLICY = (
    'HTTP 403 Forbidden: trainjobs.trainer.kubeflow.org "dj-x-s1" is forbidden: ValidatingAdmissionPolicy '
    "'dispatch-k8s-owners-trainjobs' with binding 'dispatch-k8s-owners-trainjobs' denied request: TrainJob dj-x-s1 "
    "belongs to a dispatch job: CREATE is made only by dispatch (or break-glass), and system:serviceaccount:a:b is "
    "none of them"
)


def test_dispatchs_denial_passes():
    assert judge(403, OURS).result is Result.PASSED


def test_the_owner_policys_denial_is_dispatchs_too():
    assert judge(403, POLICY).result is Result.PASSED


@pytest.mark.parametrize(
    ("status", "message", "says"),
    [
        (201, "", "did not call dispatch's webhook"),
        (
            500,
            'Internal error occurred: failed calling webhook "validate.trainjobs.dispatch.phpboyscout.uk": failed to '
            'call webhook: Post "https://dispatch-k8s.dispatch-system.svc:443/validate?timeout=5s": tls: failed to '
            "verify certificate: x509: certificate signed by unknown authority",
            "the caBundle is not (yet) injected",
        ),
        (
            500,
            'Internal error occurred: failed calling webhook "validate.trainjobs.dispatch.phpboyscout.uk": failed to '
            'call webhook: Post "https://dispatch-k8s.dispatch-system.svc:443/validate?timeout=5s": no endpoints '
            'available for service "dispatch-k8s"',
            "has no ready pod",
        ),
        (
            500,
            'failed calling webhook "validate.trainjobs.dispatch.phpboyscout.uk": failed to call webhook: Post '
            '"https://dispatch-k8s.dispatch-system.svc:443/validate?timeout=5s": context deadline exceeded',
            "did not answer within",
        ),
        (
            403,
            'admission webhook "validator.trainjob.trainer.kubeflow.org" denied the request: runtime not found',
            "not by dispatch-k8s",
        ),
    ],
)
def test_what_a_fresh_install_outgrows_is_retried_and_named(status, message, says):
    verdict = judge(status, message)
    assert verdict.result is Result.RETRY
    assert says in verdict.message


@pytest.mark.parametrize(
    ("status", "message", "says"),
    [
        (404, "HTTP 404 Not Found: the server could not find the requested resource", "TrainJob API is not served"),
        (
            403,
            'HTTP 403 Forbidden: trainjobs.trainer.kubeflow.org is forbidden: User "system:serviceaccount:d:t" '
            'cannot create resource "trainjobs" in API group "trainer.kubeflow.org" in the namespace "x"',
            "may not create TrainJobs here",
        ),
    ],
)
def test_what_will_not_change_fails_at_once(status, message, says):
    verdict = judge(status, message)
    assert verdict.result is Result.FAILED
    assert says in verdict.message


def test_the_probe_is_dispatchs_by_its_name_alone():
    body = probe("team-a", job_id="01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert body["metadata"] == {"name": "dj-01arz3ndektsv4rrffq69g5fav-s1", "namespace": "team-a"}
    assert is_dispatch_name(body["metadata"]["name"])
    assert is_dispatch(body)
    assert "labels" not in body["metadata"]
    assert "annotations" not in body["metadata"]
    assert probe("a")["metadata"]["name"] != probe("a")["metadata"]["name"], "a fresh name each time"
