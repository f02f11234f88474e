"""The imperative shell: HTTPS in, AdmissionReview out. Decode, decide, respond; the rules are elsewhere.

Two error channels, as in kopf and controller-runtime: a request that is not a usable AdmissionReview gets
an HTTP error (400, 413, 415) because there is no uid to answer; anything that goes wrong after decoding
(a rule raising, a lookup failing) is an AdmissionReview denial that echoes the uid and names the error,
so the API server and the person behind it see why.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web
from kubernetes_asyncio.client.exceptions import ApiException

import webhook.admission as admission  # through the module, so tests can replace a rule
from serving.drain import close_when
from serving.flags import parse_duration
from serving.kube import describe_api_error
from serving.logs import fields
from serving.tls import ReloadingServerContext
from webhook.config import Config
from webhook.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from webhook.metrics import Metrics
from webhook.review import Lookups, Request, Verdict, parse_review, response
from webhook.runtime_facts import RuntimeFacts

MAX_BODY: Final = 6 * 1024 * 1024
"""Bytes. The API server's own request limit is 3 MiB of object, and a review carries object and
oldObject; controller-runtime allows 7 MiB. aiohttp's default (1 MiB) would refuse big UPDATEs."""

LOOKUP_TIMEOUT: Final = 3.0
"""Seconds all lookups of one review may take, at most (see ``lookup_budget``)."""

SHUTDOWN_TIMEOUT: Final = 10.0
"""Seconds in-flight reviews get to finish after SIGTERM; the API server's own timeout is 5 at most."""

RuntimeLookup = Callable[[str, str], Awaitable[Mapping[str, Any] | RuntimeFacts | None]]
"""(namespace, name) -> the TrainingRuntime or its facts (webhook/runtime_facts.py), or None when it does not
exist; raises when it cannot tell."""
ReadinessCheck = Callable[[], Awaitable[tuple[bool, str]]]

log = logging.getLogger(__name__)


class LookupFailed(Exception):
    pass


@dataclass
class Webhook:
    config: Config
    tls: ReloadingServerContext
    lookup: RuntimeLookup | None = None
    lookup_ready: ReadinessCheck | None = None
    """None when no Kubernetes client is configured: then readiness does not depend on one."""
    metrics: Metrics = field(default_factory=Metrics)
    stopping: bool = False

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/validate", functools.partial(self._review, endpoint="validate"))
        app.router.add_post("/mutate", functools.partial(self._review, endpoint="mutate"))
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        # A review on a kept-alive connection when the listener closes would be denied (we fail closed).
        app.on_response_prepare.append(close_when(lambda: self.stopping))
        return app

    async def _review(self, http: web.Request, *, endpoint: str) -> web.Response:
        started = time.perf_counter()
        review = await self._decode(http, endpoint)
        verdict, body = await self._answer(endpoint, review, lookup_budget(http.query.get("timeout")))
        seconds = time.perf_counter() - started
        self.metrics.observe_review(endpoint, review, verdict, seconds)
        log_review(endpoint, review, verdict, seconds)
        return web.Response(body=body, content_type="application/json")

    async def _decode(self, http: web.Request, endpoint: str) -> Request:
        if http.content_type != "application/json":
            raise self._reject(http, endpoint, 415, f"content type must be application/json, not {http.content_type}")
        if http.content_length is not None and http.content_length > MAX_BODY:
            raise self._reject(http, endpoint, 413, f"body of {http.content_length} bytes exceeds {MAX_BODY}")
        try:
            body = await http.read()
        except web.HTTPRequestEntityTooLarge:  # a chunked body, which has no Content-Length to check first
            raise self._reject(http, endpoint, 413, f"body exceeds {MAX_BODY} bytes") from None
        if not body:
            raise self._reject(http, endpoint, 400, "empty body: expected an AdmissionReview")
        try:
            document = json.loads(body)
        except (ValueError, RecursionError) as exc:  # bad JSON, bad UTF-8, nesting too deep for the parser
            raise self._reject(http, endpoint, 400, f"malformed JSON: {exc}") from None
        try:
            return parse_review(document)
        except ValueError as exc:  # MalformedReview
            raise self._reject(http, endpoint, 400, str(exc)) from None

    async def _answer(self, endpoint: str, review: Request, budget: float) -> tuple[Verdict, bytes]:
        try:
            verdict = await self._decide(endpoint, review, budget)
            return verdict, _encode(response(review, verdict))
        except LookupFailed as exc:
            log.warning("review %s of %s %s/%s: %s", review.uid, review.kind, review.namespace, review.name, exc)
            verdict = Verdict.deny("lookup-failed", f"dispatch's webhook cannot check this request: {exc}", code=500)
        except Exception as exc:
            log.exception("internal error in /%s for review %s", endpoint, review.uid)
            message = f"dispatch's webhook failed internally in {endpoint}: {type(exc).__name__}: {exc}"
            verdict = Verdict.deny("internal-error", message, code=500)
        return verdict, _encode(response(review, verdict))

    async def _decide(self, endpoint: str, review: Request, budget: float) -> Verdict:
        if endpoint == "mutate":
            return admission.mutate(review, self.config)
        return admission.validate(review, self.config, await self._lookups(review, budget))

    async def _lookups(self, review: Request, budget: float) -> Lookups:
        lookups, lookup = Lookups(), self.lookup
        wanted = admission.lookups_needed(review, self.config)
        if wanted and lookup is None:
            raise LookupFailed("no Kubernetes client is configured to read TrainingRuntimes")
        namespace = name = ""
        try:
            async with asyncio.timeout(budget):  # one budget for all of them: the API server waits for all
                for namespace, name in wanted:
                    lookups.runtimes[namespace, name] = await lookup(namespace, name)  # type: ignore[misc]
        except TimeoutError:
            raise LookupFailed(f"reading TrainingRuntime {namespace}/{name} took over {budget:g}s") from None
        except Exception as exc:
            raise LookupFailed(f"cannot read TrainingRuntime {namespace}/{name}: {_describe(exc)}") from None
        return lookups

    def _reject(self, http: web.Request, endpoint: str, status: int, message: str) -> web.HTTPException:
        log.warning("refused %s %s from %s: HTTP %d: %s", http.method, http.path, http.remote, status, message)
        self.metrics.count_bad_request(endpoint, status)
        return _HTTP_ERRORS[status](text=message)

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        problems = []
        if self.stopping:
            problems.append("shutting down")
        if self.tls.info.expired():
            problems.append(f"the served certificate expired at {self.tls.info.not_after.isoformat()}")
        if self.lookup_ready is not None:
            ok, why = await self.lookup_ready()
            if not ok:
                problems.append(f"cannot look up TrainingRuntimes: {why}")
        return web.Response(status=503 if problems else 200, text="; ".join(problems) or "ok")

    async def _metrics(self, _: web.Request) -> web.Response:
        text = self.metrics.render(self.tls)
        return web.Response(body=text.encode(), headers={"Content-Type": METRICS_CONTENT_TYPE})


