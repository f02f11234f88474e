"""The release (docs/releases.md): one version everywhere, and what scripts/release builds.

The version checks and scripts/release's refusals are unit tests. The release itself runs in the tier C lane
(marker ``node``), whose builds include the image (scripts/build-image): scripts/release runs on a clean copy of
the checkout (its files as a clean clone holds them, committed in a repository of their own), so its image is
this checkout's, the one the lane already built, and nothing is built twice. Then each artifact is checked: the
checksums, the packaged chart renders the digest of the OCI archive's manifest, the SBOMs list the components
they must. The two wheels, built from this tree as the release builds them, are unit tests: the package's installs
in a fresh virtual environment where ``dispatch-agent --help`` runs, and so does the command-line client's, alone,
where ``kubectl-dispatch --help`` runs without any server's dependency.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
import yaml

from harness import cli_dist
from tests.charts.helm import ROOT, run_helm
from tests.charts.test_image import checkout_tree

VERSION = (ROOT / "VERSION").read_text().strip()
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z-]+(\.[0-9A-Za-z-]+)*)?$")
RELEASE = ROOT / "scripts" / "release"
REPOSITORY = yaml.safe_load((ROOT / "charts" / "dispatch-k8s" / "values.yaml").read_text())["image"]["repository"]


# --- one version --------------------------------------------------------------------------------------------


def test_the_version_is_semver_and_the_charts_version_and_app_version():
    assert SEMVER.match(VERSION), f"VERSION is not SemVer: {VERSION!r}"
    chart = yaml.safe_load((ROOT / "charts" / "dispatch-k8s" / "Chart.yaml").read_text())
    assert (chart["version"], chart["appVersion"]) == (VERSION, VERSION), "set Chart.yaml's to VERSION's"


def test_the_python_package_reads_its_version_from_the_version_file():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"file": "VERSION"}


def test_the_changelog_has_the_versions_section_and_each_version_its_upgrade_notes():
    text = (ROOT / "CHANGELOG.md").read_text()
    sections = re.split(r"^## ", text, flags=re.MULTILINE)[1:]
    headings = [s.splitlines()[0] for s in sections]
    assert headings[0] == "[Unreleased]", "Keep a Changelog: [Unreleased] first"
    assert any(h.startswith(f"[{VERSION}]") for h in headings), f"CHANGELOG.md has no section [{VERSION}]"
    for section in sections[1:]:
        assert "### Upgrade notes" in section, f"{section.splitlines()[0]}: no Upgrade notes"


def test_the_license_is_the_apache_2_0_text_pyproject_and_the_image_claim():
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"] == "Apache-2.0"
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in (ROOT / "Dockerfile").read_text()


# --- scripts/release's refusals (before it builds anything) ----------------------------------------------------


def clean_copy(into: Path) -> Path:
    """This checkout's files as a clean clone holds them, committed in a repository of their own."""
    checkout_tree(into)
    git = ["git", "-c", "user.name=release test", "-c", "user.email=release@test.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the checkout as it is"]):
        subprocess.run([*git, *args], cwd=into, check=True, capture_output=True)
    return into


