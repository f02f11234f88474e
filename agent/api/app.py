"""The HTTPS shell of the API: authenticate, parse, authorize, call the service, answer.

Mount it in the agent's ``serve``::

    api = ApiServer(Kube(api_client, timeout=settings.request_timeout), settings)
    async with serving(api.app(), host, settings.port, tls):  # tls: serving.tls.ReloadingServerContext
        ...

Order of checks, for every route but the OpenAPI document: a bearer token (401), TokenReview (401), the
body (400), SubjectAccessReview for each right the route needs (403), observe-only for the calls that may let
something run (503: Start, Open, Release; read from the cluster, so every replica answers alike) —
and only then does the agent read or write anything on the caller's behalf.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from typing import Final

from aiohttp import web
from prometheus_client import CollectorRegistry
from pydantic import BaseModel, ValidationError

from agent.api.auth import Authenticator, FailureLimiter, User, authorize, bearer_token
from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import Kube
from agent.api.models import OutputRequest
from agent.api.openapi import document
from agent.api.routes import OPENAPI_PATH, ROUTES, Route
from agent.api.service import Service
from agent.api.settings import ApiSettings
from serving.drain import close_when
from serving.prometheus import Counter, Histogram, exposition, registry
from serving.tls import ReloadingServerContext

MAX_BODY: Final = 1024 * 1024
"""Bytes: a StartRequest is a few KiB; the API server refuses objects over 1.5 MiB anyway."""
SHUTDOWN_TIMEOUT: Final = 10.0
DURATION_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
CALLER_GONE: Final = 499
"""The ``code`` counted for a call whose caller went away before its answer (nginx's "client closed request"):
not an error of the agent's, and no answer is sent. Only a number in the metric and the log."""
CALLER_POLL: Final = 1.0
"""Seconds between looks at whether a follower's connection is still open (so a slot frees within this)."""
STOPPED: Final = 503
"""The ``code`` counted for a call cut off because the agent stopped (its handler cancelled at shutdown)."""

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiMetrics:
    """In the agent's registry when it serves the API (one /metrics for both); a registry of its own alone."""

    def __init__(self, reg: CollectorRegistry | None = None) -> None:
        self.registry = reg if reg is not None else registry("agent")
        self.requests = Counter(
            self.registry,
            "dispatch_api_requests_total",
            "API calls answered, by operation and HTTP status.",
            ("operation", "code"),
        )
        self.duration = Histogram(
            self.registry,
            "dispatch_api_request_duration_seconds",
            "Time to answer an API call (a log stream: until it ends).",
            DURATION_BUCKETS,
            ("operation",),
        )

    def render(self) -> str:
        return exposition(self.registry).decode()


def caller_gone(request: web.Request) -> bool:
    """The caller's connection is closed or closing."""
    transport = request.transport
    return transport is None or transport.is_closing()


def _json(model: BaseModel, status: int = 200) -> web.Response:
    body = json.dumps(model.model_dump(mode="json", by_alias=True), separators=(",", ":"))
    return web.Response(text=body, status=status, content_type="application/json")


def error_response(error: ApiError, status: int | None = None) -> web.Response:
    headers = {"WWW-Authenticate": "Bearer"} if error.kind is ErrorKind.UNAUTHENTICATED else None
    if error.retry_after is not None:
        headers = {"Retry-After": str(error.retry_after)}
    return web.json_response(error.body(), status=status or error.status, headers=headers)


# The request's field names, as the contract's errors name them in the spec's words.
_FIELDS: Final = {"JobID": "jobId", "N": "n", "G": "g", "WorkDir": "workDir"}


def _field(name: str) -> str:
    head, dot, rest = name.partition(".")
    return _FIELDS.get(head, head) + dot + rest


@web.middleware
async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error as the typed JSON body, including the router's own 404 and 405."""
    try:
        return await handler(request)
    except ApiError as exc:
        if exc.field:
            exc.field = _field(exc.field)
        return error_response(exc)
    except web.HTTPNotFound:
        return error_response(ApiError(ErrorKind.NOT_FOUND, f"no such endpoint: {request.method} {request.path}"))
    except web.HTTPMethodNotAllowed as exc:
        allowed = ", ".join(sorted(exc.allowed_methods))
        return error_response(ApiError(ErrorKind.INVALID, f"{request.method} is not allowed; use {allowed}"), 405)
    except web.HTTPException:
        raise
    except ConnectionResetError as exc:  # aiohttp's ClientConnectionResetError too: the caller went away
        log.info("%s %s: the caller went away before the answer (%s)", request.method, request.path, exc)
        return web.Response(status=CALLER_GONE)
    except Exception as exc:
        log.exception("internal error in %s %s", request.method, request.path)
        return error_response(ApiError(ErrorKind.INTERNAL, f"internal error: {type(exc).__name__}: {exc}"))


async def parse(request: web.Request, model: type[BaseModel]) -> BaseModel:
    """The JSON body as ``model``, by the wire names only and strictly (no "3" for 3): what the schema says."""
    if request.content_type != "application/json":
        raise ApiError(ErrorKind.INVALID, f"the body must be application/json, not {request.content_type or 'absent'}")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(ErrorKind.INVALID, f"the body exceeds {MAX_BODY} bytes") from None
    if not raw:
        raise ApiError(ErrorKind.INVALID, "the body is empty: expected a JSON object")
    try:
        return model.model_validate_json(raw, strict=True, by_alias=True, by_name=False)
    except ValidationError as exc:
        problems = exc.errors(include_url=False)
        where = ".".join(str(p) for p in problems[0]["loc"]) or None
        message = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(body)'}: {e['msg']}" for e in problems)
        raise ApiError(ErrorKind.INVALID, message, field=where) from None


class ApiServer:
    """The API over one Kubernetes client. ``service`` holds the operations and the observe-only state."""

    def __init__(
        self,
        kube: Kube,
        settings: ApiSettings,
        *,
        authenticator: Authenticator | None = None,
        metrics: CollectorRegistry | None = None,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.service = Service(kube, settings)
        self.operations: dict[str, Callable[..., Awaitable[BaseModel]]] = {
            route.operation: getattr(self.service, route.operation) for route in ROUTES if route.response is not None
        }
        """Each route's operation (agent/api/service/), by the route's ``operation``; Output streams apart."""
        self.authenticate = authenticator or Authenticator(
            kube, audiences=settings.token_audiences, ttl=settings.token_cache_seconds
        )
        self.failures = FailureLimiter(settings.failed_token_limit, settings.failed_token_window)
        self.follow_streams: dict[str, int] = {}
        """Output streams with ``follow`` open, per username."""
        self.watches: dict[str, int] = {}
        """Watch calls waiting, per username."""
        self.metrics = ApiMetrics(metrics)
        self.stopping = False
        """Set on SIGTERM: every answer from then on closes its connection (serving.drain)."""
        self._openapi = json.dumps(document())

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[errors])
        self.add_routes(app)
        # A supervisor's call on a kept-alive connection when the listener closes would end with no answer,
        # and it could not tell whether the call took effect.
        app.on_response_prepare.append(close_when(lambda: self.stopping))
        app.on_cleanup.append(lambda _: self.service.close_feed())
        return app

    def add_routes(self, app: web.Application) -> None:
        """The API's routes, for an app of the caller's (its middlewares then apply, not ours)."""
        for route in ROUTES:
            app.router.add_route(route.method, route.path, functools.partial(self._call, route=route))
        app.router.add_get(OPENAPI_PATH, self._document)

    async def _document(self, _: web.Request) -> web.Response:
        # Public, like /healthz: it describes the API and holds nothing about any object or caller.
        return web.Response(text=self._openapi, content_type="application/json")

    async def _call(self, request: web.Request, *, route: Route) -> web.StreamResponse:
        started = time.perf_counter()
        code = 500
        try:
            response = await self._answer(request, route)
            code = response.status
            return response
        except ApiError as exc:
            code = exc.status
            raise
        except ConnectionResetError:
            # The caller closed the connection (mid-body, or before the answer was written): not an internal
            # error. Counted apart; the errors middleware logs it at info and answers no one.
            code = CALLER_GONE
            raise
        except asyncio.CancelledError:
            # aiohttp cancels a handler when its connection is lost (with handler cancellation) or when the
            # server stops; neither is an internal error.
            code = CALLER_GONE if caller_gone(request) else STOPPED
            log.info(
                "%s: cancelled (%s)", route.operation, "the caller went away" if code == CALLER_GONE else "stopping"
            )
            raise
        finally:
            self.metrics.requests.inc(route.operation, str(code))
            self.metrics.duration.observe(time.perf_counter() - started, route.operation)

    async def _authenticate(self, request: web.Request) -> User:
        """The caller, from its bearer token; a client address that presented too many failed tokens lately
        is refused before any TokenReview, unless its token was accepted recently."""
        client = request.remote or "unknown"
        header = request.headers.get("Authorization")
        wait = self.failures.retry_after(client)
        if wait is not None:
            token = header.partition(" ")[2].strip() if header else ""
            if not (token and self.authenticate.accepted_recently(token)):
                raise ApiError(
                    ErrorKind.RATE_LIMITED,
                    f"too many failed tokens from {client}: retry in {math.ceil(wait)}s",
                    retry_after=math.ceil(wait) or 1,
                )
        try:
            return await self.authenticate(bearer_token(header))
        except ApiError as exc:
            if exc.kind is ErrorKind.UNAUTHENTICATED:
                self.failures.failed(client)
            raise

    async def _answer(self, request: web.Request, route: Route) -> web.StreamResponse:
        user = await self._authenticate(request)
        body = await parse(request, route.request) if route.request is not None else None
        for access in route.rights(body):
            await authorize(self.kube, user, access)
        if route.may_run:
            await self.service.refuse_if_observe_only(body)
        log.info("%s by %s", route.operation, user.username)
        if route.response is None:
            assert isinstance(body, OutputRequest)
            return await self._stream(request, body, user)
        call = self.operations[route.operation]
        if route.operation == "watch":
            waiting = "{user} already has {n} Watch call(s) waiting, the most one user may hold (maxWatches)"
            with self._holding(self.watches, user, self.settings.max_watches, waiting + "; let one return first"):
                return _json(await call(body))
        result = await (call(body) if body is not None else call())
        return _json(result)

    @contextlib.contextmanager
    def _holding(self, held: dict[str, int], user: User, most: int, refusal: str) -> Iterator[None]:
        """One more of ``held``'s calls open for ``user`` while the block runs; refused (429, ``refusal`` with
        {user} and {n}) at ``most``."""
        open_now = held.get(user.username, 0)
        if open_now >= most:
            raise ApiError(ErrorKind.RATE_LIMITED, refusal.format(user=user.username, n=open_now), retry_after=1)
        held[user.username] = open_now + 1
        try:
            yield
        finally:
            left = held[user.username] - 1
            if left:
                held[user.username] = left
            else:
                del held[user.username]

    async def _stream(self, request: web.Request, body: OutputRequest, user: User) -> web.StreamResponse:
        if not body.follow:
            return await self._stream_log(request, body, user)
        following = "{user} already follows {n} log stream(s), the most one user may hold open (maxFollowStreams)"
        with self._holding(self.follow_streams, user, self.settings.max_follow_streams, following + "; end one first"):
            return await self._stream_log(request, body, user)

    async def _stream_log(self, request: web.Request, body: OutputRequest, user: User) -> web.StreamResponse:
        async with self.service.output(body) as (pod, upstream):
            response = web.StreamResponse(headers={"X-Dispatch-Pod": pod})
            response.content_type = "text/plain"
            response.charset = "utf-8"
            response.enable_chunked_encoding()
            await response.prepare(request)
            try:
                if not await _until_caller_gone(request, _copy(upstream.content.iter_any(), response)):
                    raise ConnectionResetError("the caller closed the connection")
            except ConnectionResetError:  # the caller went away: nothing left to answer
                log.info("output of %s for %s: the caller went away", pod, user.username)
                return response
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the status is sent; all that can be done is to end the stream
                log.warning("output of %s ended early: %s: %s", pod, type(exc).__name__, exc)
            await response.write_eof()
            return response


async def _copy(chunks: AsyncIterator[bytes], response: web.StreamResponse) -> None:
    async for chunk in chunks:
        await response.write(chunk)


async def _until_caller_gone(request: web.Request, copying: Awaitable[None]) -> bool:
    """Run ``copying`` until it ends (True) or the caller's connection closes first (False, ``copying``
    cancelled). A followed log may stay quiet for hours, and aiohttp notices a closed connection only on the
    next write; without this the handler, and the caller's follow-stream slot, would be held until the next
    log line (maxFollowStreams would lock a supervisor out of a quiet job)."""
    task = asyncio.ensure_future(copying)
    try:
        while not task.done():
            transport = request.transport
            if transport is None or transport.is_closing():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                return False
            await asyncio.wait({task}, timeout=CALLER_POLL)
        task.result()  # the copy's own error, if any, is the caller's to handle
        return True
    finally:
        if not task.done():  # this handler was cancelled (the agent stopping): so is the copy
            task.cancel()


@asynccontextmanager
async def serving(app: web.Application, host: str, port: int, tls: ReloadingServerContext) -> AsyncIterator[int]:
    """Serve ``app`` over HTTPS only on host:port (0: a free one) until the block ends; yields the port.

    The certificate follows its files (checked in the background while serving). On exit the listener
    closes first, then calls in flight get SHUTDOWN_TIMEOUT seconds.
    """
    runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=SHUTDOWN_TIMEOUT, access_log=None)
    await runner.setup()
    watcher = asyncio.create_task(tls.watch(), name="api-certificate-reload")
    try:
        site = web.TCPSite(runner, host, port, ssl_context=tls.context)
        await site.start()
        yield runner.addresses[0][1]
    finally:
        watcher.cancel()
        await runner.cleanup()
