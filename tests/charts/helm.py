"""The real helm (v4, built by controlplane/build.sh), run on the chart with its state kept out of $HOME."""

from __future__ import annotations

import atexit
import os
import shlex
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.binaries import MissingBinaryError, locate

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dispatch-k8s"
KUBE_VERSION = "1.36.3"
"""What `helm template` assumes the cluster runs: tier A's Kubernetes (controlplane/versions.env)."""

_HOME = Path(tempfile.mkdtemp(prefix="dispatch-k8s-helm-"))
"""helm's cache, config and data, and the values files the tests write: one folder per test process."""
atexit.register(shutil.rmtree, _HOME, ignore_errors=True)


def helm_binary() -> Path:
    """The pinned helm; a missing build fails the test (never skips) with the command that builds it."""
    try:
        return locate().require(["helm"])["helm"]
    except MissingBinaryError as exc:
        pytest.fail(str(exc), pytrace=False)


def run_helm(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "HELM_CACHE_HOME": str(_HOME / "cache"),
        "HELM_CONFIG_HOME": str(_HOME / "config"),
        "HELM_DATA_HOME": str(_HOME / "data"),
        "KUBECONFIG": str(_HOME / "no-kubeconfig"),
    }
    result = subprocess.run(
        [str(helm_binary()), *args], capture_output=True, text=True, env=env, check=False, timeout=timeout
    )
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


def _values_args(values: Mapping[str, Any] | None) -> list[str]:
    if not values:
        return []
    handle, name = tempfile.mkstemp(prefix="values-", suffix=".yaml", dir=_HOME)
    with os.fdopen(handle, "w") as f:
        yaml.safe_dump(dict(values), f)
    return ["--values", name]


@dataclass
class Rendered:
    """The objects `helm template` rendered, hooks included, in its order."""

    docs: list[dict[str, Any]]
    release: str
    namespace: str

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [d for d in self.docs if d["kind"] == kind]

    def one(self, kind: str, name: str | None = None) -> dict[str, Any]:
        found = [d for d in self.of(kind) if name is None or d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name or ''}, rendered {len(found)}"
        return found[0]

    def kinds(self) -> set[str]:
        return {d["kind"] for d in self.docs}

    def hooks(self) -> list[dict[str, Any]]:
        return [d for d in self.docs if "helm.sh/hook" in (d["metadata"].get("annotations") or {})]

    def regular(self) -> list[dict[str, Any]]:
        return [d for d in self.docs if "helm.sh/hook" not in (d["metadata"].get("annotations") or {})]


def template(
    values: Mapping[str, Any] | None = None,
    *,
    release: str = "dispatch-k8s",
    namespace: str = "dispatch-system",
    extra: Sequence[str] = (),
) -> Rendered:
    result = run_helm(
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        KUBE_VERSION,
        *_values_args(values),
        *extra,
    )
    docs = [d for d in yaml.safe_load_all(result.stdout) if d]
    return Rendered(docs, release, namespace)


def template_error(values: Mapping[str, Any] | None = None, *, extra: Sequence[str] = ()) -> str:
    """helm template's error output for values it must refuse (the test fails if it renders)."""
    result = run_helm(
        "template", "dispatch-k8s", str(CHART), "--namespace", "dispatch-system", *_values_args(values), *extra,
        check=False,
    )  # fmt: skip
    assert result.returncode != 0, f"helm template accepted what it must refuse: {values or extra}"
    return result.stderr


def readme_argv(command: str, release: str, namespace: str) -> list[str]:
    """A README command's helm arguments (charts/readme.py COMMANDS), for a test's release, namespace and chart."""
    words = shlex.split(command.replace("\\\n", " "))
    assert words[0] == "helm", command
    swap = {"dispatch-k8s": release, "dispatch-system": namespace, "charts/dispatch-k8s": str(CHART)}
    return [swap.get(w, w) for w in words[1:]]
