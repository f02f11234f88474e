"""dispatch installed from a release's artifacts alone (tier C), used, and uninstalled without a trace.

The release folder is scripts/release's (the session's ``released`` fixture, tests/charts/conftest.py). Nothing
of the checkout is on the install's path: the image is loaded into the real node's containerd from the release's
OCI archive (under the name and digest the packaged chart pins, so the kubelet finds it and never pulls), the
chart is the packaged ``.tgz``, its only values are the command line's, ``dispatch-agent`` is the release's wheel
in a virtual environment of its own, and the job's runtime is the example the package carries.

Then ``helm test`` passes and one job goes through it as docs/quickstart.md runs one (its blocks, unchanged, run
as tests/docs/test_quickstart.py runs them: the queue, the runtime, the supervisor, Preflight, Start, Open, the
job's log); the job is stopped and the quickstart's cluster-wide objects deleted, as its clean-up says, but its
namespaces are kept. After ``helm uninstall``, every object of every listable resource, namespaced and
cluster-scoped, is read: none made since the test began may be dispatch's (the release's labels and Helm
annotations, dispatch's keys, its names), but for what docs/install.md says stays (the agent's Lease; Events
are not read). The prologue's ConfigMap, which Start made in the job's namespace, is gone: the pre-delete hook
deleted it. Then the Lease is deleted as the page says, and nothing of dispatch is left at all.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

import pytest

from charts.readme import COMMANDS
from contract.keys import ADMISSION_CHECK_NAME, LEASE_NAME, NAME, PROLOGUE_CONFIGMAP_PREFIX
from contract.prologue import PROLOGUE_CONFIGMAP
from harness.binaries import locate, locate_node
from harness.kube_http import KubeHttp
from harness.pytest_plugin import TierC
from harness.sandbox.on_node import deployment_pods
from tests.agent.gate.kit import eventually
from tests.charts.helm import ROOT, readme_argv, run_helm
from tests.charts.test_chart_on_a_kubelet import only_the_real_node  # noqa: F401  (fixture)
from tests.charts.test_release import REPOSITORY, VERSION
from tests.docs.blocks import Block
from tests.docs.test_quickstart import (  # noqa: F401  (clean_cluster: fixture)
    JOB_NS,
    RELEASE,
    RELEASE_NS,
    _expected_output,
    _last_block,
    clean_cluster,
    script,
    shell_blocks,
)

DOMAIN = "dispatch.phpboyscout.uk/"
JOB_NAME = re.compile(r"dj-[0-9a-z]{26}-s[0-9]+")
SKIPPED = {"events"}
"""Resources not read: the Events the agent wrote stay until their TTL (docs/install.md, Uninstall)."""
DOCUMENTED = {("Lease", RELEASE_NS, LEASE_NAME)}
"""What docs/install.md says `helm uninstall` leaves of dispatch here: the agent's Lease, which Helm does not own."""
KEPT_CLEANUP = ("delete namespace", "helm uninstall")
"""The quickstart's clean-up lines this test runs itself (the uninstall) or later (the namespaces)."""


# -- what is dispatch's ------------------------------------------------------------------------------------


