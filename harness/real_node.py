"""Tier C: real nodes. A kubelet and its own containerd run as processes of the harness, joined to the
run's API server, so pods really start: real containers (runc), real Downward API values, a real PID 1.

Each node has its own containerd (root, state, socket), kubelet root dir, pod log dir, cgroup root and a
Linux bridge made by this run; the bridge's address is the node's IP (the kubelet refuses a loopback node
IP) and pods get addresses on it from the CNI bridge and host-local plugins. Nothing is routed off the
machine: no masquerade, no forwarding rule, no route but the bridge's own subnet and the Service CIDR through
the node (where harness/service_network.py's kube-proxy translates it).

The node carries the taint REAL_NODE_TAINT, so tier B's workloads stay on kwok's nodes; what must run for
real tolerates it (`real_node_pod_spec`). `RealNode.stop()` removes every container, mount, cgroup and the
bridge; `stop_kubelet()` leaves the containers running, as a node whose kubelet died would.

Faults (chaos/nemesis.py): the kubelet and containerd can each be killed (SIGKILL) and restarted, or hung
(SIGSTOP) and resumed; containerd killed leaves its shims and containers running and, restarted, manages them
again. `power_off()` and `power_on()` are the machine going down and booting again with its images.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from certs import pki
from harness.binaries import NodeArtifacts
from harness.cluster import LOOPBACK, SERVICE_CIDR, ControlPlane, ensure_inotify_room, free_port
from harness.processes import ManagedProcess, add_cleanup, remove_cleanup, wait_until

REAL_NODE_TAINT = "harness.dispatch.phpboyscout.uk/real-node"
REAL_NODE_LABEL = "harness.dispatch.phpboyscout.uk/real-node"
# containerd's CRI namespace: the kubelet's containers and the images it may use.
CRI_NAMESPACE = "k8s.io"
# Pod subnets are /24s of this range; each node takes one not configured on any interface of the machine.
POD_RANGE = ipaddress.ip_network("10.244.0.0/16")
CGROUP_BASE = "/sys/fs/cgroup"
# Short enough for a Linux interface name (15 characters).
BRIDGE_PREFIX = "dk8s-"
LEASE_SECONDS = 20
SHORT_BASE = Path("/var/lib/dispatch-k8s")


class NodeProcessExited(RuntimeError):
    """containerd or the kubelet of a real node exited."""


def _until(predicate: Any, timeout: float, what: str) -> None:
    """wait_until, but a node process that died ends the wait at once."""

    def probe() -> Any:
        try:
            return predicate()
        except NodeProcessExited as e:
            died.append(e)
            return True

    died: list[NodeProcessExited] = []
    wait_until(probe, timeout, interval=0.5, what=what)
    if died:
        raise died[0]


def real_node_pod_spec(node: str) -> dict[str, Any]:
    """What a pod spec needs to run on the real node `node` (merge into the spec)."""
    return {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "tolerations": [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    }


def _run(argv: list[str], check: bool = True, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, check=check, capture_output=True, text=True, **kwargs)


def _free_subnet() -> ipaddress.IPv4Network:
    used = []
    out = _run(["ip", "-j", "-4", "addr", "show"]).stdout
    for link in json.loads(out):
        for a in link.get("addr_info", []):
            used.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    candidates = list(POD_RANGE.subnets(new_prefix=24))
    for _ in range(64):
        net = candidates[secrets.randbelow(len(candidates))]
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError(f"no free /24 in {POD_RANGE} for a node's pod network")


@dataclass
class RealNode:
    name: str
    control_plane: ControlPlane
    artifacts: NodeArtifacts
    dir: Path
    bridge: str
    subnet: ipaddress.IPv4Network
    cgroup_root: str
    kubelet_port: int
    containerd: ManagedProcess | None = None
    kubelet: ManagedProcess | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def kubelet_identity(self) -> str:
        """The kubelet's client certificate and kubeconfig in the run's pki/ and kubeconfigs/."""
        return f"kubelet-{self.name}"

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.run_dir / "kubeconfigs" / f"{self.kubelet_identity}.kubeconfig"

    @property
    def ip(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def short_dir(self) -> Path:
        """For what holds unix sockets (paths are limited to 108 bytes; the run folder may be deep): containerd's
        sockets and the kubelet's root dir."""
        return SHORT_BASE / self.cgroup_root.rsplit("-", 1)[-1]

    @property
    def socket(self) -> Path:
        return self.short_dir / "containerd.sock"

    @property
    def kubelet_root(self) -> Path:
        return self.short_dir / "kubelet"

    @property
    def pod_logs_dir(self) -> Path:
        return self.dir / "pod-logs"

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """containerd's own client against this node's containerd, in the kubelet's namespace."""
        return _run(
            [str(self.artifacts.binary("ctr")), "--address", str(self.socket), "--namespace", CRI_NAMESPACE, *args],
            check=check,
        )

    def import_images(self, archive: Path) -> None:
        """Makes the images of a `docker save` archive available to the kubelet (no registry is involved)."""
        self.ctr("images", "import", str(archive))

    def container_pids(self) -> dict[str, int]:
        """Container id -> host pid of each live container of this node (pod sandboxes included), read from
        /proc, so it works with the kubelet or containerd down: a container's first process is a child of
        one of this node's shims, in a cgroup under the node's cgroup root named by the container id."""
        shims = _shim_pids(str(self.socket))
        found: dict[str, int] = {}
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
                cgroup = (proc / "cgroup").read_text()
            except (OSError, ValueError, IndexError):
                continue
            ours = [line for line in cgroup.splitlines() if f":{self.cgroup_root}/" in line]
            if ppid in shims and ours:
                found[ours[0].rsplit("/", 1)[-1]] = int(proc.name)
        return found

    def tasks(self) -> dict[str, dict[str, str]]:
        """containerd's running tasks on this node: container id -> {pid, status}."""
        lines = self.ctr("tasks", "list").stdout.splitlines()[1:]
        return {p[0]: {"pid": p[1], "status": p[2]} for p in (line.split() for line in lines) if len(p) >= 3}

    # --- starting and stopping ------------------------------------------------------------

    def start_containerd(self) -> None:
        sup = self.control_plane.supervisor
        env = {"PATH": f"{self.artifacts.bin_dir}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        self.containerd = sup.start(
            f"containerd-{self.name}",
            [self.artifacts.binary("containerd"), "--config", self.dir / "containerd" / "config.toml"],
            env=env,
        )
        _until(
            lambda: self._check(self.containerd) and self.ctr("version", check=False).returncode == 0,
            60,
            f"containerd of {self.name}",
        )

    def start_kubelet(self) -> None:
        sup = self.control_plane.supervisor
        self.kubelet = sup.start(
            f"kubelet-{self.name}",
            [
                self.artifacts.binary("kubelet"),
                f"--config={self.dir / 'kubelet' / 'config.yaml'}",
                f"--kubeconfig={self.kubeconfig}",
                f"--root-dir={self.kubelet_root}",
                f"--hostname-override={self.name}",
                f"--node-ip={self.ip}",
                f"--node-labels={REAL_NODE_LABEL}=true",
                "--v=1",
            ],
            env={"PATH": f"{self.artifacts.bin_dir}:/usr/sbin:/usr/bin:/sbin:/bin"},
        )

    def stop_kubelet(self) -> None:
        """The kubelet dies; containerd and every container keep running (a node that stopped reporting)."""
        if self.kubelet is not None:
            self.control_plane.supervisor.stop(self.kubelet.name)
            self.kubelet = None

    # --- faults ---------------------------------------------------------------------------------

    def kill_kubelet(self) -> None:
        """SIGKILL to the kubelet (a crash); the containers keep running. restart_kubelet() brings it back."""
        self.control_plane.supervisor.kill(self._process(self.kubelet, "kubelet").name)

    def restart_kubelet(self) -> None:
        """The kubelet starts again (stopped first if it still runs): it finds its node and its containers."""
        if self.kubelet is None:
            self.start_kubelet()
        else:
            self.kubelet = self.control_plane.supervisor.restart(self.kubelet.name)

    def pause_kubelet(self) -> None:
        """SIGSTOP: the kubelet hangs, silent to the API server; resume_kubelet() lets it go on."""
        self.control_plane.supervisor.send_signal(self._process(self.kubelet, "kubelet").name, signal.SIGSTOP)

    def resume_kubelet(self) -> None:
        if self.kubelet is not None:
            self.control_plane.supervisor.send_signal(self.kubelet.name, signal.SIGCONT)

    def kill_containerd(self) -> None:
        """SIGKILL to containerd: its shims and their containers keep running (containerd's live restore)."""
        self.control_plane.supervisor.kill(self._process(self.containerd, "containerd").name)

    def restart_containerd(self, timeout: float = 60) -> None:
        """containerd starts again on the same root and state, reconnects to the running shims and answers."""
        if self.containerd is None:
            self.start_containerd()
            return
        self.containerd = self.control_plane.supervisor.restart(self.containerd.name)
        _until(
            lambda: self._check(self.containerd) and self.ctr("version", check=False).returncode == 0,
            timeout,
            f"containerd of {self.name} again",
        )

    def pause_containerd(self) -> None:
        self.control_plane.supervisor.send_signal(self._process(self.containerd, "containerd").name, signal.SIGSTOP)

    def resume_containerd(self) -> None:
        if self.containerd is not None:
            self.control_plane.supervisor.send_signal(self.containerd.name, signal.SIGCONT)

    def power_on(self, timeout: float = 120) -> None:
        """The machine boots again after power_off(): what lived in memory is gone (containerd's state, the
        pods' network namespaces and volume mounts, their addresses), the disk is not (containerd's root with the
        images, the kubelet's root). containerd, then the kubelet; returns once the node is Ready."""
        # Each step only when still to do: a power_on that failed half-way can be called again.
        if self.containerd is None:
            if self.kubelet is not None:
                raise RuntimeError(f"{self.name}: a kubelet runs without containerd; power_off() first")
            _unmount_under(self.dir / "containerd" / "state")
            shutil.rmtree(self.dir / "containerd" / "state", ignore_errors=True)
            _unmount_under(self.kubelet_root)
            for reservation in (self.dir / "cni" / "ipam").glob("*/*"):
                if reservation.name[:1].isdigit():  # an address held by a pod that died with the machine
                    reservation.unlink(missing_ok=True)
            self.start_containerd()
        if self.kubelet is None:
            self.start_kubelet()
        self.wait_ready(timeout)

    def _process(self, process: ManagedProcess | None, what: str) -> ManagedProcess:
        if process is None:
            raise RuntimeError(f"the {what} of {self.name} is not running")
        return process

    def power_off(self) -> None:
        """The machine goes down: the kubelet, every container and containerd are gone (what an operator
        asserts with the out-of-service taint). The node object stays; `stop()` still cleans up."""
        # A hung (SIGSTOPped) containerd would hang every ctr call below, and a hung kubelet its own stop.
        self.resume_containerd()
        self.resume_kubelet()
        self.stop_kubelet()
        if self.containerd is not None and self.containerd.alive():
            self._remove_containers()
        if self.containerd is not None:
            with contextlib.suppress(KeyError):
                self.control_plane.supervisor.stop(self.containerd.name)
            self.containerd = None
        self._kill_leftover_shims()

    def _check(self, process: ManagedProcess | None) -> bool:
        if process is not None and not process.alive():
            raise NodeProcessExited(process.describe_exit())
        return True

    def wait_ready(self, timeout: float = 120) -> None:
        admin = self.control_plane.admin

        def ready() -> bool:
            self._check(self.containerd)
            self._check(self.kubelet)
            node = admin.get_or_none("v1", "Node", self.name)
            conds = {c["type"]: c["status"] for c in ((node or {}).get("status") or {}).get("conditions") or []}
            return conds.get("Ready") == "True"

        _until(ready, timeout, f"real node {self.name} Ready")

    def stop(self) -> None:
        """Everything of this node goes: kubelet, containers, containerd, mounts, cgroups, the bridge."""
        remove_cleanup(self.stop)
        self.power_off()
        _unmount_under(self.dir)
        _remove_cgroups(self.cgroup_root)
        _run(["ip", "link", "delete", self.bridge], check=False)
        _unmount_under(self.short_dir)
        shutil.rmtree(self.short_dir, ignore_errors=True)
        # Images and snapshots are large; logs stay.
        for sub in ("containerd/root", "containerd/state"):
            shutil.rmtree(self.dir / sub, ignore_errors=True)

    def _remove_containers(self) -> None:
        for cid in self.tasks():
            self.ctr("tasks", "kill", "--signal", "SIGKILL", cid, check=False)
        deadline = time.monotonic() + 20
        while self.tasks() and time.monotonic() < deadline:
            for cid in self.tasks():
                self.ctr("tasks", "delete", "--force", cid, check=False)
            time.sleep(0.2)
        for line in self.ctr("containers", "list", "--quiet").stdout.split():
            self.ctr("containers", "delete", line, check=False)

    def _kill_leftover_shims(self) -> None:
        # A shim outlives containerd on purpose (live restore), and so do its containers.
        for pid in self.container_pids().values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        for pid in _shim_pids(str(self.socket)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)


