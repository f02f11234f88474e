"""Tier C's build and the harness agree on where it lives, and it never shares tier A/B's cache folder."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.binaries import REPO_ROOT, MissingBinaryError, locate, locate_node


def _print_dir(script: str, cache: Path) -> Path:
    env = {**os.environ, "DISPATCH_K8S_CACHE": str(cache)}
    out = subprocess.run([str(REPO_ROOT / script), "--print-dir"], capture_output=True, text=True, env=env, check=True)
    return Path(out.stdout.strip())


def test_the_harness_finds_tier_c_where_build_node_puts_it(tmp_path: Path) -> None:
    env = {"DISPATCH_K8S_CACHE": str(tmp_path)}
    assert locate_node(environ=env).root == _print_dir("controlplane/build-node.sh", tmp_path)


def test_tier_c_has_its_own_cache_folder(tmp_path: Path) -> None:
    env = {"DISPATCH_K8S_CACHE": str(tmp_path)}
    node, cp = locate_node(environ=env).root, locate(environ=env).root
    assert node.parent == tmp_path / "node"
    assert cp.parent == tmp_path / "controlplane"
    assert cp == _print_dir("controlplane/build.sh", tmp_path)


def test_a_missing_build_names_what_is_missing_and_the_command(tmp_path: Path) -> None:
    artifacts = locate_node(environ={"DISPATCH_K8S_CACHE": str(tmp_path)})
    missing = artifacts.missing()
    assert {"kubelet", "containerd", "cni/bridge", "images/base.tar"} <= set(missing)
    with pytest.raises(MissingBinaryError, match=r"missing kubelet, .* controlplane/build-node\.sh"):
        artifacts.require()
