"""Typed API errors, each with a stable HTTP status and JSON body ``{"error", "message", "field"}``; and
``contract``, which turns a contract builder's ContractError into an ``invalid`` request naming the field."""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any, TypeVar

from contract.errors import ContractError

T = TypeVar("T")


class ErrorKind(StrEnum):
    INVALID = "invalid"
    """The request is malformed; ``field`` names what was wrong. Nothing was read or written."""
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    REJECTED = "rejected"
    """The operation must not happen (a fence, e.g. Open after the object ended unopened)."""
    CONFLICT = "conflict"
    """The object is not as the request expects (a different UID; a concurrent write). Re-read, retry."""
    OBSERVE_ONLY = "observe_only"
    """The adapter cannot prove its gates (the verdict on the Lease); Start, Open and Release refuse with the reason."""
    RATE_LIMITED = "rate_limited"
    """Too many failed tokens from this client, or too many open log streams of this user; retry later."""
    UNAVAILABLE = "unavailable"
    """The API server could not be reached or answered with an error; safe to retry."""
    EXPIRED = "expired"
    """Watch: the version is older than the agent remembers (or from another API): watch again without one."""
    INTERNAL = "internal"
    """A bug in the agent; the message says where. Nothing more is known about what was written."""


STATUS: dict[ErrorKind, int] = {
    ErrorKind.INVALID: 400,
    ErrorKind.UNAUTHENTICATED: 401,
    ErrorKind.FORBIDDEN: 403,
    ErrorKind.NOT_FOUND: 404,
    ErrorKind.REJECTED: 409,
    ErrorKind.CONFLICT: 409,
    ErrorKind.EXPIRED: 410,
    ErrorKind.RATE_LIMITED: 429,
    ErrorKind.OBSERVE_ONLY: 503,
    ErrorKind.UNAVAILABLE: 503,
    ErrorKind.INTERNAL: 500,
}


class ApiError(Exception):
    def __init__(
        self,
        kind: ErrorKind,
        message: str,
        field: str | None = None,
        *,
        orphans: list[str] | None = None,
        retry_after: int | None = None,
        workers: list[dict[str, Any]] | None = None,
        ceased: bool | None = None,
        ceased_reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.field = field
        self.orphans = orphans
        self.retry_after = retry_after
        """Seconds, sent as Retry-After (rate_limited)."""
        """Status of a TrainJob that is gone (or replaced): what it left behind, as the spec names orphans."""
        self.workers = workers
        """On a MultiKueue manager (Status of a TrainJob that is gone, Start): what of the job is left on each
        worker, as ``WorkerRemainsModel`` bodies (agent/multicluster/worker_remains.py)."""
        self.ceased = ceased
        self.ceased_reason = ceased_reason
        """On a MultiKueue manager, Status of a TrainJob that is gone: Ceased across the workers, and why."""

    @property
    def status(self) -> int:
        return STATUS[self.kind]

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.kind.value, "message": self.message}
        if self.field:
            body["field"] = self.field
        if self.orphans is not None:
            body["orphans"] = self.orphans
        if self.workers is not None:
            body["workers"] = self.workers
        if self.ceased is not None:
            body["ceased"] = self.ceased
            body["ceasedReason"] = self.ceased_reason or ""
        return body


def contract(call: Callable[..., T], *args: Any) -> T:
    """Run a contract builder; its ContractError is an invalid request naming the field."""
    try:
        return call(*args)
    except ContractError as exc:
        raise ApiError(ErrorKind.INVALID, exc.message, field=exc.field) from None
