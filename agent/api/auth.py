"""Who is calling, and may they: TokenReview, then SubjectAccessReview against dispatch's own API group.

The supervisor's rights are checked as if dispatch's operations were Kubernetes resources of the group
``dispatch.phpboyscout.uk`` (``trainjobs``, ``trainjobs/log``, ``preflights``), so a cluster admin grants
them with an ordinary Role and RoleBinding, and they never imply any right on the TrainJobs themselves:
the agent writes those under its own ServiceAccount.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import Kube, KubeError
from contract import upstream
from contract.upstream import SUBJECT_ACCESS_REVIEWS, TOKEN_REVIEWS

API_GROUP: Final = "dispatch.phpboyscout.uk"
# dispatch's operations on a TrainJob, as a resource of its own group named by the TrainJob's own plural.
TRAINJOBS: Final = upstream.TRAINJOBS.plural
LOG: Final = "log"
PREFLIGHTS: Final = "preflights"
CACHE_MAX: Final = 4096
"""TokenReview answers kept at most; one per distinct token, so a flood of made-up tokens stays bounded."""


@dataclass(frozen=True)
class User:
    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: dict[str, list[str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Access:
    """One right a request needs: ``verb`` on ``resource[/subresource]`` of dispatch's group."""

    verb: str
    resource: str
    namespace: str | None = None
    """None for the cluster-scoped ``preflights``."""
    name: str | None = None
    subresource: str | None = None

    def describe(self) -> str:
        what = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        where = f' in namespace "{self.namespace}"' if self.namespace else " (cluster-wide)"
        named = f' "{self.name}"' if self.name else ""
        return f"{self.verb} {what}.{API_GROUP}{named}{where}"

    def resource_attributes(self) -> dict[str, Any]:
        attrs: dict[str, Any] = {"group": API_GROUP, "resource": self.resource, "verb": self.verb}
        for key, value in (("namespace", self.namespace), ("name", self.name), ("subresource", self.subresource)):
            if value:
                attrs[key] = value
        return attrs


def bearer_token(header: str | None) -> str:
    """The token of ``Authorization: Bearer <token>``; 401 when there is none."""
    if not header:
        raise ApiError(ErrorKind.UNAUTHENTICATED, "no Authorization header: send Authorization: Bearer <token>")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise ApiError(ErrorKind.UNAUTHENTICATED, "the Authorization header is not 'Bearer <token>'")
    return token


def token_review(token: str, audiences: tuple[str, ...]) -> dict[str, Any]:
    spec: dict[str, Any] = {"token": token}
    if audiences:
        spec["audiences"] = list(audiences)
    return {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}


def reviewed_user(review: Any, audiences: tuple[str, ...]) -> User:
    """The user a TokenReview answer names; 401 when the token was not accepted (for our audiences)."""
    status = review.get("status") if isinstance(review, dict) else None
    if not isinstance(status, dict) or status.get("authenticated") is not True:
        error = status.get("error") if isinstance(status, dict) else None
        raise ApiError(ErrorKind.UNAUTHENTICATED, f"the token was not accepted{': ' + error if error else ''}")
    if audiences and not set(status.get("audiences") or ()) & set(audiences):
        raise ApiError(ErrorKind.UNAUTHENTICATED, f"the token is not bound to an audience of {list(audiences)}")
    user = status.get("user") or {}
    extra = user.get("extra") or {}
    return User(
        username=str(user.get("username", "")),
        uid=str(user.get("uid", "")),
        groups=tuple(str(g) for g in user.get("groups") or ()),
        extra={str(k): [str(v) for v in vs] for k, vs in extra.items() if isinstance(vs, list)},
    )


def access_review(user: User, access: Access) -> dict[str, Any]:
    spec: dict[str, Any] = {"user": user.username, "resourceAttributes": access.resource_attributes()}
    if user.uid:
        spec["uid"] = user.uid
    if user.groups:
        spec["groups"] = list(user.groups)
    if user.extra:
        spec["extra"] = user.extra
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


def review_verdict(review: Any, user: User, access: Access) -> None:
    """Nothing when the SubjectAccessReview allowed it; 403 naming the missing right otherwise."""
    status = review.get("status") if isinstance(review, dict) else None
    if isinstance(status, dict) and status.get("allowed") is True and status.get("denied") is not True:
        return
    reason = status.get("reason") if isinstance(status, dict) else None
    message = f"{user.username} may not {access.describe()}"
    raise ApiError(ErrorKind.FORBIDDEN, f"{message}: {reason}" if reason else message)


