"""The webhook's Prometheus metrics: reviews by verdict, their latency, bad requests and the certificate.

The primitives and the exposition format are serving/prometheus.py, shared with the agent.
"""

from __future__ import annotations

from typing import Final, Protocol

from serving.prometheus import CONTENT_TYPE, Counter, Gauge, Histogram, LabelValues, render
from webhook.review import Request, Verdict

__all__ = ["CONTENT_TYPE", "DURATION_BUCKETS", "MAX_REVIEW_SERIES", "OTHER", "CertificateState", "Metrics"]

DURATION_BUCKETS: Final = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Seconds. A review takes well under a millisecond of CPU; a runtime lookup adds an API round trip; the
API server gives up at the webhook's timeoutSeconds (5 at most)."""

MAX_REVIEW_SERIES: Final = 1000
"""Label values come from the request, and anyone who can reach the port can send a review: past this many
series, new ones are folded into resource="other" so memory and scrape size stay bounded."""

OTHER: Final = "other"


class CertificateState(Protocol):
    reloads: int
    failures: int

    @property
    def not_after_timestamp(self) -> float: ...


class Metrics:
    def __init__(self) -> None:
        self._reviews = Counter(
            "dispatch_webhook_reviews_total",
            "AdmissionReviews answered, by verdict and deciding rule.",
            ("endpoint", "resource", "operation", "verdict", "rule"),
        )
        self._duration = Histogram(
            "dispatch_webhook_review_duration_seconds",
            "Time from request to answer, lookups included.",
            DURATION_BUCKETS,
            ("endpoint",),
        )
        self._bad_requests = Counter(
            "dispatch_webhook_bad_requests_total", "Requests refused with an HTTP error.", ("endpoint", "code")
        )
        self._not_after = Gauge("dispatch_webhook_certificate_not_after_seconds", "Expiry of the served certificate.")
        self._reloads = Counter(
            "dispatch_webhook_certificate_reloads_total", "Certificate changes seen, by result.", ("result",)
        )

    @property
    def reviews(self) -> dict[LabelValues, int | float]:
        return self._reviews.samples

    @property
    def bad_requests(self) -> dict[LabelValues, int | float]:
        return self._bad_requests.samples

    def observe_review(self, endpoint: str, request: Request, verdict: Verdict, seconds: float) -> None:
        key = (endpoint, request.resource, request.operation, _verdict(verdict), verdict.rule)
        if key not in self.reviews and len(self.reviews) >= MAX_REVIEW_SERIES:
            key = (endpoint, OTHER, request.operation, _verdict(verdict), verdict.rule)
        self._reviews.inc(*key)
        self._duration.observe(seconds, endpoint)

    def count_bad_request(self, endpoint: str, code: int) -> None:
        self._bad_requests.inc(endpoint, str(code))

    def render(self, certificate: CertificateState | None = None) -> str:
        metrics = [self._reviews, self._duration, self._bad_requests]
        if certificate is not None:
            self._not_after.set(certificate.not_after_timestamp)
            self._reloads.set_total(certificate.reloads, "loaded")
            self._reloads.set_total(certificate.failures, "kept_old")
            metrics += [self._not_after, self._reloads]
        return render(metrics)


def _verdict(verdict: Verdict) -> str:
    return "allowed" if verdict.allowed else "denied"