def _shim_pids(socket: str) -> set[int]:
    """This node's shims: each names its containerd's socket on its command line."""
    pids = set()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"containerd-shim-runc-v2") and socket.encode() in cmdline:
            pids.add(int(proc.name))
    return pids


def _unmount_under(root: Path) -> None:
    prefix = str(root.resolve()) + "/"
    for _ in range(3):
        mounts = []
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if point.startswith(prefix):
                mounts.append(point)
        if not mounts:
            return
        for point in sorted(mounts, key=len, reverse=True):
            _run(["umount", "-l", point], check=False)


def _make_cgroups(cgroup_root: str) -> None:
    """The kubelet's cgroup root in every v1 hierarchy (it refuses to start without them)."""
    for controller in Path(CGROUP_BASE).iterdir():
        if not controller.is_dir() or controller.is_symlink():
            continue
        top = controller / cgroup_root.lstrip("/")
        top.mkdir(exist_ok=True)
        # A new v1 cpuset has no CPUs and no memory nodes: nothing could run in it.
        for knob in ("cpuset.cpus", "cpuset.mems"):
            if (controller / knob).exists() and not (top / knob).read_text().strip():
                (top / knob).write_text((controller / knob).read_text())


def _remove_cgroups(cgroup_root: str) -> None:
    for controller in Path(CGROUP_BASE).iterdir():
        top = controller / cgroup_root.lstrip("/")
        if not top.is_dir():
            continue
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda w: len(w[0]), reverse=True):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)


