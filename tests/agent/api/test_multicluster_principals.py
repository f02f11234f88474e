"""Preflight's proof of a MultiKueue worker's principals (agent/api/principals.py): the manager's MultiKueue and
the manager's agent (the chart's multicluster.multikueue and multicluster.managerAgent) act here from the manager
with a credential, so a ServiceAccount named for them must exist (no pod is asked for), a user's name is taken as
configured and said so in the report, a group fails, and one name in both fails (docs/security.md, attack 12)."""

from __future__ import annotations

from agent.api.principals import REMOTE, ROLES, OwnerPrincipals, Principals, Seen, principal_notes, principal_problems
from agent.api.principals import wanted as wanted_of
from agent.api.service.capabilities import capabilities
from agent.api.service.heartbeat import LeaseState
from agent.api.service.probe import ProbeResult

MK_SA = "system:serviceaccount:multikueue:kueue-remote"
AGENT_SA = "system:serviceaccount:dispatch-remote:manager-agent"
MK_USER = "multikueue-manager"
AGENT_USER = "dispatch-manager-agent"


NOBODY = Principals()


def worker(multikueue: Principals = NOBODY, agent: Principals = NOBODY) -> OwnerPrincipals:
    return OwnerPrincipals(multikueue=multikueue, managerAgent=agent)


def test_a_remote_service_account_must_exist_and_needs_no_pod():
    given = worker(Principals(usernames=(MK_SA,)), Principals(usernames=(AGENT_SA,)))
    want = wanted_of(given)
    assert want.service_accounts == {("multikueue", "kueue-remote"), ("dispatch-remote", "manager-agent")}
    assert want.pod_namespaces == frozenset()  # acts from the manager: no pod here runs as it
    there = Seen(want.namespaces, want.service_accounts, frozenset())
    assert principal_problems(given, there) == []

    no_account = Seen(want.namespaces, frozenset({("multikueue", "kueue-remote")}), frozenset())
    (problem,) = principal_problems(given, no_account)
    assert problem.startswith(
        f"multicluster.managerAgent.usernames names {AGENT_SA}, but ServiceAccount dispatch-remote/manager-agent "
        "does not exist, so whoever may create ServiceAccounts in dispatch-remote could take the name"
    ), problem
    assert "set multicluster.managerAgent.usernames to the user of the manager's dispatch agent's credential" in problem

    no_namespace = Seen(frozenset({"dispatch-remote"}), frozenset({("dispatch-remote", "manager-agent")}), frozenset())
    (problem,) = principal_problems(given, no_namespace)
    assert problem.startswith(f"multicluster.multikueue.usernames names {MK_SA}, but namespace multikueue does not")


def test_a_remote_user_is_taken_as_configured_and_the_report_says_so():
    given = worker(Principals(usernames=(MK_USER,)), Principals(usernames=(AGENT_USER, AGENT_SA)))
    want = wanted_of(given)
    assert principal_problems(given, Seen(want.namespaces, want.service_accounts, frozenset())) == []
    notes = principal_notes(given)
    assert len(notes) == 2, notes  # the users, not the ServiceAccount
    assert notes[0].startswith(
        f"multicluster.managerAgent.usernames names the user {AGENT_USER}, whose name cannot be read from the API: "
        "that only the manager's dispatch agent presents it is taken as configured"
    ), notes
    assert notes[1].startswith(f"multicluster.multikueue.usernames names the user {MK_USER}, whose name cannot be")
    # Nothing is noted where nothing remote is named (one cluster, a manager).
    assert principal_notes(OwnerPrincipals()) == []
    assert principal_notes(OwnerPrincipals(scheduler=Principals(usernames=("system:kube-scheduler",)))) == []


def test_a_remote_group_fails_naming_the_value_key():
    given = worker(Principals(groups=("multikueue-managers",)), Principals(groups=("system:authenticated",)))
    problems = principal_problems(given, Seen(frozenset(), frozenset(), frozenset()))
    assert [p.split(" names ")[0] for p in problems] == [
        "multicluster.multikueue.groups",
        "multicluster.managerAgent.groups",
    ]
    assert "name its user in multicluster.managerAgent.usernames instead" in problems[1]


def test_one_name_for_both_multikueue_and_the_manager_agent_fails():
    given = worker(Principals(usernames=(MK_USER,)), Principals(usernames=(MK_USER, AGENT_USER)))
    (problem,) = principal_problems(given, Seen(frozenset(), frozenset(), frozenset()))
    assert problem.startswith(
        f"multicluster.multikueue.usernames and multicluster.managerAgent.usernames both name {MK_USER}: the manager "
        "agent's credential here must not be Kueue's"
    ), problem


def test_the_notes_are_in_the_trainer_s_reason_and_never_make_preflight_observe_only():
    notes = principal_notes(worker(Principals(usernames=(MK_USER,))))
    lease = LeaseState("2026-12-05T00:00:00Z", True, "renewed")
    caps = capabilities(kueue=False, probe=ProbeResult(10.0), lease=lease, versions={}, checks=[],
                          active_checks=[], owner_notes=notes)  # fmt: skip
    assert (caps.trainer, caps.observe_only) == (True, False), caps
    assert caps.trainer_reason.endswith(notes[0]), caps.trainer_reason
    failing = capabilities(kueue=False, probe=ProbeResult(10.0), lease=lease, versions={}, checks=[],
                             active_checks=[], trainer_problems=["a problem"], owner_notes=notes)  # fmt: skip
    assert failing.trainer_reason == f"a problem; {notes[0]}"
    assert failing.observe_only_reason == "a problem"


def test_the_remote_roles_are_the_chart_s_multicluster_values():
    assert {ROLES[r][0] for r in REMOTE} == {"multicluster.multikueue", "multicluster.managerAgent"}
