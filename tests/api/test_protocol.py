"""The API's protocol over real sockets and real TLS: authentication, authorization before anything is read,
validation errors naming the field, the typed error bodies, the OpenAPI document."""

from __future__ import annotations

import json

import aiohttp
import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from agent.api.models import ObjectRef
from agent.api.routes import ROUTES
from tests.api.conftest import NAMESPACE, SUPERVISOR, SUPERVISOR_TOKEN, TEST_SETTINGS, Agent
from tests.api.fake_kube import Grant
from tests.api.requests import start_body

pytestmark = pytest.mark.asyncio


async def post(agent: Agent, path: str, body: object, *, token: str | None = SUPERVISOR_TOKEN, **kwargs):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = body if isinstance(body, str | bytes) else json.dumps(body)
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            agent.url + path,
            data=data,
            headers=headers | kwargs.pop("headers", {"Content-Type": "application/json"}),
            ssl=agent.tls.client_context(),
        ) as response,
    ):
        return response.status, response.headers, await response.json(content_type=None)


REF = {"namespace": NAMESPACE, "name": "dj-01arz3ndektsv4rrffq69g5fav-s3", "uid": "u-1"}


async def test_the_openapi_document_is_served_without_a_token(agent: Agent):
    async with agent.client("nobody") as c:
        doc = await c.openapi()
    assert doc["openapi"] == "3.1.0"
    assert {r.path for r in ROUTES} <= set(doc["paths"])
    assert doc["components"]["securitySchemes"]["bearer"] == {"type": "http", "scheme": "bearer"}
    start = doc["paths"]["/v1/start"]["post"]
    assert start["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/StartRequest"
    }
    assert start["x-dispatch-rights"] == ["create trainjobs"]
    assert {"200", "400", "401", "403", "409", "503"} <= set(start["responses"])
    assert "jobId" in doc["components"]["schemas"]["StartRequest"]["properties"]
    assert agent.fake.calls == []


async def test_plain_http_is_not_served(agent: Agent):
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.ClientError):
            async with http.post(agent.url.replace("https", "http") + "/v1/status", json=REF) as response:
                await response.read()


async def test_no_token_is_401_and_nothing_is_reviewed_or_read(agent: Agent):
    status, headers, body = await post(agent, "/v1/status", REF, token=None)
    assert (status, body["error"]) == (401, "unauthenticated")
    assert headers["WWW-Authenticate"] == "Bearer"
    assert agent.fake.reviews == []
    assert agent.fake.calls == []


async def test_a_token_the_api_server_rejects_is_401(agent: Agent):
    status, _, body = await post(agent, "/v1/status", REF, token="forged")
    assert (status, body["error"]) == (401, "unauthenticated")
    assert agent.fake.calls == []


async def test_a_caller_without_rights_is_403_and_nothing_is_read(agent: Agent):
    agent.fake.user("stranger-token", "system:serviceaccount:team-a:stranger")
    for route in ROUTES:
        body = start_body(NAMESPACE) if route.operation == "start" else REF
        if route.operation == "preflight":
            body = {"namespace": NAMESPACE, "runtime": {"name": "torch-distributed"}}
        if route.operation == "hold":
            body = {**REF, "who": "alice", "reason": "maintenance"}
        if route.operation == "list":
            body = {"namespace": NAMESPACE}
        async with (
            aiohttp.ClientSession() as http,
            http.request(
                route.method,
                agent.url + route.path,
                data=json.dumps(body) if route.method == "POST" else None,
                headers={"Authorization": "Bearer stranger-token", "Content-Type": "application/json"},
                ssl=agent.tls.client_context(),
            ) as response,
        ):
            answer = await response.json()
        assert (response.status, answer["error"]) == (403, "forbidden"), route.operation
        assert "system:serviceaccount:team-a:stranger may not" in answer["message"]
    assert agent.fake.calls == []


async def test_a_right_in_another_namespace_does_not_count(agent: Agent):
    agent.fake.user("other-token", "other")
    agent.fake.grants.append(Grant("other", "get", "trainjobs", "team-b"))
    status, _, body = await post(agent, "/v1/status", REF, token="other-token")
    assert status == 403
    assert (
        'get trainjobs.dispatch.phpboyscout.uk "dj-01arz3ndektsv4rrffq69g5fav-s3" in namespace "team-a"'
        in (body["message"])
    )
    assert agent.fake.calls == []


async def test_the_review_asks_about_our_own_group_with_the_callers_identity(agent: Agent):
    await post(agent, "/v1/status", REF)
    access = next(r for r in agent.fake.reviews if r["kind"] == "SubjectAccessReview")
    assert access["spec"]["user"] == SUPERVISOR
    assert access["spec"]["uid"] == f"uid-{SUPERVISOR}"
    assert access["spec"]["resourceAttributes"] == {
        "group": "dispatch.phpboyscout.uk",
        "resource": "trainjobs",
        "verb": "get",
        "namespace": NAMESPACE,
        "name": REF["name"],
    }