# --- configuration files --------------------------------------------------------------------------


def _containerd_config(node: RealNode) -> str:
    d = node.dir / "containerd"
    cni = node.dir / "cni"
    # Version 3 is containerd 2.x's format. NRI would listen on a machine-wide socket; netns mounts
    # under the state dir keep each node's pod namespaces its own.
    return f"""version = 3
root = "{d / "root"}"
state = "{d / "state"}"
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = "{node.socket}"

[ttrpc]
  address = "{node.socket}.ttrpc"

[debug]
  level = "info"

[plugins]
  [plugins."io.containerd.cri.v1.images"]
    snapshotter = "overlayfs"
    [plugins."io.containerd.cri.v1.images".pinned_images]
      sandbox = "{node.artifacts.pause_image}"
  [plugins."io.containerd.cri.v1.runtime"]
    netns_mounts_under_state_dir = true
    # The pod sandbox asks for oom_score_adj -998 and Guaranteed pods for -997: lowering it needs
    # CAP_SYS_RESOURCE, which this machine's bounding set lacks. Restricted, containerd never asks for less
    # than its own score (runc would fail with "can't get final child's PID from pipe").
    restrict_oom_score_adj = true
    [plugins."io.containerd.cri.v1.runtime".containerd]
      default_runtime_name = "runc"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
          BinaryName = "{node.artifacts.runc}"
          SystemdCgroup = false
    [plugins."io.containerd.cri.v1.runtime".cni]
      bin_dirs = ["{node.artifacts.cni_bin_dir}"]
      conf_dir = "{cni / "net.d"}"
  [plugins."io.containerd.grpc.v1.cri"]
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
"""


