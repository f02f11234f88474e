"""The chart gives a worker's agent the principals of multicluster.multikueue and multicluster.managerAgent with the
owners' (api.owners), so that Preflight proves them too (agent/api/principals.py); elsewhere they name nobody."""

from __future__ import annotations

from agent.api.principals import Principals
from contract.multicluster import ROLE_MANAGER, ROLE_WORKER
from tests.charts.helm import template
from tests.charts.test_multicluster import _agent_config

MK_USER = "multikueue-manager"
AGENT_SA = "system:serviceaccount:dispatch-remote:manager-agent"


def test_a_worker_s_agent_is_given_multikueue_s_and_the_manager_agent_s_principals_to_prove(tmp_path):
    values = {"multicluster": {"role": ROLE_WORKER, "multikueue": {"usernames": [MK_USER], "groups": []},
                               "managerAgent": {"usernames": [AGENT_SA], "groups": []}}}  # fmt: skip
    owners = _agent_config(template(values), tmp_path).api.owners
    assert owners.multikueue == Principals(usernames=(MK_USER,))
    assert owners.manager_agent == Principals(usernames=(AGENT_SA,))


def test_outside_a_worker_they_name_nobody(tmp_path):
    for values in ({}, {"multicluster": {"role": ROLE_MANAGER}}):
        owners = _agent_config(template(values), tmp_path).api.owners
        assert (owners.multikueue, owners.manager_agent) == (Principals(), Principals())
