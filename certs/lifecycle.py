"""The certificate lifecycle as pure decisions: what the Secret should hold next, given what it holds now.

Everything here is a function of plain data (the Secret's bytes, whether our webhook configurations
carry the bundle, and the time) so every decision is tested with an injected clock and no cluster.
The only impure step is ``carry_out``, which draws new keys; the async shell (``certs.controller``)
reads, calls ``decide`` and ``carry_out``, and writes with resourceVersion preconditions.

The Secret (created empty by the chart, filled only by the certificate controller) holds:

- ``ca.crt``, ``ca.key``: the signing CA; it issued ``tls.crt``.
- ``tls.crt``, ``tls.key``: the serving certificate of the webhook and the agent API (the leaf alone).
- ``ca-next.crt``, ``ca-next.key``: a staged CA, already trusted (in the bundle), not yet signing.
- ``ca-previous.crt``: the CA before the last switch, still trusted during the overlap (its key is gone).

The trust bundle (the webhook configurations' ``caBundle``, and ``ca.crt`` in the served directory) is
previous + current + next, oldest first. It depends on the Secret alone, never on the time, so replicas
that read the same Secret inject byte-identical bundles and never fight over their order.

CA rotation, so that no client ever meets a certificate it does not trust:

1. *stage*: at 2/3 of the CA's life a new CA is added as ``ca-next``; the bundle now carries both.
2. *promote*: once every webhook configuration of ours carries that bundle, and it has been in the
   Secret ``settle`` long (the API servers' informers and the agent API's clients pick up the new bundle),
   the new CA becomes the signer, the old one moves to ``ca-previous``, and ``tls.crt`` is re-issued.
3. *drop*: ``overlap`` after that re-issue (every replica has long reloaded it), or once it expires, the
   previous CA leaves the bundle.
"""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final

from certs import pki
from certs.contents import (
    BACKDATE,
    CA_CERT,
    KEYS,
    TLS_CERT,
    TLS_KEY,
    KeyedCert,
    Material,
    expired,
    issued_at,
    renewal_due_at,
    sans,
    signed_by,
    trust_bundle,
)

# --- lifetimes --------------------------------------------------------------------------------------

CA_VALIDITY: Final = dt.timedelta(days=365)
"""A year (cert-manager's DynamicAuthority default): a CA key leaked from the Secret is useful for a year
at most, and the rotation path, with its bundle overlap, runs every eight months instead of once a decade,
so it is exercised while people still remember it."""

SERVING_VALIDITY: Final = dt.timedelta(days=90)
"""90 days, renewed after 60: the serving key is copied into every pod, so it lives shorter than the CA;
the 30 days of margin outlast any controller outage someone would not notice. 90 days also fits in the
third of the CA's life left after staging, so no serving certificate is ever cut short by its CA."""

RENEW_AT: Final = 2 / 3
"""Fraction of a certificate's life after which it is replaced (cert-manager, cert-controller)."""

SETTLE: Final = dt.timedelta(hours=1)
"""How long a staged CA sits in the bundle before it signs: far longer than the API servers need to see a
new caBundle (their informers take well under a second) and than clients of the agent API need to re-read
the bundle, which they should do at least hourly."""

OVERLAP: Final = dt.timedelta(hours=24)
"""How long the previous CA stays trusted after the switch: every replica reloads the new serving
certificate within seconds; a replica that has not done so after a day is unready (see Readiness) and
out of the Service. The previous CA's key is gone by then, so trusting its certificate a day longer
lets nobody sign anything new."""

CA_NAME: Final = "dispatch-k8s-ca"


@dataclass(frozen=True)
class Policy:
    """What the controller maintains: names on the serving certificate, and the lifetimes."""

    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = ()
    ca_validity: dt.timedelta = CA_VALIDITY
    serving_validity: dt.timedelta = SERVING_VALIDITY
    renew_at: float = RENEW_AT
    settle: dt.timedelta = SETTLE
    overlap: dt.timedelta = OVERLAP
    ca_name: str = CA_NAME

    def __post_init__(self) -> None:
        if not self.dns_names and not self.ip_addresses:
            raise ValueError("the serving certificate needs at least one DNS name or IP address")
        if not 0 < self.renew_at < 1:
            raise ValueError(f"renew_at must be between 0 and 1, not {self.renew_at}")
        zero = dt.timedelta(0)
        if min(self.ca_validity, self.serving_validity) <= zero or min(self.settle, self.overlap) < zero:
            raise ValueError("validities must be positive, settle and overlap not negative")
        # After staging, the old CA must outlive the settle, the switch and the overlap, or a rotation could
        # not complete before the old CA expires.
        left_after_staging = self.ca_validity * (1 - self.renew_at)
        if self.settle + self.overlap >= left_after_staging:
            raise ValueError(
                f"settle ({self.settle}) + overlap ({self.overlap}) must be shorter than the CA's life left "
                f"after staging ({left_after_staging})"
            )
        # The overlap counts from the serving certificate issued at the switch; it must end before that
        # certificate's renewal, which would start it again.
        if self.overlap >= self.serving_validity * self.renew_at:
            raise ValueError(
                f"overlap ({self.overlap}) must be shorter than the serving certificate's renewal interval "
                f"({self.serving_validity * self.renew_at})"
            )

    @property
    def common_name(self) -> str:
        # Clients match SANs, never the CN; the first name is the shortest (a CN is at most 64 characters).
        return self.dns_names[0] if self.dns_names else self.ip_addresses[0]