def _cni_config(node: RealNode) -> dict[str, Any]:
    return {
        "cniVersion": "1.0.0",
        "name": "dispatch-k8s",
        "plugins": [
            {
                "type": "bridge",
                "bridge": node.bridge,
                # The harness gives the bridge its address; isGateway would also switch on IP forwarding.
                "isGateway": False,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": str(node.subnet), "gateway": node.ip}]],
                    # The Service CIDR goes to the node, where kube-proxy's rules are (harness/service_network.py).
                    "routes": [{"dst": str(node.subnet)}, {"dst": SERVICE_CIDR, "gw": node.ip}],
                    "dataDir": str(node.dir / "cni" / "ipam"),
                },
            }
        ],
    }


def _kubelet_config(node: RealNode) -> dict[str, Any]:
    k = node.dir / "kubelet"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": node.ip,
        "port": node.kubelet_port,
        "readOnlyPort": 0,
        "healthzBindAddress": LOOPBACK,
        "healthzPort": free_port(),
        "tlsCertFile": str(k / "serving.crt"),
        "tlsPrivateKeyFile": str(k / "serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(node.control_plane.ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{node.socket}",
        "imageServiceEndpoint": f"unix://{node.socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": node.cgroup_root,
        # This machine has cgroup v1; kubelets from 1.35 refuse it unless told otherwise.
        "failCgroupV1": False,
        "failSwapOn": False,
        "podLogsDir": str(node.pod_logs_dir),
        "volumePluginDir": str(k / "volume-plugins"),
        "staticPodPath": "",
        "registerNode": True,
        "registerWithTaints": [{"key": REAL_NODE_TAINT, "value": "true", "effect": "NoSchedule"}],
        "nodeLeaseDurationSeconds": LEASE_SECONDS,
        "nodeStatusUpdateFrequency": "5s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        # Images come from `ctr images import`, never from a registry: they must never be collected.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "protectKernelDefaults": False,
        "serializeImagePulls": False,
        "maxPods": 30,
        "resolvConf": "/etc/resolv.conf",
        "shutdownGracePeriod": "0s",
    }


