"""The command-line client's own distribution (harness/cli_dist.py, clients/python/pyproject.toml).

Its modules are what the commands import with every server's module refused (checked in a fresh interpreter);
its wheel, built alone into a temporary folder, installs in a fresh virtual environment with nothing of this
checkout, and both its commands call the agent's API over TLS. The install takes the dependencies from this
virtual environment's site-packages (a path, not an install: nothing of this checkout comes with them), not from
the package index (the build, isolated, gets setuptools from it as any build does); the release's test
(tests/charts/test_release.py) installs the released wheel with its dependencies from the index.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path

import pytest

from agent.api.models import StartRequest
from harness import cli_dist
from tests.agent.api import conftest as api
from tests.agent.api.conftest import NAMESPACE, SUPERVISOR_TOKEN, Agent
from tests.agent.api.requests import start_body

# The API's fixtures: the agent's API on loopback with real TLS, over a fake API server.
agent, fake, tls = api.agent, api.fake, api.tls

VERSION = (cli_dist.ROOT / "VERSION").read_text().strip()
PYPROJECT = tomllib.loads((cli_dist.PACKAGING / "pyproject.toml").read_text())
NEVER = ("webhook/", "certs/", "charts/", "harness/", "agent/gate/", "agent/runtime/", "agent/api/service/",
         "agent/api/app.py", "agent/api/auth.py", "agent/api/routes.py", "agent/cli.py", "serving/prometheus.py",
         "serving/tls.py")  # fmt: skip


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return cli_dist.build(tmp_path_factory.mktemp("cli-dist"))


def test_the_commands_import_no_servers_module_and_not_kubernetes_asyncio():
    files = cli_dist.imported_files(cli_dist.ENTRY, [*cli_dist.SERVER, *cli_dist.CREDENTIAL_ONLY])
    names = {f.relative_to(cli_dist.ROOT).as_posix() for f in files}
    assert {"agent/api/cli.py", "agent/api/kubectl.py", "agent/api/client.py", "agent/api/models.py"} <= names
    assert not {n for n in names if n.startswith(NEVER)}


def test_a_server_module_in_the_import_closure_fails_the_build_naming_it():
    with pytest.raises(RuntimeError, match="kubernetes_asyncio is a server's module"):
        cli_dist.imported_files(("serving.kube",), ["kubernetes_asyncio"])


def test_the_wheel_holds_the_clis_modules_its_commands_and_its_dependencies_and_no_server(wheel: Path):
    assert wheel.name == f"dispatch_k8s_cli-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = f"dispatch_k8s_cli-{VERSION}.dist-info"
        metadata = z.read(f"{info}/METADATA").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    assert {"agent/api/cli.py", "agent/api/kubectl.py", "serving/kube.py", "serving/kubeconfig.py",
            "prologue/dispatch-prologue.sh"} <= names  # fmt: skip
    assert not {n for n in names if n.startswith(NEVER)}
    requires = [line.split(":", 1)[1] for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert _names(requires) == _names(PYPROJECT["project"]["dependencies"])
    assert not _names(requires) & {"prometheus-client", "cryptography"}, "the servers' dependencies only"
    assert "kubectl-dispatch = agent.api.kubectl:main" in entry_points
    assert "dispatch-agent = agent.api.cli:main" in entry_points


def _names(requirements: list[str]) -> set[str]:
    return {re.match(r"\s*([A-Za-z0-9_.-]+)", r)[1].lower().replace("_", "-") for r in requirements}  # type: ignore[index]


def _venv_with(wheel: Path, where: Path) -> Path:
    """A fresh virtual environment with the wheel and nothing else of this checkout; the dependencies are this
    environment's site-packages, on a path (no .pth there is processed: no editable install comes with it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = where / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True)  # fmt: skip
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    Path(site, "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return where / "bin"


def _run(*argv: str | Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=env, cwd="/", timeout=60)


@pytest.mark.asyncio
async def test_the_wheel_installs_alone_and_both_commands_call_the_agent(wheel: Path, agent: Agent, tmp_path: Path):
    bin_dir = await asyncio.to_thread(_venv_with, wheel, tmp_path / "venv")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}

    where = await asyncio.to_thread(_run, bin_dir / "python", "-c", "import agent.api.cli as m; print(m.__file__)",
                                    env=env)  # fmt: skip
    assert where.stdout.startswith(str(tmp_path / "venv")), where
    helped = await asyncio.to_thread(_run, bin_dir / "kubectl-dispatch", "--help", env=env)
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: kubectl dispatch")
    helped = await asyncio.to_thread(_run, bin_dir / "dispatch-agent", "--help", env=env)
    assert helped.returncode == 0, helped.stderr
    assert "serve" not in helped.stdout.split("exit status:")[0], "the servers' verb is dispatch-k8s's only"

    async with agent.client() as client:
        started = await client.start(StartRequest.model_validate(start_body(NAMESPACE)))
    ref = ["--server", agent.url, "--ca-file", agent.tls.ca_file, "--name", started.name, "--uid", started.uid]
    # kubectl's habits: the token and the namespace from ~/.kube/config (kubernetes_asyncio reads the token).
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
                  "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                  "users": [{"name": "u", "user": {"token": SUPERVISOR_TOKEN}}],
                  "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": NAMESPACE}}]}  # fmt: skip
    (home / ".kube" / "config").write_text(json.dumps(kubeconfig))
    status = await asyncio.to_thread(_run, bin_dir / "kubectl-dispatch", "status", *ref, env=env)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["phase"] == "Gated"
    token = tmp_path / "token"
    token.write_text(SUPERVISOR_TOKEN + "\n")
    status = await asyncio.to_thread(_run, bin_dir / "dispatch-agent", "status", *ref, "-n", NAMESPACE,
                                     "--token-file", token, "-o", "table", env={**env, "HOME": os.devnull})  # fmt: skip
    assert status.returncode == 0, status.stderr
    assert status.stdout.split()[:2] == ["FIELD", "VALUE"]
