"""``python -m webhook serve`` as a process: bad inputs exit non-zero naming the problem; a good start
serves until SIGTERM and then shuts down cleanly."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from tests.webhook.conftest import HOST, Pki, admission_review
from tests.webhook.fake_api import FakeApi, running

START_TIMEOUT = 30.0  # seconds; a cold interpreter importing kubernetes_asyncio on a busy 2-core machine


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return env


def _serve_args(tls_files: Pki, config: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "webhook", "serve",
        "--tls-cert-file", str(tls_files.cert_file), "--tls-private-key-file", str(tls_files.key_file),
        "--config", str(config), "--bind-address", HOST, "--port", "0", *extra,
    ]  # fmt: skip


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env=_env(), check=False)


@pytest.mark.parametrize(
    ("config", "names"),
    [
        ("dispatch:\n  usernames: [a]\nallowRankRestrat: true\n", ["allowRankRestrat", "Extra inputs are not permitted"]),
        ("dispatch:\n  usernames: 5\n", ["dispatch.usernames"]),
        ("allowSpecPrologue: maybe\n", ["allowSpecPrologue", "valid boolean"]),
        ("dispatch: [unclosed\n", ["cannot read config"]),
    ],
    ids=["unknown-key", "wrong-type", "not-a-boolean", "bad-yaml"],
)  # fmt: skip
def test_bad_config_exits_non_zero_naming_the_key(tmp_path: Path, tls_files: Pki, config: str, names: list[str]):
    path = tmp_path / "config.yaml"
    path.write_text(config)
    result = _run(_serve_args(tls_files, path))
    assert result.returncode == 1
    assert result.stderr.startswith("dispatch-webhook: config ") or "cannot read config" in result.stderr
    for name in names:
        assert name in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_file_and_certificate(tmp_path: Path, tls_files: Pki):
    result = _run(_serve_args(tls_files, tmp_path / "absent.yaml"))
    assert result.returncode == 1
    assert "cannot read config" in result.stderr
    (tmp_path / "config.yaml").write_text("{}\n")
    tls_files.key_file.unlink()
    result = _run(_serve_args(tls_files, tmp_path / "config.yaml"))
    assert result.returncode == 1
    assert "cannot read the certificate or key" in result.stderr
    assert "Traceback" not in result.stderr


def test_no_kubeconfig_outside_a_cluster_exits_non_zero(tmp_path: Path, tls_files: Pki):
    (tmp_path / "config.yaml").write_text("{}\n")
    result = _run(_serve_args(tls_files, tmp_path / "config.yaml"))
    assert result.returncode == 1
    assert "in-cluster ServiceAccount" in result.stderr


def test_missing_flag_is_a_usage_error(tmp_path: Path):
    result = _run([sys.executable, "-m", "webhook", "serve", "--config", str(tmp_path / "c.yaml")])
    assert result.returncode == 2
    assert "--tls-cert-file" in result.stderr


async def _wait_for_line(stream: asyncio.StreamReader, pattern: str, seen: list[str]) -> re.Match[str]:
    while True:
        line = (await stream.readline()).decode()
        assert line, "the process exited early:\n" + "".join(seen)
        seen.append(line)
        if match := re.search(pattern, line):
            return match


@pytest.mark.asyncio(loop_scope="function")
async def test_serves_until_sigterm_then_stops_cleanly(tmp_path: Path, tls_files: Pki):
    (tmp_path / "config.yaml").write_text("dispatch:\n  usernames: [system:serviceaccount:d:d]\n")
    fake = FakeApi()
    async with running(fake) as api_url:
        kubeconfig = fake.kubeconfig(api_url, tmp_path / "kubeconfig")
        args = _serve_args(
            tls_files, tmp_path / "config.yaml", "--kubeconfig", str(kubeconfig), "--shutdown-delay-duration", "1s"
        )
        process = await asyncio.create_subprocess_exec(
            *args, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, env=_env()
        )
        seen: list[str] = []
        try:
            started = await asyncio.wait_for(
                _wait_for_line(process.stderr, r"serving https on .*:(\d+)", seen), START_TIMEOUT
            )
            url = f"https://{HOST}:{started[1]}"
            connector = aiohttp.TCPConnector(ssl=tls_files.client_context())
            async with aiohttp.ClientSession(connector=connector) as session:
                async with session.get(url + "/readyz") as resp:
                    assert (resp.status, await resp.text()) == (200, "ok")
                async with session.post(url + "/validate", json=admission_review(uid="cli")) as resp:
                    assert (await resp.json())["response"]["uid"] == "cli"
                    assert "Connection" not in resp.headers, resp.headers  # HTTP/1.1: kept alive
                assert connector._conns, "the connection was not kept for the next review"

                process.send_signal(signal.SIGTERM)
                await asyncio.wait_for(_wait_for_line(process.stderr, r"stopping: not ready now", seen), 10)
                # During the shutdown delay the pod reports not ready but still answers reviews, and closes
                # each connection after its answer, so a client's next review goes through the Service again
                # (to a Ready pod) instead of meeting the listener's close on a kept-alive connection.
                async with session.get(url + "/readyz") as resp:
                    assert (resp.status, await resp.text()) == (503, "shutting down")
                    assert resp.headers.get("Connection") == "close", resp.headers
                async with session.post(url + "/validate", json=admission_review(uid="late")) as resp:
                    assert (await resp.json())["response"]["uid"] == "late"
                    assert resp.headers.get("Connection") == "close", resp.headers
                assert not connector._conns, "a connection was kept after the answer said close"
            assert await asyncio.wait_for(process.wait(), 15) == 0
            seen += (await process.stderr.read()).decode().splitlines(keepends=True)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    assert any("stopped" in line for line in seen), "".join(seen)
    assert not any("Traceback" in line for line in seen), "".join(seen)


@pytest.mark.asyncio(loop_scope="function")
async def test_json_logs_have_one_line_per_review_with_its_keys(tmp_path: Path, tls_files: Pki):
    (tmp_path / "config.yaml").write_text("dispatch:\n  usernames: [system:serviceaccount:d:d]\n")
    fake = FakeApi()
    async with running(fake) as api_url:
        kubeconfig = fake.kubeconfig(api_url, tmp_path / "kubeconfig")
        args = _serve_args(tls_files, tmp_path / "config.yaml", "--kubeconfig", str(kubeconfig),
                           "--log-format", "json", "--log-level", "debug")  # fmt: skip
        process = await asyncio.create_subprocess_exec(
            *args, stderr=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.DEVNULL, env=_env()
        )
        seen: list[str] = []
        try:
            started = await asyncio.wait_for(
                _wait_for_line(process.stderr, r"serving https on .*:(\d+)", seen), START_TIMEOUT
            )
            connector = aiohttp.TCPConnector(ssl=tls_files.client_context())
            async with aiohttp.ClientSession(connector=connector) as session:
                url = f"https://{HOST}:{started[1]}/validate"
                async with session.post(url, json=admission_review(uid="json-1")) as resp:
                    verdict = (await resp.json())["response"]
            await asyncio.wait_for(_wait_for_line(process.stderr, r'"review_uid": "json-1"', seen), 10)
            process.send_signal(signal.SIGTERM)
            assert await asyncio.wait_for(process.wait(), 15) == 0
            seen += (await process.stderr.read()).decode().splitlines(keepends=True)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
    lines = [json.loads(line) for line in seen]  # every line is one JSON object
    (review,) = [line for line in lines if line.get("review_uid") == "json-1"]
    assert review["outcome"] == ("allowed" if verdict["allowed"] else "denied")
    assert review["level"] == ("debug" if verdict["allowed"] else "info")
    assert (review["endpoint"], review["resource"], review["operation"]) == ("validate", "trainjobs", "CREATE")
    assert review["rule"]
    assert review["logger"] == "webhook.server"
