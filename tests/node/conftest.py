"""Tier C's tests share tier B's readmission-gate setup (an agent, a gated ClusterQueue, a namespace per test)."""

from tests.e2e.test_readmission_gate import gate, ns  # noqa: F401  (fixtures)
