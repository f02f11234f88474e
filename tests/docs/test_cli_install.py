"""docs/api.md, "Install the command-line client": the block runs as written, in bash, with kubectl.

The wheel is this checkout's (``harness.cli_dist``, as scripts/release builds it); ``pip`` installs its
dependencies from the package index at requirements/lock.txt's versions (``PIP_CONSTRAINT``), and
``kubectl dispatch status`` reaches the agent's API (on loopback with real TLS, over a fake API server) with the
token of ``~/.kube/config``'s user. The tier C lane (marker ``node``) runs it: kubectl is the one
controlplane/build-node.sh builds, at the cluster's version, as tests/docs/test_quickstart.py runs it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.api.models import StartRequest
from harness import cli_dist
from harness.binaries import locate_node
from tests.agent.api import conftest as api
from tests.agent.api.conftest import NAMESPACE, SUPERVISOR_TOKEN, Agent
from tests.agent.api.requests import start_body
from tests.charts.helm import ROOT
from tests.docs.blocks import fenced_blocks

VERSION = (ROOT / "VERSION").read_text().strip()
HEADING = "Install the command-line client"
EXAMPLE_NAME = "dj-01jdq7z9v3k8m2n4p6r8t0w2y4-s3"
EXAMPLE_UID = "6ddc797c-…"

# The API's fixtures: the agent's API on loopback with real TLS, over a fake API server.
agent, fake, tls = api.agent, api.fake, api.tls


def _block() -> str:
    (block,) = [b for b in fenced_blocks("docs/api.md") if b.heading == HEADING and b.lang == "sh"]
    assert "kubectl dispatch status" in block.text
    assert f"dispatch_k8s_cli-{VERSION}-py3-none-any.whl" in block.text.replace("0.1.0", VERSION)
    return block.text


@pytest.mark.node  # the tier C lane: its kubectl (see the module's docstring)
@pytest.mark.timeout(600)
@pytest.mark.asyncio
async def test_the_install_block_installs_the_wheel_and_kubectl_dispatch_calls_the_agent(agent: Agent, tmp_path):
    kubectl = locate_node().binary("kubectl")
    assert os.access(kubectl, os.X_OK), f"{kubectl} is missing: run controlplane/build-node.sh"
    work, home = tmp_path / "work", tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    await asyncio.to_thread(cli_dist.build, work)
    (work / "ca.crt").write_bytes(agent.tls.ca_file.read_bytes())
    async with agent.client() as client:
        started = await client.start(StartRequest.model_validate(start_body(NAMESPACE)))
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                  "users": [{"name": "u", "user": {"token": SUPERVISOR_TOKEN}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}  # fmt: skip
    (home / ".kube" / "config").write_text(json.dumps(kubeconfig))

    script = _block().replace("0.1.0", VERSION).replace(EXAMPLE_NAME, started.name).replace(EXAMPLE_UID, started.uid)
    base = Path(sys.base_prefix) / "bin"  # python3: the interpreter this checkout's environment was made from
    # PIP_NO_COMPILE: the bytecode of every dependency is most of an install's time and tests nothing of the block;
    # Python compiles what the command imports when it runs.
    env = {"HOME": str(home), "AGENT": agent.url, "PATH": os.pathsep.join([str(kubectl.parent), str(base), "/usr/bin:/bin"]),
           "PIP_CONSTRAINT": str(ROOT / "requirements" / "lock.txt"), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
           "PIP_NO_COMPILE": "1"}  # fmt: skip
    result = await asyncio.to_thread(
        subprocess.run, ["bash", "-euo", "pipefail", "-c", script], cwd=work, env=env, capture_output=True, text=True,
        timeout=540,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    rows = dict(line.split(None, 1) for line in result.stdout.splitlines() if len(line.split(None, 1)) == 2)
    assert rows["NAME"] == started.name
    assert rows["NAMESPACE"] == NAMESPACE
    assert rows["PHASE"] == "Gated"
