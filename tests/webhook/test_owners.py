"""The allowlist of webhook/owners.py: its shape, and docs/security.md's copy, which charts/generate.py writes."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from webhook import owners
from webhook.config import Config, Owners, Principals
from webhook.rules.owners import owner_policy

ROOT = Path(__file__).resolve().parents[2]


def test_docs_security_states_the_allowlist_the_policies_are_rendered_from():
    """charts/generate.py writes the table between its markers (its --check, tests/charts/test_chart_generated.py, keeps
    it current): exactly the table, and nothing else, lies between them."""
    text = (ROOT / "docs" / "security.md").read_text()
    between = text.split("<!-- generated: owners-allowlist", 1)[1].split("<!-- end generated -->", 1)[0]
    assert between.split("\n", 1)[1] == owners.allowlist_table()


def test_every_role_of_the_table_has_principals_in_the_config():
    roles = {r for kind in owners.KINDS for rs in kind.writes.values() for r in rs} - {owners.EVERYONE}
    config = Config()
    for role in roles | {owners.BREAK_GLASS}:
        assert config.principals(role) is not None
    assert (
        set(Owners.model_fields)
        | {
            owners.DISPATCH,
            owners.KUEUE,
            owners.MULTIKUEUE,
            owners.MULTIKUEUE_STATUS,
            owners.DISPATCH_STATUS,
            owners.MANAGER_AGENT,
            *owners.KUBERNETES_PRINCIPALS,
        }
        >= roles
    )


def test_break_glass_is_nobody_by_default_and_a_stranger_owns_nothing_but_pod_deletes_and_evictions():
    assert Config().owners.breakGlass.usernames == ()
    assert Config().owners.breakGlass.groups == ()
    open_to_all = {
        (kind.resource, write)
        for kind in owners.KINDS
        for write, roles in kind.writes.items()
        if owners.EVERYONE in roles
    }
    assert open_to_all == {("pods", ("DELETE", "")), ("pods", ("CREATE", "eviction"))}


def test_creates_belong_to_one_creator_each_and_on_a_worker_to_multikueue_or_the_manager_s_agent_for_its_copies():
    creators = {kind.resource: kind.writes[("CREATE", "")] for kind in owners.KINDS}
    assert creators == {
        "trainjobs": (owners.DISPATCH, owners.MULTIKUEUE),
        "trainingruntimes": (owners.DISPATCH, owners.MANAGER_AGENT),
        "jobsets": (owners.TRAINER,),
        "jobs": (owners.JOBSET,),
        "pods": (owners.JOB_CONTROLLER,),
        "workloads": (owners.KUEUE, owners.MULTIKUEUE),
        "configmaps": (owners.DISPATCH, owners.MANAGER_AGENT),
    }
    # MultiKueue and the manager's agent own nothing outside role worker, and there only their copies and
    # replicas (owners.ONLY_ON); a kubelet only its node's pods.
    assert set(owners.ONLY_ON) == {
        owners.KUBELET,
        owners.MULTIKUEUE,
        owners.MULTIKUEUE_STATUS,
        owners.DISPATCH_STATUS,
        owners.MANAGER_AGENT,
    }
    assert Config().principals(owners.MANAGER_AGENT) == Principals()


def test_kueue_s_multikueue_writes_only_the_status_of_the_trainjobs_it_manages():
    writes = {
        (kind.resource, w)
        for kind in owners.KINDS
        for w, roles in kind.writes.items()
        if owners.MULTIKUEUE_STATUS in roles
    }
    assert writes == {("trainjobs", ("UPDATE", "status"))}
    assert Config().principals(owners.MULTIKUEUE_STATUS) == Config().kueue


def test_dispatch_writes_a_trainjob_s_status_only_where_multikueue_manages_it():
    """The release of a lost worker's quota (agent/multicluster/lost_quota.py): dispatch's principals, on the status of the
    TrainJobs whose managedBy is MultiKueue's, and nowhere else as that role."""
    writes = {
        (kind.resource, w)
        for kind in owners.KINDS
        for w, roles in kind.writes.items()
        if owners.DISPATCH_STATUS in roles
    }
    assert writes == {("trainjobs", ("UPDATE", "status"))}
    assert owners.DISPATCH not in owners.TRAINJOBS.writes[("UPDATE", "status")]
    assert Config().principals(owners.DISPATCH_STATUS) == Config().dispatch
    assert owners.ONLY_ON[owners.DISPATCH_STATUS] is owners.ONLY_ON[owners.MULTIKUEUE_STATUS]


# -- A kubelet is one node ---------------------------------------------------------------------------


def _kubelet_test() -> str:
    (variable,) = [v for v in owner_policy(Config(), owners.PODS)["spec"]["variables"] if v["name"] == owners.KUBELET]
    return variable["expression"]


def test_a_kubelet_writes_only_the_status_of_pods_and_no_role_defaults_to_a_group():
    """A group says nothing of which pods its members' writes are about, and anyone may be added to one."""
    writes = {(k.resource, w) for k in owners.KINDS for w, roles in k.writes.items() if owners.KUBELET in roles}
    assert writes == {("pods", ("UPDATE", "status"))}
    assert all(groups == () for groups in owners.DEFAULT_GROUPS.values())
    assert all(getattr(Owners(), role).groups == () for role in Owners.model_fields)
    for principals in (Config().dispatch, Config().kueue, Config().controllers):
        assert principals.groups == ()


def test_a_kubelet_is_its_nodes_user_not_a_setting():
    assert owners.KUBELET not in Owners.model_fields
    assert Config().principals(owners.KUBELET) == Principals()
    with pytest.raises(ValidationError, match=r"owners\.kubelet .*is no longer a setting: remove it"):
        Config.model_validate({"owners": {"kubelet": {"groups": ["system:nodes"]}}})


def test_a_kubelets_writes_are_judged_on_the_node_of_the_object_and_of_the_old_object():
    """The user's whole name is system:node:<the pod's nodeName>, on the new object and the old: no group, no
    other name, and no unbound pod (``system:node:`` alone names no node)."""
    test = _kubelet_test()
    assert 'request.userInfo.username.startsWith("system:node:")' in test
    for o in ("object", "oldObject"):
        node = f"{o}.?spec.?nodeName.orValue('')"
        assert f"({o} == null || {node} != '' && request.userInfo.username == \"system:node:\" + {node})" in test
    assert "groups" not in test, "no group is a kubelet"
    assert "substring" not in test, "no index past the end of a short name"


def test_the_kubelets_test_is_the_same_whatever_the_config():
    """No value of the config reaches it: a site cannot widen it (the chart renders it as text)."""
    wide = Config(owners=Owners(breakGlass=Principals(groups=("system:nodes",))), dispatch=Principals(groups=("g",)))
    (variable,) = [v for v in owner_policy(wide, owners.PODS)["spec"]["variables"] if v["name"] == owners.KUBELET]
    assert variable["expression"] == _kubelet_test()
