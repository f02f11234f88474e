"""The agent's one Kubernetes client: plain JSON in and out over kubernetes_asyncio's ApiClient, and its one error,
``KubeError``, which serving/watch.py and serving/kube.py's ``read_json`` raise too.

Objects are read as the API server writes them (camelCase JSON), never through the generated models: the pure
modules read JSON (agent/domain/node_loss.py refuses a model's snake_case ``to_dict()``, whose keys would read as
absent fields), and a model would silently drop fields it does not know. So every call goes through
``ApiClient.call_api`` unparsed, which also keeps its auth (client certificates, the ServiceAccount token and its
refresh) and TLS settings. Paths are built by ``contract.upstream``'s ``Resource.path``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Final

import aiohttp
from kubernetes_asyncio import client

from contract.keys import FIELD_MANAGER

JSON_PATCH: Final = "application/json-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"

QUERY_NAMES: Final = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "limit": "limit",
    "_continue": "continue",
    "watch": "watch",
    "resource_version": "resourceVersion",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "timeout_seconds": "timeoutSeconds",
}
"""The keyword arguments of a collection's call (``Kube.collection``), as kubernetes_asyncio's generated list
calls name them (serving/watch.py and the webhook's watch pass them so), and their query parameters."""


TOO_MANY_REQUESTS_RETRIES: Final = 5
"""A 429 is sent again this many times (client-go: 10), each after the Retry-After asked, at most
``RETRY_AFTER_CAP`` seconds: a call waits about 10 s at most before the 429 is its answer."""
RETRY_AFTER_CAP: Final = 2.0


def retry_after(header: str | None) -> float:
    """The seconds a 429's Retry-After asks for (1 when absent or unreadable), capped at ``RETRY_AFTER_CAP``."""
    try:
        seconds = float(header) if header is not None else 1.0
    except ValueError:
        seconds = 1.0
    return min(max(seconds, 0.0), RETRY_AFTER_CAP)


class KubeError(Exception):
    """The API server answered with an error (``status`` >= 400), or could not be reached (``status`` 0)."""

    def __init__(self, status: int, reason: str, message: str, method: str = "", path: str = "") -> None:
        super().__init__(f"{method} {path}: HTTP {status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def webhook_denial(self) -> bool:
        """A refusal by an admission webhook (or policy), as opposed to RBAC's refusal of the agent itself."""
        return "admission webhook" in self.message or "ValidatingAdmissionPolicy" in self.message

    def describe(self) -> str:
        return f"HTTP {self.status} {self.reason}: {self.message}".strip(": ")


def error(status: int, raw: bytes, method: str = "", path: str = "") -> KubeError:
    """The KubeError of an error answer: the reason and message of its Status body, else its text."""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, Mapping):
        return KubeError(status, str(body.get("reason", "")), str(body.get("message", "")), method, path)
    return KubeError(status, "", raw.decode("utf-8", "replace")[:500], method, path)


def selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in labels.items())


