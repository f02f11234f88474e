"""The certificate controller: the thin async shell around ``certs.lifecycle`` and ``certs.injection``.

One pass (``reconcile``): read the Secret and our webhook configurations, ``decide``, write the Secret
with the resourceVersion read (a replica that loses the race gets 409, re-reads and takes what the
winner wrote), inject the bundle into our configurations (again with the resourceVersion read), write the
served files, and update ``Readiness``. ``run`` repeats the pass whenever a watch sees the Secret or a
configuration change (a ``helm upgrade`` that blanks the caBundle is re-injected within a second) and
when the lifecycle's next deadline comes, with a resync as a backstop.

The API server is the only coordination between replicas: no leader election is needed, because every
write is conditional and every decision is a function of what was read.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import random
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from certs import contents, lifecycle
from certs.files import write_served
from certs.injection import LABEL, LABEL_VALUE, all_injected, injection_patch, is_ours
from contract.keys import NAME
from serving.kube import describe_api_error

FIELD_MANAGER: Final = "dispatch.phpboyscout.uk/adapter"
MAX_ATTEMPTS: Final = 10
"""Conflicting writes retried per pass (cert-controller: 10 steps); each retry re-reads first."""
RESYNC: Final = 300.0
"""Seconds between passes when nothing happens: a backstop for a watch that silently stalls."""
WATCH_TIMEOUT: Final = 240
"""Seconds a watch lasts before it is re-opened (the API server's own limit is 30 to 60 minutes)."""
MAX_BACKOFF: Final = 30.0

Clock = Callable[[], dt.datetime]

log = logging.getLogger(__name__)


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass(frozen=True)
class Target:
    """What one controller maintains."""

    namespace: str
    secret: str
    configurations: tuple[str, ...] = (NAME,)
    """Names of our Validating and Mutating webhook configurations (they must also carry our label)."""
    out_dir: Path | None = None
    """Where the servers read tls.crt, tls.key and ca.crt (the bundle); None writes no files."""


class Readiness:
    """Ready when the serving certificate is loaded and the CA is injected: the servers' files hold the
    Secret's serving certificate (and, in-process, the TLS context serves it), every configuration of ours
    carries the bundle, and that bundle verifies the certificate now. Call it as the webhook's readiness
    check: ``await readiness()`` -> (ready, why)."""

    def __init__(
        self,
        *,
        served: Callable[[], str] | None = None,
        clock: Clock = utcnow,
        max_staleness: dt.timedelta | None = None,
    ) -> None:
        self._served = served
        """In-process: the sha256 of the certificate the TLS context serves (ReloadingServerContext.info)."""
        self._clock = clock
        self._max_staleness = max_staleness
        """After this long without a successful pass, not ready: this replica may be serving a certificate
        the others have since stopped trusting (the controller sets it to half the overlap)."""
        self._problem: str | None = "the certificate controller has not run yet"
        self._leaf: bytes | None = None
        self._bundle: bytes | None = None
        self._checked_at: dt.datetime | None = None
        self._updated = asyncio.Event()

    def update(self, *, problem: str | None, leaf: bytes | None = None, bundle: bytes | None = None) -> None:
        """The outcome of a successful pass (or of a failure that leaves nothing to serve)."""
        self._problem, self._leaf, self._bundle = problem, leaf, bundle
        self._checked_at = self._clock()
        self._updated.set()

    def check(self) -> tuple[bool, str]:
        if self._problem is not None or self._leaf is None or self._bundle is None:
            return False, self._problem or "no serving certificate yet"
        # Re-checked at every probe: a controller that cannot reach the API server keeps its last answer,
        # and that answer must still turn false when the certificate runs out, or before the CA it was
        # signed by may have left the other replicas' bundle.
        now = self._clock()
        checked_at, limit = self._checked_at, self._max_staleness
        if checked_at is not None and limit is not None and now - checked_at > limit:
            return False, f"no successful certificate pass since {checked_at.isoformat()}"
        if not contents.verifies(self._leaf, self._bundle, now):
            return False, "the serving certificate does not verify against the injected bundle now"
        if self._served is not None and self._served() != contents.fingerprint(self._leaf):
            return False, "the server has not loaded the current serving certificate yet"
        return True, "ok"

    async def __call__(self) -> tuple[bool, str]:
        return self.check()

    async def wait_ready(self) -> None:
        """Returns once ready (wrap it in ``asyncio.timeout``)."""
        while not self.check()[0]:
            self._updated.clear()
            await self._updated.wait()


@dataclass
class Stats:
    """Counts for the logs and the tests."""

    passes: int = 0
    failures: int = 0
    """Passes that raised: an API error, or conflicts past MAX_ATTEMPTS."""
    secret_writes: int = 0
    conflicts: int = 0
    injections: int = 0
    files_written: int = 0
    last_error: str | None = None
    plans: deque[str] = field(default_factory=lambda: deque(maxlen=100))
    """The last Secret writes, described."""


class SecretMissingError(RuntimeError):
    pass


class CertController:
    def __init__(
        self,
        api: client.ApiClient,
        target: Target,
        policy: lifecycle.Policy,
        *,
        clock: Clock = utcnow,
        readiness: Readiness | None = None,
        field_manager: str = FIELD_MANAGER,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.target = target
        self.policy = policy
        self.clock = clock
        self.readiness = readiness or Readiness(clock=clock, max_staleness=policy.overlap / 2)
        self.stats = Stats()
        self.material: contents.Material | None = None
        """The Secret's material as of the last pass."""
        self._api = api
        self._core = client.CoreV1Api(api)
        self._admission = client.AdmissionregistrationV1Api(api)
        self._field_manager = field_manager
        self._sleep = sleep
        self._wake = asyncio.Event()
        self._succeeded = False
        self._injected: deque[bytes] = deque(maxlen=4)
        """Bundles this controller has seen carried by all our configurations."""
        self._unlabelled: set[tuple[str, str]] = set()

    # --- one pass -------------------------------------------------------------------------------------

    async def reconcile(self) -> dt.datetime | None:
        """One pass; returns when the lifecycle next wants a look (None: no deadline). Raises on API errors
        other than conflicts (after readiness is updated to say why, until a first pass succeeded)."""
        try:
            return await self._reconcile()
        except Exception as exc:
            why = describe_api_error(exc) if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
            self.stats.last_error = why
            self.stats.failures += 1
            if not self._succeeded or isinstance(exc, SecretMissingError):
                # Before the first success there is nothing to serve. After it, a failing API server must
                # not take every replica out of the Service: what is loaded and injected stays valid, and
                # Readiness re-checks it against the clock at every probe.
                self.readiness.update(problem=why)
            raise

    async def _reconcile(self) -> dt.datetime | None:
        self.stats.passes += 1
        material = await self._converge_secret()
        self.material = material
        bundle = contents.trust_bundle(material)
        configurations = await self._inject(bundle)
        loaded = await self._write_files(material)
        self._update_readiness(material, bundle, configurations, loaded)
        self._succeeded = True
        return lifecycle.next_decision_at(material, self.policy, self.clock())

    async def _converge_secret(self) -> contents.Material:
        """Bring the Secret to a state ``decide`` is content with; returns the material stored."""
        for attempt in range(MAX_ATTEMPTS):
            secret = await self._read_secret()
            before = contents.decode_secret_data(secret.get("data"))
            material = contents.parse(before)
            if material.problems:
                log.warning("Secret %s: setting aside %s", self._secret_ref, "; ".join(material.problems))
            configurations = await self._read_configurations()
            injected = all_injected(configurations.values(), contents.trust_bundle(material))
            now = self.clock()
            plan = lifecycle.decide(material, self.policy, now, injected=injected)
            if not plan:
                return material
            after = lifecycle.carry_out(material, plan, self.policy, now)
            patch = lifecycle.secret_patch(secret["metadata"]["resourceVersion"], before, after)
            try:
                # The stub omits ``_content_type``, which the client accepts (it is in the method's all_params).
                written = await self._core.patch_namespaced_secret(  # type: ignore[call-arg]
                    self.target.secret,
                    self.target.namespace,
                    patch,
                    field_manager=self._field_manager,
                    _content_type="application/merge-patch+json",
                )
            except ApiException as exc:
                if exc.status != 409:
                    raise
                # Another replica wrote first. What it wrote is re-read and judged like anything else: if it
                # satisfies ``decide``, that is the certificate everyone uses.
                self.stats.conflicts += 1
                log.info("Secret %s changed under us (%s); re-reading", self._secret_ref, plan.describe())
                await self._backoff(attempt)
                continue
            self.stats.secret_writes += 1
            self.stats.plans.append(plan.describe())
            log.info("Secret %s updated: %s", self._secret_ref, plan.describe())
            # What the API server stored is the truth (another writer's keys included).
            return contents.parse(contents.decode_secret_data(self._json(written)["data"]))
        raise RuntimeError(f"Secret {self._secret_ref}: still conflicting after {MAX_ATTEMPTS} attempts")

    async def _inject(self, bundle: bytes) -> dict[tuple[str, str], Mapping[str, Any] | None]:
        """Give every configuration of ours ``bundle``; returns them as they are afterwards."""
        after: dict[tuple[str, str], Mapping[str, Any] | None] = {}
        for kind, name in self._configuration_refs():
            for attempt in range(MAX_ATTEMPTS):
                obj = await self._read_configuration(kind, name)
                ops = injection_patch(obj, bundle) if obj is not None else None
                if ops is None:
                    after[kind, name] = obj
                    break
                try:
                    after[kind, name] = await self._patch_configuration(kind, name, ops)
                except ApiException as exc:
                    if exc.status == 404:
                        after[kind, name] = None
                        break
                    if exc.status != 409:
                        raise
                    self.stats.conflicts += 1
                    await self._backoff(attempt)
                    continue
                self.stats.injections += 1
                log.info("injected the CA bundle into %s %s", kind, name)
                break
            else:
                raise RuntimeError(f"{kind} {name}: still conflicting after {MAX_ATTEMPTS} attempts")
        return after

    async def _write_files(self, material: contents.Material) -> bool:
        files = lifecycle.served_files(material)
        if files is None:
            return False
        if self.target.out_dir is not None and await asyncio.to_thread(write_served, self.target.out_dir, files):
            self.stats.files_written += 1
            log.info("wrote the serving certificate to %s", self.target.out_dir)
        return True

    def _update_readiness(
        self,
        material: contents.Material,
        bundle: bytes,
        configurations: Mapping[tuple[str, str], Mapping[str, Any] | None],
        loaded: bool,
    ) -> None:
        if not loaded or material.serving is None:
            self.readiness.update(problem="no serving certificate yet")
            return
        pending = [f"{kind} {name}" for (kind, name), obj in configurations.items() if not all_injected([obj], bundle)]
        if not pending and bundle not in self._injected:
            self._injected.append(bundle)
        if pending and bundle not in self._injected:
            self.readiness.update(problem=f"the CA bundle is not injected into {', '.join(pending)} yet")
            return
        # Once this bundle has been injected, a configuration blanked afterwards (a helm upgrade) does not make
        # the pod unready: it is re-injected within a second, and taking every replica out of the Service
        # meanwhile would turn that second into an outage of the agent API too.
        self.readiness.update(problem=None, leaf=material.serving.cert_pem, bundle=bundle)

    # --- the loop -------------------------------------------------------------------------------------

    def poke(self) -> None:
        """Run a pass soon (watch events, tests that move the clock)."""
        self._wake.set()

    async def run(self, *, resync: float = RESYNC, watches: bool = True) -> None:
        """Passes until cancelled: on every watch event, at the lifecycle's next deadline, every ``resync``."""
        watchers = (
            [asyncio.create_task(self._watch(*w), name=f"watch-{w[0]}") for w in self._watches()] if watches else []
        )
        failures = 0
        try:
            while True:
                self._wake.clear()
                try:
                    wake_at = await self.reconcile()
                    failures = 0
                    delay = resync
                    if wake_at is not None:
                        delay = min(resync, max(0.0, (wake_at - self.clock()).total_seconds()) + 0.01)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    failures += 1
                    delay = min(MAX_BACKOFF, 0.5 * 2**failures)
                    log.warning("certificate pass failed (retrying in %.1fs): %s", delay, self.stats.last_error)
                with suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._wake.wait()
        finally:
            for task in watchers:
                task.cancel()
            await asyncio.gather(*watchers, return_exceptions=True)

    def _watches(self) -> list[tuple[str, Callable[..., Any], tuple[Any, ...], str]]:
        ns, secret = self.target.namespace, self.target.secret
        out: list[tuple[str, Callable[..., Any], tuple[Any, ...], str]] = [
            (f"secret/{secret}", self._core.list_namespaced_secret, (ns,), secret)
        ]
        for name in self.target.configurations:
            out.append((f"vwc/{name}", self._admission.list_validating_webhook_configuration, (), name))
            out.append((f"mwc/{name}", self._admission.list_mutating_webhook_configuration, (), name))
        return out

    async def _watch(self, what: str, list_fn: Callable[..., Any], args: tuple[Any, ...], name: str) -> None:
        # A field selector on the name is what lets RBAC scope list and watch to resourceNames. The events
        # only wake the loop: every pass re-reads, so a missed or stale event costs nothing but latency.
        failures = 0
        while True:
            try:
                async with watch.Watch().stream(
                    list_fn, *args, field_selector=f"metadata.name={name}", timeout_seconds=WATCH_TIMEOUT
                ) as stream:
                    async for _event in stream:
                        failures = 0
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                why = describe_api_error(exc) if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"
                log.warning("watch of %s failed: %s", what, why)
                await self._sleep(min(MAX_BACKOFF, 0.5 * 2**failures))

    # --- API calls ------------------------------------------------------------------------------------

    @property
    def _secret_ref(self) -> str:
        return f"{self.target.namespace}/{self.target.secret}"

    async def _read_secret(self) -> dict[str, Any]:
        try:
            secret = await self._core.read_namespaced_secret(self.target.secret, self.target.namespace)
        except ApiException as exc:
            if exc.status == 404:
                raise SecretMissingError(
                    f"Secret {self._secret_ref} does not exist: the chart creates it (empty); "
                    "the certificate controller only fills it"
                ) from None
            raise
        return self._json(secret)

    def _configuration_refs(self) -> list[tuple[str, str]]:
        kinds = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")
        return [(kind, name) for name in self.target.configurations for kind in kinds]

    async def _read_configurations(self) -> dict[tuple[str, str], Mapping[str, Any] | None]:
        return {(kind, name): await self._read_configuration(kind, name) for kind, name in self._configuration_refs()}

    async def _read_configuration(self, kind: str, name: str) -> dict[str, Any] | None:
        """The configuration, or None when it is missing or is not ours (wrong label): never touched then."""
        read = (
            self._admission.read_validating_webhook_configuration
            if kind == "ValidatingWebhookConfiguration"
            else self._admission.read_mutating_webhook_configuration
        )
        try:
            obj = self._json(await read(name))
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        if not is_ours(obj, self.target.configurations):
            if (kind, name) not in self._unlabelled:  # once, not at every pass
                self._unlabelled.add((kind, name))
                log.warning("%s %s lacks the label %s=%s; leaving it alone", kind, name, LABEL, LABEL_VALUE)
            return None
        self._unlabelled.discard((kind, name))
        return obj

    async def _patch_configuration(self, kind: str, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
        patch = (
            self._admission.patch_validating_webhook_configuration
            if kind == "ValidatingWebhookConfiguration"
            else self._admission.patch_mutating_webhook_configuration
        )
        # The stub omits ``_content_type``, which the client accepts (it is in the method's all_params).
        written = await patch(  # type: ignore[call-arg]
            name, ops, field_manager=self._field_manager, _content_type="application/json-patch+json"
        )
        return self._json(written)

    def _json(self, model: object) -> dict[str, Any]:
        """The API's JSON of an object the client read or wrote (a model serializes to a dict)."""
        body: dict[str, Any] = self._api.sanitize_for_serialization(model)
        return body

    async def _backoff(self, attempt: int) -> None:
        # Jitter so that replicas that collided do not collide again in lockstep (client-go DefaultRetry).
        await self._sleep(0.01 * 2**attempt * (0.5 + random.random()))
