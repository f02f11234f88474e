"""The agent's memory per Workload, at 10,000 and 100,000 Workloads, in process (no API server).

    .venv/bin/python -m benchmarks.agent_memory_bench [--workloads 10000 100000]   (from the repository root)

Each size runs in a fresh child process, which builds the agent's controller (agent/gate/controller.py) and feeds
it the Workloads exactly as a fresh agent's initial LIST does: serving/watch.py's ``list_all``, pages of 500
as the API server's JSON bytes, decoded and handed to the Workload handler one by one. The Workloads are
those of benchmarks/agent_bench.py's memory figure (other jobs' Workloads, ≈2.5 KB of JSON each). Then the
same number of MODIFIED events (the running agent). Reported: VmRSS before, after the LIST (and its peak,
VmHWM), after the events, and per Workload.

benchmarks/agent_bench.py measures the real process against the real API server (10,000 there takes minutes
to create on this machine; 100,000 would take most of an hour), this the agent's own share at both sizes:
the API server is not involved, and neither is kubernetes_asyncio's read buffer (one page).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

PAGE = 500


def status(key: str) -> int:
    """A /proc/self/status field in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise KeyError(key)


def workload(i: int) -> dict[str, Any]:
    from benchmarks.agent_bench import workload_body

    owner = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": f"other-{i:06d}", "namespace": "bench",
                                                                   "uid": secrets.token_hex(16)}}  # fmt: skip
    body = workload_body(owner, filler=True)
    body["metadata"].update(
        {"name": f"job-other-{i:06d}", "namespace": "bench", "uid": f"{i:032x}", "resourceVersion": str(1000 + i)}
    )
    return body


class Pages:
    """The initial LIST as the agent's kube client returns it: one page of API JSON bytes at a time."""

    def __init__(self, n: int) -> None:
        self.n, self.sent = n, 0

    async def list_page(self, call: Any, **kwargs: Any) -> dict[str, Any]:
        start = int(kwargs.get("_continue") or 0)
        items = [workload(i) for i in range(start, min(self.n, start + PAGE))]
        end = start + len(items)
        meta = {"resourceVersion": "999999", **({"continue": str(end)} if end < self.n else {})}
        raw = json.dumps({"kind": "WorkloadList", "metadata": meta, "items": items}).encode()
        del items
        return json.loads(raw)  # decoded as serving.kube.read_json does


def child(n: int) -> None:
    from agent.config import AgentConfig
    from agent.constants import WORKLOADS
    from agent.gate.controller import Controller
    from serving import watch

    class NoApi:
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(name)

    async def run() -> dict[str, int]:
        kube: Any = NoApi()
        controller = Controller(kube, AgentConfig(), identity="bench")
        handler = controller._handlers[WORKLOADS]
        out = {"idle": status("VmRSS")}
        await watch.list_all(Pages(n), None, handler)  # type: ignore[arg-type]
        out["listed"], out["listed_peak"] = status("VmRSS"), status("VmHWM")
        for i in range(n):  # the running agent: one MODIFIED event of each (decoded from its watch line)
            handler.event("MODIFIED", json.loads(json.dumps(workload(i))))
        out["events"], out["peak"] = status("VmRSS"), status("VmHWM")
        out["hints"] = len(controller.index.hints)
        return out

    print(json.dumps(asyncio.run(run())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    print(f"{platform.node()}, {os.cpu_count()} CPUs, {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC")
    print(f"{'Workloads':>10} {'idle':>9} {'listed':>9} {'LIST peak':>10} {'running':>9} {'peak':>9}  per Workload")
    for n in args.workloads:
        if not 1 <= n <= 1_000_000:
            parser.error("--workloads: 1 to 1,000,000 each")
        out = subprocess.run(
            [sys.executable, "-m", "benchmarks.agent_memory_bench", "--child", str(n)],
            capture_output=True, text=True, check=True, timeout=3600,
        )  # fmt: skip
        r = json.loads(out.stdout.strip().splitlines()[-1])
        assert r["hints"] == n, r
        mib = {k: v / 1024 for k, v in r.items() if k != "hints"}
        per = (r["peak"] - r["idle"]) * 1024 / n
        print(
            f"{n:>10,} {mib['idle']:7.1f} Mi {mib['listed']:7.1f} Mi {mib['listed_peak']:8.1f} Mi "
            f"{mib['events']:7.1f} Mi {mib['peak']:7.1f} Mi  {per:.0f} bytes (peak above idle / Workloads)"
        )


if __name__ == "__main__":
    main()
