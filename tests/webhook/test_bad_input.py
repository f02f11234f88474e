"""Every kind of bad input gets a clean HTTP error, one log line, and the server keeps serving."""

from __future__ import annotations

import asyncio
import copy
import gzip
import logging
import ssl

import aiohttp
import pytest

from tests.webhook.conftest import HOST, Running, admission_review
from webhook.server import MAX_BODY

pytestmark = pytest.mark.asyncio(loop_scope="function")


def _without(path: str) -> dict:
    review = admission_review()
    *parents, last = path.split(".")
    node = review
    for part in parents:
        node = node[part]
    del node[last]
    return review


def _with(path: str, value: object) -> dict:
    review = copy.deepcopy(admission_review())
    *parents, last = path.split(".")
    node = review
    for part in parents:
        node = node[part]
    node[last] = value
    return review


BAD_REVIEWS = {
    "not an object": ([admission_review()], "the body must be a JSON object"),
    "wrong kind": (_with("kind", "Pod"), "expected kind AdmissionReview"),
    "v1beta1": (_with("apiVersion", "admission.k8s.io/v1beta1"), "apiVersion admission.k8s.io/v1"),
    "no request": (_without("request"), "request must be an object"),
    "no uid": (_without("request.uid"), "request.uid must be a non-empty string"),
    "empty uid": (_with("request.uid", ""), "request.uid must be a non-empty string"),
    "no kind": (_without("request.kind"), "request.kind and request.resource must be objects"),
    "no userInfo": (_without("request.userInfo"), "request.userInfo must be an object"),
    "bad groups": (_with("request.userInfo.groups", [1]), "request.userInfo.groups must be a list of strings"),
    "no operation": (_without("request.operation"), "request.operation must be a non-empty string"),
    "bad operation": (_with("request.operation", "PATCH"), "request.operation 'PATCH' is not one of"),
    "object not a map": (_with("request.object", [1, 2]), "request.object must be an object or null"),
}


async def _post_raw(server: Running, data: object, content_type: str | None = "application/json") -> tuple[int, str]:
    headers = {"Content-Type": content_type} if content_type else {}
    async with server.session.post(server.url + "/validate", data=data, headers=headers) as resp:
        return resp.status, await resp.text()


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "webhook.server" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("case", BAD_REVIEWS)
async def test_not_an_admission_review_is_400_naming_the_problem(
    server: Running, caplog: pytest.LogCaptureFixture, case: str
):
    body, message = BAD_REVIEWS[case]
    status, text = await server.post("/validate", body)
    assert status == 400
    assert message in text
    assert len(_refusals(caplog)) == 1
    assert "HTTP 400" in _refusals(caplog)[0]
    assert message in _refusals(caplog)[0]
    await server.assert_serving()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "malformed JSON: Expecting property name"),
        (b'{"apiVersion": "admission.k8s.io/v1", ', "malformed JSON"),
        (b"\xff\xfe\xfa", "malformed JSON"),
        (b"[" * 200_000 + b"]" * 200_000, "malformed JSON"),  # deeper than the parser's recursion limit
        (b"1" * 5000, "malformed JSON"),  # an integer longer than Python converts
        (b"", "empty body"),
    ],
    ids=["syntax", "truncated", "not-utf8", "too-deep", "huge-int", "empty"],
)
async def test_malformed_json_is_400(server: Running, caplog: pytest.LogCaptureFixture, data: bytes, message: str):
    status, text = await _post_raw(server, data)
    assert status == 400
    assert text.startswith(message)
    assert len(_refusals(caplog)) == 1
    await server.assert_serving()


async def test_compressed_bodies_are_not_inflated(server: Running):
    bomb = gzip.compress(b" " * (64 * 1024 * 1024))  # 64 MiB of spaces in about 64 KiB
    async with server.session.post(
        server.url + "/validate",
        data=bomb,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
    ) as resp:
        assert resp.status == 400
        assert (await resp.text()).startswith("malformed JSON")
    await server.assert_serving()


