"""Where controlplane/build.sh puts the binaries, CRDs and manifests for the pinned versions.

The cache key is computed here exactly as build.sh computes it, so the harness finds the build
of the versions in this checkout and nothing else.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
CONTROLPLANE_DIR = REPO_ROOT / "controlplane"
VERSIONS_FILE = CONTROLPLANE_DIR / "versions.env"
BUILD_SCRIPT = "controlplane/build.sh"
NODE_VERSIONS_FILE = CONTROLPLANE_DIR / "node.env"
NODE_BUILD_SCRIPT = "controlplane/build-node.sh"
# Tier C's binaries (the CNI plugins are under bin/cni/).
NODE_BINARIES = ("kubelet", "kube-proxy", "kubectl", "containerd", "containerd-shim-runc-v2", "ctr")
CNI_PLUGINS = ("bridge", "host-local", "loopback")
# runc comes from Debian (apt-get install runc); containerd runs it by this path.
RUNC = Path("/usr/sbin/runc")

TIER_A_BINARIES = ("etcd", "kube-apiserver")
TIER_B_BINARIES = (
    *TIER_A_BINARIES,
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "jobset",
    "trainer-controller-manager",
    "kueue",
)


PENDING_BUILDS_ENV = "DISPATCH_K8S_PENDING_BUILDS"
"""A status file of the builds `scripts/test` runs beside its first tests (`scripts/setup --rest`): `running`, then
`done` and their seconds, or `failed` and the log's path."""


class MissingBinaryError(RuntimeError):
    """A control-plane artifact has not been built for the pinned versions."""


BUILD_WAIT_SECONDS = 3600
"""How long a test waits for the builds beside it: a fresh machine's control plane, nodes and image, busy cores."""


def await_builds(
    environ: Mapping[str, str] = os.environ,
    poll: float = 2.0,
    timeout: float = BUILD_WAIT_SECONDS,
    built: Callable[[], bool] = lambda: False,
) -> None:
    """Returns once the background builds have ended, or once `built()` says what the caller needs is there; at once
    where none run. MissingBinaryError if they failed first."""
    path = environ.get(PENDING_BUILDS_ENV)
    if not path:
        return
    deadline = time.monotonic() + timeout
    while (state := _read(Path(path))).startswith("running") and not built():
        if time.monotonic() > deadline:
            raise MissingBinaryError(f"the background builds ({path}) still ran after {timeout:.0f} s")
        time.sleep(poll)
    if state.startswith("failed"):
        raise MissingBinaryError(f"the builds scripts/test ran in the background failed: {state}")


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        return ""


def parse_versions(text: str) -> dict[str, str]:
    """KEY=value lines; blank lines and # comments are ignored (the subset bash `source` reads the same)."""
    versions: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.isidentifier() or any(c in value for c in " \"'$`"):
            raise ValueError(f"versions.env line {number} is not a plain KEY=value: {raw!r}")
        versions[key] = value
    return versions


def cache_key(versions_text: bytes, k8s_version: str) -> str:
    return f"k8s-{k8s_version}-{hashlib.sha256(versions_text).hexdigest()[:12]}"


def cache_root(environ: Mapping[str, str] = os.environ) -> Path:
    base = environ.get("DISPATCH_K8S_CACHE") or str(Path.home() / ".cache" / "dispatch-k8s")
    return Path(base) / "controlplane"