def service_dns_names(service: str, namespace: str, cluster_domain: str = "cluster.local") -> tuple[str, ...]:
    """The names a client in the cluster may use for the Service; the API server uses <svc>.<ns>.svc."""
    svc = f"{service}.{namespace}.svc"
    return (service, f"{service}.{namespace}", svc, f"{svc}.{cluster_domain}")


# --- the decision -----------------------------------------------------------------------------------


class Step(StrEnum):
    NEW_CA = "new-ca"
    """No usable CA (first start, expired, broken): make one and sign with it at once."""
    PROMOTE = "promote"
    """The staged CA becomes the signer; the current one becomes the previous."""
    STAGE = "stage"
    """A new CA joins the bundle, not yet signing."""
    DROP_PREVIOUS = "drop-previous"
    """The previous CA leaves the bundle."""
    ISSUE = "issue"
    """A new serving certificate from the (possibly new) signing CA."""


@dataclass(frozen=True)
class Plan:
    steps: tuple[tuple[Step, str], ...] = ()
    """Each step with why it is taken, in the order ``carry_out`` applies them."""

    def __bool__(self) -> bool:
        return bool(self.steps)

    def describe(self) -> str:
        return "; ".join(f"{step}: {why}" for step, why in self.steps) or "nothing to do"


def decide(material: Material, policy: Policy, now: dt.datetime, *, injected: bool) -> Plan:
    """What to change in the Secret now. ``injected``: every webhook configuration of ours carries
    ``trust_bundle(material)`` (vacuously true when there are none)."""
    steps: list[tuple[Step, str]] = []
    ca = material.ca if material.ca and not expired(material.ca.cert, now) else None
    staged = material.next_ca if material.next_ca and not expired(material.next_ca.cert, now) else None
    drop = _drop_previous(material, ca, policy, now)
    promoted = False

    if ca is None:
        why = "no CA" if material.ca is None else f"the CA expired at {material.ca.cert.not_valid_after_utc}"
        if staged is not None:
            # The staged CA is already in the bundle (perhaps injected), so it is the least disruptive signer.
            steps.append((Step.PROMOTE, f"{why}; the staged CA takes over at once"))
        else:
            steps.append((Step.NEW_CA, why))
        promoted = True
    elif staged is None:
        due = renewal_due_at(ca.cert, policy.renew_at)
        why = None
        if now >= due:
            why = f"the CA is past {policy.renew_at:.0%} of its life (since {due})"
        elif material.next_ca is not None:
            why = "the staged CA is expired; staging a fresh one"
        # One rotation at a time: a new CA is staged only once the previous one has left (or leaves now), so
        # a promotion never pushes out a previous CA before its overlap is over, whatever the lifetimes.
        if why and (material.previous_ca is None or drop):
            steps.append((Step.STAGE, why))
    else:
        ready_at = issued_at(staged.cert) + policy.settle
        if injected and now >= ready_at:
            steps.append((Step.PROMOTE, "the bundle with the staged CA is injected and has settled"))
            promoted = True

    if drop and not promoted:
        steps.append((Step.DROP_PREVIOUS, drop))

    if promoted:
        steps.append((Step.ISSUE, "the signing CA changed"))
    else:
        why = serving_problem(material, policy, now)
        if why:
            steps.append((Step.ISSUE, why))
    return Plan(tuple(steps))


def _drop_previous(material: Material, ca: KeyedCert | None, policy: Policy, now: dt.datetime) -> str | None:
    """Why the previous CA may leave the bundle now, or None."""
    if material.previous_ca is None:
        return None
    if expired(pki.load_certificate(material.previous_ca), now):
        return "the previous CA expired"
    serving = material.serving.cert if material.serving else None
    # The overlap counts from the serving certificate of the current CA (issued at the switch, or later:
    # a later one only lengthens the overlap, never shortens it).
    if ca is None or serving is None or not signed_by(serving, ca.cert):
        return None
    if now < issued_at(serving) + policy.overlap:
        return None
    return f"the overlap of {policy.overlap} after the switch is over"


def serving_problem(material: Material, policy: Policy, now: dt.datetime) -> str | None:
    """Why the serving certificate must be re-issued by the current CA, or None when it is fine."""
    if material.serving is None:
        return "no serving certificate"
    if material.ca is None:
        return "no CA"
    cert = material.serving.cert
    if not signed_by(cert, material.ca.cert):
        return "the serving certificate is not signed by the current CA"
    dns, ips = sans(cert)
    missing = sorted(set(policy.dns_names) - dns) + sorted(set(policy.ip_addresses) - ips)
    if missing:
        return f"the serving certificate lacks {', '.join(missing)}"
    if expired(cert, now):
        return f"the serving certificate expired at {cert.not_valid_after_utc}"
    due = renewal_due_at(cert, policy.renew_at)
    if now >= due:
        return f"the serving certificate is past {policy.renew_at:.0%} of its life (since {due})"
    return None