async def test_body_over_the_limit_is_413(server: Running, caplog: pytest.LogCaptureFixture):
    status, text = await _post_raw(server, b" " * (MAX_BODY + 1))
    assert status == 413
    assert f"body of {MAX_BODY + 1} bytes exceeds {MAX_BODY}" in text
    await server.assert_serving()

    async def chunks():  # no Content-Length: the limit is enforced while reading
        for _ in range(7):
            yield b" " * (1024 * 1024)

    status, text = await _post_raw(server, chunks())
    assert status == 413
    assert f"body exceeds {MAX_BODY} bytes" in text
    assert len(_refusals(caplog)) == 2
    await server.assert_serving()


async def test_a_big_review_under_the_limit_is_answered(server: Running):
    review = admission_review(uid="big")
    review["request"]["object"]["metadata"]["annotations"]["example.com/padding"] = "x" * (5 * 1024 * 1024)
    status, answer = await server.post("/validate", review)
    assert status == 200
    assert answer["response"]["uid"] == "big"


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", None])
async def test_wrong_content_type_is_415(server: Running, caplog: pytest.LogCaptureFixture, content_type: str | None):
    import json

    status, text = await _post_raw(server, json.dumps(admission_review()).encode(), content_type)
    assert status == 415
    assert "content type must be application/json" in text
    assert len(_refusals(caplog)) == 1
    await server.assert_serving()


async def test_json_with_charset_is_accepted(server: Running):
    import json

    status, _ = await _post_raw(server, json.dumps(admission_review()).encode(), "application/json; charset=utf-8")
    assert status == 200


async def test_bad_requests_are_counted(server: Running):
    await _post_raw(server, b"{", "application/json")
    await _post_raw(server, b"{}", "text/plain")
    await _post_raw(server, b"{}", "text/plain")
    assert server.webhook.metrics.bad_requests == {("validate", "400"): 1, ("validate", "415"): 2}


async def _handshake(port: int, context: ssl.SSLContext) -> str:
    _, writer = await asyncio.open_connection(HOST, port, ssl=context)
    try:
        return writer.get_extra_info("ssl_object").version()
    finally:
        writer.close()


def _tls_client(server: Running, maximum: ssl.TLSVersion) -> ssl.SSLContext:
    context = server.pki.client_context()
    # Let this client offer the old versions at all (OpenSSL 3 refuses them at its default level).
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    context.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    context.maximum_version = maximum
    return context


@pytest.mark.filterwarnings("ignore:ssl.TLSVersion.TLSv1_1 is deprecated:DeprecationWarning")
async def test_tls_below_1_2_is_refused(server: Running, tls_files):
    port = int(server.url.rsplit(":", 1)[1])
    old_client = _tls_client(server, ssl.TLSVersion.TLSv1_1)

    # Control: this client can complete a TLS 1.1 handshake with a server that allows it.
    permissive = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    permissive.set_ciphers("DEFAULT:@SECLEVEL=0")
    permissive.minimum_version = ssl.TLSVersion.MINIMUM_SUPPORTED
    permissive.load_cert_chain(tls_files.cert_file, tls_files.key_file)
    control = await asyncio.start_server(lambda r, w: w.close(), HOST, 0, ssl=permissive)
    async with control:
        assert await _handshake(control.sockets[0].getsockname()[1], old_client) == "TLSv1.1"

    with pytest.raises((ssl.SSLError, ConnectionError)):
        await _handshake(port, old_client)
    assert await _handshake(port, _tls_client(server, ssl.TLSVersion.TLSv1_2)) == "TLSv1.2"
    assert await _handshake(port, server.pki.client_context()) == "TLSv1.3"
    await server.assert_serving()


async def test_plain_http_is_refused(server: Running):
    plain = server.url.replace("https://", "http://")
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientError):
            async with session.post(plain + "/validate", json=admission_review()) as resp:
                await resp.read()
    await server.assert_serving()


async def test_unknown_path_and_method(server: Running):
    async with server.session.get(server.url + "/validate") as resp:
        assert resp.status == 405
    async with server.session.post(server.url + "/nope", json={}) as resp:
        assert resp.status == 404
    await server.assert_serving()
