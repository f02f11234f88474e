"""`python -m harness.matrix [PYTEST ARGS]`: the Kubernetes compatibility matrix (docs/compatibility.md).

For the pinned Kubernetes and each older version of controlplane/matrix.env, oldest first, one after another: the
version's kube-apiserver built where missing (`controlplane/build.sh --kube VERSION`), then one pytest of
harness.lanes.MATRIX_TESTS on tier A with it (`DISPATCH_K8S_KUBE_VERSION`). It writes the table of results to
`RESULT_FILE` (docs/compatibility-matrix.md, which docs/compatibility.md points at) and prints it; the exit code is
the first failing version's pytest's. `scripts/test --matrix` runs it.
"""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.binaries import BUILD_SCRIPT, KUBE_VERSION_ENV, REPO_ROOT, locate, matrix_versions
from harness.lanes import MATRIX_TESTS, matrix_deselect
from harness.report import minutes

RESULT_FILE = REPO_ROOT / "docs" / "compatibility-matrix.md"


@dataclass(frozen=True)
class Result:
    version: str
    pinned: bool
    code: int
    counts: Mapping[str, int]
    build_seconds: float
    test_seconds: float

    @property
    def verdict(self) -> str:
        return "passed" if self.code == 0 else f"failed (pytest exit {self.code})"


def junit_counts(path: Path) -> dict[str, int]:
    """passed, failed (failures and errors) and skipped, from pytest's JUnit XML; zeros where there is none."""
    try:
        suites = ET.parse(path).getroot()
    except (FileNotFoundError, ET.ParseError):
        return {"passed": 0, "failed": 0, "skipped": 0}
    suite = suites if suites.tag == "testsuite" else suites.find("testsuite")
    attrs = {k: int(suite.get(k, "0")) for k in ("tests", "failures", "errors", "skipped")} if suite is not None else {}
    failed = attrs.get("failures", 0) + attrs.get("errors", 0)
    skipped = attrs.get("skipped", 0)
    return {"passed": attrs.get("tests", 0) - failed - skipped, "failed": failed, "skipped": skipped}


def render(results: Sequence[Result], started: datetime.datetime, commit: str) -> str:
    lines = [
        "# The Kubernetes matrix: its last result",
        "",
        "Written by `scripts/test --matrix` (harness/matrix.py), which runs the reduced set of tier A tests",
        "(harness/lanes.py `MATRIX_TESTS`) on each Kubernetes version of the matrix; docs/compatibility.md says what",
        "the set proves and what is not tested.",
        "",
        f"Run: {started:%Y-%m-%d %H:%M} UTC, commit {commit}.",
        "",
        "| Kubernetes | kube-apiserver | result | passed | failed | skipped | build | tests |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        built = "the pin (controlplane/versions.env)" if r.pinned else "`controlplane/build.sh --kube`"
        lines.append(
            f"| {r.version} | {built} | {r.verdict} | {r.counts['passed']} | {r.counts['failed']} | "
            f"{r.counts['skipped']} | {minutes(r.build_seconds)} | {minutes(r.test_seconds)} |"
        )
    return "\n".join(lines) + "\n"


def _commit() -> str:
    """The checkout's commit, and whether its tree had changes beside it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True,
                              check=False).stdout.strip()  # fmt: skip

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + (" with uncommitted changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def run_version(version: str, pinned: bool, pytest_args: Sequence[str], folder: Path) -> Result:
    env = dict(os.environ)
    env.pop(KUBE_VERSION_ENV, None)
    build_seconds = 0.0
    if not pinned:
        env[KUBE_VERSION_ENV] = version
        start = time.monotonic()
        build = subprocess.run([str(REPO_ROOT / BUILD_SCRIPT), "--kube", version, "kube-apiserver"], env=env,
                               check=False)  # fmt: skip
        build_seconds = time.monotonic() - start
        if build.returncode != 0:
            return Result(version, pinned, build.returncode, junit_counts(Path("/nonexistent")), build_seconds, 0.0)
    junit = folder / f"{version}.xml"
    argv = [sys.executable, "-m", "pytest", "-m", "cluster", f"--junitxml={junit}", *MATRIX_TESTS,
            *matrix_deselect(version), *pytest_args]  # fmt: skip
    print(f"\n== Kubernetes {version}: {' '.join(argv[1:])}", flush=True)
    start = time.monotonic()
    code = subprocess.run(argv, env=env, cwd=REPO_ROOT, check=False).returncode
    return Result(version, pinned, code, junit_counts(junit), build_seconds, time.monotonic() - start)


def main(argv: Sequence[str] | None = None) -> int:
    pytest_args = list(sys.argv[1:] if argv is None else argv)
    started = datetime.datetime.now(datetime.UTC)
    pin = locate(environ={}).versions["K8S_VERSION"]
    versions = [(v, False) for v in matrix_versions()] + [(pin, True)]
    folder = Path(tempfile.mkdtemp(prefix="dispatch-k8s-matrix-"))
    results = [run_version(v, pinned, pytest_args, folder) for v, pinned in versions]
    text = render(results, started, _commit())
    RESULT_FILE.write_text(text)
    print(f"\n{text}\n(written to {RESULT_FILE.relative_to(REPO_ROOT)})", flush=True)
    return next((r.code for r in results if r.code != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
