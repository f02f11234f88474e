"""Readiness as the servers consult it: the certificate loaded and the CA injected, re-checked against the
clock at every probe."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from certs import contents
from certs import lifecycle as lc
from certs.controller import Readiness

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
POLICY = lc.Policy(dns_names=lc.service_dns_names("dispatch-k8s", "dispatch-system"))


def material() -> contents.Material:
    return lc.carry_out(contents.Material(), lc.decide(contents.Material(), POLICY, T0, injected=True), POLICY, T0)


def test_not_ready_until_told_then_ready_until_the_certificate_runs_out():
    now = [T0]
    readiness = Readiness(clock=lambda: now[0])
    assert readiness.check() == (False, "the certificate controller has not run yet")
    readiness.update(problem="the CA bundle is not injected into ValidatingWebhookConfiguration x yet")
    assert readiness.check()[0] is False
    m = material()
    readiness.update(problem=None, leaf=m.serving.cert_pem, bundle=contents.trust_bundle(m))
    assert readiness.check() == (True, "ok")
    # A controller cut off from the API server keeps its last answer, but not past the certificate's end.
    now[0] = m.serving.cert.not_valid_after_utc + dt.timedelta(seconds=1)
    assert readiness.check() == (False, "the serving certificate does not verify against the injected bundle now")


def test_in_process_servers_are_ready_only_once_their_tls_context_serves_the_certificate():
    m = material()
    served = ["sha256 of something older"]
    readiness = Readiness(served=lambda: served[0], clock=lambda: T0)
    readiness.update(problem=None, leaf=m.serving.cert_pem, bundle=contents.trust_bundle(m))
    assert readiness.check() == (False, "the server has not loaded the current serving certificate yet")
    served[0] = contents.fingerprint(m.serving.cert_pem)  # what ReloadingServerContext.info.sha256 reports
    assert readiness.check() == (True, "ok")


@pytest.mark.asyncio(loop_scope="function")
async def test_wait_ready_and_the_webhooks_readiness_signature():
    m = material()
    readiness = Readiness(clock=lambda: T0)
    waiter = asyncio.create_task(readiness.wait_ready())
    await asyncio.sleep(0)
    assert not waiter.done()
    readiness.update(problem=None, leaf=m.serving.cert_pem, bundle=contents.trust_bundle(m))
    await asyncio.wait_for(waiter, 1)
    assert await readiness() == (True, "ok")  # webhook.server.ReadinessCheck: () -> Awaitable[(bool, str)]


def test_a_replica_whose_controller_is_cut_off_turns_unready_before_the_previous_ca_can_leave():
    m = material()
    now = [T0]
    readiness = Readiness(clock=lambda: now[0], max_staleness=POLICY.overlap / 2)
    readiness.update(problem=None, leaf=m.serving.cert_pem, bundle=contents.trust_bundle(m))
    now[0] = T0 + POLICY.overlap / 2
    assert readiness.check() == (True, "ok")
    now[0] += dt.timedelta(seconds=1)
    ready, why = readiness.check()
    assert not ready
    assert why.startswith("no successful certificate pass since 2030-01-01T00:00:00")
