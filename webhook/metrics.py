"""The webhook's Prometheus metrics: reviews by verdict, their latency, bad requests and the certificate.

The registry (with the process's own metrics) and the wrappers are serving/prometheus.py.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry

from serving.prometheus import (
    CONTENT_TYPE,
    CertificateCollector,
    CertificateState,
    Counter,
    Histogram,
    LabelValues,
    exposition,
    registry,
)
from webhook.review import Request, Verdict

__all__ = ["CONTENT_TYPE", "DURATION_BUCKETS", "MAX_REVIEW_SERIES", "OTHER", "CertificateState", "Metrics"]

DURATION_BUCKETS: Final = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
"""Seconds. A review takes well under a millisecond of CPU; a runtime lookup adds an API round trip; the
API server gives up at the webhook's timeoutSeconds (5 at most)."""

MAX_REVIEW_SERIES: Final = 1000
"""Label values come from the request, and anyone who can reach the port can send a review: past this many
series, new ones are folded into resource="other" so memory and scrape size stay bounded."""

OTHER: Final = "other"


class Metrics:
    def __init__(self, reg: CollectorRegistry | None = None) -> None:
        self.registry = reg if reg is not None else registry("webhook")
        r = self.registry
        self._reviews = Counter(
            r,
            "dispatch_webhook_reviews_total",
            "AdmissionReviews answered, by verdict and deciding rule.",
            ("endpoint", "resource", "operation", "verdict", "rule"),
        )
        self._series: set[LabelValues] = set()
        self._duration = Histogram(
            r,
            "dispatch_webhook_review_duration_seconds",
            "Time from request to answer, lookups included.",
            DURATION_BUCKETS,
            ("endpoint",),
        )
        self._bad_requests = Counter(
            r, "dispatch_webhook_bad_requests_total", "Requests refused with an HTTP error.", ("endpoint", "code")
        )
        self._lookups = Counter(
            r,
            "dispatch_webhook_runtime_lookups_total",
            "Runtime copies looked up, by where the answer came from: memory (the watch) or api (a GET).",
            ("source",),
        )
        self._certificate = CertificateCollector("dispatch_webhook")
        r.register(self._certificate)

    @property
    def reviews(self) -> dict[LabelValues, float]:
        return self._reviews.samples()

    @property
    def bad_requests(self) -> dict[LabelValues, float]:
        return self._bad_requests.samples()

    def observe_review(self, endpoint: str, request: Request, verdict: Verdict, seconds: float) -> None:
        key = (endpoint, request.resource, request.operation, _verdict(verdict), verdict.rule)
        if key not in self._series:
            if len(self._series) >= MAX_REVIEW_SERIES:
                key = (endpoint, OTHER, request.operation, _verdict(verdict), verdict.rule)
            self._series.add(key)
        self._reviews.inc(*key)
        self._duration.observe(seconds, endpoint)

    @property
    def lookups(self) -> dict[LabelValues, float]:
        return self._lookups.samples()

    def count_lookup(self, source: str) -> None:
        self._lookups.inc(source)

    def count_bad_request(self, endpoint: str, code: int) -> None:
        self._bad_requests.inc(endpoint, str(code))

    def render(self, certificate: CertificateState | None = None) -> str:
        """The exposition text; with ``certificate``, its expiry and reload counts from now on."""
        if certificate is not None:
            self._certificate.state = certificate
        return exposition(self.registry).decode()


def _verdict(verdict: Verdict) -> str:
    return "allowed" if verdict.allowed else "denied"
