"""Tier A: etcd and kube-apiserver on loopback, with our own PKI, RBAC, admission and the CRDs.

`start_control_plane()` returns a running `ControlPlane`; `ControlPlane.stop()` ends every process
it started. Usable from pytest (see harness.pytest_plugin) and from plain scripts:

    with start_control_plane(new_run_dir()) as cp:
        print(cp.admin_kubeconfig)
"""

from __future__ import annotations

import datetime as dt
import os
import secrets
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from certs import pki
from harness.binaries import TIER_A_BINARIES, Artifacts, locate
from harness.kube_http import ApiError, Credentials, KubeHttp
from harness.kubeconfig import write_kubeconfig
from harness.processes import ProcessSupervisor, wait_until

LOOPBACK = "127.0.0.1"
SERVICE_CIDR = "10.96.0.0/16"
# First address of SERVICE_CIDR: the `kubernetes` Service, so in-cluster style clients verify.
KUBERNETES_SERVICE_IP = "10.96.0.1"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
ADMIN_USER = "dispatch-admin"
# Run folders (logs of past runs) kept under the default base.
KEEP_RUNS = 20


_HANDED_OUT: set[int] = set()
_HANDING_OUT = threading.Lock()
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
INOTIFY_ROOM = 1024
"""inotify instances the runs need: each API server and controller manager takes 6, each kubelet (cAdvisor) and
containerd more, and lanes side by side with a fourth control plane passed Debian's default of 128 (a kubelet
failed "inotify_init: too many open files"). kind documents the same limit."""


def ensure_inotify_room(
    minimum: int = INOTIFY_ROOM, *, required: bool = False, setting: Path = INOTIFY_INSTANCES
) -> None:
    """Raises the kernel's per-user inotify instances to ``minimum`` when lower (root only). ``required``: a run that
    cannot have it (not root) fails here, naming the setting, instead of a component failing later."""
    try:
        current = int(setting.read_text())
    except (OSError, ValueError):
        return  # not Linux's procfs: nothing to raise
    if current >= minimum:
        return
    try:
        setting.write_text(str(minimum))
    except OSError as err:
        if required:
            raise RuntimeError(
                f"fs.inotify.max_user_instances is {current}; a real node needs at least {minimum} "
                f"(as root: sysctl -w fs.inotify.max_user_instances={minimum}): {err}"
            ) from err


def listen_ports(ephemeral: tuple[int, int]) -> range:
    """Where servers' ports are picked: outside the kernel's ephemeral range, from which every outgoing connection
    takes its local port, so none takes a port between the check and the server's bind (with a kwok per node, and
    lanes side by side, the kernel's own pick did collide)."""
    low, high = ephemeral
    return range(10000, low) if low - 10000 >= 2000 else range(high + 1, 65536)


def free_port() -> int:
    """A loopback TCP port free a moment ago, outside the ephemeral range, and never handed out twice by this
    process (its threads start clusters side by side)."""
    try:
        low, high = (int(v) for v in EPHEMERAL_RANGE.read_text().split())
    except (OSError, ValueError):
        low, high = 32768, 60999  # Linux's default
    ports = listen_ports((low, high))
    with _HANDING_OUT:
        for _ in range(1000):
            port = secrets.choice(ports)
            if port in _HANDED_OUT:
                continue
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                try:
                    s.bind((LOOPBACK, port))
                except OSError:
                    continue
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free loopback port in {ports}")


def new_run_dir(base: Path | None = None) -> Path:
    """A fresh folder for one run's logs, PKI and etcd data: $DISPATCH_K8S_RUN_DIR or under the temp dir."""
    if base is None and os.environ.get("DISPATCH_K8S_RUN_DIR"):
        base = Path(os.environ["DISPATCH_K8S_RUN_DIR"])
    base = base or Path(tempfile.gettempdir()) / "dispatch-k8s-runs"
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"run-{stamp}-{os.getpid()}-", dir=base))
    prune_run_dirs(base)
    return run_dir


