"""The command-line client's own distribution, ``dispatch-k8s-cli``, built from this tree's modules.

Its modules are the ones ``kubectl-dispatch`` and ``dispatch-agent VERB`` import (``agent.api.kubectl``,
``agent.api.cli``) and the ones the kubeconfig's credentials need (``serving.kube``, loaded only then), found by
importing them in a fresh interpreter where the servers cannot be imported (``SERVER``): a module of the
command line that pulls in a server fails the build, naming the import. They are staged beside
clients/python/pyproject.toml (its metadata and dependencies), ``VERSION`` and ``LICENSE``, then built.

    python -m harness.cli_dist OUT [--python PYTHON] [--builder PYTHON]

``--python``: the interpreter whose packages the modules import (default: this one); ``--builder``: one with
``build`` (scripts/release's pinned tools) builds the wheel and the sdist; without it, ``pip wheel`` of this
interpreter builds the wheel only (the tests). Either builds in an isolated environment, with the setuptools
clients/python/pyproject.toml requires, from the package index. Prints the wheel's path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[1]
PACKAGING: Final = ROOT / "clients" / "python"
NAME: Final = "dispatch-k8s-cli"
ENTRY: Final = ("agent.api.kubectl", "agent.api.cli")
"""What the commands import when they start (clients/python/pyproject.toml's scripts)."""
CREDENTIALS: Final = ("serving.kube",)
"""What ``agent.api.cli`` loads only to read the kubeconfig user's credentials (kubernetes_asyncio's loader)."""
OURS: Final = ("agent", "serving", "contract", "prologue")
"""The packages of this tree the command line may take modules from."""
PACKAGE_DATA: Final = ("prologue/dispatch-prologue.sh", "prologue/spec-prologue.sh")
"""Files ``contract.prologue`` reads when imported."""
SERVER: Final = (
    "aiohttp.web",
    "prometheus_client",
    "cryptography",
    "webhook",
    "certs",
    "charts",
    "harness",
    "agent.cli",
    "agent.config",
    "agent.gate",
    "agent.runtime",
    "agent.api.app",
    "agent.api.auth",
    "agent.api.kube",
    "agent.api.openapi",
    "agent.api.routes",
    "agent.api.service",
    "serving.prometheus",
    "serving.tls",
    "serving.watch",
)
"""Modules (with their submodules) the command line never imports: the servers, their metrics and TLS."""
CREDENTIAL_ONLY: Final = ("kubernetes_asyncio", "serving.kube", "serving.client")
"""Never imported when the commands start; only for the kubeconfig's credentials."""

# Run in a fresh interpreter: a finder ahead of every other refuses the blocked modules, then the modules are
# imported and the files of ours that got loaded are printed, as JSON.
_PROBE = r"""
import importlib, json, sys

blocked = tuple(sys.argv[1].split(","))
ours = tuple(sys.argv[2].split(","))

class Refuse:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in blocked):
            raise ImportError(f"{name} is a server's module, which the command line must not import")
        return None

sys.meta_path.insert(0, Refuse())
for module in sys.argv[3].split(","):
    importlib.import_module(module)
files = sorted({m.__file__ for n, m in list(sys.modules.items())
                if n.split(".")[0] in ours and getattr(m, "__file__", None)})
print(json.dumps(files))
"""


def imported_files(modules: Sequence[str], blocked: Sequence[str], python: str = sys.executable) -> list[Path]:
    """The files of this tree's packages that importing ``modules`` loads, in a fresh interpreter (cwd: the
    tree) where ``blocked`` cannot be imported; RuntimeError with the interpreter's error when one is."""
    result = subprocess.run(
        [python, "-c", _PROBE, ",".join(blocked), ",".join(OURS), ",".join(modules)],
        cwd=ROOT,  # first on sys.path (``-c``): this tree's modules, even where another tree is installed editable
        capture_output=True,
        text=True,
        # Nothing written into the tree (scripts/release builds from a clean one).
        env={k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
        | {"PYTHONDONTWRITEBYTECODE": "1"},
    )
    if result.returncode != 0:
        raise RuntimeError(f"importing {', '.join(modules)} without the servers failed:\n{result.stderr.strip()}")
    files = [Path(f) for f in json.loads(result.stdout)]
    outside = [f for f in files if ROOT not in f.parents]
    if outside:
        raise RuntimeError(f"modules of ours imported from outside {ROOT}: {outside}")
    return files


def modules(python: str = sys.executable) -> list[Path]:
    """The distribution's modules, relative to the tree: what the commands import when they start (never a
    server's, never kubernetes_asyncio), and what the kubeconfig's credentials add."""
    started = imported_files(ENTRY, [*SERVER, *CREDENTIAL_ONLY], python)
    credentials = imported_files(CREDENTIALS, SERVER, python)
    return sorted({f.relative_to(ROOT) for f in (*started, *credentials)})


def stage(into: Path, python: str = sys.executable) -> list[Path]:
    """The distribution's source tree in ``into``: its modules and package data, its pyproject.toml and README,
    the tree's VERSION and LICENSE. Returns the modules."""
    files = modules(python)
    for relative in [*files, *map(Path, PACKAGE_DATA)]:
        (into / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / relative, into / relative)
    for source, name in ((PACKAGING / "pyproject.toml", "pyproject.toml"), (PACKAGING / "README.md", "README.md"),
                         (ROOT / "VERSION", "VERSION"), (ROOT / "LICENSE", "LICENSE")):  # fmt: skip
        shutil.copy2(source, into / name)
    return files


def build(out: Path, python: str = sys.executable, builder: str | None = None) -> Path:
    """The wheel (and, with ``builder``, the sdist) in ``out``; returns the wheel's path."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dispatch-k8s-cli-") as tmp:
        source = Path(tmp) / "src"
        stage(source, python)
        if builder:
            command = [builder, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(source)]
        else:
            command = [python, "-m", "pip", "wheel", "-q", "--no-deps",
                       "--wheel-dir", str(out), str(source)]  # fmt: skip
        result = subprocess.run(command, cwd=tmp, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(command[:3])} failed:\n{(result.stdout + result.stderr)[-3000:]}")
    version = (ROOT / "VERSION").read_text().strip()
    wheel = out / f"{NAME.replace('-', '_')}-{version}-py3-none-any.whl"
    if not wheel.is_file():
        raise RuntimeError(f"no {wheel.name} in {out}")
    return wheel


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.cli_dist", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the folder the wheel (and the sdist) go into")
    parser.add_argument("--python", default=sys.executable, help="the interpreter the modules are found with")
    parser.add_argument("--builder", help="an interpreter with `build`: wheel and sdist, isolated")
    args = parser.parse_args(argv)
    try:
        print(build(args.out, args.python, args.builder))
    except RuntimeError as exc:
        print(f"harness.cli_dist: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
