"""The prologue on a real kubelet shares the gate's end-to-end setup (an agent, a gated ClusterQueue, a namespace)."""

from tests.agent.gate.test_readmission_gate import gate, ns  # noqa: F401  (fixtures)
