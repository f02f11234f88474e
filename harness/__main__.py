"""Runs the local control plane outside pytest.

python -m harness                 # tier A until Ctrl-C, prints the admin kubeconfig path
python -m harness --tier b        # tier B
python -m harness --tier c        # tier B plus one real node (kubelet, containerd, kube-proxy; root)
python -m harness --tier mc       # three tier B planes joined by Kueue's MultiKueue: a manager, two workers
python -m harness --tier b --exit-when-ready   # start, print timings as JSON, stop
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from harness.binaries import TIER_A_BINARIES, TIER_B_BINARIES, MissingBinaryError, locate, locate_node
from harness.cluster import new_run_dir, start_control_plane
from harness.multicluster import start_multicluster
from harness.real_node import RealNode, start_real_node
from harness.service_network import ServiceNetwork, start_service_network
from harness.tier_b import start_tier_b


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness", description=__doc__.splitlines()[0])
    parser.add_argument("--tier", choices=("a", "b", "c", "mc"), default="a")
    parser.add_argument("--exit-when-ready", action="store_true", help="print timings as JSON and stop")
    args = parser.parse_args(argv)

    try:
        locate().require(TIER_A_BINARIES if args.tier == "a" else TIER_B_BINARIES)
        node_artifacts = locate_node().require() if args.tier == "c" else None
    except MissingBinaryError as e:
        print(e, file=sys.stderr)
        return 2

    if args.tier == "mc":
        return _multicluster(args.exit_when_ready)
    started = time.monotonic()
    cp = start_control_plane(new_run_dir())
    node: RealNode | None = None
    network: ServiceNetwork | None = None
    try:
        tier_a_ready = time.monotonic() - started
        if args.tier in ("b", "c"):
            start_tier_b(cp)
        if node_artifacts is not None:
            node = start_real_node(cp, "real-node-0", node_artifacts)
            cp.timings.update({f"real_node_{k}": v for k, v in node.timings.items()})
            network = start_service_network(cp, node, node_artifacts)
            cp.timings["service_network_ready"] = network.timings["ready"]
        ready = time.monotonic() - started
        if args.exit_when_ready:
            timings = {"tier": args.tier, "ready_s": round(ready, 2), "tier_a_ready_s": round(tier_a_ready, 2)}
            print(json.dumps({**timings, "steps": {k: round(v, 2) for k, v in cp.timings.items()}}))
            return 0
        print(f"tier {args.tier.upper()} ready in {ready:.1f}s")
        print(f"  API server:  {cp.api_url}")
        print(f"  kubeconfig:  {cp.admin_kubeconfig}")
        print(f"  logs:        {cp.supervisor.log_dir}")
        _wait_for_ctrl_c()
        return 0
    finally:
        if network is not None:
            network.stop()
        if node is not None:
            node.stop()
        cp.stop()


def _wait_for_ctrl_c() -> None:
    print("Ctrl-C stops every process.", flush=True)
    # Blocked, the signals wait for sigwait instead of interrupting; children started earlier
    # keep their own signal masks.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.sigwait({signal.SIGINT, signal.SIGTERM})


def _multicluster(exit_when_ready: bool) -> int:
    mc = start_multicluster()
    try:
        if exit_when_ready:
            print(json.dumps({"tier": "mc", "steps": {k: round(v, 2) for k, v in mc.timings.items()}}))
            return 0
        print(f"MultiKueue ready in {mc.timings['multikueue_active']:.1f}s")
        for role, tb in [("manager", mc.manager), *((w.name, w.tier_b) for w in mc.workers)]:
            cp = tb.control_plane
            print(f"  {role:9} {cp.api_url}  kubeconfig {cp.admin_kubeconfig}  logs {cp.supervisor.log_dir}")
        _wait_for_ctrl_c()
        return 0
    finally:
        mc.stop()


if __name__ == "__main__":
    sys.exit(main())