class FailureLimiter:
    """Failed authentications per client address in a sliding window; a client over the limit is blocked
    until its oldest failure in the window ages out. Bounded: at most CACHE_MAX clients are remembered."""

    def __init__(self, limit: int, window: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._limit, self._window, self._clock = limit, window, clock
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, client: str, now: float) -> deque[float]:
        seen = self._failures.get(client)
        if seen is None:
            return deque()
        while seen and seen[0] <= now - self._window:
            seen.popleft()
        if not seen:
            del self._failures[client]
        return seen

    def retry_after(self, client: str) -> float | None:
        """Seconds until ``client`` may try again, or None when it is not blocked."""
        now = self._clock()
        seen = self._recent(client, now)
        if len(seen) < self._limit:
            return None
        return max(0.0, seen[-self._limit] + self._window - now)

    def failed(self, client: str) -> None:
        now = self._clock()
        if client not in self._failures and len(self._failures) >= CACHE_MAX:
            for other in list(self._failures):
                self._recent(other, now)
            if len(self._failures) >= CACHE_MAX:  # a flood from many addresses: forget the oldest
                self._failures.pop(next(iter(self._failures)))
        self._recent(client, now)
        self._failures.setdefault(client, deque()).append(now)


class Authenticator:
    """TokenReview, its answers (either way) cached for ``ttl`` seconds under the token's SHA-256.

    Why cache: a supervisor polls Status, and each call would cost the API server a TokenReview (for a bound
    ServiceAccount token, a signature check and a lookup of the ServiceAccount and its pod). Why briefly: a
    deleted ServiceAccount or an expired token must stop working soon; the API server's own webhook token
    authenticator caches for two minutes by default, ten seconds is well inside that. Why a hash: the cache
    then holds no usable credential. Calls with the same token that miss the cache together share one review
    (a supervisor starting a sweep of many calls at once sends one TokenReview, not one per call).
    """

    def __init__(
        self,
        kube: Kube,
        *,
        audiences: tuple[str, ...] = (),
        ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._kube = kube
        self._audiences = audiences
        self._ttl = ttl
        self._clock = clock
        self._cache: dict[bytes, tuple[float, User | ApiError]] = {}
        self._reviewing: dict[bytes, asyncio.Future[User | ApiError]] = {}
        self.reviews = 0
        """TokenReviews sent (for tests and metrics)."""

    def accepted_recently(self, token: str) -> bool:
        """The token was accepted by a review whose answer is still cached (no review is sent)."""
        cached = self._cache.get(hashlib.sha256(token.encode()).digest())
        return cached is not None and cached[0] > self._clock() and isinstance(cached[1], User)

    async def __call__(self, token: str) -> User:
        key = hashlib.sha256(token.encode()).digest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return _answer(cached[1])
        if (pending := self._reviewing.get(key)) is not None:
            try:
                return _answer(await asyncio.shield(pending))
            except asyncio.CancelledError:
                if not pending.cancelled():  # this call was cancelled, not the review
                    raise
                return await self(token)  # the call that reviewed went away: review anew
        pending = asyncio.get_running_loop().create_future()
        self._reviewing[key] = pending
        try:
            answer = await self._review(token)
            pending.set_result(answer)
        except asyncio.CancelledError:
            pending.cancel()
            raise
        except Exception as exc:
            pending.set_exception(exc)
            pending.exception()  # retrieved here, so one no call waits for is not reported
            raise
        finally:
            del self._reviewing[key]
        if self._ttl > 0:
            if len(self._cache) >= CACHE_MAX:
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
                if len(self._cache) >= CACHE_MAX:
                    self._cache.clear()
            self._cache[key] = (now + self._ttl, answer)
        return _answer(answer)

    async def _review(self, token: str) -> User | ApiError:
        try:
            self.reviews += 1
            review = await self._kube.request("POST", TOKEN_REVIEWS.path(), body=token_review(token, self._audiences))
        except KubeError as exc:  # not the caller's fault: say so, and cache nothing
            raise ApiError(ErrorKind.UNAVAILABLE, f"cannot review the token: {exc.describe()}") from None
        try:
            return reviewed_user(review, self._audiences)
        except ApiError as exc:
            return exc


def _answer(answer: User | ApiError) -> User:
    if isinstance(answer, ApiError):
        raise ApiError(answer.kind, answer.message)
    return answer


async def authorize(kube: Kube, user: User, access: Access) -> None:
    """SubjectAccessReview; 403 when not allowed. Not cached: a revoked RoleBinding applies at once."""
    try:
        review = await kube.request("POST", SUBJECT_ACCESS_REVIEWS.path(), body=access_review(user, access))
    except KubeError as exc:
        raise ApiError(ErrorKind.UNAVAILABLE, f"cannot review access: {exc.describe()}") from None
    review_verdict(review, user, access)