class Kube:
    """Thin JSON REST over an ApiClient. Every write carries dispatch's field manager.

    ``unreachable``: a failure to reach the API server (a refused connection, a timeout) raises KubeError with
    status 0; else the transport's own exception (aiohttp's, TimeoutError, OSError) propagates, as the gate
    expects (agent/runtime/kube.py: its passes treat it as a failed pass, not as the API server's refusal)."""

    def __init__(
        self, api: client.ApiClient, *, timeout: float = 30.0, workers: Any = None, unreachable: bool = True
    ) -> None:
        self.api = api
        self.timeout = timeout
        self.unreachable = unreachable
        self.workers = workers
        """On a MultiKueue manager, for the API: the agent's credential for each worker
        (agent/multicluster/worker_reads.py ``WorkerClients``; Preflight proves them)."""

    async def _call(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
        limit: float | aiohttp.ClientTimeout | None = None,
    ) -> aiohttp.ClientResponse:
        for attempt in range(TOO_MANY_REQUESTS_RETRIES + 1):
            try:
                response: aiohttp.ClientResponse = await self.api.call_api(
                    path,
                    method,
                    query_params=list(query),
                    header_params={"Accept": "application/json", "Content-Type": content_type},
                    body=body,
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _request_timeout=limit or self.timeout,
                )
            except (aiohttp.ClientError, TimeoutError, OSError) as exc:
                if not self.unreachable:
                    raise
                raise KubeError(0, "Unreachable", f"{type(exc).__name__}: {exc}", method, path) from None
            if response.status != 429 or attempt == TOO_MANY_REQUESTS_RETRIES:
                return response
            # The API server did not process it (priority and fairness, or a cache still initializing after its
            # start): sent again after the Retry-After it asks for, as client-go's rest client does.
            wait = retry_after(response.headers.get("Retry-After"))
            response.release()
            await asyncio.sleep(wait)
        raise AssertionError("unreachable")  # the loop returns on its last attempt

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: Sequence[tuple[str, Any]] = (),
        body: Any = None,
        content_type: str = "application/json",
    ) -> Any:
        response = await self._call(method, path, query=query, body=body, content_type=content_type)
        try:
            raw = await response.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            if not self.unreachable:
                raise
            raise KubeError(0, "Unreachable", f"{type(exc).__name__}: {exc}", method, path) from None
        finally:
            response.release()
        if response.status >= 400:
            raise error(response.status, raw, method, path)
        return json.loads(raw) if raw else None

    async def get(self, path: str) -> dict[str, Any] | None:
        """The object, or None when it does not exist."""
        try:
            found: dict[str, Any] | None = await self.request("GET", path)
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def list(self, path: str, labels: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
        query = [("labelSelector", selector(labels))] if labels else []
        return list((await self.request("GET", path, query=query)).get("items") or [])

    async def page(self, path: str, *, limit: int | None = None, token: str | None = None) -> dict[str, Any]:
        """One page of a LIST: the whole answer (``items`` and ``metadata.continue``)."""
        query = ([("limit", str(limit))] if limit else []) + ([("continue", token)] if token else [])
        return dict(await self.request("GET", path, query=query) or {})

    async def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = await self.request(
            "POST", path, query=[("fieldManager", FIELD_MANAGER)], body=dict(body)
        )
        return created

    async def replace(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """A PUT; the body's resourceVersion makes it fail with 409 if the object changed since it was read.
        Only for the Lease, which leader election writes whole the same way (never a TrainJob)."""
        replaced: dict[str, Any] = await self.request(
            "PUT", path, query=[("fieldManager", FIELD_MANAGER)], body=dict(body)
        )
        return replaced

    async def json_patch(self, path: str, ops: Sequence[Mapping[str, Any]], *, dry_run: bool = False) -> dict[str, Any]:
        """A JSON Patch; ``dry_run``: judged by validation and every admission webhook and policy, never stored."""
        query = [("fieldManager", FIELD_MANAGER)] + ([("dryRun", "All")] if dry_run else [])
        patched: dict[str, Any] = await self.request(
            "PATCH", path, query=query, body=list(ops), content_type=JSON_PATCH
        )
        return patched

    async def apply(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Server-side apply, forced (our fields are ours); the body's uid and resourceVersion are its
        preconditions."""
        query = [("fieldManager", FIELD_MANAGER), ("force", True)]
        applied: dict[str, Any] = await self.request(
            "PATCH", path, query=query, body=dict(body), content_type=APPLY_PATCH
        )
        return applied

    async def delete(self, path: str, *, uid: str, propagation: str) -> bool:
        """Delete the object if it is still the one with ``uid``; False when it was already gone.

        A different object of the same name fails the precondition with 409 Conflict.
        """
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": uid},
            "propagationPolicy": propagation,
        }
        try:
            await self.request("DELETE", path, body=body)
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def discovery(self) -> dict[str, Any]:
        found: dict[str, Any] = await self.request("GET", "/apis")
        return found

    async def serves(self, group_version: str, kind: str) -> bool:
        """Whether the API server serves ``kind`` in ``group_version`` (its discovery document, readable by every
        authenticated user)."""
        try:
            document = await self.request("GET", f"/apis/{group_version}")
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        resources = (document or {}).get("resources") or []
        return any(isinstance(r, Mapping) and r.get("kind") == kind for r in resources)

    async def openapi_v3(self, group_version: str) -> dict[str, Any] | None:
        """The served OpenAPI v3 document of one group/version (``/openapi/v3``, readable by every
        authenticated user through ``system:discovery``), or None when it is not served."""
        index = await self.request("GET", "/openapi/v3")
        entry = ((index or {}).get("paths") or {}).get(f"apis/{group_version}")
        url = entry.get("serverRelativeURL") if isinstance(entry, Mapping) else None
        if not isinstance(url, str):
            return None
        path, _, raw_query = url.partition("?")
        query = [
            (name, value) for name, _, value in (part.partition("=") for part in raw_query.split("&") if "=" in part)
        ]
        document: dict[str, Any] | None = await self.request("GET", path, query=query)
        return document

    @asynccontextmanager
    async def stream(self, path: str, query: Sequence[tuple[str, str]]) -> AsyncIterator[aiohttp.ClientResponse]:
        """A streaming GET (a log): the response whose body is read as it arrives; errors raise KubeError.

        No total timeout, which would cut a followed log; connecting is still bounded.
        """
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=None)
        response = await self._call("GET", path, query=query, limit=timeout)
        try:
            if response.status >= 400:
                raise error(response.status, await response.read(), "GET", path)
            yield response
        finally:
            response.release()

    # -- collections, for serving/watch.py ------------------------------------------------------------------

    def collection(self, path: str, **fixed: Any) -> Callable[..., Awaitable[aiohttp.ClientResponse]]:
        """The unread GET of a collection (``path``) that serving/watch.py lists and watches through: called
        with a generated list call's keyword arguments (``QUERY_NAMES``: ``limit``, ``_continue``, ``watch``,
        ``resource_version`` ...; ``fixed`` ones, e.g. a ``label_selector``, on every call), ``_request_timeout``
        bounding it (this client's timeout when None); the response is the caller's to read and release."""

        async def call(
            *,
            _preload_content: bool = False,
            _request_timeout: float | aiohttp.ClientTimeout | None = None,
            **params: Any,
        ) -> aiohttp.ClientResponse:
            del _preload_content  # always unread: the caller decodes the JSON, or the watch's lines, once
            merged = {**fixed, **params}
            query = [(QUERY_NAMES[name], value) for name, value in merged.items() if value is not None]
            return await self._call("GET", path, query=query, limit=_request_timeout)

        return call

    async def list_page(self, call: Callable[..., Awaitable[Any]], **kwargs: Any) -> dict[str, Any]:
        """One page of ``call``'s LIST (a ``collection``), as the API's JSON (serving/watch.py's ``Lister``)."""
        listed: dict[str, Any] = await read_json(call(**kwargs, _request_timeout=self.timeout))
        return listed


async def read_json(call: Awaitable[Any]) -> Any:
    """The JSON body of an unread answer (a ``collection``'s, or a generated call's made with
    ``_preload_content=False``: the API's own JSON, not a client model), or KubeError carrying the API server's
    reason and message."""
    response = await call
    try:
        raw = await response.read()
    finally:
        response.release()
    if not 200 <= response.status <= 299:
        raise error(response.status, raw)
    return json.loads(raw) if raw else None
