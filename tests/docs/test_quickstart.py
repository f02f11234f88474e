"""docs/quickstart.md, run as written (tier C): every ``sh`` block, in order, in one bash, against tier B's API
server with a real kubelet, from `helm install` to the job's identity in its log and the uninstall.

The test changes no command. It gives the settings block's variables its own values (the admin's kubeconfig,
the image scripts/build-image built and imported into the node, the node's Debian image for the job, which
is never pulled), laid over the block after it has run; it puts the pinned kubectl and helm and this
checkout's dispatch-agent first on PATH; and it runs the blocks from a folder of its own whose `charts` is
the repository's, as a reader runs them from a checkout. kwok's nodes are cordoned and the real node's taint
lifted for the length of the test (as for the chart's own tier C test), so the chart's pods and the job's
trainer pod, which know nothing of the harness, are scheduled on the real node, and the log Output returns
is what a real container printed.

It installs from scratch and shares no installation with the other tier C tests: the install is one of the
commands the page gives, and it must run as written.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract.identity import attempt_token, epoch, r_of
from contract.keys import ADMISSION_CHECK_NAME
from harness.binaries import locate, locate_node
from harness.kube_http import KubeHttp
from harness.pytest_plugin import TierC
from tests.agent.gate.kit import eventually
from tests.charts.helm import ROOT, run_helm
from tests.charts.test_chart_on_a_kubelet import only_the_real_node  # noqa: F401  (fixture)
from tests.docs.blocks import Block, fenced_blocks

pytestmark = [pytest.mark.e2e, pytest.mark.node]

QUICKSTART = "docs/quickstart.md"
SETTINGS = ("KUBECONFIG", "DISPATCH_IMAGE_REPOSITORY", "DISPATCH_IMAGE_TAG", "JOB_IMAGE")
"""The variables the settings block declares and the test gives its own values."""
_EXPORT = re.compile(r"^export (?P<name>[A-Z_][A-Z0-9_]*)=\S+(\s+#.*)?$")
MARK = "### quickstart block "
KUEUE_V = "kueue.x-k8s.io/v1beta2"
ADMISSION = "admissionregistration.k8s.io/v1"
RELEASE, RELEASE_NS, JOB_NS = "dispatch-k8s", "dispatch-system", "team-a"
CLUSTER_OBJECTS = (
    (KUEUE_V, "ClusterQueue", "quickstart"),
    (KUEUE_V, "ResourceFlavor", "quickstart"),
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", "dispatch-preflight-team-a"),
    ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime", "dispatch-torch"),
)
"""What the quickstart creates outside its namespaces: removed by the test if a failed run left it."""


def shell_blocks() -> list[Block]:
    blocks = [b for b in fenced_blocks(QUICKSTART) if b.lang == "sh"]
    assert blocks, f"{QUICKSTART} has no sh block"
    return blocks


def settings_names(block: Block) -> list[str]:
    """The variables the settings block exports; AssertionError for a line that is not `export NAME=value`."""
    names = []
    for line in block.text.splitlines():
        m = _EXPORT.match(line.strip())
        assert m, f"{block.id}: the settings block holds only `export NAME=value` lines, not {line!r}"
        names.append(m["name"])
    return names


def script(blocks: list[Block], settings: dict[str, str]) -> str:
    """One bash script of the blocks, each announced by MARK and its place; the test's settings laid over the
    first block (the settings) right after it."""
    parts = ["set -euo pipefail"]
    for i, block in enumerate(blocks):
        parts.append(f"echo '{MARK}{block.id}'; echo '{MARK}{block.id}' >&2")
        parts.append(block.text)
        if i == 0:
            parts.extend(f"export {k}={_quote(v)}" for k, v in settings.items())
    parts.append(f"echo '{MARK}done'")
    return "\n".join(parts) + "\n"


def _quote(value: str) -> str:
    return "'" + value.replace("'", "'\\''") + "'"


def test_the_settings_block_declares_what_the_test_sets() -> None:
    # What the test sets must be what a reader sets: a renamed or dropped setting fails here, not silently.
    first = shell_blocks()[0]
    assert sorted(settings_names(first)) == sorted(SETTINGS), first.id


def test_the_script_runs_every_block_in_order_and_stops_at_the_first_failure(tmp_path: Path) -> None:
    # The runner itself: a failing command ends the run at its block, and the mark names that block.
    blocks = [
        Block("q.md", 1, "sh", "export KUBECONFIG=/x\n", "0"),
        Block("q.md", 5, "sh", "echo one\n", "1"),
        Block("q.md", 9, "sh", "false | cat\necho never\n", "2"),
        Block("q.md", 13, "sh", "echo two\n", "3"),
    ]
    done = subprocess.run(["bash", "-c", script(blocks, {"KUBECONFIG": "/y"})], capture_output=True, text=True)
    assert done.returncode != 0
    assert "one" in done.stdout
    assert "never" not in done.stdout
    assert "two" not in done.stdout
    assert _last_block(done.stdout) == "q.md:9"
    ok = subprocess.run(["bash", "-c", script(blocks[:2], {"KUBECONFIG": "/y"}) + 'echo "$KUBECONFIG"'],
                        capture_output=True, text=True)  # fmt: skip
    assert ok.returncode == 0, ok
    assert ok.stdout.rstrip().endswith("/y"), ok


def _last_block(stdout: str) -> str:
    marks = [line.removeprefix(MARK) for line in stdout.splitlines() if line.startswith(MARK)]
    return marks[-1] if marks else "(none)"


def _expected_output() -> list[str]:
    """The lines the quickstart says Output shows: its `text` block of DISPATCH_ variables."""
    (shown,) = [b for b in fenced_blocks(QUICKSTART) if b.lang == "text" and b.text.startswith("DISPATCH_")]
    return shown.text.splitlines()


def _path(tier_c: TierC) -> str:
    helm = locate().require(["helm"])["helm"].parent
    kubectl = locate_node().binary("kubectl")
    assert os.access(kubectl, os.X_OK), f"{kubectl} is missing: run controlplane/build-node.sh"
    venv = Path(sys.executable).parent  # this checkout's dispatch-agent (pip install -e .)
    assert (venv / "dispatch-agent").exists(), f"dispatch-agent is not installed beside {sys.executable}"
    return os.pathsep.join([str(kubectl.parent), str(helm), str(venv), os.environ.get("PATH", "/usr/bin:/bin")])


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A folder of the test's own, as a checkout's root: `charts` is the repository's."""
    (tmp_path / "charts").symlink_to(ROOT / "charts")
    return tmp_path