def prune_run_dirs(base: Path, keep: int = KEEP_RUNS) -> None:
    """Deletes all but the newest `keep` run folders (run-<date>-<time>-<pid>-<random>), never one
    whose process is still alive."""

    def mtime(path: Path) -> float:
        try:
            return path.stat().st_mtime
        except FileNotFoundError:  # pruned meanwhile by another session
            return 0.0

    for old in sorted(base.glob("run-*"), key=mtime, reverse=True)[keep:]:
        parts = old.name.split("-")
        if len(parts) >= 5 and parts[3].isdigit() and _alive(int(parts[3])):
            continue
        shutil.rmtree(old, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --- PKI ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PkiFiles:
    dir: Path

    def path(self, name: str) -> Path:
        return self.dir / name

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    def ca(self) -> pki.CertifiedKey:
        """The run's CA, to issue certificates that components started later need (tier C)."""
        return pki.CertifiedKey(cert_pem=self.ca_cert.read_bytes(), key_pem=self.path("ca.key").read_bytes())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def _write_pair(dir_: Path, stem: str, ck: pki.CertifiedKey) -> None:
    _write(dir_ / f"{stem}.crt", ck.cert_pem)
    _write(dir_ / f"{stem}.key", ck.key_pem, private=True)


def write_pki(dir_: Path) -> PkiFiles:
    """CA, API server serving cert, client certs for each component, front-proxy pair, SA keys."""
    dir_.mkdir(parents=True, exist_ok=True)
    ca = pki.make_ca("dispatch-local-ca")
    _write_pair(dir_, "ca", ca)
    _write_pair(
        dir_,
        "apiserver",
        pki.make_serving_cert(
            ca,
            "kube-apiserver",
            dns_names=[
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ],
            ip_addresses=[LOOPBACK, KUBERNETES_SERVICE_IP],
        ),
    )
    # The identities kubeadm gives these components, so their bootstrap RBAC roles apply.
    _write_pair(dir_, "admin", pki.make_client_cert(ca, ADMIN_USER, groups=["system:masters"]))
    _write_pair(dir_, "controller-manager", pki.make_client_cert(ca, "system:kube-controller-manager"))
    _write_pair(dir_, "scheduler", pki.make_client_cert(ca, "system:kube-scheduler"))
    # The API server's identity towards kubelets (logs, exec, port-forward), as kubeadm makes it.
    kubelet_client = pki.make_client_cert(ca, "kube-apiserver-kubelet-client", groups=["system:masters"])
    _write_pair(dir_, "apiserver-kubelet-client", kubelet_client)
    front_proxy_ca = pki.make_ca("dispatch-local-front-proxy-ca")
    _write_pair(dir_, "front-proxy-ca", front_proxy_ca)
    _write_pair(dir_, "front-proxy-client", pki.make_client_cert(front_proxy_ca, "front-proxy-client"))
    sa = pki.make_keypair(pki.KeyKind.RSA_2048)
    _write(dir_ / "sa.key", sa.private_key_pem, private=True)
    _write(dir_ / "sa.pub", sa.public_key_pem)
    return PkiFiles(dir_)


# --- the control plane -------------------------------------------------------------------------


@dataclass
class ControlPlane:
    run_dir: Path
    artifacts: Artifacts
    supervisor: ProcessSupervisor
    pki: PkiFiles
    api_port: int
    etcd_port: int
    admin: KubeHttp
    admin_kubeconfig: Path
    timings: dict[str, float] = field(default_factory=dict)
    audit_log: Path | None = None
    """The API server's audit log (JSON lines), when started with ``audit_users``."""

    @property
    def api_url(self) -> str:
        return f"https://{LOOPBACK}:{self.api_port}"

    @property
    def ca_file(self) -> Path:
        return self.pki.ca_cert

    @property
    def admin_credentials(self) -> Credentials:
        return self.admin.credentials

    def component_kubeconfig(self, component: str) -> Path:
        """kubeconfig for a client certificate written by write_pki (admin, controller-manager, scheduler)."""
        creds = Credentials(
            server=self.api_url,
            ca_file=self.ca_file,
            client_cert_file=self.pki.path(f"{component}.crt"),
            client_key_file=self.pki.path(f"{component}.key"),
        )
        return write_kubeconfig(self.run_dir / "kubeconfigs" / f"{component}.kubeconfig", creds, component)

    def client_kubeconfig(self, component: str, user: str, groups: Sequence[str] = ()) -> Path:
        """A client certificate for ``user`` issued now by the run's CA, and its kubeconfig: for what starts
        after the control plane (tier C's kubelets and kube-proxy)."""
        _write_pair(self.pki.dir, component, pki.make_client_cert(self.pki.ca(), user, groups=list(groups)))
        return self.component_kubeconfig(component)

    # --- namespaces and service accounts --------------------------------------------------

    def create_namespace(self, prefix: str = "t", labels: dict[str, str] | None = None) -> str:
        name = f"{_dns_label(prefix)[:40]}-{secrets.token_hex(3)}"
        meta: dict[str, Any] = {"name": name}
        if labels:
            meta["labels"] = labels
        self.admin.create({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
        return name

    def delete_namespace(self, name: str) -> None:
        # Without kube-controller-manager (tier A) the namespace stays Terminating; names never repeat.
        self.admin.delete("v1", "Namespace", name)

    def ensure_service_account(self, namespace: str, name: str) -> dict[str, Any]:
        try:
            return self.admin.create(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"namespace": namespace, "name": name},
                }
            )
        except ApiError as e:
            if e.status != 409:
                raise
            return self.admin.get("v1", "ServiceAccount", name, namespace)

    def service_account_token(
        self, namespace: str, name: str, *, expiration_seconds: int = 3600, audiences: list[str] | None = None
    ) -> str:
        """A bound token from the TokenRequest API, as the kubelet would project it into a pod."""
        self.ensure_service_account(namespace, name)
        spec: dict[str, Any] = {"expirationSeconds": expiration_seconds}
        if audiences:
            spec["audiences"] = audiences
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
        return self.admin.request("POST", path, body)["status"]["token"]

    def service_account_credentials(self, namespace: str, name: str, **token_args: Any) -> Credentials:
        token = self.service_account_token(namespace, name, **token_args)
        return Credentials(server=self.api_url, ca_file=self.ca_file, token=token)

    def service_account_kubeconfig(self, namespace: str, name: str, **token_args: Any) -> Path:
        """kubeconfig that authenticates as system:serviceaccount:<namespace>:<name>."""
        creds = self.service_account_credentials(namespace, name, **token_args)
        path = self.run_dir / "kubeconfigs" / f"sa-{namespace}-{name}.kubeconfig"
        return write_kubeconfig(path, creds, f"system:serviceaccount:{namespace}:{name}")

    # --- manifests ------------------------------------------------------------------------

    def apply_all(self, docs: list[dict[str, Any]]) -> None:
        for doc in docs:
            self.admin.apply(doc)

    def wait_crds_established(self, names: list[str], timeout: float = 60) -> None:
        def established() -> bool:
            for name in names:
                crd = self.admin.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
                conditions = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
                if conditions.get("Established") != "True":
                    return False
            return True

        wait_until(established, timeout, what=f"CRDs established: {', '.join(names)}")

    def stop(self) -> None:
        self.supervisor.stop_all()
        # etcd's data is the only bulky thing in the run folder; the logs stay for inspection.
        shutil.rmtree(self.run_dir / "etcd-data", ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _dns_label(text: str) -> str:
    cleaned = "".join(c if c.isalnum() else "-" for c in text.lower()).strip("-")
    while "--" in cleaned:
        cleaned = cleaned.replace("--", "-")
    return cleaned or "t"


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def crd_documents(artifacts: Artifacts) -> list[dict[str, Any]]:
    """The Trainer, JobSet and Kueue CRDs from the pinned modules.

    Kueue's are installed as in its `bases` (no conversion webhook): with no Kueue running, a
    conversion webhook would make the API server's v1beta1 watch caches fail on every object.
    Tier B adds the conversion webhook (harness.tier_b.kueue_conversion) before it starts Kueue.
    """
    docs: list[dict[str, Any]] = []
    for sub in ("jobset", "trainer", "kueue"):
        for path in sorted((artifacts.crds_dir / sub).glob("*.yaml")):
            docs.extend(load_yaml_docs(path))
    return docs


def _etcd_argv(binary: Path, data_dir: Path, client_port: int, peer_port: int) -> list[str]:
    client = f"http://{LOOPBACK}:{client_port}"
    peer = f"http://{LOOPBACK}:{peer_port}"
    return [
        str(binary),
        "--name=default",
        f"--data-dir={data_dir}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        # Test data is disposable; fsync dominates etcd latency on small VMs.
        "--unsafe-no-fsync=true",
        "--auto-compaction-retention=1",
        f"--quota-backend-bytes={2 << 30}",
        "--log-level=warn",
    ]


def _apiserver_argv(binary: Path, run_dir: Path, p: PkiFiles, api_port: int, etcd_port: int) -> list[str]:
    return [
        str(binary),
        f"--etcd-servers=http://{LOOPBACK}:{etcd_port}",
        f"--bind-address={LOOPBACK}",
        f"--advertise-address={LOOPBACK}",
        f"--secure-port={api_port}",
        f"--cert-dir={run_dir / 'apiserver-certs'}",
        f"--tls-cert-file={p.path('apiserver.crt')}",
        f"--tls-private-key-file={p.path('apiserver.key')}",
        f"--client-ca-file={p.ca_cert}",
        f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={p.path('sa.pub')}",
        f"--service-account-signing-key-file={p.path('sa.key')}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        # Default plugins stay on (webhooks, ValidatingAdmissionPolicy, ServiceAccount, ...);
        # NodeRestriction is what kubeadm adds on top.
        "--enable-admission-plugins=NodeRestriction",
        "--allow-privileged=true",
        # The default reconciler would publish 127.0.0.1 as the `kubernetes` endpoint, which
        # Endpoints validation rejects (loopback).
        "--endpoint-reconciler-type=none",
        f"--requestheader-client-ca-file={p.path('front-proxy-ca.crt')}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={p.path('front-proxy-client.crt')}",
        f"--proxy-client-key-file={p.path('front-proxy-client.key')}",
        f"--kubelet-client-certificate={p.path('apiserver-kubelet-client.crt')}",
        f"--kubelet-client-key={p.path('apiserver-kubelet-client.key')}",
        # Node addresses, never their names: a node name is not in any DNS here.
        "--kubelet-preferred-address-types=InternalIP",
        "--profiling=false",
    ]


def _audit_policy(users: Sequence[str]) -> dict[str, Any]:
    """Metadata (verb, resource, URI, user, response code) of every request by ``users``, nothing of anyone
    else's; one event per request (RequestReceived omitted: only ResponseStarted for a watch, and
    ResponseComplete)."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [{"level": "Metadata", "users": list(users)}, {"level": "None"}],
    }


def start_control_plane(
    run_dir: Path, artifacts: Artifacts | None = None, *, timeout: float = 90, audit_users: Sequence[str] = ()
) -> ControlPlane:
    """Starts etcd and kube-apiserver, installs the CRDs; returns once everything is ready.

    ``audit_users`` (opt-in, for benchmarks that count a client's requests on the server's side): the API
    server writes an audit log of those users' requests alone to ``ControlPlane.audit_log``."""
    artifacts = artifacts or locate()
    binaries = artifacts.require(TIER_A_BINARIES)
    ensure_inotify_room()
    started = time.monotonic()
    timings: dict[str, float] = {}
    supervisor = ProcessSupervisor(run_dir / "logs")
    try:
        p = write_pki(run_dir / "pki")
        timings["pki"] = time.monotonic() - started

        etcd_port, etcd_peer_port, api_port = free_port(), free_port(), free_port()
        supervisor.start("etcd", _etcd_argv(binaries["etcd"], run_dir / "etcd-data", etcd_port, etcd_peer_port))
        apiserver = _apiserver_argv(binaries["kube-apiserver"], run_dir, p, api_port, etcd_port)
        audit_log = run_dir / "audit.log" if audit_users else None
        if audit_log is not None:
            policy = run_dir / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(_audit_policy(audit_users)))
            # Blocking mode: no event is dropped under load (a request's event is written as it ends, so a
            # reader waits a moment past the last answer). No rotation within a run (maxsize in MB).
            apiserver += [f"--audit-policy-file={policy}", f"--audit-log-path={audit_log}",
                          "--audit-log-mode=blocking", "--audit-log-maxsize=10000"]  # fmt: skip
        supervisor.start("kube-apiserver", apiserver)

        creds = Credentials(
            server=f"https://{LOOPBACK}:{api_port}",
            ca_file=p.ca_cert,
            client_cert_file=p.path("admin.crt"),
            client_key_file=p.path("admin.key"),
        )
        admin = KubeHttp(creds)
        cp = ControlPlane(
            run_dir=run_dir,
            artifacts=artifacts,
            supervisor=supervisor,
            pki=p,
            api_port=api_port,
            etcd_port=etcd_port,
            admin=admin,
            admin_kubeconfig=write_kubeconfig(run_dir / "kubeconfigs" / "admin.kubeconfig", creds, ADMIN_USER),
            timings=timings,
            audit_log=audit_log,
        )

        def ready() -> bool:
            supervisor.check_alive()
            return admin.request("GET", "/readyz") == "ok"

        wait_until(ready, timeout, interval=0.1, what="kube-apiserver /readyz")
        timings["apiserver_ready"] = time.monotonic() - started

        crds = crd_documents(artifacts)
        cp.apply_all(crds)
        cp.wait_crds_established([d["metadata"]["name"] for d in crds], timeout)
        timings["crds_established"] = time.monotonic() - started
        return cp
    except BaseException:
        supervisor.stop_all()
        raise


@contextmanager
def control_plane(run_dir: Path | None = None) -> Iterator[ControlPlane]:
    cp = start_control_plane(run_dir or new_run_dir())
    try:
        yield cp
    finally:
        cp.stop()
