"""``dispatch-agent start|open|...``: the CLI in a process of its own against the API over TLS."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
import sys
from pathlib import Path

import pytest
import yaml

from agent.api.cli import COMMANDS, EXIT_CODES, main
from agent.cli import main as agent_main
from harness.cluster import free_port
from serving.prometheus import version
from tests.agent.api.conftest import NAMESPACE, SERVICE_NAME, SUPERVISOR_TOKEN, Agent
from tests.agent.api.requests import start_body


async def cli(agent: Agent, tmp_path: Path, *args: str, stdin: bytes = b"", token: str | None = SUPERVISOR_TOKEN,
              env: dict[str, str] | None = None, server: str | None = None):  # fmt: skip
    """``dispatch-agent VERB`` as a process (the same parser ``python -m agent`` uses), with a token file unless
    ``token`` is None."""
    token_args: list[str] = []
    if token is not None:
        token_file = tmp_path / "token"
        token_file.write_text(token + "\n")
        token_args = ["--token-file", str(token_file)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "agent", args[0], "--server", server or agent.url, *token_args,
        "--ca-file", str(agent.tls.ca_file), *args[1:],
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**_clean_env(), **(env or {})},
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


@pytest.mark.asyncio
async def test_resolve_reaches_the_services_name_at_an_address_and_still_checks_the_certificate(
    agent: Agent, tmp_path: Path
):
    port = agent.url.rsplit(":", 1)[1]
    by_name = f"https://{SERVICE_NAME}:{port}"
    code, out, err = await cli(agent, tmp_path, "capabilities", "--resolve", f"{SERVICE_NAME}:127.0.0.1",
                               server=by_name)  # fmt: skip
    assert code == 0, err
    assert json.loads(out)["observeOnly"] is False
    code, _, err = await cli(agent, tmp_path, "capabilities", env={"DISPATCH_AGENT_RESOLVE": f"{SERVICE_NAME}:127.0.0.1"},
                             server=by_name)  # fmt: skip
    assert code == 0, err
    # A name the certificate does not carry, sent to the same address: refused by the TLS check.
    code, _, err = await cli(agent, tmp_path, "capabilities", "--resolve", "elsewhere.invalid:127.0.0.1",
                             server=f"https://elsewhere.invalid:{port}")  # fmt: skip
    assert code == 3, err
    assert b"certificate" in err.lower() or b"hostname" in err.lower(), err
    code, out, err = await cli(agent, tmp_path, "capabilities", "--resolve", f"{SERVICE_NAME}:not-an-ip",
                               server=by_name)  # fmt: skip
    assert (code, out) == (2, b"")
    assert "HOST:ADDRESS" in json.loads(err)["message"], err


def test_usage(capsys, monkeypatch):
    monkeypatch.delenv("DISPATCH_AGENT_SERVER", raising=False)
    assert main(["status", "--namespace", "x"]) == 2
    assert "--server (or $DISPATCH_AGENT_SERVER) is required" in capsys.readouterr().err
    assert set(COMMANDS) == {"start", "open", "hold", "release", "stop", "status", "list", "watch", "output", "preflight",
                             "capabilities"}  # fmt: skip


def test_the_kubectl_plugin_names_itself_in_its_errors(capsys, monkeypatch):
    from agent.api import kubectl

    monkeypatch.delenv("DISPATCH_AGENT_SERVER", raising=False)
    assert kubectl.main(["status", "--namespace", "x"]) == 2
    assert "kubectl dispatch status: --server (or $DISPATCH_AGENT_SERVER) is required" in capsys.readouterr().err


def _clean_env() -> dict[str, str]:
    """No kubeconfig or agent settings of the machine's leak into the command."""
    drop = {"KUBECONFIG", "KUBERNETES_SERVICE_HOST", "DISPATCH_AGENT_SERVER", "DISPATCH_AGENT_TOKEN_FILE",
            "DISPATCH_AGENT_CA_FILE", "HOME"}  # fmt: skip
    return {k: v for k, v in os.environ.items() if k not in drop} | {"HOME": "/nonexistent"}


