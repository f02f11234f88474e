"""Tier B's kubelets are one node each: every kwok acts as its node's user (harness/tier_b.py)."""

from __future__ import annotations

from harness.tier_b import COMPONENT_IDENTITIES, NODES_GROUP, kwok_identity, kwok_process


def test_each_kwok_is_its_nodes_user_and_no_other_component_is_in_system_nodes():
    """A member of system:nodes under another name would be a kubelet that no node's name confines (docs/security.md,
    attack 13): the policies refuse it, and so tier B never runs one."""
    user, groups = kwok_identity("kwok-node-1")
    assert user == "system:node:kwok-node-1"
    assert NODES_GROUP in groups
    assert all(NODES_GROUP not in groups for _, groups in COMPONENT_IDENTITIES.values())
    assert kwok_process("kwok-node-1") != kwok_process("kwok-node-2"), "one process per node"
