"""Prometheus metrics with ``prometheus_client``, one registry per server.

Each server (the webhook, the agent with its API, the certificate controller) builds one ``registry`` and
registers its own metrics in it; the registry already carries the process's ``process_*`` (memory, CPU,
open files, start time), the Python runtime's ``python_*`` and ``dispatch_build_info``. Nothing goes into
the library's global registry, so two servers in one test process never see each other's samples.

The small wrappers below keep the call sites short (``inc("raise")`` instead of
``.labels("raise").inc()``) and let tests read a sample without parsing text.
"""

from __future__ import annotations

import platform
from collections.abc import Iterable, Sequence
from typing import Final, Protocol

import prometheus_client
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from serving.version import version

# The ``*_created`` series double every counter and histogram and nobody queries them (cert-manager and
# controller-runtime expose none either). Process-wide, before any metric exists.
prometheus_client.disable_created_metrics()

CONTENT_TYPE: Final = prometheus_client.CONTENT_TYPE_PLAIN_0_0_4
"""What ``exposition`` writes: the text format every Prometheus reads."""

LabelValues = tuple[str, ...]


def registry(component: str) -> CollectorRegistry:
    """A fresh registry with the process, runtime and build metrics of ``component`` (webhook, agent, certs)."""
    reg = CollectorRegistry()
    prometheus_client.ProcessCollector(registry=reg)
    prometheus_client.PlatformCollector(registry=reg)
    prometheus_client.GCCollector(registry=reg)
    build = prometheus_client.Gauge(
        "dispatch_build_info",
        "Always 1: the component, the version of dispatch-k8s and the Python running it.",
        ("component", "version", "python_version"),
        registry=reg,
    )
    build.labels(component, version(), platform.python_version()).set(1)
    return reg


def exposition(reg: CollectorRegistry) -> bytes:
    """The registry's samples in the text format (``CONTENT_TYPE``)."""
    return prometheus_client.generate_latest(reg)


class _Wrapped:
    def __init__(self, metric: prometheus_client.Counter | prometheus_client.Gauge | prometheus_client.Histogram):
        self._metric = metric
        self.labelnames: tuple[str, ...] = tuple(metric._labelnames)

    def _child(self, labels: Sequence[str]):  # type: ignore[no-untyped-def]
        if len(labels) != len(self.labelnames):
            raise ValueError(f"{self._metric._name} takes labels {self.labelnames}, got {tuple(labels)}")
        # A lone surrogate (valid in a JSON string, from a request) is not UTF-8: replaced, so that the
        # exposition can never fail.
        return (
            self._metric.labels(*(v.encode("utf-8", "replace").decode("utf-8") for v in labels))
            if labels
            else self._metric
        )

    def samples(self, suffix: str = "") -> dict[LabelValues, float]:
        """Label values -> value of every sample named ``<name><suffix>`` (tests, bounded-label checks)."""
        out: dict[LabelValues, float] = {}
        for family in self._metric.collect():
            for s in family.samples:  # a counter's family is named without _total, its samples with
                if s.name == family.name + suffix or (suffix == "" and s.name == family.name + "_total"):
                    out[tuple(s.labels[n] for n in self.labelnames)] = s.value
        return out


class Counter(_Wrapped):
    def __init__(self, reg: CollectorRegistry, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(prometheus_client.Counter(name, help_text, labelnames, registry=reg))

    def inc(self, *labels: str, amount: float = 1) -> None:
        self._child(labels).inc(amount)


class Gauge(_Wrapped):
    def __init__(self, reg: CollectorRegistry, name: str, help_text: str, labelnames: Sequence[str] = ()) -> None:
        super().__init__(prometheus_client.Gauge(name, help_text, labelnames, registry=reg))

    def set(self, value: float, *labels: str) -> None:
        self._child(labels).set(value)


class Histogram(_Wrapped):
    def __init__(
        self,
        reg: CollectorRegistry,
        name: str,
        help_text: str,
        buckets: Sequence[float],
        labelnames: Sequence[str] = (),
    ) -> None:
        super().__init__(prometheus_client.Histogram(name, help_text, labelnames, buckets=buckets, registry=reg))

    def observe(self, value: float, *labels: str) -> None:
        self._child(labels).observe(value)

    def count(self, *labels: str) -> float:
        return self.samples("_count").get(tuple(labels), 0.0)


class CertificateState(Protocol):
    """What a server knows of the certificate it serves (serving.tls.ReloadingServerContext)."""

    reloads: int
    failures: int

    @property
    def not_after_timestamp(self) -> float: ...


class CertificateCollector(Collector):
    """``<prefix>_certificate_expiration_timestamp_seconds`` and ``<prefix>_certificate_reloads_total``, read
    from the served certificate at every scrape (the reloader keeps the counts; nothing is copied)."""

    def __init__(self, prefix: str, state: CertificateState | None = None) -> None:
        self.prefix = prefix
        self.state = state

    def collect(self) -> Iterable[Metric]:
        state = self.state
        if state is None:
            return
        yield GaugeMetricFamily(
            f"{self.prefix}_certificate_expiration_timestamp_seconds",
            "When the served certificate expires (Unix seconds).",
            value=state.not_after_timestamp,
        )
        reloads = CounterMetricFamily(
            f"{self.prefix}_certificate_reloads",
            "Certificate changes seen on disk, by result: loaded, or kept_old when the new pair was unusable.",
            labels=("result",),
        )
        reloads.add_metric(("loaded",), state.reloads)
        reloads.add_metric(("kept_old",), state.failures)
        yield reloads
