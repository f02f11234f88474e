"""docs/metrics.md lists every metric the three servers and the API emit, and nothing they do not."""

from __future__ import annotations

import re
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from agent.api.app import ApiMetrics
from agent.runtime.metrics import AgentMetrics
from certs import contents, pki
from certs.controller import Readiness, Stats
from certs.metrics import certs_registry
from serving.prometheus import CertificateCollector
from tests.charts.helm import ROOT
from webhook.metrics import Metrics


class _Served:
    reloads, failures, not_after_timestamp = 0, 0, 1_900_000_000.0


def registries() -> dict[str, CollectorRegistry]:
    """Each server's registry as it is when everything it can show is there (a certificate served and read)."""
    agent = AgentMetrics()
    ApiMetrics(agent.registry)
    agent.registry.register(CertificateCollector("dispatch_api", _Served()))
    webhook = Metrics()
    webhook.render(_Served())
    ca = pki.make_ca("docs-ca")
    leaf = pki.make_serving_cert(ca, "docs", dns_names=["docs"])
    material = contents.Material(
        ca=contents.KeyedCert(ca.cert_pem, ca.key_pem), serving=contents.KeyedCert(leaf.cert_pem, leaf.key_pem)
    )
    controller = SimpleNamespace(material=material, stats=Stats(), readiness=Readiness())
    return {"agent": agent.registry, "webhook": webhook.registry, "certs": certs_registry(controller)}  # type: ignore[arg-type]


def emitted() -> set[str]:
    """The name of every metric family, as queried (a counter with its _total)."""
    return {
        family.name + ("_total" if family.type == "counter" else "")
        for reg in registries().values()
        for family in reg.collect()
    }


def test_every_metric_is_documented_and_every_documented_one_exists():
    docs = (ROOT / "docs" / "metrics.md").read_text()
    documented = set(re.findall(r"^\| `([a-z_]+)` \| (?:gauge|counter|histogram) \|", docs, re.MULTILINE))
    names = emitted()
    assert names - documented == set(), "emitted but not in docs/metrics.md"
    assert documented - names == set(), "in docs/metrics.md but emitted by no server"
