"""The allowlist of webhook/owners.py: its shape, and docs/security.md kept equal to it."""

from __future__ import annotations

from pathlib import Path

from webhook import owners
from webhook.config import Config, Owners, Principals

ROOT = Path(__file__).resolve().parents[2]


def test_docs_security_states_the_allowlist_the_policies_are_rendered_from():
    assert owners.allowlist_table() in (ROOT / "docs" / "security.md").read_text()


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
    # replicas (owners.ONLY_ON).
    assert set(owners.ONLY_ON) == {
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
    """The release of a lost worker's quota (agent/lostquota.py): dispatch's principals, on the status of the
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
