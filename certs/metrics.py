"""The certificate controller's Prometheus metrics, read from the controller at every scrape.

The expiry of the CA that signs and of the serving certificate in the Secret (what every replica serves
after its next reload), the passes that failed (a failed pass is a rotation or an injection not done), the
Secret writes and injections done, and readiness. The registry carries the process's own metrics too
(serving/prometheus.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from certs.controller import CertController
from serving.prometheus import registry


class CertsCollector(Collector):
    def __init__(self, controller: CertController) -> None:
        self.controller = controller

    def collect(self) -> Iterable[Metric]:
        c = self.controller
        material = c.material
        expiry = (
            ("ca", "the CA that signs the serving certificate", material.ca if material else None),
            ("serving", "the serving certificate in the Secret", material.serving if material else None),
        )
        for name, what, keyed in expiry:
            family = GaugeMetricFamily(
                f"dispatch_certs_{name}_expiration_timestamp_seconds",
                f"When {what} expires (Unix seconds); absent until the controller has read the Secret.",
            )
            if keyed is not None:
                family.add_metric((), keyed.cert.not_valid_after_utc.timestamp())
            yield family
        counters = (
            (
                "pass_failures",
                "Passes that failed (an API error or a conflict retried out): nothing rotated.",
                c.stats.failures,
            ),
            ("passes", "Passes over the Secret and the webhook configurations.", c.stats.passes),
            ("secret_writes", "Writes of the Secret: a fill, a renewal or a CA rotation step.", c.stats.secret_writes),
            ("injections", "Writes of the CA bundle into a webhook configuration.", c.stats.injections),
            (
                "write_conflicts",
                "Writes refused because another replica wrote first (then re-read).",
                c.stats.conflicts,
            ),
        )
        for name, help_text, value in counters:
            yield CounterMetricFamily(f"dispatch_certs_{name}", help_text, value=value)
        yield GaugeMetricFamily(
            "dispatch_certs_ready",
            "1 while the serving certificate is written and the CA bundle injected (the container's /readyz).",
            value=1 if c.readiness.check()[0] else 0,
        )


def certs_registry(controller: CertController) -> CollectorRegistry:
    reg = registry("certs")
    reg.register(CertsCollector(controller))
    return reg
