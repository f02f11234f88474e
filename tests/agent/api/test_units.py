"""Pure parts of the API shell: the bearer token, the reviews, the route table's rights, the settings and
the OpenAPI document; and the TokenReview cache with a stub API server."""

from __future__ import annotations

import asyncio

import pytest

from agent.api.auth import (
    Access,
    Authenticator,
    FailureLimiter,
    User,
    access_review,
    bearer_token,
    review_verdict,
    reviewed_user,
)
from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import KubeError
from agent.api.models import ObjectRef, PreflightRequest
from agent.api.openapi import document
from agent.api.routes import ROUTES, coordinates
from agent.api.settings import ApiSettings
from contract.upstream import Resource
from tests.agent.api.requests import start_request


@pytest.mark.parametrize("header", [None, "", "Basic abc", "Bearer", "Bearer  ", "Bearer a b"])
def test_no_usable_bearer_token_is_unauthenticated(header):
    with pytest.raises(ApiError) as err:
        bearer_token(header)
    assert err.value.kind is ErrorKind.UNAUTHENTICATED


def test_the_bearer_token():
    assert bearer_token("Bearer abc.def") == "abc.def"
    assert bearer_token("bearer  abc ") == "abc"


def test_a_token_review_answer():
    review = {"status": {"authenticated": True, "user": {"username": "u", "uid": "1", "groups": ["g"],
              "extra": {"k": ["v"]}}, "audiences": ["dispatch"]}}  # fmt: skip
    assert reviewed_user(review, ()) == User("u", "1", ("g",), {"k": ["v"]})
    assert reviewed_user(review, ("dispatch",)).username == "u"
    with pytest.raises(ApiError, match="not bound to an audience"):
        reviewed_user(review, ("other",))
    with pytest.raises(ApiError, match="not accepted: expired"):
        reviewed_user({"status": {"authenticated": False, "error": "expired"}}, ())
    with pytest.raises(ApiError):
        reviewed_user({}, ())


def test_the_access_review_and_its_verdict():
    user = User("alice", "u1", ("team",), {"scopes": ["x"]})
    access = Access("get", "trainjobs", "team-a", "dj-x", "log")
    body = access_review(user, access)
    assert body["spec"] == {
        "user": "alice",
        "uid": "u1",
        "groups": ["team"],
        "extra": {"scopes": ["x"]},
        "resourceAttributes": {"group": "dispatch.phpboyscout.uk", "resource": "trainjobs", "verb": "get",
                               "namespace": "team-a", "name": "dj-x", "subresource": "log"},
    }  # fmt: skip
    review_verdict({"status": {"allowed": True}}, user, access)
    for status in ({"allowed": False, "reason": "no"}, {"allowed": True, "denied": True}, {}):
        with pytest.raises(ApiError) as err:
            review_verdict({"status": status}, user, access)
        assert err.value.kind is ErrorKind.FORBIDDEN
        assert (
            'alice may not get trainjobs/log.dispatch.phpboyscout.uk "dj-x" in namespace "team-a"' in err.value.message
        )


def test_each_route_asks_for_its_rights():
    rights = {r.operation: r for r in ROUTES}
    ref = ObjectRef(namespace="ns", name="dj-x", uid="u")
    assert rights["status"].rights(ref) == [Access("get", "trainjobs", "ns", "dj-x")]
    assert rights["output"].rights(ref) == [Access("get", "trainjobs", "ns", "dj-x", "log")]
    assert rights["stop"].rights(ref) == [Access("delete", "trainjobs", "ns", "dj-x")]
    assert [r.verb for r in (rights["open"].rights(ref) + rights["release"].rights(ref))] == ["update", "update"]
    assert rights["start"].rights(start_request("ns")) == [
        Access("create", "trainjobs", "ns", "dj-01arz3ndektsv4rrffq69g5fav-s3")
    ]
    pre = PreflightRequest.model_validate({"namespace": "ns", "runtime": {"name": "r"}})
    assert rights["preflight"].rights(pre) == [Access("create", "preflights"), Access("create", "trainjobs", "ns")]
    assert rights["capabilities"].rights(None) == [Access("get", "preflights")]
    assert coordinates(None) == (None, None)
    assert [r.operation for r in ROUTES if r.mutating] == ["start", "open", "hold", "release", "stop"]
    # Observe-only refuses what may let something run; Stop and Hold only reduce risk.
    assert [r.operation for r in ROUTES if r.may_run] == ["start", "open", "release"]


def test_resource_paths():
    assert Resource("", "v1", "pods").path("ns", "p", "log") == "/api/v1/namespaces/ns/pods/p/log"
    assert Resource("kueue.x-k8s.io", "v1beta2", "admissionchecks", namespaced=False).path() == (
        "/apis/kueue.x-k8s.io/v1beta2/admissionchecks"
    )
    with pytest.raises(ValueError, match="namespaced"):
        Resource("", "v1", "pods").path()


