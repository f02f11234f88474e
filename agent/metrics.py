"""The agent's Prometheus metrics (primitives and exposition: serving/prometheus.py)."""

from __future__ import annotations

from typing import Final

from serving.prometheus import Counter, Gauge, Histogram, render

RECONCILE_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds for one pass: a GET of the Workload, a few more reads, one or two writes."""
READY_BUCKETS: Final = (0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""Seconds from quota reserved to our Ready. Kueue stamps QuotaReserved in whole seconds, so below a second
this is coarse; the benchmark measures it end to end."""


class AgentMetrics:
    def __init__(self) -> None:
        self.decisions = Counter(
            "dispatch_agent_decisions_total", "Passes that decided something, by action.", ("action",)
        )
        self.reconcile_seconds = Histogram(
            "dispatch_agent_reconcile_duration_seconds",
            "Time of one pass over a Workload, reads and writes included, by result.",
            RECONCILE_BUCKETS,
            ("result",),
        )
        self.reserved_to_ready = Histogram(
            "dispatch_agent_quota_reserved_to_ready_seconds",
            "From the Workload's QuotaReserved transition to our check's Ready write.",
            READY_BUCKETS,
        )
        self.conflicts = Counter(
            "dispatch_agent_write_conflicts_total",
            "Preconditioned writes refused because the object changed since it was read.",
            ("object",),
        )
        self.errors = Counter("dispatch_agent_reconcile_errors_total", "Passes that failed, by error.", ("error",))
        self.foreign = Counter("dispatch_agent_foreign_reports_total", "Foreign reasons reported as Events.")
        self.leader = Gauge("dispatch_agent_leader", "1 while this replica holds the Lease and runs the gate.")
        self.watch_restarts = Counter(
            "dispatch_agent_watch_restarts_total", "Watches started again, by resource and why.", ("resource", "why")
        )
        self.queue_depth = Gauge("dispatch_agent_queue_depth", "Workload keys waiting for a worker.")
        self.leader.set(0)

    def render(self) -> str:
        return render(
            [
                self.decisions,
                self.reconcile_seconds,
                self.reserved_to_ready,
                self.conflicts,
                self.errors,
                self.foreign,
                self.leader,
                self.watch_restarts,
                self.queue_depth,
            ]
        )
