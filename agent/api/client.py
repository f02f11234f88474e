"""A small async client of the agent's API, typed with the API's own models.

    async with AgentClient("https://dispatch-agent.dispatch-system:8443", token, ca_file="ca.crt") as agent:
        started = await agent.start(StartRequest(...))
        await agent.open(ObjectRef(namespace=..., name=started.name, uid=started.uid))

Every failure raises ``AgentError`` carrying the API's ``ErrorKind`` (``unavailable`` when the agent could
not be reached at all).
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from pydantic import BaseModel, ValidationError

from agent.api.errors import ErrorKind
from agent.api.models import (
    Capabilities,
    ErrorResponse,
    HoldRequest,
    ListItem,
    ListRequest,
    ListResponse,
    ObjectRef,
    OpenResponse,
    OutcomeResponse,
    OutputRequest,
    PreflightRequest,
    StartRequest,
    StartResponse,
    StatusResponse,
    WatchRequest,
    WatchResponse,
    WorkerRemainsModel,
)
from agent.api.paths import OPENAPI_PATH, PREFIX

M = TypeVar("M", bound=BaseModel)
DEFAULT_TIMEOUT: Final = 120.0
"""Seconds for one call: Start may wait timeouts.workload for the Workload, Preflight watches ten seconds."""


class AgentError(Exception):
    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        *,
        status: int = 0,
        field: str | None = None,
        orphans: list[str] | None = None,
        workers: list[WorkerRemainsModel] | None = None,
        ceased: bool | None = None,
        ceased_reason: str | None = None,
    ) -> None:
        super().__init__(f"{kind.value}: {message}" + (f" (field {field})" if field else ""))
        self.kind = kind
        self.message = message
        self.status = status
        self.field = field
        self.orphans = orphans
        self.workers = workers
        """On a MultiKueue manager (not_found from Status, Start's refusals): what is left on each worker."""
        self.ceased = ceased
        self.ceased_reason = ceased_reason
        """On a MultiKueue manager, not_found from Status: Ceased across the workers, and why."""

    def body(self) -> dict[str, Any]:
        return ErrorResponse(
            error=self.kind.value, message=self.message, field=self.field, orphans=self.orphans,
            workers=self.workers, ceased=self.ceased, ceased_reason=self.ceased_reason,
        ).model_dump(by_alias=True, exclude_none=True)  # fmt: skip


def token_from_file(path: str | Path) -> Callable[[], str]:
    """Read the token at each call: a projected ServiceAccount token is rotated on disk."""

    def read() -> str:
        return Path(path).read_text(encoding="utf-8").strip()

    return read


def _error(status: int, raw: bytes) -> AgentError:
    try:
        body = ErrorResponse.model_validate_json(raw)
        kind = ErrorKind(body.error)
    except (ValidationError, ValueError):
        text = raw.decode("utf-8", "replace")[:500]
        return AgentError(ErrorKind.UNAVAILABLE if status >= 500 else ErrorKind.INVALID, text, status=status)
    return AgentError(kind, body.message, status=status, field=body.field, orphans=body.orphans,
                      workers=body.workers, ceased=body.ceased, ceased_reason=body.ceased_reason)  # fmt: skip


class _Resolve(AbstractResolver):
    """Given host names to given addresses (as curl's --resolve), the rest by the system's resolver: the
    certificate is still checked against the name in the URL."""

    def __init__(self, hosts: Mapping[str, str]) -> None:
        self.hosts = dict(hosts)
        self.fallback = aiohttp.ThreadedResolver()

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host not in self.hosts:
            return await self.fallback.resolve(host, port, family)
        address = self.hosts[host]
        return [ResolveResult(hostname=host, host=address, port=port, family=socket.AF_INET, proto=0,
                              flags=socket.AI_NUMERICHOST)]  # fmt: skip

    async def close(self) -> None:
        await self.fallback.close()


class AgentClient:
    def __init__(
        self,
        server: str,
        token: str | Callable[[], str],
        *,
        ca_file: str | Path | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        resolve: Mapping[str, str] | None = None,
    ) -> None:
        """``resolve`` connects to a host of the URL at a given address, e.g. the Service's name at its
        ClusterIP from a machine without the cluster's DNS."""
        self.server = server.rstrip("/")
        self._token = token
        self._ssl = ssl_context or ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
        self._timeout = timeout
        self._resolve = dict(resolve or {})
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> AgentClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            resolver = _Resolve(self._resolve) if self._resolve else None
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self._ssl, resolver=resolver))
        return self._session

    def _headers(self) -> dict[str, str]:
        token = self._token() if callable(self._token) else self._token
        return {"Authorization": f"Bearer {token}", "Accept": "application/json"}

    async def _call(self, method: str, path: str, body: BaseModel | None, answer: type[M], *, wait: float = 0) -> M:
        """``wait``: seconds the agent may hold the call on purpose (Watch), on top of the client's timeout."""
        data = body.model_dump_json(by_alias=True, exclude_none=True) if body is not None else None
        headers = self._headers() | ({"Content-Type": "application/json"} if data is not None else {})
        try:
            async with self.session.request(
                method,
                self.server + path,
                data=data,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=self._timeout + wait),
            ) as response:
                raw = await response.read()
                if response.status >= 400:
                    raise _error(response.status, raw)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise AgentError(
                ErrorKind.UNAVAILABLE, f"cannot reach {self.server}: {type(exc).__name__}: {exc}"
            ) from None
        try:
            return answer.model_validate_json(raw, by_alias=True)
        except ValidationError as exc:
            raise AgentError(
                ErrorKind.INTERNAL, f"unexpected answer to {path}: {exc}", status=response.status
            ) from None

    async def start(self, req: StartRequest) -> StartResponse:
        return await self._call("POST", f"{PREFIX}/start", req, StartResponse)

    async def open(self, ref: ObjectRef) -> OpenResponse:
        return await self._call("POST", f"{PREFIX}/open", _ref(ref), OpenResponse)

    async def hold(self, req: HoldRequest) -> OutcomeResponse:
        return await self._call("POST", f"{PREFIX}/hold", req, OutcomeResponse)

    async def release(self, ref: ObjectRef) -> OutcomeResponse:
        return await self._call("POST", f"{PREFIX}/release", _ref(ref), OutcomeResponse)

    async def stop(self, ref: ObjectRef) -> OutcomeResponse:
        return await self._call("POST", f"{PREFIX}/stop", _ref(ref), OutcomeResponse)

    async def status(self, ref: ObjectRef) -> StatusResponse:
        return await self._call("POST", f"{PREFIX}/status", _ref(ref), StatusResponse)

    async def list(self, req: ListRequest) -> ListResponse:
        """One page of dispatch's TrainJobs in a namespace; pass ``continue`` back for the next."""
        return await self._call("POST", f"{PREFIX}/list", req, ListResponse)

    async def list_all(self, namespace: str, job_id: str | None = None, limit: int = 100) -> list[ListItem]:
        """Every page of List, concatenated."""
        items: list[ListItem] = []
        token: str | None = None
        while True:
            page = await self.list(ListRequest(namespace=namespace, job_id=job_id, limit=limit, continue_=token))
            items += page.items
            token = page.continue_
            if not token:
                return items

    async def watch(self, req: WatchRequest) -> WatchResponse:
        """The TrainJobs of a namespace changed since ``req.version`` (a snapshot without one), waiting up to
        ``req.timeout_seconds`` for one."""
        return await self._call("POST", f"{PREFIX}/watch", req, WatchResponse, wait=req.timeout_seconds)

    async def changes(self, namespace: str, wait: int = 30) -> AsyncIterator[ListItem]:
        """Every dispatch TrainJob of ``namespace`` as it is now, then each as it changes, for ever: Watch in a
        loop, starting again from a snapshot when the agent answers ``expired``. An item may repeat a phase."""
        version: str | None = None
        while True:
            try:
                answer = await self.watch(WatchRequest(namespace=namespace, version=version, timeout_seconds=wait))
            except AgentError as exc:
                if exc.kind is not ErrorKind.EXPIRED:
                    raise
                version = None
                continue
            for item in answer.items:
                yield item
            version = answer.version

    async def preflight(self, req: PreflightRequest) -> Capabilities:
        return await self._call("POST", f"{PREFIX}/preflight", req, Capabilities)

    async def capabilities(self) -> Capabilities:
        return await self._call("GET", f"{PREFIX}/capabilities", None, Capabilities)

    async def openapi(self) -> dict[str, Any]:
        try:
            async with self.session.get(self.server + OPENAPI_PATH) as response:
                raw = await response.read()
                if response.status >= 400:
                    raise _error(response.status, raw)
                return json.loads(raw)
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise AgentError(ErrorKind.UNAVAILABLE, f"cannot reach {self.server}: {exc}") from None

    async def output(self, req: OutputRequest) -> AsyncIterator[bytes]:
        """Rank 0's log as it arrives. With ``follow`` it ends when the container does (or on ``aclose()``)."""
        data = req.model_dump_json(by_alias=True, exclude_none=True)
        try:
            async with self.session.post(
                self.server + f"{PREFIX}/output",
                data=data,
                headers=self._headers() | {"Content-Type": "application/json"},
                # No total: a followed log runs as long as the job; connecting and each read are bounded.
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self._timeout),
            ) as response:
                if response.status >= 400:
                    raise _error(response.status, await response.read())
                async for chunk in response.content.iter_any():
                    yield chunk
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            raise AgentError(ErrorKind.UNAVAILABLE, f"the log stream from {self.server} broke: {exc}") from None


def _ref(ref: ObjectRef) -> ObjectRef:
    """Only the ObjectRef's own fields, also when given a subclass (a HoldRequest, an OutputRequest)."""
    return ObjectRef(namespace=ref.namespace, name=ref.name, uid=ref.uid)