@pytest.fixture
def clean_cluster(tier_c: TierC) -> Iterator[None]:
    """Nothing of the quickstart's before it runs (the chart owns the AdmissionCheck's name), and nothing left
    after it, passed or failed."""
    admin = tier_c.tier_b.admin
    check = admin.get_or_none(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK_NAME)
    if check is not None:
        # Left by another test (not by a release): Kueue keeps it while a ClusterQueue names it.
        assert "meta.helm.sh/release-name" not in (check["metadata"].get("annotations") or {}), check["metadata"]
        admin.delete(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK_NAME)
        eventually(lambda: _gone(admin, KUEUE_V, "AdmissionCheck", ADMISSION_CHECK_NAME), 60,
                   f"AdmissionCheck {ADMISSION_CHECK_NAME}, left by another test, deleted")  # fmt: skip
    try:
        yield
    finally:
        kubeconfig = str(tier_c.tier_b.control_plane.admin_kubeconfig)
        run_helm("uninstall", RELEASE, "--namespace", RELEASE_NS, "--kubeconfig", kubeconfig, "--no-hooks",
                 "--ignore-not-found", check=False)  # fmt: skip
        for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
            admin.delete(ADMISSION, kind, RELEASE)
        for api, kind, name in CLUSTER_OBJECTS:
            admin.delete(api, kind, name)
        for ns in (JOB_NS, RELEASE_NS):
            if admin.get_or_none("v1", "Namespace", ns) is not None:
                tier_c.tier_b.control_plane.delete_namespace(ns)


