"""The agent's Prometheus metrics (the registry and its process metrics: serving/prometheus.py).

One registry per agent process: the gate's metrics here, the supervisor API's (agent/api/app.py) and its
certificate's in the same one, all served on the health port's /metrics.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Final

import prometheus_client
from prometheus_client import CollectorRegistry

from serving.prometheus import Counter, Gauge, Histogram, exposition, registry

RECONCILE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds for one pass: a GET of the Workload, a few more reads, one or two writes."""
READY_BUCKETS: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Seconds from quota reserved to our Ready. Kueue stamps QuotaReserved in whole seconds, so below a second
this is coarse; the benchmark measures it end to end."""


class AgentMetrics:
    def __init__(self, reg: CollectorRegistry | None = None) -> None:
        self.registry = reg if reg is not None else registry("agent")
        r = self.registry
        self.decisions = Counter(
            r, "dispatch_agent_decisions_total", "Passes that decided something, by action.", ("action",)
        )
        self.reconcile_seconds = Histogram(
            r,
            "dispatch_agent_reconcile_duration_seconds",
            "Time of one pass over a Workload, reads and writes included, by result.",
            RECONCILE_BUCKETS,
            ("result",),
        )
        self.reserved_to_ready = Histogram(
            r,
            "dispatch_agent_quota_reserved_to_ready_seconds",
            "From the Workload's QuotaReserved transition to our check's Ready write.",
            READY_BUCKETS,
        )
        self.conflicts = Counter(
            r,
            "dispatch_agent_write_conflicts_total",
            "Preconditioned writes refused because the object changed since it was read.",
            ("object",),
        )
        self.errors = Counter(r, "dispatch_agent_reconcile_errors_total", "Passes that failed, by error.", ("error",))
        self.foreign = Counter(r, "dispatch_agent_foreign_reports_total", "Foreign reasons reported as Events.")
        self.leader = Gauge(r, "dispatch_agent_leader", "1 while this replica holds the Lease and runs the gate.")
        self.watch_restarts = Counter(
            r, "dispatch_agent_watch_restarts_total", "Watches started again, by resource and why.", ("resource", "why")
        )
        self.reads = Counter(
            r,
            "dispatch_agent_reads_total",
            "A pass's reads of Workloads, TrainJobs and JobSets, by where they were answered from.",
            ("resource", "source"),
        )
        self.queue_depth = Gauge(r, "dispatch_agent_queue_depth", "Workload keys waiting for a worker.")
        self.held_checks = prometheus_client.Gauge(
            "dispatch_agent_held_checks",
            "Workloads whose check this leader holds Pending because pods of the previous execution may still run.",
            registry=r,
        )
        self.longest_held_seconds = prometheus_client.Gauge(
            "dispatch_agent_longest_held_check_seconds",
            "How long the longest of those holds has lasted so far (0 when none).",
            registry=r,
        )
        self.leader.set(0)

    def follow_holds(self, since: Callable[[], Collection[float]], clock: Callable[[], float] = time.time) -> None:
        """Read the holds at every scrape: ``since`` gives when each current hold began (Unix seconds)."""
        self.held_checks.set_function(lambda: len(since()))
        self.longest_held_seconds.set_function(lambda: max((clock() - t for t in since()), default=0.0))

    def render(self) -> str:
        return exposition(self.registry).decode()