def dispatch_marks(obj: dict[str, Any]) -> list[str]:
    """Why ``obj`` is dispatch's: the release's Helm annotations or labels, a key or finalizer of dispatch's
    domain, or one of dispatch's names. Empty when it is not."""
    meta = obj["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    name = meta.get("name", "")
    marks = []
    if annotations.get("meta.helm.sh/release-name") == RELEASE:
        marks.append("the release's Helm annotation")
    marks += [f"label {k}={v}" for k, v in labels.items()
              if (k, v) in {("app.kubernetes.io/instance", RELEASE), ("app.kubernetes.io/name", NAME),
                            ("app.kubernetes.io/managed-by", NAME)}]  # fmt: skip
    marks += [f"key {k}" for k in (*labels, *annotations) if k.startswith(DOMAIN)]
    marks += [f"finalizer {f}" for f in meta.get("finalizers") or [] if f.startswith(DOMAIN)]
    if (
        name in (RELEASE, ADMISSION_CHECK_NAME, LEASE_NAME)
        or name.startswith((f"{RELEASE}-", PROLOGUE_CONFIGMAP_PREFIX, f"sh.helm.release.v1.{RELEASE}."))
        or JOB_NAME.search(name)
    ):
        marks.append(f"name {name}")
    return marks


def listable(admin: KubeHttp) -> list[tuple[str, str, str]]:
    """(collection path, resource, kind) of every resource the API server lists, in each group's preferred
    version (one object is one object whatever the version), namespaced ones across all namespaces."""
    docs = [("/api/v1", admin.request("GET", "/api/v1"))]
    for group in admin.request("GET", "/apis")["groups"]:
        version = group["preferredVersion"]["groupVersion"]
        docs.append((f"/apis/{version}", admin.request("GET", f"/apis/{version}")))
    return [
        (f"{prefix}/{r['name']}", r["name"], r["kind"])
        for prefix, doc in docs
        for r in doc["resources"]
        if "/" not in r["name"] and "list" in r.get("verbs", []) and r["name"] not in SKIPPED
    ]


def dispatch_objects(admin: KubeHttp) -> dict[str, tuple[tuple[str, str, str], list[str]]]:
    """uid -> ((kind, namespace, name), marks) of every object in the cluster that is dispatch's."""
    found = {}
    for path, _resource, kind in listable(admin):
        for obj in admin.request("GET", path)["items"]:
            if marks := dispatch_marks(obj):
                meta = obj["metadata"]
                found[meta["uid"]] = ((kind, meta.get("namespace", ""), meta["name"]), marks)
    return found


def test_dispatch_marks_names_what_is_dispatchs_and_nothing_else() -> None:
    def obj(name: str, **meta: Any) -> dict[str, Any]:
        return {"metadata": {"name": name, **meta}}

    assert dispatch_marks(obj(PROLOGUE_CONFIGMAP, namespace=JOB_NS))
    assert dispatch_marks(obj("trainjob-dj-01jdq7z9v3k8m2n4p6r8t0w2y4-s1-3a2f1"))
    assert dispatch_marks(obj("x", finalizers=["dispatch.phpboyscout.uk/may-still-run"]))
    assert dispatch_marks(obj("x", annotations={"meta.helm.sh/release-name": RELEASE}))
    assert dispatch_marks(obj(LEASE_NAME, namespace=RELEASE_NS))
    assert dispatch_marks(obj(f"{RELEASE}-uninstall"))
    # The harness's own keys (a real node's label) and a namespace that merely names dispatch are not.
    assert not dispatch_marks(obj("real-node-0", labels={"harness.dispatch.phpboyscout.uk/real-node": "true"}))
    assert not dispatch_marks(obj(RELEASE_NS))
    assert not dispatch_marks(obj("supervisor", namespace=JOB_NS))


# -- the release's artifacts --------------------------------------------------------------------------------


def load_release_image(tier_c: TierC, released: Path, version: str = VERSION) -> tuple[str, str]:
    """The release's OCI archive imported into the node's containerd, under the name its index gives and under its
    manifest's digest (what the kubelet looks up for `repository:tag@digest`); any earlier copy removed first.
    Two releases of one version share the tag; each keeps its digest's name. Returns (name, digest)."""
    archive = released / f"dispatch-k8s-image-{version}.oci.tar"
    digest = (released / f"dispatch-k8s-image-{version}.digest").read_text().strip()
    name = f"{REPOSITORY}:{version}"
    tier_c.node.ctr("images", "rm", name, f"{REPOSITORY}@{digest}", check=False)
    tier_c.node.ctr("images", "import", str(archive))
    # What a pull leaves beside the tag: the name by the manifest's digest, which the CRI resolves
    # `repository:tag@digest` by (ctr's --digests would name the archive's index instead).
    tier_c.node.ctr("images", "tag", "--force", name, f"{REPOSITORY}@{digest}")
    listed = set(tier_c.node.ctr("images", "list", "--quiet").stdout.split())
    assert {name, f"{REPOSITORY}@{digest}"} <= listed, sorted(i for i in listed if REPOSITORY in i)
    return name, digest


def agent_venv(released: Path, into: Path) -> Path:
    """The release's wheel in a virtual environment of its own: the `dispatch-agent` the job is driven with."""
    subprocess.run([sys.executable, "-m", "venv", str(into)], check=True)
    wheel = released / f"dispatch_k8s-{VERSION}-py3-none-any.whl"
    lock = ROOT / "requirements" / "lock.txt"
    subprocess.run([str(into / "bin" / "pip"), "install", "-q", "-c", str(lock), str(wheel)], check=True,
                   timeout=600)  # fmt: skip
    return into / "bin"


def runtime_from_the_package(chart: Path, workdir: Path) -> None:
    """The package's example runtime where the quickstart's block reads it (charts/dispatch-k8s/examples/)."""
    with tarfile.open(chart) as tar:
        member = tar.extractfile("dispatch-k8s/examples/training-runtime.yaml")
        assert member is not None
        target = workdir / "charts" / "dispatch-k8s" / "examples" / "training-runtime.yaml"
        target.parent.mkdir(parents=True)
        target.write_bytes(member.read())


def the_script(chart: Path, agent_bin: Path, settings: dict[str, str]) -> str:
    """The quickstart's blocks with its install replaced by the package's and its clean-up without the uninstall
    and the namespaces' deletion; its settings block as the quickstart test lays it."""
    blocks = shell_blocks()
    (install,) = [i for i, b in enumerate(blocks) if "helm install" in b.text]
    (cleanup,) = [i for i, b in enumerate(blocks) if "helm uninstall" in b.text]
    assert (install, cleanup) == (1, len(blocks) - 1), (
        "the quickstart's order changed: settings, install, ..., clean-up"
    )
    from_release = Block("release", 1, "sh", "\n".join([
        f'test "$(command -v dispatch-agent)" = {agent_bin / "dispatch-agent"}',
        f"helm install {RELEASE} {chart} --namespace {RELEASE_NS} --create-namespace \\",
        "  --set 'api.tokenAudiences={dispatch-agent}' --wait --timeout 5m",
        f"helm test {RELEASE} --namespace {RELEASE_NS} --logs",
    ]) + "\n", "install from the release")  # fmt: skip
    lines = blocks[cleanup].text.splitlines()
    kept = [line for line in lines if not any(k in line for k in KEPT_CLEANUP)]
    assert len(lines) - len(kept) == 3, "the quickstart's clean-up: one uninstall and two namespaces"
    stop = Block(blocks[cleanup].path, blocks[cleanup].line, "sh", "\n".join(kept) + "\n", blocks[cleanup].heading)
    return script([blocks[0], from_release, *blocks[install + 1 : cleanup], stop], settings)


@pytest.mark.e2e
@pytest.mark.node
@pytest.mark.usefixtures("only_the_real_node", "clean_cluster")
@pytest.mark.timeout(3000)  # the session's scripts/release runs in this test's setup when it runs alone
def test_install_use_and_uninstall_from_the_release_artifacts_alone(
    tier_c: TierC, released: Path, tmp_path: Path
) -> None:
    admin = tier_c.tier_b.admin
    before = set(dispatch_objects(admin))
    chart = released / f"dispatch-k8s-{VERSION}.tgz"
    image, digest = load_release_image(tier_c, released)
    workdir = tmp_path / "work"
    workdir.mkdir()
    runtime_from_the_package(chart, workdir)
    agent_bin = agent_venv(released, tmp_path / "agent-venv")

    helm = locate().require(["helm"])["helm"].parent
    kubectl = locate_node().binary("kubectl").parent
    settings = {
        "KUBECONFIG": str(tier_c.tier_b.control_plane.admin_kubeconfig),
        "DISPATCH_IMAGE_REPOSITORY": REPOSITORY,  # unused: the package pins its image
        "DISPATCH_IMAGE_TAG": VERSION,
        "JOB_IMAGE": tier_c.node.artifacts.base_image,  # imported into the node's containerd: never pulled
    }
    (workdir / "from-release.sh").write_text(the_script(chart, agent_bin, settings))
    env = {
        "PATH": f"{agent_bin}:{kubectl}:{helm}:/usr/local/bin:/usr/bin:/bin",
        "HOME": str(workdir),
        "HELM_CACHE_HOME": str(workdir / ".helm" / "cache"),
        "HELM_CONFIG_HOME": str(workdir / ".helm" / "config"),
        "HELM_DATA_HOME": str(workdir / ".helm" / "data"),
        "LANG": "C.UTF-8",
    }
    started = time.monotonic()
    done = subprocess.run(["bash", str(workdir / "from-release.sh")], cwd=workdir, env=env, capture_output=True,
                          text=True, timeout=1200, check=False)  # fmt: skip
    (workdir / "from-release.log").write_text(f"{done.stdout}\n--- stderr\n{done.stderr}")
    assert done.returncode == 0, (
        f"failed at {_last_block(done.stdout)} (exit {done.returncode}); "
        f"stdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"
    )
    assert "Phase:          Succeeded" in done.stdout, "helm test's pod did not pass"
    missing = [line for line in _expected_output() if line not in done.stdout.splitlines()]
    assert not missing, f"the job's Output did not print {missing}:\n{done.stdout[-3000:]}"
    print(f"install, helm test, the job and its stop: {time.monotonic() - started:.0f}s")

    # What ran was the release's image: the package pins it by digest, and the kubelet resolved that digest from
    # the archive's import (no registry is reachable). status.image is not compared: the CRI reports any of the
    # image's names, and the lane's own tag of the same image may be one.
    pods = deployment_pods(admin, RELEASE_NS, RELEASE)
    assert pods, "the release's pods"
    for pod in pods:
        spec = pod["spec"]["containers"] + pod["spec"].get("initContainers", [])
        assert {c["image"] for c in spec} == {f"{image}@{digest}"}, [c["image"] for c in spec]
        for status in pod["status"]["containerStatuses"] + pod["status"].get("initContainerStatuses", []):
            assert status["imageID"].endswith(digest), (status["name"], status["imageID"])
    # Start made the prologue's ConfigMap in the job's namespace; nothing but the hook removes it now.
    assert admin.get_or_none("v1", "ConfigMap", PROLOGUE_CONFIGMAP, JOB_NS) is not None

    kubeconfig = str(tier_c.tier_b.control_plane.admin_kubeconfig)
    out = run_helm(*readme_argv(COMMANDS["uninstall"], RELEASE, RELEASE_NS), "--kubeconfig", kubeconfig,
                   timeout=600).stdout  # fmt: skip
    assert "uninstalled" in out, out

    def left() -> dict[tuple[str, str, str], list[str]]:
        return {what: marks for uid, (what, marks) in dispatch_objects(admin).items() if uid not in before}

    def only_the_documented() -> dict[tuple[str, str, str], list[str]]:
        now = left()
        assert set(now) == DOCUMENTED, sorted(now.items())
        return now

    # Helm returns once it asked for each deletion: the pods' end and the garbage collector take a moment.
    eventually(only_the_documented, 180, "after helm uninstall, nothing of dispatch's but the agent's Lease",
               interval=2)  # fmt: skip
    assert admin.get_or_none("v1", "ConfigMap", PROLOGUE_CONFIGMAP, JOB_NS) is None, "the hook deletes it"
    assert admin.get_or_none("v1", "Namespace", JOB_NS) is not None, "the namespace was kept: the hook deleted it"

    # docs/install.md: `kubectl -n dispatch-system delete lease dispatch-admission`.
    admin.delete("coordination.k8s.io/v1", "Lease", LEASE_NAME, RELEASE_NS)
    eventually(lambda: _assert_empty(left()), 60, "nothing of dispatch's left at all", interval=2)


def _assert_empty(found: dict[tuple[str, str, str], list[str]]) -> None:
    assert not found, sorted(found.items())


def test_the_script_runs_the_quickstarts_blocks_with_the_packages_install(tmp_path: Path) -> None:
    text = the_script(tmp_path / "dispatch-k8s.tgz", tmp_path / "bin", {"KUBECONFIG": "/k"})
    assert f"helm install {RELEASE} {tmp_path / 'dispatch-k8s.tgz'} --namespace {RELEASE_NS}" in text
    assert "charts/dispatch-k8s --namespace" not in text, "the checkout's chart is not installed"
    assert "--set image." not in text, "the package's pinned image, not one given"
    assert "dispatch-agent start --request start.json" in text
    assert "dispatch-agent stop --request job.json" in text
    assert "kubectl delete clusterqueue quickstart" in text
    assert "helm uninstall" not in text
    assert "delete namespace" not in text
    assert text.index("export KUBECONFIG='/k'") < text.index("helm install")
