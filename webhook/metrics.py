"""The webhook's Prometheus metrics, kept in memory and written in the text exposition format by hand.

Two counters, one histogram and the certificate's expiry are all we expose; a client library would be a
dependency for a few dozen lines.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from typing import Final, Protocol

from webhook.review import Request, Verdict

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

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
        self.reviews: dict[tuple[str, str, str, str, str], int] = {}
        self.bad_requests: dict[tuple[str, str], int] = {}
        self._buckets: dict[str, list[int]] = {}
        self._sums: dict[str, float] = {}

    def observe_review(self, endpoint: str, request: Request, verdict: Verdict, seconds: float) -> None:
        key = (endpoint, request.resource, request.operation, _verdict(verdict), verdict.rule)
        if key not in self.reviews and len(self.reviews) >= MAX_REVIEW_SERIES:
            key = (endpoint, OTHER, request.operation, _verdict(verdict), verdict.rule)
        self.reviews[key] = self.reviews.get(key, 0) + 1
        buckets = self._buckets.setdefault(endpoint, [0] * (len(DURATION_BUCKETS) + 1))
        # Buckets are stored non-cumulative (one increment per observation) and summed when rendered.
        buckets[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        self._sums[endpoint] = self._sums.get(endpoint, 0.0) + seconds

    def count_bad_request(self, endpoint: str, code: int) -> None:
        key = (endpoint, str(code))
        self.bad_requests[key] = self.bad_requests.get(key, 0) + 1

    def render(self, certificate: CertificateState | None = None) -> str:
        lines = [
            "# HELP dispatch_webhook_reviews_total AdmissionReviews answered, by verdict and deciding rule.",
            "# TYPE dispatch_webhook_reviews_total counter",
        ]
        names = ("endpoint", "resource", "operation", "verdict", "rule")
        lines += [
            f"dispatch_webhook_reviews_total{_labels(zip(names, k, strict=True))} {v}" for k, v in self.reviews.items()
        ]
        lines += [
            "# HELP dispatch_webhook_review_duration_seconds Time from request to answer, lookups included.",
            "# TYPE dispatch_webhook_review_duration_seconds histogram",
        ]
        name = "dispatch_webhook_review_duration_seconds"
        for endpoint, counts in self._buckets.items():
            cumulative = 0
            for bound, count in zip((*DURATION_BUCKETS, math.inf), counts, strict=True):
                cumulative += count
                le = "+Inf" if bound == math.inf else repr(bound)
                lines.append(f"{name}_bucket{_labels([('endpoint', endpoint), ('le', le)])} {cumulative}")
            lines.append(f"{name}_sum{_labels([('endpoint', endpoint)])} {self._sums[endpoint]!r}")
            lines.append(f"{name}_count{_labels([('endpoint', endpoint)])} {cumulative}")
        lines += [
            "# HELP dispatch_webhook_bad_requests_total Requests refused with an HTTP error.",
            "# TYPE dispatch_webhook_bad_requests_total counter",
        ]
        lines += [
            f"dispatch_webhook_bad_requests_total{_labels([('endpoint', e), ('code', c)])} {v}"
            for (e, c), v in self.bad_requests.items()
        ]
        if certificate is not None:
            lines += [
                "# HELP dispatch_webhook_certificate_not_after_seconds Expiry of the served certificate.",
                "# TYPE dispatch_webhook_certificate_not_after_seconds gauge",
                f"dispatch_webhook_certificate_not_after_seconds {certificate.not_after_timestamp!r}",
                "# HELP dispatch_webhook_certificate_reloads_total Certificate changes seen, by result.",
                "# TYPE dispatch_webhook_certificate_reloads_total counter",
                f'dispatch_webhook_certificate_reloads_total{{result="loaded"}} {certificate.reloads}',
                f'dispatch_webhook_certificate_reloads_total{{result="kept_old"}} {certificate.failures}',
            ]
        return "\n".join(lines) + "\n"


def _verdict(verdict: Verdict) -> str:
    return "allowed" if verdict.allowed else "denied"


def _labels(pairs: Iterable[tuple[str, str]]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _escape(value: str) -> str:
    # The exposition format's escapes; lone surrogates (valid in a JSON string, not in UTF-8) are replaced
    # so that rendering can never fail.
    value = value.encode("utf-8", "replace").decode("utf-8")
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