def test_settings():
    assert ApiSettings().workload_timeout == 30.0
    s = ApiSettings.model_validate({"labels": {"team": "a"}, "workloadTimeout": 5, "nodeLossTaints": ["x/y"]})
    assert (s.site_labels, s.workload_timeout, s.node_loss_taints) == ({"team": "a"}, 5, ("x/y",))
    for bad, says in (
        ({"labels": {"kueue.x-k8s.io/queue-name": "q"}}, "reserved"),
        ({"annotations": {"dispatch.phpboyscout.uk/x": "1"}}, "reserved"),
        ({"workloadTimeout": 0}, "greater than 0"),
        ({"surprise": 1}, "Extra inputs"),
    ):
        with pytest.raises(ValueError, match=says):
            ApiSettings.model_validate(bad)


def test_the_document_refers_only_to_schemas_it_has():
    doc = document()
    text = str(doc)
    for name in doc["components"]["schemas"]:
        assert f"#/components/schemas/{name}" in text or name in (
            "CredentialSpec",
            "PublishSpec",
            "RuntimeRef",
            "KueueSpec",
            "ExecutionModel",
            "PodStatusModel",
        )
    import re

    for ref in re.findall(r"#/components/schemas/(\w+)", text):
        assert ref in doc["components"]["schemas"]
    assert doc["paths"]["/v1/openapi.json"]["get"]["security"] == []
    output = doc["paths"]["/v1/output"]["post"]["responses"]["200"]
    assert "text/plain" in output["content"]
    assert "observe_only" in doc["paths"]["/v1/start"]["post"]["responses"]["503"]["description"]
    assert "observe_only" not in doc["paths"]["/v1/status"]["post"]["responses"]["503"]["description"]


class StubKube:
    def __init__(self, answers):
        self.answers = list(answers)
        self.sent = []

    async def request(self, method, path, *, body=None, **_):
        self.sent.append(body)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def test_token_reviews_are_cached_by_hash_for_the_ttl_either_way():
    now = [0.0]
    ok = {"status": {"authenticated": True, "user": {"username": "u"}}}
    no = {"status": {"authenticated": False}}
    stub = StubKube([ok, no, ok])
    auth = Authenticator(stub, ttl=10, clock=lambda: now[0])

    async def run():
        assert (await auth("t1")).username == "u"
        assert (await auth("t1")).username == "u"
        for _ in range(2):
            with pytest.raises(ApiError):
                await auth("bad")
        now[0] = 11
        assert (await auth("t1")).username == "u"

    asyncio.run(run())
    assert auth.reviews == 3
    assert "t1" not in str(auth._cache)


def test_an_unreachable_api_server_is_unavailable_and_not_cached():
    stub = StubKube(
        [KubeError(0, "Unreachable", "refused"), {"status": {"authenticated": True, "user": {"username": "u"}}}]
    )
    auth = Authenticator(stub, ttl=10)

    async def run():
        with pytest.raises(ApiError) as err:
            await auth("t")
        assert err.value.kind is ErrorKind.UNAVAILABLE
        assert (await auth("t")).username == "u"

    asyncio.run(run())


class SlowStub(StubKube):
    """Answers only once ``go`` is set, so calls pile up behind the first review."""

    def __init__(self, answers):
        super().__init__(answers)
        self.go = asyncio.Event()

    async def request(self, method, path, *, body=None, **kw):
        await self.go.wait()
        return await super().request(method, path, body=body, **kw)


def test_calls_that_miss_the_cache_together_share_one_review_and_its_failure():
    ok = {"status": {"authenticated": True, "user": {"username": "u"}}}

    async def run():
        stub = SlowStub([KubeError(0, "Unreachable", "refused"), ok])
        auth = Authenticator(stub, ttl=10)
        calls = [asyncio.create_task(auth("t")) for _ in range(5)]
        await asyncio.sleep(0.01)
        stub.go.set()
        failed = await asyncio.gather(*calls, return_exceptions=True)
        assert [getattr(e, "kind", e) for e in failed] == [ErrorKind.UNAVAILABLE] * 5
        calls = [asyncio.create_task(auth("t")) for _ in range(5)]
        assert [u.username for u in await asyncio.gather(*calls)] == ["u"] * 5
        assert auth.reviews == 2

    asyncio.run(run())


def test_a_call_that_reviewed_and_went_away_leaves_the_others_to_review_anew():
    ok = {"status": {"authenticated": True, "user": {"username": "u"}}}

    async def run():
        stub = SlowStub([ok, ok])
        auth = Authenticator(stub, ttl=10)
        first = asyncio.create_task(auth("t"))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(auth("t"))
        await asyncio.sleep(0.01)
        first.cancel()
        await asyncio.sleep(0.01)
        stub.go.set()
        assert (await second).username == "u"
        assert first.cancelled()

    asyncio.run(run())


def test_the_failure_limiter_forgets_after_its_window():
    now = [0.0]
    limiter = FailureLimiter(2, 10.0, clock=lambda: now[0])
    limiter.failed("a")
    assert limiter.retry_after("a") is None
    now[0] = 4.0
    limiter.failed("a")
    assert limiter.retry_after("a") == pytest.approx(6.0)
    assert limiter.retry_after("b") is None  # per client
    now[0] = 10.5  # the first failure aged out
    assert limiter.retry_after("a") is None
    now[0] = 14.5
    assert limiter.retry_after("a") is None
