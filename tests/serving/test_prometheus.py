"""serving/prometheus.py: one registry per server on prometheus_client, with the process's metrics."""

from __future__ import annotations

import platform

import pytest

from serving.prometheus import CertificateCollector, Counter, Gauge, Histogram, exposition, registry, version
from tests.webhook.test_protocol import parse_exposition


def test_the_wrappers_render_parseable_text():
    reg = registry("test")
    c = Counter(reg, "c_total", "A counter.", ("a",))
    c.inc("x")
    c.inc("x", amount=2)
    g = Gauge(reg, "g", "A gauge.")
    g.set(1.5)
    h = Histogram(reg, "h_seconds", "A histogram.", (0.1, 1.0), ("r",))
    for v in (0.05, 0.1, 0.5, 3.0):
        h.observe(v, "ok")
    samples = parse_exposition(exposition(reg).decode())
    assert samples["c_total", frozenset({("a", "x")})] == 3
    assert c.samples() == {("x",): 3}
    assert samples["g", frozenset()] == 1.5
    bucket = {dict(k[1])["le"]: v for k, v in samples.items() if k[0] == "h_seconds_bucket"}
    assert bucket == {"0.1": 2, "1.0": 3, "+Inf": 4}
    assert samples["h_seconds_count", frozenset({("r", "ok")})] == 4
    assert h.count("ok") == 4
    assert h.count("other") == 0


def test_a_registry_has_the_process_runtime_and_build_metrics_and_no_created_series():
    samples = parse_exposition(exposition(registry("webhook")).decode())
    names = {name for name, _ in samples}
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_open_fds",
                 "process_max_fds", "process_start_time_seconds", "python_info", "python_gc_collections_total"):  # fmt: skip
        assert name in names
    build = {"component": "webhook", "version": version(), "python_version": platform.python_version()}
    assert samples["dispatch_build_info", frozenset(build.items())] == 1
    assert version() != "unknown"  # installed: the version is pyproject.toml's
    counted = registry("x")
    Counter(counted, "c_total", "A counter.").inc()
    Histogram(counted, "h_seconds", "A histogram.", (1.0,)).observe(0.5)
    assert not [line for line in exposition(counted).decode().splitlines() if "_created" in line]


def test_registries_are_separate():
    one, two = registry("a"), registry("b")
    Counter(one, "c_total", "A counter.").inc()
    Counter(two, "c_total", "A counter.")  # the same name in another registry is another metric
    assert parse_exposition(exposition(two).decode())["c_total", frozenset()] == 0


def test_the_wrong_labels_and_bad_buckets_are_refused():
    reg = registry("test")
    with pytest.raises(ValueError, match="takes labels"):
        Counter(reg, "c_total", "A counter.", ("a",)).inc()
    with pytest.raises(ValueError, match="sorted"):
        Histogram(reg, "h", "H.", (1.0, 0.5))


class _Served:
    reloads, failures, not_after_timestamp = 2, 1, 1_900_000_000.0


def test_the_certificate_collector_reads_the_served_certificate_at_each_scrape():
    reg = registry("test")
    collector = CertificateCollector("dispatch_x")
    reg.register(collector)
    assert "certificate" not in exposition(reg).decode()  # nothing served yet: no series
    collector.state = _Served()
    samples = parse_exposition(exposition(reg).decode())
    assert samples["dispatch_x_certificate_expiration_timestamp_seconds", frozenset()] == 1_900_000_000
    assert samples["dispatch_x_certificate_reloads_total", frozenset({("result", "loaded")})] == 2
    assert samples["dispatch_x_certificate_reloads_total", frozenset({("result", "kept_old")})] == 1
