"""Tier B: the Go client against the live agent, as a supervisor runs it.

The agent runs as in tests/agent/api/test_e2e.py (a ServiceAccount with exactly the chart's RBAC, real TLS on
loopback, the readmission controller as its own process), here with ``tokenAudiences`` set as the chart
recommends. Supervisors are ServiceAccounts with exactly the supervisor's Role (and Preflight's ClusterRole),
their tokens bound to the agent's audience. Then:

* ``go test -run TestContract`` of clients/go/agent drives every operation and the errors a supervisor
  meets (a held job, a conflict while the previous execution's pod stops, a stranger's TrainJob refused, a
  stranger's and a bad token, observe-only, the follow-stream limit), checking every exchange against the
  OpenAPI document; it must run, never skip;
* the example supervisor (clients/go/examples/supervisor) runs one job through Preflight, Start, Open, a
  Hold and Release, Status and Output.

The test's own hand (``/linger``, ``/let-go``, ``/log`` on a loopback port) does what no supervisor may: keeps a
deleted pod Running as a slow kubelet would, and writes lines to the containers' log that kwok serves.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from aiohttp import web

from agent.api.client import AgentClient
from agent.api.models import KueueSpec, PreflightRequest, RuntimeRef
from agent.api.settings import ApiSettings
from harness.tier_b import KWOK_SLOW_KUBELET_ANNOTATION, TierB
from tests.agent.api import test_e2e as base
from tests.agent.api.cluster import allowed, apply, running_agent, supervisors
from tests.agent.api.test_e2e import CLUSTER_QUEUE, KUEUE, QUEUE, RUNTIME, TRAINER, cri_line
from tests.goclient.go import MODULE, go, go_env, run_go

controller = base.controller  # the readmission controller's process, once per module

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]
AUDIENCE = "dispatch-agent"
SETTINGS = ApiSettings(workloadTimeout=30, probeSeconds=3, tokenAudiences=[AUDIENCE])
LINGER = "test.dispatch.phpboyscout.uk/linger"
FOREIGN = "someone-elses-job"


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The contract test binary and the example, built before the cluster work (the machine's Go caches make
    a rebuild of unchanged code a matter of seconds)."""
    out = tmp_path_factory.mktemp("go-bin")
    run_go("test", "-c", "-o", str(out / "agent.test"), "./agent")
    run_go("build", "-o", str(out / "supervisor"), "./examples/supervisor")
    return {"contract": out / "agent.test", "supervisor": out / "supervisor"}


class Hand:
    """What the test does that no supervisor may, on a loopback port the Go test calls."""

    def __init__(self, tb: TierB, namespace: str) -> None:
        self.tb, self.ns = tb, namespace
        self.lingering: set[str] = set()

    def _patch(self, pod: str, meta: dict[str, Any]) -> None:
        self.tb.control_plane.admin.request(
            "PATCH", f"/api/v1/namespaces/{self.ns}/pods/{pod}", {"metadata": meta},
            content_type="application/strategic-merge-patch+json",
        )  # fmt: skip

    def linger(self, pod: str) -> None:
        """Kept in the API once deleted, still Running: kwok confirms no deletion while a finalizer is left."""
        self._patch(pod, {"finalizers": [LINGER], "annotations": {KWOK_SLOW_KUBELET_ANNOTATION: "true"}})
        self.lingering.add(pod)

    def let_go(self, pod: str) -> None:
        self._patch(pod, {"$deleteFromPrimitiveList/finalizers": [LINGER],
                          "annotations": {KWOK_SLOW_KUBELET_ANNOTATION: None}})  # fmt: skip
        self.lingering.discard(pod)

    def log(self, line: str) -> None:
        with self.tb.container_log.open("a") as log:
            log.write(cri_line(line))

    async def serve(self) -> web.AppRunner:
        async def act(request: web.Request) -> web.Response:
            body = await request.json()
            action = request.match_info["action"]
            if action == "linger":
                await asyncio.to_thread(self.linger, body["pod"])
            elif action == "let-go":
                await asyncio.to_thread(self.let_go, body["pod"])
            elif action == "log":
                self.log(body["line"])
            else:
                raise web.HTTPNotFound()
            return web.json_response({})

        app = web.Application()
        app.router.add_post("/{action}", act)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner


@dataclass
class Live:
    env: dict[str, str]
    url: str
    ca_file: Path
    token_file: Path


def _foreign_trainjob(tb: TierB, namespace: str) -> str:
    """A TrainJob that is not dispatch's (neither its name nor a runtime patch of dispatch's), suspended."""
    created = tb.control_plane.admin.create(
        {"apiVersion": TRAINER, "kind": "TrainJob", "metadata": {"name": FOREIGN, "namespace": namespace},
         "spec": {"suspend": True, "runtimeRef": {"name": RUNTIME, "kind": "ClusterTrainingRuntime",
                                                  "apiGroup": "trainer.kubeflow.org"}}}
    )  # fmt: skip
    return created["metadata"]["uid"]


