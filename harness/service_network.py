"""Tier C's Service network: what kube-proxy and the API server's endpoint reconciler give every real cluster,
so that pods on the real nodes reach Services (the in-cluster API server included) and the API server reaches
webhooks through their Services.

- **kube-proxy**, built from the control plane's pins, runs as a process of the harness in nftables mode in the
  machine's network namespace, where the real nodes' bridges are. Its tables (`kube-proxy` in the ip and ip6
  families) are machine-wide, so one run at a time holds them (LOCK_PATH) and the harness deletes them after.
- **The `kubernetes` Service's endpoint.** The API server listens on loopback only (every tier's clients use
  it there, and the reconciler would publish loopback, which Endpoints validation refuses). A relay on the
  first real node's IP, the port the API server's own, forwards to it; the harness writes the EndpointSlice the
  reconciler would. TLS passes through untouched (the serving certificate names 10.96.0.1).
- **Routes.** Pods route the Service CIDR to their node (harness/real_node.py's CNI config); the machine
  routes it into the first node's bridge, so that no packet for a Service IP ever leaves by the default route.

Everything lives in addresses this run created: the nodes' bridges and the pods' network namespaces.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from harness.binaries import NodeArtifacts
from harness.cluster import KUBERNETES_SERVICE_IP, LOOPBACK, SERVICE_CIDR, ControlPlane, free_port
from harness.processes import ManagedProcess, add_cleanup, remove_cleanup, wait_until
from harness.real_node import POD_RANGE, RealNode

LOCK_PATH = Path("/run/lock/dispatch-k8s-kube-proxy.lock")
NFT_TABLES = (("ip", "kube-proxy"), ("ip6", "kube-proxy"))
ENDPOINT_SLICE_MANAGER = "harness.dispatch.phpboyscout.uk"


class Relay:
    """A TCP relay from (host, port) to (target_host, target_port): one thread per direction per connection."""

    def __init__(self, host: str, port: int, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.create_server((host, port))
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name=f"relay-{host}:{port}", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._closed:
                    client.close()
                    upstream.close()
                    return
                self._connections.update((client, upstream))
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            connections, self._connections = self._connections, set()
        with contextlib.suppress(OSError):
            self._listener.close()
        for s in connections:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


def _kube_proxy_config(node: RealNode, kubeconfig: Path) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "mode": "nftables",
        "hostnameOverride": node.name,
        "clusterCIDR": str(POD_RANGE),
        "healthzBindAddress": f"{LOOPBACK}:{free_port()}",
        "metricsBindAddress": f"{LOOPBACK}:{free_port()}",
        # NodePorts only on the node's own address, never on the machine's other interfaces.
        "nodePortAddresses": [f"{node.ip}/32"],
        # Zero leaves the machine's conntrack settings as they are.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "syncPeriod": "30s",
        "minSyncPeriod": "0s",
    }


def _endpoint_slice(ip: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "kubernetes",
            "namespace": "default",
            "labels": {
                "kubernetes.io/service-name": "kubernetes",
                "endpointslice.kubernetes.io/managed-by": ENDPOINT_SLICE_MANAGER,
            },
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }


def _delete_tables() -> None:
    for family, table in NFT_TABLES:
        subprocess.run(["nft", "delete", "table", family, table], capture_output=True, check=False)


@dataclass
class ServiceNetwork:
    control_plane: ControlPlane
    node: RealNode
    relay: Relay
    lock: IO[str]
    kube_proxy: ManagedProcess | None = None
    routed: bool = False
    timings: dict[str, float] = field(default_factory=dict)

    def stop(self) -> None:
        remove_cleanup(self.stop)
        if self.kube_proxy is not None:
            with contextlib.suppress(KeyError):
                self.control_plane.supervisor.stop(self.kube_proxy.name)
            self.kube_proxy = None
        _delete_tables()
        if self.routed:
            subprocess.run(["ip", "route", "delete", SERVICE_CIDR], capture_output=True, check=False)
            self.routed = False
        self.relay.close()
        with contextlib.suppress(OSError):
            fcntl.flock(self.lock, fcntl.LOCK_UN)
            self.lock.close()


def lock_holder(path: Path = LOCK_PATH) -> str | None:
    """The pid of the run whose kube-proxy holds the machine's tables now, or None when they are free."""
    if not path.exists():
        return None
    with path.open("a+") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return path.read_text().strip() or "?"
        fcntl.flock(f, fcntl.LOCK_UN)
    return None


def _take_lock(timeout: float) -> IO[str]:
    LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
    f = LOCK_PATH.open("a+")
    deadline = time.monotonic() + timeout
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            f.seek(0)
            f.truncate()
            f.write(f"{os.getpid()}\n")
            f.flush()
            return f
        except BlockingIOError:
            if time.monotonic() > deadline:
                holder = Path(LOCK_PATH).read_text().strip() or "?"
                f.close()
                raise RuntimeError(
                    f"another run (pid {holder}) holds {LOCK_PATH}: its kube-proxy owns the machine's "
                    "nftables table `kube-proxy`; wait for it to end"
                ) from None
            time.sleep(1)


def start_service_network(
    cp: ControlPlane, node: RealNode, artifacts: NodeArtifacts, *, lock_timeout: float = 600
) -> ServiceNetwork:
    """kube-proxy for the real nodes, the `kubernetes` Service's endpoint on `node`'s IP, and the routes."""
    started = time.monotonic()
    lock = _take_lock(lock_timeout)
    try:
        relay = Relay(node.ip, cp.api_port, LOOPBACK, cp.api_port)
    except BaseException:
        lock.close()
        raise
    net = ServiceNetwork(cp, node, relay, lock)
    add_cleanup(net.stop)
    try:
        _delete_tables()  # a crashed run's leftovers
        subprocess.run(["ip", "route", "replace", SERVICE_CIDR, "dev", node.bridge, "src", node.ip], check=True)
        net.routed = True
        cp.admin.apply(_endpoint_slice(node.ip, cp.api_port))

        d = cp.run_dir / "kube-proxy"
        d.mkdir(parents=True, exist_ok=True)
        # The identity kubeadm gives kube-proxy, bound to system:node-proxier by the bootstrap RBAC.
        config = _kube_proxy_config(node, cp.client_kubeconfig("kube-proxy", "system:kube-proxy"))
        (d / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        net.kube_proxy = cp.supervisor.start(
            "kube-proxy",
            [artifacts.binary("kube-proxy"), f"--config={d / 'config.yaml'}", "--v=1"],
            env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
        )

        def healthy() -> bool:
            if net.kube_proxy is None or not net.kube_proxy.alive():
                raise RuntimeError(f"kube-proxy exited: {net.kube_proxy.describe_exit() if net.kube_proxy else ''}")
            out = subprocess.run(["nft", "list", "table", "ip", "kube-proxy"], capture_output=True, text=True)
            return out.returncode == 0 and KUBERNETES_SERVICE_IP in out.stdout

        wait_until(healthy, 90, interval=0.5, what="kube-proxy has programmed the `kubernetes` Service")
        net.timings["ready"] = time.monotonic() - started
        return net
    except BaseException:
        net.stop()
        raise