def _kubeconfig(path: Path, contexts: dict[str, tuple[str, str | None]], current: str) -> Path:
    """A kubeconfig whose contexts (name -> (bearer token, namespace)) reach no cluster: the agent's CLI takes
    only the token and the namespace from it."""
    cluster = {"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}
    users = [{"name": f"u-{n}", "user": {"token": token}} for n, (token, _) in contexts.items()]
    ctxs = [{"name": n, "context": {"cluster": "c", "user": f"u-{n}", **({"namespace": ns} if ns else {})}}
            for n, (_, ns) in contexts.items()]  # fmt: skip
    doc = {"apiVersion": "v1", "kind": "Config", "clusters": [cluster], "users": users, "contexts": ctxs,
           "current-context": current}  # fmt: skip
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.asyncio
async def test_table_and_yaml_output_and_the_kubeconfig_as_kubectl_finds_it(agent: Agent, tmp_path: Path):
    code, out, err = await cli(
        agent, tmp_path, "start", "--request", "-", stdin=json.dumps(start_body(NAMESPACE)).encode()
    )
    assert code == 0, err
    started = json.loads(out)
    # No --token-file and no -n: the token and the namespace come from the kubeconfig's context, named by
    # --context or current in the files of $KUBECONFIG (a list; a missing file in it is skipped).
    kubeconfig = _kubeconfig(tmp_path / "kc", {"supervisor": (SUPERVISOR_TOKEN, NAMESPACE),
                                               "stranger": ("forged", "elsewhere")}, current="stranger")  # fmt: skip
    ref = ["--name", started["name"], "--uid", started["uid"]]
    code, out, err = await cli(agent, tmp_path, "status", *ref, "--kubeconfig", str(kubeconfig),
                               "--context", "supervisor", "-o", "table", token=None)  # fmt: skip
    assert code == 0, err
    lines = out.decode().splitlines()
    assert lines[0].split() == ["FIELD", "VALUE"]
    fields = dict(line.split(None, 1) for line in lines[1:] if line and len(line.split(None, 1)) == 2)
    assert fields["NAME"] == started["name"]
    assert fields["NAMESPACE"] == NAMESPACE
    assert fields["PHASE"] == "Gated"
    assert fields["HELD-BY"] == "<none>"
    env = {"KUBECONFIG": f"{tmp_path / 'absent'}{os.pathsep}{kubeconfig}"}
    code, out, err = await cli(agent, tmp_path, "status", *ref, "--context", "supervisor", "-o", "yaml",
                               token=None, env=env)  # fmt: skip
    assert code == 0, err
    assert yaml.safe_load(out)["phase"] == "Gated"
    # List as a table: a row per TrainJob, every page with --all.
    code, out, err = await cli(agent, tmp_path, "list", "-n", NAMESPACE, "--all", "-o", "table")
    assert code == 0, err
    header, *rows = out.decode().splitlines()
    assert header.split() == ["NAME", "UID", "N", "PHASE"]  # what fits a terminal; -o wide has every column
    assert [row.split() for row in rows] == [[started["name"], started["uid"], "3", "Gated"]]
    # The current context's token is refused by the agent: exit 1, the error as JSON on stderr.
    code, out, err = await cli(agent, tmp_path, "status", *ref, token=None, env=env)
    assert (code, json.loads(err)["error"]) == (1, "unauthenticated")


@pytest.mark.asyncio
async def test_exit_status_names_what_went_wrong(agent: Agent, tmp_path: Path):
    ref = ["-n", NAMESPACE, "--name", "x", "--uid", "u"]
    code, _, err = await cli(agent, tmp_path, "status", *ref, server=f"https://127.0.0.1:{free_port()}")
    assert (code, json.loads(err)["error"]) == (3, "unavailable")  # not reached
    code, _, err = await cli(agent, tmp_path, "status", *ref, token=None)
    assert code == 2  # no token: no --token-file, no kubeconfig, not in a pod
    assert "in-cluster ServiceAccount" in json.loads(err)["message"]
    code, _, err = await cli(agent, tmp_path, "status", *ref, "-o", "xml")
    assert code == 2
    assert "invalid choice: 'xml'" in err.decode()


def test_every_verb_is_listed_by_the_agents_own_help_with_the_exit_codes(capsys):
    with pytest.raises(SystemExit) as exit_:
        agent_main(["--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    for verb in ("serve", *COMMANDS):
        assert re.search(rf"^    {verb}\b", text, re.MULTILINE), verb
    for code in EXIT_CODES:
        assert re.search(rf"^  {code}\s", text, re.MULTILINE)
    with pytest.raises(SystemExit):
        agent_main(["--version"])
    assert capsys.readouterr().out == f"dispatch-agent {version()} (Python {platform.python_version()})\n"
