"""harness.lanes: which tests share a pytest session, and in which order they run."""

from pathlib import PurePath

from harness.lanes import lane_of, sort_key


def test_lanes_keep_the_old_order_in_one_session_and_put_each_cluster_kind_in_its_own_session():
    unit, shells, tier_a = [], ["shells"], ["cluster"]
    tier_b, node, mc = ["e2e"], ["e2e", "node"], ["e2e", "multicluster"]
    p = PurePath("/r/tests/x/test_y.py")
    sandbox = PurePath("/r/tests/harness/test_sandbox.py")
    assert [lane_of(m, p) for m in (unit, shells, tier_a, tier_b, node, mc)] == [
        "units",
        "units",
        "units",
        "tier-b",
        "tier-c",
        "multicluster",
    ]
    assert lane_of(tier_b, sandbox) == "tier-c"  # it takes the kube-proxy lock: before the node, in its lane
    order = sorted([(node, p), (tier_b, sandbox), (mc, p), (tier_b, p), (tier_a, p), (shells, p), (unit, p)],
                   key=lambda mp: sort_key(*mp))  # fmt: skip
    assert order == [(unit, p), (shells, p), (tier_a, p), (tier_b, p), (mc, p), (tier_b, sandbox), (node, p)]
    mc_sandbox = PurePath("/r/tests/harness/test_multicluster_sandbox.py")
    assert sorted([(mc, p), (mc, mc_sandbox)], key=lambda mp: sort_key(*mp)) == [(mc, mc_sandbox), (mc, p)]