@pytest_asyncio.fixture
async def live(
    binaries: dict[str, Path], tier_b: TierB, controller: base.Controller, namespace: str, tmp_path: Path
) -> AsyncIterator[Live]:
    cp = tier_b.control_plane
    other = cp.create_namespace("go-contract-other")
    apply(cp, {"apiVersion": KUEUE, "kind": "LocalQueue", "metadata": {"namespace": namespace, "name": QUEUE},
               "spec": {"clusterQueue": CLUSTER_QUEUE}})  # fmt: skip
    tier_b.create_local_queue(namespace)  # the harness's queue: its ClusterQueue does not list dispatch's check
    who = supervisors(cp, namespace, other)
    tokens = tmp_path / "tokens"
    tokens.mkdir()
    bound = {name: cp.service_account_token(namespace, name, audiences=[AUDIENCE]) for name in ("supervisor", "stranger", "elsewhere")}  # fmt: skip
    files = {
        "supervisor": bound["supervisor"],
        "rotated": cp.service_account_token(namespace, "supervisor", audiences=[AUDIENCE]),
        "stranger": bound["stranger"],
        "elsewhere": bound["elsewhere"],
        "wrong-audience": who.tokens["supervisor"],  # the API server's own audience
    }
    for name, token in files.items():
        (tokens / name).write_text(token + "\n")
    foreign_uid = await asyncio.to_thread(_foreign_trainjob, tier_b, namespace)
    hand = Hand(tier_b, namespace)
    runner = await hand.serve()
    port = runner.addresses[0][1]
    try:
        async with running_agent(cp, tmp_path, SETTINGS) as agent:
            ca_file = tmp_path / "ca.crt"
            ca_file.write_bytes(agent.ca.cert_pem)
            await allowed(agent, bound["supervisor"], namespace)
            await controller.wait_leading()
            env = {
                "DISPATCH_AGENT_SERVER": agent.url,
                "DISPATCH_AGENT_CA_FILE": str(ca_file),
                "DISPATCH_AGENT_TOKEN_FILE": str(tokens / "supervisor"),
                "DISPATCH_CONTRACT_NAMESPACE": namespace,
                "DISPATCH_CONTRACT_RUNTIME": RUNTIME,
                "DISPATCH_CONTRACT_QUEUE": QUEUE,
                "DISPATCH_CONTRACT_UNCHECKED_QUEUE": tier_b.local_queue,
                "DISPATCH_CONTRACT_AUDIENCE": AUDIENCE,
                "DISPATCH_CONTRACT_TOKENS": str(tokens),
                "DISPATCH_CONTRACT_FOREIGN": f"{namespace}/{FOREIGN}/{foreign_uid}",
                "DISPATCH_CONTRACT_CONTROL": f"http://127.0.0.1:{port}",
            }
            try:
                yield Live(env, agent.url, ca_file, tokens / "supervisor")
            finally:
                # Whatever the Go test left: no pod kept by our finalizer, Kueue mode not observe-only.
                for pod in list(hand.lingering):
                    await asyncio.to_thread(hand.let_go, pod)
                async with agent.client(bound["supervisor"]) as api:
                    caps = await api.capabilities()
                    if caps.observe_only:
                        await base.eventually(lambda: _passing(api, namespace), 60, "Kueue mode trusted again")
    finally:
        await runner.cleanup()
        cp.delete_namespace(other)


async def _passing(api: AgentClient, namespace: str) -> None:
    caps = await api.preflight(
        PreflightRequest(namespace=namespace, runtime=RuntimeRef(name=RUNTIME), kueue=KueueSpec(local_queue=QUEUE))
    )
    assert not caps.observe_only, caps.observe_only_reason


async def _run(argv: list[str], env: dict[str, str], within: float, log: Path) -> tuple[int, str]:
    """A Go program, while this event loop goes on serving the agent; its output goes to ``log`` as it runs."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=MODULE / "agent", env=go_env(**env), stdout=out, stderr=asyncio.subprocess.STDOUT
        )
        try:
            await asyncio.wait_for(proc.wait(), within)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return -1, await asyncio.to_thread(log.read_text) + f"\n(killed after {within:g}s)"
    return proc.returncode or 0, await asyncio.to_thread(log.read_text)


@pytest.mark.timeout(600)
async def test_the_go_client_keeps_the_contract_with_the_live_agent(
    live: Live, binaries: dict[str, Path], tmp_path: Path
):
    go()  # the toolchain is there (the binary was built with it)
    argv = [str(binaries["contract"]), "-test.run", "^TestContract$", "-test.v", "-test.timeout", "8m"]
    code, out = await _run(argv, live.env, 540, tmp_path / "go-test.log")
    assert code == 0, out
    assert "--- SKIP" not in out, out
    assert re.search(r"^--- PASS: TestContract \(", out, re.MULTILINE), out
    for subtest in ("what_a_supervisor_meets", "jobs/Kueue_mode", "jobs/plain_mode", "every_exchange_conformed"):
        assert re.search(rf"--- PASS: TestContract/{subtest}", out), f"{subtest} did not pass:\n{out}"


async def test_the_example_supervisor_runs_one_job(live: Live, binaries: dict[str, Path], tmp_path: Path):
    env = live.env | {"PATH": os.environ.get("PATH", "")}
    argv = [str(binaries["supervisor"]), "-server", live.url, "-ca-file", str(live.ca_file),
            "-token-file", str(live.token_file), "-audience", AUDIENCE,
            "-namespace", live.env["DISPATCH_CONTRACT_NAMESPACE"], "-runtime", RUNTIME, "-queue", QUEUE]  # fmt: skip
    code, out = await _run(argv, env, 280, tmp_path / "supervisor.log")
    assert code == 0, out
    for step in ("Preflight", "Start", "Open", "Hold", "Release", "Status", "Output", "Stop"):
        assert re.search(rf"^{step}\b", out, re.MULTILINE), f"no {step} step:\n{out}"
    assert re.search(r"^Release\s+Running\s.*\bA=2\b", out, re.MULTILINE), out