def next_decision_at(material: Material, policy: Policy, now: dt.datetime) -> dt.datetime | None:
    """The earliest later time at which ``decide`` may answer differently with the same Secret (the timer).
    Changes of the Secret or of the webhook configurations wake the controller through its watches."""
    times: list[dt.datetime] = []
    if material.ca:
        times += [renewal_due_at(material.ca.cert, policy.renew_at), material.ca.cert.not_valid_after_utc]
    if material.next_ca:
        times += [issued_at(material.next_ca.cert) + policy.settle, material.next_ca.cert.not_valid_after_utc]
    if material.previous_ca:
        times.append(pki.load_certificate(material.previous_ca).not_valid_after_utc)
        if material.serving:
            times.append(issued_at(material.serving.cert) + policy.overlap)
    if material.serving:
        times += [renewal_due_at(material.serving.cert, policy.renew_at), material.serving.cert.not_valid_after_utc]
    later = [t for t in times if t > now]
    return min(later) if later else None


# --- carrying the plan out (draws keys: the one impure step of the core) ----------------------------


def carry_out(material: Material, plan: Plan, policy: Policy, now: dt.datetime) -> Material:
    """The material after ``plan``'s steps, issuing certificates at ``now``."""
    m = replace(material, problems=())
    for step, _ in plan.steps:
        match step:
            case Step.NEW_CA:
                # Only when there is no usable CA at all (none, expired, or broken): what it signed cannot be
                # trusted any more, so there is nothing to overlap with.
                m = replace(m, ca=_new_ca(policy, now), next_ca=None)
            case Step.STAGE:
                m = replace(m, next_ca=_new_ca(policy, now))
            case Step.PROMOTE:
                assert m.next_ca is not None
                old = m.ca.cert_pem if m.ca and not expired(m.ca.cert, now) else m.previous_ca
                m = replace(m, ca=m.next_ca, next_ca=None, previous_ca=old)
            case Step.DROP_PREVIOUS:
                m = replace(m, previous_ca=None)
            case Step.ISSUE:
                assert m.ca is not None
                m = replace(m, serving=_new_serving(m.ca, material.serving, policy, now))
    return m


def _new_ca(policy: Policy, now: dt.datetime) -> KeyedCert:
    # A distinct name per CA (like kube's self-signed "name@timestamp") keeps the bundle readable.
    ca = pki.make_ca(
        f"{policy.ca_name}@{int(now.timestamp())}",
        organization="dispatch-k8s",
        validity=policy.ca_validity,
        now=now,
        backdate=BACKDATE,
    )
    return KeyedCert(ca.cert_pem, ca.key_pem)


def _new_serving(ca: KeyedCert, old: KeyedCert | None, policy: Policy, now: dt.datetime) -> KeyedCert:
    dns, ips = list(policy.dns_names), list(policy.ip_addresses)
    if old is not None and not expired(old.cert, now):
        # Keep the names the current certificate has: during a rolling upgrade that changes the Service,
        # old and new replicas want different names; the union satisfies both, so they do not re-issue
        # in turn. The next renewal by time drops names nobody wants any more.
        old_dns, old_ips = sans(old.cert)
        if not (set(dns) <= old_dns and set(ips) <= old_ips):
            dns += sorted(old_dns - set(dns))
            ips += sorted(old_ips - set(ips))
    leaf = pki.make_serving_cert(
        ca.certified_key(),
        policy.common_name,
        dns_names=dns,
        ip_addresses=ips,
        validity=policy.serving_validity,
        now=now,
        backdate=BACKDATE,
    )
    return KeyedCert(leaf.cert_pem, leaf.key_pem)


# --- the Secret write ---------------------------------------------------------------------------------


def secret_patch(resource_version: str, before: Mapping[str, bytes], after: Material) -> dict[str, Any]:
    """A JSON merge patch from ``before`` (the decoded data read) to ``after``, preconditioned on the
    resourceVersion read: a replica that lost a race gets 409 and re-reads what the winner wrote.

    Only our keys are touched (absent ones are deleted with null); anything else in the Secret stays."""
    wanted = after.data()
    data: dict[str, str | None] = {}
    for key in KEYS:
        if key in wanted:
            if before.get(key) != wanted[key]:
                data[key] = base64.b64encode(wanted[key]).decode()
        elif key in before:
            data[key] = None
    return {"metadata": {"resourceVersion": resource_version}, "data": data}


def served_files(material: Material) -> dict[str, bytes] | None:
    """What the servers read from the served directory, or None while there is no serving certificate."""
    if material.serving is None:
        return None
    return {TLS_CERT: material.serving.cert_pem, TLS_KEY: material.serving.key_pem, CA_CERT: trust_bundle(material)}
