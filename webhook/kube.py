"""The webhook's only I/O against the API server: reading the runtime copy a rule needs, and readiness."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from contract import upstream
from contract.keys import LABEL_JOB_ID
from contract.objects import dig
from serving import watch
from serving.kube import describe_api_error, read_json
from webhook.runtime_facts import RuntimeFacts, runtime_facts, uid_of

RUNTIMES: Final = upstream.TRAINING_RUNTIMES

LIST_PAGE: Final = 100
"""Copies per page of the LIST (serving/watch.py asks for 500, which suits Workloads). A copy carries a whole
training runtime, ≈ 30 KB of JSON with its managedFields, ten times a Workload; a page's decoded objects,
once freed, leave the heap fragmented at about their own size (CPython's arenas stay pinned by the few
objects kept of each copy), so the page size bounds the RSS above what is kept: 500 a page held ≈ 95 MiB of
a 10,000-copy webhook, 100 holds ≈ 20 (docs/performance.md), for 1,000 requests at 100,000 copies."""

READY_TTL: Final = 5.0
"""Seconds a readiness answer is reused: kubelet probes every replica every few seconds, and a probe should
not cost the API server a request each time."""


class RuntimeReader:
    """Reads a TrainingRuntime; None when it does not exist, ApiException on any other failure."""

    def __init__(self, api: client.ApiClient) -> None:
        self._api = client.CustomObjectsApi(api)

    async def __call__(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        try:
            return await self._api.get_namespaced_custom_object(
                RUNTIMES.group, RUNTIMES.version, namespace, RUNTIMES.plural, name
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise


Key = tuple[str, str]
"""(namespace, name)"""


class RuntimeCopies:
    """The runtime copies (TrainingRuntimes labelled with a job id), fed by a watch, in front of a GET.

    What is kept of a copy, and what every answer is, memory's or a GET's, is its ``RuntimeFacts``
    (webhook/runtime_facts.py): its uid and what the creation rules read of it, not the copy.

    ``await copies(namespace, name)`` answers from memory only with a copy the watch has shown and only while
    the watch is open; anything else (a miss, the watch reconnecting or re-listing, the watch not allowed)
    is a fresh GET, and the GET's answer is never put in memory (the watch is the only writer, so an older
    GET can never overwrite a newer event). A negative answer never comes from memory.

    Why a remembered copy answers as a fresh read would: a copy's spec never changes after creation (the
    webhook refuses the edit, docs/webhook.md), and the facts are everything the rules read of it, so an
    entry answers exactly as a fresh read of the same object (same uid). An object of the same name
    recreated is a new uid, whose ADDED replaces the entry; a DELETED removes the entry only if it is the
    same uid (uid-checked, so events of an old object never remove a newer one).

    What memory cannot know: a copy deleted (or replaced) so recently that the watch has not delivered the
    event yet (milliseconds on loopback). A TrainJob created in that window is allowed on the copy as it was
    a moment before, as if its create had come just before the delete, which a fresh read cannot exclude
    either (nothing orders the two). docs/performance.md states the window.
    """

    def __init__(
        self,
        api: client.ApiClient,
        fallback: Callable[[str, str], Awaitable[Mapping[str, Any] | None]],
        count: Callable[[str], None] | None = None,
    ) -> None:
        self._custom = client.CustomObjectsApi(api)
        self._fallback = fallback
        """The GET (RuntimeReader): its whole object is reduced to the same facts as a watched copy's."""
        self._count = count or (lambda source: None)
        """Told "memory" or "api" on each lookup (the webhook's metrics)."""
        self._copies: dict[Key, RuntimeFacts] = {}
        self._listing: dict[Key, RuntimeFacts] | None = None
        self.live = False
        """A watch stream is open and the last LIST is complete: memory is as current as the watch."""
        self.synced = asyncio.Event()
        self.hits = 0
        self.misses = 0

    async def __call__(self, namespace: str, name: str) -> RuntimeFacts | None:
        if self.live:
            found = self._copies.get((namespace, name))
            if found is not None:
                self.hits += 1
                self._count("memory")
                return found
        self.misses += 1
        self._count("api")
        found = await self._fallback(namespace, name)
        return None if found is None else runtime_facts(found)

    async def run(self) -> None:
        """List and watch the copies until cancelled (serving/watch.py: backoff, resume, re-list on 410)."""

        def call(**kwargs: Any) -> Awaitable[Any]:
            return self._custom.list_cluster_custom_object(
                RUNTIMES.group, RUNTIMES.version, RUNTIMES.plural, label_selector=LABEL_JOB_ID, **kwargs
            )

        await watch.run(RUNTIMES.plural, self, call, self, self.synced, on_live=self._on_live)  # type: ignore[arg-type]

    async def list_page(self, call: Callable[..., Awaitable[Any]], **kwargs: Any) -> dict[str, Any]:
        kwargs["limit"] = min(kwargs.get("limit") or LIST_PAGE, LIST_PAGE)
        return await read_json(call(**kwargs, _preload_content=False, _request_timeout=10))  # type: ignore[no-any-return]

    def _on_live(self, live: bool) -> None:
        self.live = live and self._listing is None

    # -- serving.watch.Handler --------------------------------------------------------------------------

    def begin(self) -> None:
        self.live = False
        self._listing = {}

    def page(self, items: list[Mapping[str, Any]]) -> None:
        assert self._listing is not None
        for obj in items:
            self._listing[_key(obj)] = runtime_facts(obj)

    def end(self) -> None:
        assert self._listing is not None
        self._copies, self._listing = self._listing, None

    def event(self, kind: str, obj: Mapping[str, Any]) -> None:
        key = _key(obj)
        if kind == "DELETED":
            held = self._copies.get(key)
            if held is not None and held.uid == uid_of(obj):
                del self._copies[key]
        else:
            self._copies[key] = runtime_facts(obj)


def _key(obj: Mapping[str, Any]) -> Key:
    # A namespace holds many copies: one string for all of them.
    return sys.intern(str(dig(obj, "metadata", "namespace"))), str(dig(obj, "metadata", "name"))


class LookupReadiness:
    """Ready when the API server answers with the TrainingRuntime API: reachable, we are authenticated, and
    the CRD is installed, which is what a lookup needs (RBAC on ``get`` is not probed: a denied lookup
    shows in the verdicts and the metrics)."""

    def __init__(self, api: client.ApiClient, *, ttl: float = READY_TTL, timeout: float = 2.0) -> None:
        self._api = client.CustomObjectsApi(api)
        self._ttl = ttl
        self._timeout = timeout
        self._checked_at = -float("inf")
        self._answer: tuple[bool, str] = (False, "not checked yet")

    async def __call__(self) -> tuple[bool, str]:
        now = time.monotonic()
        if now - self._checked_at >= self._ttl:
            self._answer = await self._probe()
            self._checked_at = time.monotonic()
        return self._answer

    async def _probe(self) -> tuple[bool, str]:
        try:
            resources = await self._api.get_api_resources(
                RUNTIMES.group, RUNTIMES.version, _request_timeout=self._timeout
            )
        except ApiException as exc:
            return False, f"API server: {describe_api_error(exc)}"
        except Exception as exc:  # connection refused, TLS, timeout: all mean "cannot look up now"
            return False, f"API server unreachable: {type(exc).__name__}: {exc}"
        if not any(r.name == RUNTIMES.plural for r in resources.resources or ()):
            return False, f"API server does not serve {RUNTIMES.plural}.{RUNTIMES.group}/{RUNTIMES.version}"
        return True, "ok"
