"""The shell's edges without a cluster: bad inputs exit non-zero naming the problem; the health endpoints."""

from __future__ import annotations

import pytest
from aiohttp.test_utils import TestClient, TestServer

from agent.api.app import ApiMetrics
from agent.cli import default_identity, main
from agent.domain.decide import Action
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HealthServer


def test_a_bad_config_exits_naming_the_key(tmp_path, capsys):
    path = tmp_path / "agent.yaml"
    path.write_text("nodeLossTaints: ['not a key']\n")
    assert main(["serve", "--config", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("dispatch-agent: config ")
    assert "nodeLossTaints" in err


def test_a_missing_kubeconfig_exits_naming_it(tmp_path, capsys):
    assert main(["serve", "--kubeconfig", str(tmp_path / "nope"), "--health-port", "0"]) == 1
    assert "cannot configure the Kubernetes client from" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flag",
    [["--workers", "0"], ["--health-port", "70000"], ["--workers", "two"], ["--shutdown-delay-duration", "5"]],
)
def test_a_flag_out_of_range_exits(capsys, flag):
    with pytest.raises(SystemExit) as exit_:
        main(["serve", *flag])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert flag[0] in err
    if flag[0] == "--shutdown-delay-duration":
        assert "not a duration like 5s or 1m30s: '5'" in err


def test_identities_differ_per_process(monkeypatch):
    monkeypatch.delenv("POD_NAME", raising=False)
    assert default_identity() != default_identity()
    monkeypatch.setenv("POD_NAME", "dispatch-admission-7d9f-abcde")
    assert default_identity() == "dispatch-admission-7d9f-abcde"


@pytest.mark.asyncio(loop_scope="function")
async def test_health_ready_and_metrics():
    state = {"ready": (False, "not listed yet: pods")}
    metrics = AgentMetrics()
    server = HealthServer(metrics.registry, lambda: state["ready"])
    async with TestClient(TestServer(server.app())) as client:
        assert (await client.get("/healthz")).status == 200
        response = await client.get("/readyz")
        assert (response.status, await response.text()) == (503, "not listed yet: pods")
        state["ready"] = (True, "ok (standby)")
        assert (await client.get("/readyz")).status == 200
        server.stopping = True
        assert (await client.get("/readyz")).status == 503
        metrics.decisions.inc(Action.ADMIT.value)
        response = await client.get("/metrics")
        assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        assert 'dispatch_agent_decisions_total{action="admit"} 1.0' in await response.text()


def test_the_tls_files_go_together(capsys, tmp_path):
    assert main(["serve", "--tls-cert-file", str(tmp_path / "tls.crt")]) == 2
    assert "--tls-cert-file and --tls-private-key-file go together" in capsys.readouterr().err


def test_the_operators_client_is_the_same_command(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["status", "--help"])
    assert exit_.value.code == 0
    assert "--server" in capsys.readouterr().out


@pytest.mark.asyncio(loop_scope="function")
async def test_the_apis_metrics_share_the_health_port():
    metrics = AgentMetrics()
    ApiMetrics(metrics.registry).requests.inc("status", "200")
    server = HealthServer(metrics.registry, lambda: (True, "ok"))
    async with TestClient(TestServer(server.app())) as client:
        text = await (await client.get("/metrics")).text()
    assert 'dispatch_api_requests_total{code="200",operation="status"} 1.0' in text
    assert text.count("# TYPE process_resident_memory_bytes ") == 1


@pytest.mark.cluster
def test_serve_with_tls_files_serves_the_supervisor_api_and_drains_it_on_sigterm(control_plane, tmp_path):
    import http.client
    import json
    import os
    import signal
    import ssl
    import sys
    import time

    from certs import pki
    from harness.cluster import free_port

    ca = pki.make_ca("agent-api-test")
    pair = pki.make_serving_cert(ca, "dispatch-agent", ip_addresses=["127.0.0.1"])
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    port = free_port()
    argv = [sys.executable, "-m", "agent", "serve", "--kubeconfig", control_plane.admin_kubeconfig,
            "--health-port", "0", "--bind-address", "127.0.0.1", "--api-port", str(port),
            "--tls-cert-file", tmp_path / "tls.crt", "--tls-private-key-file", tmp_path / "tls.key",
            "--shutdown-delay-duration", "3s"]  # fmt: skip
    name = f"agent-api-{port}"
    process = control_plane.supervisor.start(name, argv)
    context = ssl.create_default_context(cadata=ca.cert_pem.decode())

    def document(conn: http.client.HTTPSConnection) -> tuple[dict, str | None]:
        conn.request("GET", "/v1/openapi.json")
        answer = conn.getresponse()
        assert answer.status == 200, answer.status
        return json.loads(answer.read()), answer.getheader("Connection")

    try:
        deadline = time.monotonic() + 30
        kept = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        while True:
            try:
                served, connection = document(kept)
                break
            except OSError:
                assert time.monotonic() < deadline, control_plane.supervisor.get(name).describe_exit()
                kept.close()
                time.sleep(0.3)
        assert served["openapi"].startswith("3.")
        assert "/v1/start" in served["paths"]
        assert connection is None  # HTTP/1.1: kept alive for the next call

        # SIGTERM: the gate steps down at once, the API answers on for the delay, each answer closing its
        # connection, so a supervisor's kept-alive connection never meets the listener's close mid-call.
        os.kill(process.pid, signal.SIGTERM)
        signalled = time.monotonic()
        eventually = time.monotonic() + 2
        while "the API closes in" not in process.log_path.read_text():
            assert time.monotonic() < eventually, process.log_path.read_text()
            time.sleep(0.05)
        served, connection = document(kept)  # the connection opened before SIGTERM still answers
        assert (served["openapi"][:2], connection) == ("3.", "close")
        assert kept.sock is None, "the client kept a connection the answer said to close"
        fresh = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
        assert document(fresh)[1] == "close"  # a new connection, routed here before the Service updated
        assert process.popen.wait(15) == 0, process.describe_exit()
        assert time.monotonic() - signalled >= 3 - 0.5, "closed before the delay"
        assert "stopped" in process.log_path.read_text()
    finally:
        control_plane.supervisor.stop(name)