@dataclass(frozen=True)
class Artifacts:
    """The build of one set of pins: bin/, crds/ and manifests/ under `root`; `binaries` puts some elsewhere (an older
    kube-apiserver of the matrix: `locate`)."""

    root: Path
    versions: Mapping[str, str]
    binaries: Mapping[str, Path] = field(default_factory=dict)
    build_hint: str = ""
    """The command that builds `binaries`, for the error that names what is missing."""

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def crds_dir(self) -> Path:
        return self.root / "crds"

    @property
    def manifests_dir(self) -> Path:
        return self.root / "manifests"

    @property
    def kube_version(self) -> str:
        """The Kubernetes version of the API server these artifacts start."""
        return self.versions.get(KUBE_VERSION_KEY, self.versions["K8S_VERSION"])

    def binary(self, name: str) -> Path:
        return self.binaries.get(name) or self.bin_dir / name

    def missing(self, names: Iterable[str]) -> list[str]:
        missing = [n for n in names if not os.access(self.binary(n), os.X_OK)]
        missing += [d.name + "/" for d in (self.crds_dir, self.manifests_dir) if not d.is_dir()]
        return missing

    def require(self, names: Iterable[str]) -> dict[str, Path]:
        """Paths of the named binaries, or MissingBinaryError naming what to build and how."""
        names = list(names)
        if self.binaries and (newer := [n for n in names if n in TIER_B_BINARIES and n not in TIER_A_BINARIES]):
            # kube-controller-manager and kube-scheduler may not be newer than the API server (the version skew
            # policy), and Kueue, JobSet, Trainer and kwok are built against the pinned one.
            raise MissingBinaryError(
                f"{KUBE_VERSION_ENV}={self.kube_version} starts tier A alone (etcd and kube-apiserver): "
                f"{', '.join(newer)} run only on the pinned Kubernetes"
            )
        if self.missing(names):
            await_builds(built=lambda: not self.missing(names))
        missing = self.missing(names)
        if missing:
            elsewhere = [m for m in missing if m in self.binaries]
            if elsewhere:
                raise MissingBinaryError(
                    f"missing {', '.join(str(self.binary(m)) for m in elsewhere)}. Build it with: {self.build_hint}"
                    "   (needs Go >= 1.26 and the Go module proxy)"
                )
            binaries = [m for m in missing if not m.endswith("/")]
            raise MissingBinaryError(
                f"control plane not built for the pinned versions: missing {', '.join(missing)} "
                f"in {self.root}. Build it with: {BUILD_SCRIPT} {' '.join(binaries)}".rstrip()
                + f"   (or `{BUILD_SCRIPT}` for everything; needs Go >= 1.26 and the Go module proxy)"
            )
        return {n: self.binary(n) for n in names}


MATRIX_FILE = CONTROLPLANE_DIR / "matrix.env"
KUBE_VERSION_ENV = "DISPATCH_K8S_KUBE_VERSION"
"""Selects the Kubernetes version tier A starts: the pin (unset, or `K8S_VERSION`), `oldest` (the first of
controlplane/matrix.env) or a version listed there. docs/compatibility.md says what runs on each."""
KUBE_VERSION_KEY = "KUBE_VERSION"
"""In `Artifacts.versions` when tier A runs an older kube-apiserver: its version."""


def matrix_versions(matrix_file: Path = MATRIX_FILE) -> list[str]:
    """The older Kubernetes versions of the matrix, oldest first (controlplane/matrix.env)."""
    return [v for v in parse_versions(matrix_file.read_text())["K8S_MATRIX"].split(",") if v]


def matrix_wrapper(version: str) -> Path:
    """The wrapper module an older version's kube-apiserver is built from: controlplane/go/kubernetes-v1.<minor>."""
    minor = version.removeprefix("v1.").split(".")[0]
    return CONTROLPLANE_DIR / "go" / f"kubernetes-v1.{minor}"


def matrix_apiserver(version: str, environ: Mapping[str, str] = os.environ) -> Path:
    """Where `controlplane/build.sh --kube VERSION` puts that version's kube-apiserver (the same key)."""
    digest = hashlib.sha256((matrix_wrapper(version) / "go.mod").read_bytes()).hexdigest()[:12]
    return cache_root(environ) / f"kube-{version}-{digest}" / "bin" / "kube-apiserver"


def selected_kube_version(
    pinned: str, environ: Mapping[str, str] = os.environ, matrix_file: Path = MATRIX_FILE
) -> str | None:
    """The older version `KUBE_VERSION_ENV` selects, or None for the pin; ValueError for one the matrix lacks."""
    wanted = environ.get(KUBE_VERSION_ENV, "")
    if wanted in ("", pinned):
        return None
    matrix = matrix_versions(matrix_file)
    if wanted == "oldest":
        return matrix[0]
    if wanted not in matrix:
        raise ValueError(f"{KUBE_VERSION_ENV}={wanted}: not the pin ({pinned}) nor in {matrix_file} ({matrix})")
    return wanted