async def test_token_reviews_are_cached_briefly(agent: Agent):
    for _ in range(3):
        await post(agent, "/v1/status", REF)
    assert sum(r["kind"] == "TokenReview" for r in agent.fake.reviews) == 1
    assert sum(r["kind"] == "SubjectAccessReview" for r in agent.fake.reviews) == 3


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (start_body(NAMESPACE, n=1_000_000), "n"),
        ({k: v for k, v in start_body(NAMESPACE).items() if k != "jobId"}, "jobId"),
        ({**{k: v for k, v in start_body(NAMESPACE).items() if k != "jobId"}, "job_id": "X"}, "jobId"),
        (start_body(NAMESPACE, n="3"), "n"),
        (start_body(NAMESPACE, surprise=1), "surprise"),
        (start_body(NAMESPACE, jobId="not-a-ulid"), "jobId"),
        (
            start_body(NAMESPACE, credentials=[{"secret": "s", "mountPath": "/opt/dispatch/x"}]),
            "credentials[0].mountPath",
        ),
        (start_body(NAMESPACE, env={"DISPATCH_X": "1"}), "env.DISPATCH_X"),
        (start_body(NAMESPACE, runtime={"name": "missing"}), "runtime"),
        (
            start_body(NAMESPACE, runtime={"kind": "TrainingRuntime", "name": "r", "namespace": "team-b"}),
            "runtime.namespace",
        ),
        (start_body(NAMESPACE, runtime={"kind": "TrainingRuntime", "name": "missing"}), "runtime"),
    ],
)
async def test_invalid_requests_are_400_naming_the_field(agent: Agent, body, field):
    status, _, answer = await post(agent, "/v1/start", body)
    assert (status, answer["error"], answer.get("field")) == (400, "invalid", field), answer
    assert not agent.fake.items(f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{NAMESPACE}/trainjobs")


@pytest.mark.parametrize(
    ("data", "headers", "says"),
    [
        ("{", {"Content-Type": "application/json"}, "Invalid JSON"),
        ("", {"Content-Type": "application/json"}, "empty"),
        ("[]", {"Content-Type": "application/json"}, "Input should be an object"),
        (json.dumps(REF), {"Content-Type": "text/plain"}, "must be application/json"),
    ],
)
async def test_malformed_bodies_are_400(agent: Agent, data, headers, says):
    status, _, answer = await post(agent, "/v1/status", data, headers=headers)
    assert (status, answer["error"]) == (400, "invalid")
    assert says in answer["message"]


async def test_unknown_paths_and_methods_answer_json(agent: Agent):
    status, _, answer = await post(agent, "/v1/nope", REF)
    assert (status, answer["error"]) == (404, "not_found")
    async with (
        aiohttp.ClientSession() as http,
        http.get(agent.url + "/v1/status", ssl=agent.tls.client_context()) as response,
    ):
        assert response.status == 405
        assert (await response.json())["error"] == "invalid"


async def test_the_client_raises_with_the_kind(agent: Agent):
    async with agent.client() as c:
        with pytest.raises(AgentError) as err:
            await c.status(ObjectRef.model_validate(REF))
    assert (err.value.kind, err.value.status) == (ErrorKind.NOT_FOUND, 404)
    async with agent.client("forged") as c:
        with pytest.raises(AgentError) as err:
            await c.capabilities()
    assert err.value.kind is ErrorKind.UNAUTHENTICATED


# -- hardening (issue 10): failed tokens are rate-limited per client; follow streams are capped per user --

LIMITED = TEST_SETTINGS.model_copy(update={"failed_token_limit": 3, "failed_token_window": 60.0})


@pytest.mark.parametrize("agent", [LIMITED], indirect=True)
async def test_too_many_failed_tokens_from_one_client_are_429_without_a_token_review(agent: Agent):
    # A supervisor's token accepted before the flood keeps working while it is cached.
    assert (await post(agent, "/v1/status", REF))[0] != 401
    for i in range(3):
        status, _, _ = await post(agent, "/v1/status", REF, token=f"guess-{i}")
        assert status == 401
    reviews = sum(r["kind"] == "TokenReview" for r in agent.fake.reviews)
    status, headers, body = await post(agent, "/v1/status", REF, token="guess-3")
    assert (status, body["error"]) == (429, "rate_limited")
    assert "too many failed tokens from 127.0.0.1" in body["message"]
    assert 1 <= int(headers["Retry-After"]) <= 60
    status, _, _ = await post(agent, "/v1/status", REF, token=None)
    assert status == 429  # no header at all is refused the same way while blocked
    assert sum(r["kind"] == "TokenReview" for r in agent.fake.reviews) == reviews  # none sent for them
    assert (await post(agent, "/v1/status", REF))[0] != 429  # the cached good token still passes


FOLLOW_ONE = TEST_SETTINGS.model_copy(update={"max_follow_streams": 1})


@pytest.mark.parametrize("agent", [FOLLOW_ONE], indirect=True)
async def test_one_user_may_hold_only_so_many_follow_streams(agent: Agent):
    agent.server.follow_streams[SUPERVISOR] = 1  # one stream already open for this user
    body = REF | {"follow": True}
    status, headers, answer = await post(agent, "/v1/output", body)
    assert (status, answer["error"]) == (429, "rate_limited")
    assert "already follows 1 log stream(s)" in answer["message"]
    assert headers["Retry-After"] == "1"
    # Without follow, or once the stream ended, the call goes on (here: to the TrainJob, which does not exist).
    status, _, answer = await post(agent, "/v1/output", REF)
    assert answer["error"] == "not_found"
    del agent.server.follow_streams[SUPERVISOR]
    status, _, answer = await post(agent, "/v1/output", body)
    assert answer["error"] == "not_found"
    assert agent.server.follow_streams == {}  # released when the call ended, even in error