def log_review(endpoint: str, review: Request, verdict: Verdict, seconds: float) -> None:
    """The one line per review, its keys as fields (serving/logs.py). A denial is news (info); an allow is
    the API server's every write (debug)."""
    outcome = "allowed" if verdict.allowed else "denied"
    where = f"{review.namespace}/{review.name}" if review.namespace else review.name
    log.log(
        logging.DEBUG if verdict.allowed else logging.INFO,
        "review %s: %s %s %s %s by rule %s%s",
        review.uid,
        review.operation,
        review.resource,
        where,
        outcome,
        verdict.rule,
        f": {verdict.message}" if verdict.message else "",
        extra=fields(
            review_uid=review.uid,
            endpoint=endpoint,
            resource=review.resource,
            operation=review.operation,
            object=where or None,
            user=review.user.username,
            outcome=outcome,
            rule=verdict.rule,
            code=verdict.code,
            dry_run=review.dry_run or None,
            seconds=round(seconds, 6),
        ),
    )


_HTTP_ERRORS: Final[dict[int, Callable[..., web.HTTPException]]] = {
    400: web.HTTPBadRequest,
    413: functools.partial(web.HTTPRequestEntityTooLarge, MAX_BODY),
    415: web.HTTPUnsupportedMediaType,
}


def lookup_budget(timeout: str | None) -> float:
    """Seconds the lookups may take: 80 % of the API server's timeout for this call (it sends it as
    ``?timeout=5s``), so a slow lookup ends in a denial that names it instead of the API server's generic
    timeout; at most LOOKUP_TIMEOUT."""
    seconds = parse_duration(timeout) if timeout else None
    return LOOKUP_TIMEOUT if seconds is None else min(LOOKUP_TIMEOUT, 0.8 * seconds)


def _encode(answer: Mapping[str, Any]) -> bytes:
    return json.dumps(answer, separators=(",", ":")).encode()


def _describe(exc: Exception) -> str:
    if isinstance(exc, ApiException):
        return describe_api_error(exc)
    return f"{type(exc).__name__}: {exc}"


@asynccontextmanager
async def serving(webhook: Webhook, host: str, port: int) -> AsyncIterator[int]:
    """Serve HTTPS on host:port (0 picks a free port) until the block ends; yields the bound port.

    The certificate is re-checked in the background for as long as the server runs. On exit the listener
    closes first, then in-flight reviews get SHUTDOWN_TIMEOUT seconds to finish.
    """
    # No access log: the API server calls for every write it sends us, and the metrics count them.
    # No decompression: the API server never compresses a review, and a compressed body is a way around
    # the size limit; it reaches the JSON decoder as it is and gets a 400.
    runner = web.AppRunner(
        webhook.app(),
        access_log=None,
        handle_signals=False,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
        auto_decompress=False,
    )
    await runner.setup()
    watcher = asyncio.create_task(webhook.tls.watch(), name="certificate-reload")
    try:
        site = web.TCPSite(runner, host, port, ssl_context=webhook.tls.context)
        await site.start()
        yield runner.addresses[0][1]
    finally:
        watcher.cancel()
        await runner.cleanup()
