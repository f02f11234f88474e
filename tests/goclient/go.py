"""Go for the Go client's tests: the toolchain on PATH (never downloaded), the module at clients/go, and
builds that reuse the machine's Go caches (the default GOCACHE and GOMODCACHE, kept across runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "clients" / "go"
MODULE_PATH = "github.com/phpboyscout/dispatch-k8s/clients/go"


def go() -> str:
    """The go command; a missing toolchain fails the test (never skips it)."""
    found = shutil.which("go")
    if found is None:
        pytest.fail("Go 1.26 is not on PATH: the Go client's tests need it (README, Run the tests)", pytrace=False)
    return found


def go_env(**extra: str) -> dict[str, str]:
    """The environment, with the local toolchain only (a build never rewrites go.mod: -mod=readonly is go's
    default)."""
    return {**os.environ, "GOTOOLCHAIN": "local", **extra}


def run_go(*args: str, cwd: Path = MODULE, timeout: float = 600, **env: str) -> subprocess.CompletedProcess[str]:
    """``go ARGS`` in ``cwd``; fails the test with its output when it fails."""
    done = subprocess.run(
        [go(), *args], cwd=cwd, env=go_env(**env), capture_output=True, text=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"go {' '.join(args)} (in {cwd}) exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done