def start_real_node(
    cp: ControlPlane, name: str, artifacts: NodeArtifacts, images: list[Path] | None = None, timeout: float = 180
) -> RealNode:
    """A real node `name` joined to `cp`, Ready, with the images of `images` (docker-save archives)."""
    ensure_inotify_room(required=True)
    started = time.monotonic()
    dir_ = cp.run_dir / "nodes" / name
    suffix = secrets.token_hex(4)
    node = RealNode(
        name=name,
        control_plane=cp,
        artifacts=artifacts,
        dir=dir_,
        bridge=f"{BRIDGE_PREFIX}{suffix}"[:15],
        subnet=_free_subnet(),
        cgroup_root=f"/dispatch-k8s-{suffix}",
        kubelet_port=free_port(),
    )
    # Also when the run is interrupted (SIGTERM, SIGHUP, interpreter exit): none of this dies with a process.
    add_cleanup(node.stop)
    try:
        for sub in ("containerd", "cni/net.d", "cni/ipam", "kubelet", "pod-logs"):
            (dir_ / sub).mkdir(parents=True, exist_ok=True)
        node.kubelet_root.mkdir(mode=0o700, parents=True)
        _make_cgroups(node.cgroup_root)
        _run(["ip", "link", "add", node.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{node.ip}/{node.subnet.prefixlen}", "dev", node.bridge])
        _run(["ip", "link", "set", node.bridge, "up"])

        (dir_ / "containerd" / "config.toml").write_text(_containerd_config(node))
        (dir_ / "cni" / "net.d" / "10-dispatch-k8s.conflist").write_text(json.dumps(_cni_config(node), indent=2))
        k = dir_ / "kubelet"
        cp.client_kubeconfig(node.kubelet_identity, f"system:node:{name}", groups=["system:nodes"])
        serving = pki.make_serving_cert(cp.pki.ca(), name, dns_names=[name], ip_addresses=[node.ip])
        (k / "serving.crt").write_bytes(serving.cert_pem)
        (k / "serving.key").write_bytes(serving.key_pem)
        (k / "serving.key").chmod(0o600)
        (k / "config.yaml").write_text(yaml.safe_dump(_kubelet_config(node), sort_keys=False))

        node.start_containerd()
        node.timings["containerd_ready"] = time.monotonic() - started
        for archive in [artifacts.base_images, *(images or [])]:
            node.import_images(archive)
        node.timings["images_imported"] = time.monotonic() - started
        node.start_kubelet()
        node.wait_ready(timeout)
        node.timings["ready"] = time.monotonic() - started
        return node
    except BaseException:
        node.stop()
        raise