def locate(versions_file: Path = VERSIONS_FILE, environ: Mapping[str, str] = os.environ) -> Artifacts:
    text = versions_file.read_bytes()
    versions = parse_versions(text.decode())
    root = cache_root(environ) / cache_key(text, versions["K8S_VERSION"])
    older = selected_kube_version(versions["K8S_VERSION"], environ)
    if older is None:
        return Artifacts(root=root, versions=versions)
    return Artifacts(
        root=root,
        versions={**versions, KUBE_VERSION_KEY: older},
        binaries={"kube-apiserver": matrix_apiserver(older, environ)},
        build_hint=f"{BUILD_SCRIPT} --kube {older} kube-apiserver",
    )


CERT_MANAGER_FILE = CONTROLPLANE_DIR / "cert-manager.env"


def cert_manager_crds(environ: Mapping[str, str] = os.environ) -> Path:
    """cert-manager's CRDs (cert-manager.io), copied by `controlplane/build.sh cert-manager-crds` into their own
    cache folder, keyed by controlplane/cert-manager.env as build.sh keys it; MissingBinaryError when absent."""
    text = CERT_MANAGER_FILE.read_bytes()
    version = parse_versions(text.decode())["CERT_MANAGER_VERSION"]
    crds = cache_root(environ) / f"cert-manager-{version}-{hashlib.sha256(text).hexdigest()[:12]}" / "crds"
    if not crds.is_dir():
        raise MissingBinaryError(
            f"cert-manager's CRDs are not in {crds}. Copy them with: {BUILD_SCRIPT} cert-manager-crds "
            f"(or `{BUILD_SCRIPT}` for everything; needs Go and the Go module proxy)"
        )
    return crds


@dataclass(frozen=True)
class NodeArtifacts:
    """Tier C's build (controlplane/build-node.sh): kubelet, containerd, CNI plugins and the base images,
    in their own cache folder so that tier A/B's is never invalidated by them."""

    root: Path
    versions: Mapping[str, str]

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"

    @property
    def cni_bin_dir(self) -> Path:
        return self.root / "bin" / "cni"

    @property
    def base_images(self) -> Path:
        """`docker save` archive of the Debian base and the pause image (build-node.sh)."""
        return self.root / "images" / "base.tar"

    @property
    def base_image(self) -> str:
        return f"dispatch-k8s.local/debian-python:{self.versions['DEBIAN_SUITE']}"

    @property
    def pause_image(self) -> str:
        return f"dispatch-k8s.local/pause:{self.versions['NODE_BUILD_REVISION']}"

    @property
    def runc(self) -> Path:
        return RUNC

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def missing(self) -> list[str]:
        missing = [n for n in NODE_BINARIES if not os.access(self.binary(n), os.X_OK)]
        missing += [f"cni/{n}" for n in CNI_PLUGINS if not os.access(self.cni_bin_dir / n, os.X_OK)]
        if not self.base_images.is_file():
            missing.append("images/base.tar")
        if not os.access(RUNC, os.X_OK):
            missing.append(f"{RUNC} (apt-get install runc)")
        return missing

    def require(self) -> NodeArtifacts:
        if self.missing():
            await_builds(built=lambda: not self.missing())
        missing = self.missing()
        if missing:
            raise MissingBinaryError(
                f"real nodes not built for the pinned versions: missing {', '.join(missing)} in {self.root}. "
                f"Build them with: {NODE_BUILD_SCRIPT}   (as root; needs Go, debootstrap, docker.io)"
            )
        return self


def node_cache_key(versions_text: bytes, node_text: bytes, k8s_version: str) -> str:
    return f"node-{k8s_version}-{hashlib.sha256(versions_text + node_text).hexdigest()[:12]}"


def locate_node(
    versions_file: Path = VERSIONS_FILE, node_file: Path = NODE_VERSIONS_FILE, environ: Mapping[str, str] = os.environ
) -> NodeArtifacts:
    text, node_text = versions_file.read_bytes(), node_file.read_bytes()
    versions = {**parse_versions(text.decode()), **parse_versions(node_text.decode())}
    key = node_cache_key(text, node_text, versions["K8S_VERSION"])
    return NodeArtifacts(root=cache_root(environ).parent / "node" / key, versions=versions)