def release(tree: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    # The tests' virtual environment: a clean copy has none of its own.
    env = {**os.environ, "DISPATCH_K8S_VENV": sys.prefix}
    return subprocess.run(
        [str(tree / "scripts" / "release"), *args], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return clean_copy(tmp_path_factory.mktemp("release") / "src")


def test_it_refuses_a_version_that_is_not_semver(tmp_path):
    result = release(ROOT, "v0.1", "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "is not a SemVer version" in result.stderr


def test_it_refuses_a_dirty_tree_and_names_its_files(copy, tmp_path):
    stray = copy / "charts" / "stray.txt"
    stray.write_text("not committed\n")
    try:
        result = release(copy, VERSION, "--out", str(tmp_path / "out"))
    finally:
        stray.unlink()
    assert result.returncode != 0
    assert "the tree is not clean" in result.stderr
    assert "charts/stray.txt" in result.stderr


def test_it_refuses_a_version_other_than_the_version_files(copy, tmp_path):
    result = release(copy, "9.9.9", "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert f"VERSION says {VERSION}, not 9.9.9" in result.stderr


def test_it_refuses_a_folder_that_is_not_empty(copy, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old").write_text("")
    result = release(copy, VERSION, "--out", str(tmp_path / "out"))
    assert result.returncode != 0
    assert "is not empty" in result.stderr


# --- the release -------------------------------------------------------------------------------------------

ARTIFACTS = {
    f"dispatch-k8s-{VERSION}.tgz",
    f"dispatch-k8s-image-{VERSION}.oci.tar",
    f"dispatch-k8s-image-{VERSION}.digest",
    f"dispatch_k8s-{VERSION}-py3-none-any.whl",
    f"dispatch_k8s-{VERSION}.tar.gz",
    f"dispatch_k8s_cli-{VERSION}-py3-none-any.whl",
    f"dispatch_k8s_cli-{VERSION}.tar.gz",
    f"dispatch-k8s-image-python-{VERSION}.cdx.json",
    f"dispatch-k8s-go-client-{VERSION}.cdx.json",
    "SHA256SUMS",
}


# ``released``, the folder scripts/release built (once per session: tests/charts/conftest.py).


def _index_and_blobs(archive: Path) -> tuple[dict, dict[str, bytes]]:
    """The OCI archive's index.json and its small blobs (manifests, configs), by digest; layers are hashed."""
    blobs: dict[str, bytes] = {}
    with tarfile.open(archive) as tar:
        index = json.loads(tar.extractfile("index.json").read())  # type: ignore[union-attr] # it is a file
        for member in tar:
            if member.isfile() and member.name.startswith("blobs/sha256/"):
                sha = hashlib.sha256()
                data = io.BytesIO()
                f = tar.extractfile(member)
                assert f is not None
                while chunk := f.read(1 << 20):
                    sha.update(chunk)
                    if member.size < (1 << 20):
                        data.write(chunk)
                hexdigest = member.name.rsplit("/", 1)[1]
                assert sha.hexdigest() == hexdigest, f"{member.name} does not hash to its name"
                blobs[f"sha256:{hexdigest}"] = data.getvalue()
    return index, blobs


@pytest.mark.node  # the tier C lane: its builds include the image this needs (see the module's docstring)
@pytest.mark.timeout(1800)
def test_the_release_folder_holds_every_artifact_and_its_checksum(released):
    assert {p.name for p in released.iterdir()} == ARTIFACTS
    listed = dict(line.split("  ", 1)[::-1] for line in (released / "SHA256SUMS").read_text().splitlines())
    assert set(listed) == ARTIFACTS - {"SHA256SUMS"}
    for name, digest in listed.items():
        assert hashlib.sha256((released / name).read_bytes()).hexdigest() == digest, name
    subprocess.run(["sha256sum", "--quiet", "-c", "SHA256SUMS"], cwd=released, check=True)


@pytest.mark.node
@pytest.mark.timeout(1800)
def test_the_packaged_chart_pins_the_digest_of_the_image_archive(released):
    digest = (released / f"dispatch-k8s-image-{VERSION}.digest").read_text().strip()
    index, blobs = _index_and_blobs(released / f"dispatch-k8s-image-{VERSION}.oci.tar")
    (entry,) = index["manifests"]
    assert entry["digest"] == digest
    assert entry["annotations"]["io.containerd.image.name"] == f"{REPOSITORY}:{VERSION}"
    manifest = json.loads(blobs[digest])
    config = json.loads(blobs[manifest["config"]["digest"]])
    assert len(manifest["layers"]) == len(config["rootfs"]["diff_ids"]) >= 1
    assert all(layer["digest"] in blobs for layer in manifest["layers"]), "a layer the manifest names is missing"
    assert config["config"]["User"] == "65532:65532", "the Dockerfile's image"

    chart = released / f"dispatch-k8s-{VERSION}.tgz"
    shown = yaml.safe_load(run_helm("show", "chart", str(chart)).stdout)
    assert (shown["version"], shown["appVersion"]) == (VERSION, VERSION)
    docs = [
        d
        for d in yaml.safe_load_all(
            run_helm("template", "dispatch-k8s", str(chart), "--namespace", "dispatch-system").stdout
        )
        if d
    ]
    images = {
        c["image"]
        for d in docs
        if d["kind"] in ("Deployment", "Pod", "Job")
        for spec in [d["spec"]["template"]["spec"] if d["kind"] != "Pod" else d["spec"]]
        for c in spec.get("initContainers", []) + spec["containers"]
    }
    assert images == {f"{REPOSITORY}:{VERSION}@{digest}"}


@pytest.mark.node
@pytest.mark.timeout(1800)
def test_the_sboms_parse_and_list_what_they_cover(released):
    python = json.loads((released / f"dispatch-k8s-image-python-{VERSION}.cdx.json").read_text())
    assert python["bomFormat"] == "CycloneDX"
    versions = {c["name"].lower().replace("_", "-"): c.get("version") for c in python["components"]}
    assert versions["dispatch-k8s"] == VERSION
    names = set(versions)
    assert {"dispatch-k8s", "aiohttp", "kubernetes-asyncio", "pydantic", "cryptography", "pyyaml"} <= names
    assert not {"pip", "pytest"} & names, "only what the image holds"

    go = json.loads((released / f"dispatch-k8s-go-client-{VERSION}.cdx.json").read_text())
    assert go["bomFormat"] == "CycloneDX"
    module = go["metadata"]["component"]
    assert (module["name"], module["version"]) == ("github.com/phpboyscout/dispatch-k8s/clients/go", f"v{VERSION}")
    modules = {c["name"] for c in go["components"]}
    assert {"github.com/oapi-codegen/runtime", "github.com/pb33f/libopenapi"} <= modules


PIP_INSTALL = ("install", "-q", "--no-compile")
"""Without the bytecode of every dependency (most of an install's time, and nothing of the wheel's): Python compiles
what the commands import when they run."""


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """This tree's two wheels, built as scripts/release builds them: the package from a clean copy of the checkout,
    the command-line client by harness.cli_dist. The release's own are checked in the release folder above (and
    scripts/release installs its package wheel with the lock's versions); here each installs and runs, with no image
    to wait for, off the tier C lane."""
    copy = clean_copy(tmp_path_factory.mktemp("wheels") / "src")
    out = tmp_path_factory.mktemp("wheels-out")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--wheel-dir", str(out), str(copy)],
                   check=True, timeout=600)  # fmt: skip
    return {"dispatch-k8s": out / f"dispatch_k8s-{VERSION}-py3-none-any.whl", "dispatch-k8s-cli": cli_dist.build(out)}


@pytest.mark.timeout(1800)
def test_the_wheel_installs_in_a_fresh_environment_and_its_command_line_runs(wheels, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheel = wheels["dispatch-k8s"]
    lock = ROOT / "requirements" / "lock.txt"
    subprocess.run([str(venv / "bin" / "pip"), *PIP_INSTALL, "-c", str(lock), str(wheel)], check=True, timeout=600)
    result = subprocess.run([str(venv / "bin" / "dispatch-agent"), "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "usage: dispatch-agent" in result.stdout
    version = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; print(m.version('dispatch-k8s'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert version == VERSION


@pytest.mark.timeout(1800)
def test_the_cli_wheel_installs_alone_and_kubectl_dispatch_runs(wheels, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    wheel = wheels["dispatch-k8s-cli"]
    lock = ROOT / "requirements" / "lock.txt"
    subprocess.run([str(venv / "bin" / "pip"), *PIP_INSTALL, "-c", str(lock), str(wheel)], check=True, timeout=600)
    result = subprocess.run([str(venv / "bin" / "kubectl-dispatch"), "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "usage: kubectl dispatch" in result.stdout
    version = subprocess.run([str(venv / "bin" / "kubectl-dispatch"), "--version"], capture_output=True, text=True)
    assert version.stdout.startswith(f"kubectl dispatch {VERSION} "), version
    result = subprocess.run([str(venv / "bin" / "dispatch-agent"), "status", "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    frozen = subprocess.run([str(venv / "bin" / "pip"), "freeze"], capture_output=True, text=True, check=True).stdout
    # name==version, or name @ file:///…whl for the wheel itself
    installed = {re.split(r"==| @ ", line)[0].lower().replace("_", "-") for line in frozen.splitlines()}
    assert "dispatch-k8s-cli" in installed
    assert not {"dispatch-k8s", "prometheus-client", "cryptography"} & installed, "none of the servers' dependencies"
