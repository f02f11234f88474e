"""Pure pieces of the shell: the lookup budget, durations, the metrics text."""

from __future__ import annotations

import dataclasses

import pytest

from serving.flags import parse_duration
from tests.webhook.conftest import admission_review
from tests.webhook.test_protocol import parse_exposition
from webhook import metrics as metrics_module
from webhook.metrics import Metrics
from webhook.review import Verdict, parse_review
from webhook.server import LOOKUP_TIMEOUT, lookup_budget


@pytest.mark.parametrize(
    ("timeout", "budget"),
    [(None, LOOKUP_TIMEOUT), ("5s", LOOKUP_TIMEOUT), ("2s", 1.6), ("500ms", 0.4), ("1m0s", LOOKUP_TIMEOUT),
     ("1.5s", 1.2), ("bogus", LOOKUP_TIMEOUT), ("5", LOOKUP_TIMEOUT), ("", LOOKUP_TIMEOUT)],
)  # fmt: skip
def test_lookup_budget_is_most_of_the_api_servers_timeout(timeout: str | None, budget: float):
    assert lookup_budget(timeout) == pytest.approx(budget)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0s", 0.0), ("5s", 5.0), ("1m30s", 90.0), ("250ms", 0.25), ("1h", 3600.0), ("2.5s", 2.5),
     ("10", None), ("s", None), ("-1s", None), ("5 s", None), ("5sx", None)],
)  # fmt: skip
def test_parse_duration(text: str, seconds: float | None):
    assert parse_duration(text) == seconds


def test_metrics_render_empty_is_parseable():
    samples = parse_exposition(Metrics().render())
    assert not [name for name, _ in samples if name.startswith("dispatch_webhook_")]  # no review yet, no cert
    assert "process_resident_memory_bytes" in {name for name, _ in samples}


def test_label_values_are_escaped_and_never_break_rendering():
    request = dataclasses.replace(parse_review(admission_review()), resource='we"ird\\\nname\ud800')
    metrics = Metrics()
    metrics.observe_review("validate", request, Verdict.allow(), 0.001)
    samples = parse_exposition(metrics.render())
    (resource,) = {dict(labels)["resource"] for (name, labels) in samples if name.endswith("reviews_total")}
    assert resource == 'we\\"ird\\\\\\nname?'


def test_series_from_request_values_are_capped(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(metrics_module, "MAX_REVIEW_SERIES", 3)
    base = parse_review(admission_review())
    metrics = Metrics()
    for i in range(10):
        metrics.observe_review("validate", dataclasses.replace(base, resource=f"r{i}"), Verdict.allow(), 0.001)
    assert sorted(k[1] for k in metrics.reviews) == ["other", "r0", "r1", "r2"]
    assert metrics.reviews["validate", "other", "CREATE", "allowed", "allow"] == 7


def test_histogram_buckets_bound_from_above():
    metrics = Metrics()
    request = parse_review(admission_review())
    for seconds in (0.0005, 0.0006, 7.0):
        metrics.observe_review("validate", request, Verdict.allow(), seconds)
    samples = parse_exposition(metrics.render())

    def bucket(le: str) -> float:
        return samples[
            "dispatch_webhook_review_duration_seconds_bucket", frozenset({("endpoint", "validate"), ("le", le)})
        ]

    assert (bucket("0.0005"), bucket("0.001"), bucket("5.0"), bucket("+Inf")) == (1, 2, 2, 3)
