"""``dispatch-agent start|open|...``: the CLI in a process of its own against the API over TLS."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from agent.api.cli import COMMANDS, main
from tests.api.conftest import NAMESPACE, SUPERVISOR_TOKEN, Agent
from tests.api.requests import start_body


async def cli(agent: Agent, tmp_path: Path, *args: str, stdin: bytes = b"", token: str = SUPERVISOR_TOKEN):
    token_file = tmp_path / "token"
    token_file.write_text(token + "\n")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent.api.cli", args[0], "--server", agent.url, "--token-file", str(token_file),
        "--ca-file", str(agent.tls.ca_file), *args[1:],
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await proc.communicate(stdin)
    return proc.returncode, out, err


@pytest.mark.asyncio
async def test_start_open_status_output_stop_from_the_command_line(agent: Agent, tmp_path: Path):
    code, out, err = await cli(
        agent, tmp_path, "start", "--request", "-", stdin=json.dumps(start_body(NAMESPACE)).encode()
    )
    assert code == 0, err
    started = json.loads(out)
    ref = ["--namespace", NAMESPACE, "--name", started["name"], "--uid", started["uid"]]
    code, out, _ = await cli(agent, tmp_path, "open", *ref)
    assert (code, json.loads(out)["outcome"]) == (0, "opened")
    code, out, _ = await cli(agent, tmp_path, "hold", *ref, "--who", "ops", "--reason", "disk")
    assert (code, json.loads(out)["outcome"]) == (0, "held: TrainJob suspended")
    code, out, _ = await cli(agent, tmp_path, "status", *ref)
    assert (code, json.loads(out)["phase"]) == (0, "Held")
    code, _, err = await cli(agent, tmp_path, "output", *ref)
    assert code == 1
    assert json.loads(err)["error"] == "not_found"
    code, out, _ = await cli(agent, tmp_path, "stop", *ref)
    assert (code, json.loads(out)["outcome"]) == (0, "stopping")
    code, out, _ = await cli(agent, tmp_path, "capabilities")
    assert code == 0
    assert json.loads(out)["observeOnly"] is False


@pytest.mark.asyncio
async def test_errors_go_to_stderr_as_json(agent: Agent, tmp_path: Path):
    code, out, err = await cli(agent, tmp_path, "status", "--namespace", NAMESPACE, "--name", "x", "--uid", "u",
                               token="forged")  # fmt: skip
    assert (code, out) == (1, b"")
    assert json.loads(err)["error"] == "unauthenticated"
    code, _, err = await cli(agent, tmp_path, "status", "--namespace", NAMESPACE)
    assert code == 2
    assert json.loads(err)["error"] == "invalid"


def test_usage(capsys, monkeypatch):
    monkeypatch.delenv("DISPATCH_AGENT_SERVER", raising=False)
    assert main(["status", "--namespace", "x"]) == 2
    assert "--server and --token-file are required" in capsys.readouterr().err
    assert set(COMMANDS) == {"start", "open", "hold", "release", "stop", "status", "list", "output", "preflight",
                             "capabilities"}  # fmt: skip
