"""The API's protocol over real sockets and real TLS: authentication, authorization before anything is read,
validation errors naming the field, the typed error bodies, the OpenAPI document."""

from __future__ import annotations

import asyncio
import json
import logging
import traceback

import aiohttp
import pytest

from agent.api.client import AgentError
from agent.api.errors import ErrorKind
from agent.api.models import ObjectRef
from agent.api.routes import ROUTES
from tests.agent.api import controllers as c
from tests.agent.api.conftest import NAMESPACE, SUPERVISOR, SUPERVISOR_TOKEN, TEST_SETTINGS, Agent
from tests.agent.api.fake_kube import Grant
from tests.agent.api.requests import start_body, start_request

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
        if route.operation in ("list", "watch"):
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


# -- a caller that goes away mid-request is not an internal error -----------------------------------------


async def send_and_vanish(agent: Agent, path: str, body: bytes, *, send: int, linger: float) -> None:
    """A real TLS connection: the request's head and ``send`` bytes of its body, then, ``linger`` seconds
    later and before any answer, the connection reset (as a killed or timed-out client leaves it)."""
    host, port = agent.url.removeprefix("https://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(
        host, int(port), ssl=agent.tls.client_context(), server_hostname=host
    )
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {SUPERVISOR_TOKEN}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    writer.write(head.encode() + body[:send])
    await writer.drain()
    await asyncio.sleep(linger)
    assert not reader.at_eof(), "answered before the caller went away"
    assert reader._buffer == b"", "answered before the caller went away"
    writer.transport.abort()


def requests_counted(agent: Agent, operation: str, code: int) -> float:
    sample = agent.server.metrics.registry.get_sample_value(
        "dispatch_api_requests_total", {"operation": operation, "code": str(code)}
    )
    return sample or 0.0


async def counted(agent: Agent, operation: str, code: int) -> None:
    for _ in range(100):
        if requests_counted(agent, operation, code):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{operation} was never counted with code {code}")


def internal_errors(records: list[logging.LogRecord]) -> list[str]:
    """Records that report an internal error of the agent's API: its own, or aiohttp's "Error handling request"
    for a handler of the agent's (the fake API server's own complaints are not the agent's)."""
    found = []
    for r in records:
        trace = "".join(traceback.format_exception(*r.exc_info)) if r.exc_info else ""
        ours = r.name.startswith("agent.") or "agent/api/" in trace
        if "internal error" in r.getMessage() or (r.levelno >= logging.ERROR and ours):
            found.append(f"{r.name}: {r.getMessage()}")
    return found


async def test_a_caller_that_goes_away_mid_body_is_not_an_internal_error(agent: Agent, caplog):
    caplog.set_level(logging.INFO)
    body = json.dumps(start_body(NAMESPACE)).encode()
    await send_and_vanish(agent, "/v1/start", body, send=len(body) // 2, linger=0.3)
    await counted(agent, "start", 499)
    assert requests_counted(agent, "start", 500) == 0
    assert internal_errors(caplog.records) == []
    assert "POST /v1/start: the caller went away before the answer" in caplog.text
    assert agent.fake.writes == []  # the half a request changed nothing


async def test_a_caller_that_goes_away_before_output_answers_is_not_an_internal_error(agent: Agent, caplog):
    """Output opens the log stream from the API server before it answers; the caller is gone by then, so
    writing the answer's head fails (aiohttp's ClientConnectionResetError)."""
    async with agent.client() as api:
        started = await api.start(start_request(NAMESPACE))
    jobset = c.jobset(agent.fake, NAMESPACE, started.name, started.uid)
    c.owned_pod(agent.fake, jobset, "rank0", j="1")
    agent.fake.logs[(NAMESPACE, "rank0")] = [b"epoch 1\n"]
    agent.fake.log_wait = 1.0  # the kubelet is slow to open the stream
    caplog.set_level(logging.INFO)
    body = json.dumps({"namespace": NAMESPACE, "name": started.name, "uid": started.uid}).encode()
    await send_and_vanish(agent, "/v1/output", body, send=len(body), linger=0.3)
    await counted(agent, "output", 499)
    assert requests_counted(agent, "output", 500) == 0
    assert internal_errors(caplog.records) == []
    assert "POST /v1/output: the caller went away before the answer" in caplog.text
