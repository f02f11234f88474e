"""The naive check controller: the broken system the campaign also runs, to prove its checker can fail.

It serves dispatch's AdmissionCheck as a check controller that knows nothing of identity would: every
Workload whose dispatch check is `Pending` with quota reserved (and not evicted, finished or deactivated)
gets it set `Ready` at once. It does not raise A before a readmission and does not wait for the previous
execution's pods, the two things the real gate (agent/domain/decide.py) exists for.

* **It takes the agent's Lease** and keeps renewing it. A leader that finds another holder renewing it stands
  by (agent/runtime/leader.py: STANDBY, ``on_change(False)``, its workers cancelled), so the agent's replicas keep their
  watches and their API but never serve the gate; and the API still sees a renewed Lease, so Kueue-mode Start,
  Open and Release are not refused as "the readmission controller is down" (agent/api/decisions.py
  ``heartbeat``). The Lease's annotations (the Preflight verdicts) are kept as read.
* **One raise is kept**: the first admission of a dispatch job (A = 0, no floor: never raised) gets A = 1, as
  the real gate's first raise. Kueue-mode Open does not raise A, so without it every execution would carry
  A = 0, which the prologue refuses (exit 125) before the trainer runs: the naive arm would run nothing and
  prove nothing. Every later admission runs with that same A. ``first_raise=False`` drops even this one.
* **It writes as dispatch** (the admin's credentials impersonating dispatch's principal, the chart's agent
  ServiceAccount): the owner policies and the rule that only dispatch sets its check `Ready` let it through, as
  they do the agent; nothing else of dispatch's defence is switched off by it.
* **Nobody removes dispatch's pod finalizer meanwhile**: the agent does that only as leader (its releaser runs
  beside the gate's workers). Trainer pods deleted while this controller holds the Lease stay listed,
  Terminating (their containers are stopped all the same); a replica that leads again releases them.

dispatch numbers every execution at the TrainJob's unsuspend (the choke point: docs/security.md,
docs/webhook.md): the MutatingAdmissionPolicy `dispatch-k8s-record-start` (or the mutating webhook) raises A in
Kueue's unsuspend when it did not rise since the last one, and the policy `dispatch-k8s-unsuspend` and the
webhook's `update.unsuspend` refuse an unsuspend whose A did not. The naive arm is "a system whose only
defence is its check controller", so ``disarm_choke_point`` removes exactly that numbering and those
judgements, and nothing else.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from agent.constants import RENEW_PERIOD_SECONDS, RETRY_PERIOD_SECONDS
from agent.domain.admission_check import active_patch
from agent.domain.workload import KUEUE_API_VERSION, READY, check_state_apply, owner_trainjob, waiting_reason
from agent.runtime.leader import Kind, plan
from contract.admission import admission_count, admission_floor, raise_admission
from contract.errors import ContractError
from contract.keys import LEASE_NAME, LEASE_NAMESPACE
from contract.objects import dig, micro_time
from contract.ownership import is_dispatch
from contract.upstream import TRAINER_API_VERSION
from harness.kube_http import ApiError, KubeHttp
from harness.tier_b import HARNESS_POLICY_PREFIX
from webhook.config import DEFAULT_DISPATCH_USERNAME
from webhook.configurations import NAME, UNSUSPENDS, webhook_configurations
from webhook.configurations import RECORD_START as CONFIG_RECORD_START
from webhook.rules.jobs import JOB_RESUME
from webhook.rules.record_start import RECORD_START
from webhook.rules.unsuspend import START_APPROVAL, UNSUSPEND

log = logging.getLogger(__name__)

IDENTITY: Final = "naive-check-controller"
"""Its holder identity in the Lease, and its field manager."""
MESSAGE: Final = "naive check controller: Ready at once (A not raised, the previous execution's pods not awaited)"
FIRST_RAISE_MESSAGE: Final = "naive check controller: A raised to 1 for the first admission, then Ready"
ADMISSION_V: Final = "admissionregistration.k8s.io/v1"
SKIP_UNSUSPENDS: Final = "naive-arm-skips-unsuspends"
"""The matchCondition that stops the API server sending the webhook the updates that unsuspend a TrainJob."""
JSON_PATCH: Final = "application/json-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"


# -- the decisions, pure ----------------------------------------------------------------------------


def lease_body(
    lease: Mapping[str, Any] | None, *, namespace: str, name: str, identity: str, now: str
) -> tuple[bool, dict[str, Any]]:
    """(create?, body) that makes ``identity`` hold the Lease from ``now``, whoever holds it: the agent's own
    record format (agent/runtime/leader.py ``plan``, with the holder judged expired), the Lease as read otherwise (its
    annotations, the Preflight verdicts, kept; its resourceVersion, the PUT's precondition, kept)."""
    step = plan(lease, namespace=namespace, name=name, identity=identity, now=now, expired=True)
    body = dict(step.body or {})
    meta = dict(body.get("metadata") or {})
    meta.pop("managedFields", None)
    body["metadata"] = meta
    return step.kind is Kind.CREATE, body


def approval(workload: Mapping[str, Any], check: str, now: str, message: str = MESSAGE) -> dict[str, Any] | None:
    """The server-side apply body for ``workloads/status`` that sets ``check`` Ready, or None when the check is
    not the controller's to decide now (absent, not Pending, quota not reserved, evicted, finished, inactive:
    the real gate's step 0). Only that entry is applied (the list is a map keyed by name: the other entries are
    left to their managers); it is preconditioned on the Workload's resourceVersion as read."""
    if waiting_reason(workload, check) is not None:
        return None
    return check_state_apply(workload, check, READY, message, now)


def first_raise(trainjob: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """The JSON Patch raising A from 0 to 1 on a dispatch TrainJob never raised (A = 0 and no floor), or None:
    not dispatch's, already raised, or not raisable (contract/admission.py says why; the caller approves
    anyway and the execution runs with the A it has)."""
    if not is_dispatch(trainjob):
        return None
    try:
        if admission_floor(trainjob) is not None or admission_count(trainjob) != 0:
            return None
        return raise_admission(trainjob).patch
    except ContractError:
        return None


def trainjob_updates_webhook() -> str:
    """The name of dispatch's validating webhook that judges TrainJob updates (`update.unsuspend` among them)."""
    (validating,) = [c for c in webhook_configurations(namespace=NAME) if c["kind"] == "ValidatingWebhookConfiguration"]
    (name,) = [
        h["name"]
        for h in validating["webhooks"]
        if any("trainjobs" in r["resources"] and "UPDATE" in r["operations"] for r in h["rules"])
    ]
    return str(name)


def skip_unsuspends_patch(config: Mapping[str, Any], webhook: str) -> list[dict[str, Any]] | None:
    """The JSON Patch that adds to ``webhook`` in ``config`` a matchCondition excluding the updates that
    unsuspend (the writes `update.unsuspend` judges), or None when it has no such webhook or has it already.
    The webhook goes on judging every other TrainJob update."""
    for i, hook in enumerate(config.get("webhooks") or []):
        if hook.get("name") != webhook:
            continue
        conditions = hook.get("matchConditions") or []
        if any(c.get("name") == SKIP_UNSUSPENDS for c in conditions):
            return None
        condition = {"name": SKIP_UNSUSPENDS, "expression": f"!({UNSUSPENDS})"}
        add = (
            {"op": "add", "path": f"/webhooks/{i}/matchConditions/{len(conditions)}", "value": condition}
            if conditions
            else {"op": "add", "path": f"/webhooks/{i}/matchConditions", "value": [condition]}
        )
        return [
            {"op": "test", "path": "/metadata/uid", "value": dig(config, "metadata", "uid")},
            {"op": "test", "path": f"/webhooks/{i}/name", "value": webhook},
            add,
        ]
    return None


# -- the shell ----------------------------------------------------------------------------------------


def _now() -> str:
    return micro_time(dt.datetime.now(dt.UTC))


class NaiveGate:
    """Serves ``check`` naively (module doc). ``take_over`` once, then ``run`` in a thread."""

    def __init__(
        self,
        admin: KubeHttp,
        *,
        check: str,
        namespace: str = LEASE_NAMESPACE,
        lease: str = LEASE_NAME,
        identity: str = IDENTITY,
        as_user: str | None = DEFAULT_DISPATCH_USERNAME,
        first_raise: bool = True,
        interval: float = 0.5,
        renew_every: float = RETRY_PERIOD_SECONDS,
    ) -> None:
        """``admin`` may impersonate; the controller acts as ``as_user`` (dispatch's principal; None: as
        ``admin`` itself, whose writes of dispatch's check the policies then refuse unless it is dispatch).
        ``interval``: how often it lists the Workloads; ``renew_every``: the Lease's renewals."""
        self.check, self.namespace, self.lease, self.identity = check, namespace, lease, identity
        self.kube = admin if as_user is None else KubeHttp(admin.credentials, timeout=10.0, impersonate=(as_user, None))
        self.raise_first, self.interval, self.renew_every = first_raise, interval, renew_every
        self.previous_holder = ""
        self._held: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._approvals = 0
        self._raises = 0
        self.errors: list[str] = []
        """The last failures (capped), for a report."""

    def approvals(self) -> int:
        with self._lock:
            return self._approvals

    def raises(self) -> int:
        """First raises of A made (0 -> 1)."""
        with self._lock:
            return self._raises

    # -- the Lease ----------------------------------------------------------------------------------

    def _lease_path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    def _write_lease(self, lease: Mapping[str, Any] | None) -> dict[str, Any]:
        create, body = lease_body(lease, namespace=self.namespace, name=self.lease, identity=self.identity,
                                  now=_now())  # fmt: skip
        query = {"fieldManager": self.identity}
        if create:
            return self.kube.request("POST", self._lease_path(), body, query=query)
        return self.kube.request("PUT", f"{self._lease_path()}/{self.lease}", body, query=query)

    def _read_lease(self) -> dict[str, Any] | None:
        try:
            return self.kube.request("GET", f"{self._lease_path()}/{self.lease}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def take_over(self, timeout: float, *, settle: float = RENEW_PERIOD_SECONDS + 1.0) -> None:
        """Makes this controller the Lease's holder, then keeps it for ``settle`` seconds: the agent's leader
        tries again within its renew period, finds another holder renewing it, and stops serving the gate. So
        when this returns the real gate has stopped (with the agent's default timings). Each write is a PUT of
        the Lease as read (a create when absent): a 409 means someone wrote it meanwhile; it reads again."""
        deadline = time.monotonic() + timeout
        while True:
            lease = self._read_lease()
            try:
                self._held = self._write_lease(lease)
                break
            except ApiError as exc:
                if exc.status not in (409, 404) or time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
        self.previous_holder = str(dig(lease, "spec", "holderIdentity") or "")
        log.info("took Lease %s/%s from %r", self.namespace, self.lease, self.previous_holder)
        until = time.monotonic() + settle
        while time.monotonic() < until:
            time.sleep(min(self.renew_every, max(0.0, until - time.monotonic())))
            self.renew()

    def renew(self) -> None:
        """One renewal: a PUT of the Lease last written (one request); on a conflict, of the Lease read afresh
        (a Preflight recording its verdict, or an agent that judged it expired and took it: taken back)."""
        try:
            self._held = self._write_lease(self._held)
        except ApiError as exc:
            if exc.status not in (409, 404):
                raise
            fresh = self._read_lease()
            holder = dig(fresh, "spec", "holderIdentity")
            if holder and holder != self.identity:
                log.warning("Lease %s/%s was taken by %r: taking it back", self.namespace, self.lease, holder)
            self._held = self._write_lease(fresh)

    # -- the check --------------------------------------------------------------------------------

    def keep_active(self) -> None:
        """The AdmissionCheck's Active condition True (Kueue stops the ClusterQueues of an inactive check); the
        agent's JSON Patch, pinned to the check's uid and controllerName."""
        base = f"/apis/{KUEUE_API_VERSION}/admissionchecks"
        found = self.kube.request("GET", base, query={"fieldSelector": f"metadata.name={self.check}"})["items"]
        ops = active_patch(found[0], _now()) if found else None
        if ops:
            self.kube.request("PATCH", f"{base}/{self.check}/status", ops, query={"fieldManager": self.identity},
                              content_type=JSON_PATCH)  # fmt: skip

    def sweep(self) -> int:
        """One pass over every Workload: approves each that is due; returns how many it approved."""
        approved = 0
        for workload in self.kube.request("GET", f"/apis/{KUEUE_API_VERSION}/workloads")["items"]:
            if approval(workload, self.check, _now()) is None:
                continue
            try:
                approved += self._approve(workload)
            except ApiError as exc:
                # 409: the Workload (or the TrainJob) changed since it was read; the next pass decides again.
                self._failed(f"{dig(workload, 'metadata', 'namespace')}/{dig(workload, 'metadata', 'name')}: {exc}")
        return approved

    def _approve(self, workload: Mapping[str, Any]) -> int:
        namespace, name = dig(workload, "metadata", "namespace"), dig(workload, "metadata", "name")
        message = MESSAGE
        owner = owner_trainjob(workload)
        if self.raise_first and owner is not None:
            trainjob = self._trainjob(namespace, owner[0])
            ops = (
                first_raise(trainjob) if trainjob is not None and dig(trainjob, "metadata", "uid") == owner[1] else None
            )
            if ops:
                self.kube.request("PATCH", self._trainjob_path(namespace, owner[0]), ops,
                                  query={"fieldManager": self.identity}, content_type=JSON_PATCH)  # fmt: skip
                with self._lock:
                    self._raises += 1
                message = FIRST_RAISE_MESSAGE
        body = approval(workload, self.check, _now(), message)
        if body is None:  # cannot happen: the read is the one sweep() judged due
            return 0
        path = f"/apis/{KUEUE_API_VERSION}/namespaces/{namespace}/workloads/{name}/status"
        self.kube.request("PATCH", path, body, query={"fieldManager": self.identity, "force": "true"},
                          content_type=APPLY_PATCH)  # fmt: skip
        with self._lock:
            self._approvals += 1
        log.info("%s/%s: check %s Ready (%s)", namespace, name, self.check, message)
        return 1

    def _trainjob_path(self, namespace: str, name: str) -> str:
        return f"/apis/{TRAINER_API_VERSION}/namespaces/{namespace}/trainjobs/{urllib.parse.quote(name)}"

    def _trainjob(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self.kube.request("GET", self._trainjob_path(namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _failed(self, what: str) -> None:
        log.warning("naive check controller: %s", what)
        self.errors = [*self.errors[-49:], what]

    def run(self, stop: threading.Event) -> None:
        """Until ``stop``: the Lease renewed and Active kept every ``renew_every`` seconds, the Workloads
        swept every ``interval``. Failures are logged and retried on the next round, never fatal."""
        next_renew = 0.0
        while not stop.is_set():
            if time.monotonic() >= next_renew:
                next_renew = time.monotonic() + self.renew_every
                for step in (self.renew, self.keep_active):
                    try:
                        step()
                    except (ApiError, OSError, ValueError) as exc:
                        self._failed(f"{step.__name__}: {exc}")
            try:
                self.sweep()
            except (ApiError, OSError, ValueError) as exc:
                self._failed(f"sweep: {exc}")
            stop.wait(self.interval)


def unbind(admin: KubeHttp, kind: str, name: str, removed: list[str]) -> None:
    """Deletes the binding ``name`` of ``kind`` (noted in ``removed``), or nothing when it is gone already."""
    try:
        admin.request("DELETE", f"/apis/{ADMISSION_V}/{kind.lower()}s/{name}")
        removed.append(f"{kind} {name}")
    except ApiError as exc:
        if exc.status != 404:
            raise


def is_disarmed(admin: KubeHttp, *, fullname: str = NAME) -> bool:
    """An earlier naive arm on this cluster disarmed the choke point already (``disarm_choke_point``): the
    unsuspend policy's binding is gone."""
    name = UNSUSPEND.replace(NAME, fullname, 1)
    return admin.get_or_none(ADMISSION_V, "ValidatingAdmissionPolicyBinding", name) is None


def disarm_choke_point(admin: KubeHttp, *, fullname: str = NAME) -> list[str]:
    """Removes what refuses Kueue's unsuspend of a dispatch TrainJob whose A did not rise since its last
    unsuspend, and the resume of its Jobs that follows, and nothing else; returns what it removed (empty when
    already done).

    * the ValidatingAdmissionPolicyBindings ``<fullname>-unsuspend`` and ``<fullname>-job-resume`` (the policies
      stay, unbound): the second refuses JobSet's resume of a Job under the A it ran with, so it alone would
      stop the naive controller's readmissions; and tier B's harness-wide ``dispatch-harness-start-approval``
      (the unsuspend policy's rule that a start carries the real gate's approval, which the naive controller
      never writes);
    * the webhook's `update.unsuspend`: a matchCondition on the validating webhook of TrainJob updates stops the
      API server sending it unsuspends (every other TrainJob update is still sent to it). Removing the whole
      webhook would be wider than needed.

    * the MutatingAdmissionPolicyBindings ``<fullname>-record-start`` and tier B's harness-wide
      ``dispatch-harness-record-start`` (harness/tier_b.py binds it for every namespace), and the mutating
      webhook's route of unsuspends where the API server has no MutatingAdmissionPolicy: in Kueue mode they
      raise A in the write that starts each execution, which is dispatch's numbering, not a check controller's.

    Left in place: every other policy, the owner policies among them."""
    removed: list[str] = []
    for prefix in (fullname, HARNESS_POLICY_PREFIX):
        unbind(admin, "MutatingAdmissionPolicyBinding", RECORD_START.replace(NAME, prefix, 1), removed)
    mutating = admin.get_or_none(ADMISSION_V, "MutatingWebhookConfiguration", fullname)
    for hook in (mutating or {}).get("webhooks") or []:
        if hook.get("name", "").startswith(f"{CONFIG_RECORD_START}."):
            ops = skip_unsuspends_patch(mutating, hook["name"])
            if ops:
                admin.request("PATCH", f"/apis/{ADMISSION_V}/mutatingwebhookconfigurations/{fullname}", ops,
                              content_type=JSON_PATCH)  # fmt: skip
                removed.append(f"MutatingWebhookConfiguration {fullname}: unsuspends no longer sent to {hook['name']}")
    for policy in (UNSUSPEND, JOB_RESUME):
        unbind(admin, "ValidatingAdmissionPolicyBinding", policy.replace(NAME, fullname, 1), removed)
    unbind(admin, "ValidatingAdmissionPolicyBinding", START_APPROVAL.replace(NAME, HARNESS_POLICY_PREFIX, 1), removed)
    config = admin.get_or_none(ADMISSION_V, "ValidatingWebhookConfiguration", fullname)
    webhook = trainjob_updates_webhook()
    ops = skip_unsuspends_patch(config, webhook) if config is not None else None
    if ops:
        admin.request("PATCH", f"/apis/{ADMISSION_V}/validatingwebhookconfigurations/{fullname}", ops,
                      content_type=JSON_PATCH)  # fmt: skip
        removed.append(f"ValidatingWebhookConfiguration {fullname}: unsuspends no longer sent to webhook {webhook}")
    return removed
