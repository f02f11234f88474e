"""benchmarks.status_poll_bench: the arithmetic of a window against the idle one, and its report."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from benchmarks.status_poll_bench import Window, cpu_per_thousand, net, pct, per_call, report

CPU = {"kube-apiserver": 3.0, "etcd": 0.6, "dispatch-agent": 0.5}
"""The idle window's CPU over 60 s."""


def idle() -> Window:
    return Window("idle", 60.0, cpu=dict(CPU), requests=Counter({("get", "leases"): 12, ("update", "leases"): 12}))


def status(seconds: float = 60.0) -> Window:
    return Window(
        "Status",
        seconds,
        calls=1200,
        sweeps=12,
        cpu={"kube-apiserver": 9.0, "etcd": 1.2, "dispatch-agent": 6.5},
        requests=Counter({("get", "leases"): 12, ("update", "leases"): 12, ("get", "trainjobs"): 1200,
                          ("create", "subjectaccessreviews"): 1200, ("list (consistent)", "pods"): 1200}),
        latencies=[0.01 * i for i in range(1, 101)],
        sweep_seconds=[1.5, 2.0, 4.0],
        fleet=100,
    )  # fmt: skip


def test_the_background_is_taken_off_at_the_idle_windows_rate():
    assert net(10.0, 3.0, 60.0, 60.0) == 7.0
    assert net(10.0, 3.0, 120.0, 60.0) == 4.0  # twice as long: twice the background


def test_requests_per_call_leave_out_the_background():
    assert per_call(status(), idle(), ("get", "trainjobs")) == 1.0
    assert per_call(status(), idle(), ("get", "leases")) == 0.0  # the Lease renews by time, not by calls
    assert per_call(status(90.0), idle(), ("get", "leases")) == pytest.approx(-6 / 1200)
    assert math.isnan(per_call(Window("List", 60.0), idle(), ("get", "trainjobs")))


def test_cpu_per_thousand_calls_is_what_the_calls_add():
    assert cpu_per_thousand(status(), idle(), "kube-apiserver") == pytest.approx(5.0)  # (9 - 3) / 1200 * 1000
    assert cpu_per_thousand(status(), idle(), "dispatch-agent") == pytest.approx(5.0)
    assert cpu_per_thousand(status(), idle(), "etcd") == pytest.approx(0.5)


def test_percentiles_pick_a_sample():
    assert pct([3.0, 1.0, 2.0], 0.5) == 2.0
    assert pct([1.0, 2.0], 0.99) == 2.0
    assert math.isnan(pct([], 0.5))


def test_the_report_has_a_row_per_verb_and_resource_and_one_per_window():
    lines = report([status()], idle(), 100, 5.0)
    text = "\n".join(lines)
    assert "| get | `trainjobs` | 1.000 | 0.0 |" in lines
    assert "| create | `subjectaccessreviews` | 1.000 | 0.0 |" in lines
    assert "| get | `leases` | 0.000 | 12.0 |" in lines
    assert "| **all** | | **3.00** | 24.0 |" in lines
    assert (
        "| Status (60 s) | 1200 (12) | 510 / 990 ms | 2.00 / 4.00 s | 9.00 | 1.20 | 6.50 | 5.00 | 0.50 | 5.00 |"
        in lines
    )
    assert "| idle (60 s) | 0 | - | - | 3.00 | 0.60 | 0.50 | - | - | - |" in lines
    assert "the calls add 6.00 CPU s to the API server's 9.00 s in the window of 60 s (10.0% of one core)" in text
    assert "a sweep of all 100 jobs is 100 call(s), 0.500 API server and 0.500 agent CPU s" in text
    assert "every 5 s that is 10.0% and 10.0% of a core" in text