def _gone(admin: KubeHttp, api: str, kind: str, name: str, namespace: str | None = None) -> bool:
    assert admin.get_or_none(api, kind, name, namespace) is None, f"{kind} {name} is still there"
    return True


@pytest.mark.usefixtures("only_the_real_node", "clean_cluster")
def test_the_quickstart_runs_as_written(tier_c: TierC, workdir: Path) -> None:
    if tier_c.image is None:
        pytest.fail(tier_c.image_problem, pytrace=False)
    blocks = shell_blocks()
    repository, tag = tier_c.image.rsplit(":", 1)
    settings = {
        "KUBECONFIG": str(tier_c.tier_b.control_plane.admin_kubeconfig),
        "DISPATCH_IMAGE_REPOSITORY": repository,
        "DISPATCH_IMAGE_TAG": tag,
        "JOB_IMAGE": tier_c.node.artifacts.base_image,  # imported into the node's containerd: never pulled
    }
    assert sorted(settings) == sorted(settings_names(blocks[0]))
    helm_home = workdir / ".helm"
    env = {
        "PATH": _path(tier_c),
        "HOME": str(workdir),  # the settings block's default kubeconfig path, never read: the test's is laid over
        "HELM_CACHE_HOME": str(helm_home / "cache"),
        "HELM_CONFIG_HOME": str(helm_home / "config"),
        "HELM_DATA_HOME": str(helm_home / "data"),
        "LANG": "C.UTF-8",
    }
    text = script(blocks, settings)
    (workdir / "quickstart.sh").write_text(text)
    try:
        done = subprocess.run(["bash", str(workdir / "quickstart.sh")], cwd=workdir, env=env, capture_output=True,
                              text=True, timeout=1200, check=False)  # fmt: skip
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        raise AssertionError(
            f"the quickstart did not finish within 20 min, at {_last_block(out)}:\n{out[-4000:]}"
        ) from None
    (workdir / "quickstart.log").write_text(f"{done.stdout}\n--- stderr\n{done.stderr}")
    assert done.returncode == 0, (
        f"the quickstart failed at {_last_block(done.stdout)} (exit {done.returncode}); "
        f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    )
    assert _last_block(done.stdout) == "done"
    out = done.stdout
    print(out)  # the reader's transcript (pytest -rP shows it)

    # Output: what the real container printed, as the quickstart shows it.
    shown = _expected_output()
    missing = [line for line in shown if line not in out.splitlines()]
    assert not missing, f"Output did not print {missing}:\n{out[-3000:]}"
    # ... and the contract's identity of a first execution (A = 1, J = 0), not only the page's copy of it.
    start = json.loads((workdir / "start.json").read_text())
    assert f"DISPATCH_EPOCH={epoch(start.get('g', 0), start['n'], r_of(1, 0))}" in out
    token = attempt_token(start["jobId"], start["n"], start["attempt"], 1, 0)
    assert f"DISPATCH_ATTEMPT={token}" in out
    # Status's table names the real node as the pod's: kwok's nodes were cordoned, and they print no log.
    assert tier_c.node.name in out, out[-3000:]

    # The clean-up left nothing: the release, its webhook configurations, the queue, the namespaces.
    admin = tier_c.tier_b.admin
    for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
        assert admin.get_or_none(ADMISSION, kind, RELEASE) is None, f"{kind} left failing closed"
    for api, kind, name in CLUSTER_OBJECTS:
        assert admin.get_or_none(api, kind, name) is None, f"{kind} {name} left by the clean-up"
    assert admin.get_or_none(KUEUE_V, "AdmissionCheck", ADMISSION_CHECK_NAME) is None
    for ns in (JOB_NS, RELEASE_NS):
        assert admin.get_or_none("v1", "Namespace", ns) is None, f"namespace {ns} left"
