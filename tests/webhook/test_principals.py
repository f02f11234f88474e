"""Preflight's proof of the owners' principals (agent/api/principals.py), and the defaults it proves: one principal per
component, none that a cluster could create later."""

from __future__ import annotations

from typing import Any

import pytest

from agent.api.principals import (
    DEPLOYED,
    ROLES,
    OwnerPrincipals,
    Principals,
    Seen,
    principal_problems,
    running_as,
    service_account,
    wanted,
)
from webhook import owners
from webhook.config import DEFAULT_CONTROLLER_USERNAMES, DEFAULT_KUEUE_USERNAME, Config

JOBSET = "system:serviceaccount:jobset-system:jobset-controller-manager"
SQUATTABLE = "system:serviceaccount:kubeflow-system:jobset-controller-manager"


def pod(namespace: str, sa: str | None, phase: str = "Running", deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"namespace": namespace, "name": f"p-{sa}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-05T00:00:00Z"
    spec = {"serviceAccountName": sa} if sa else {}
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def seen(
    *accounts: tuple[str, str], running: tuple[tuple[str, str], ...] = (), namespaces: tuple[str, ...] = ()
) -> Seen:
    return Seen(
        frozenset(namespaces or {ns for ns, _ in accounts}), frozenset(accounts), frozenset(running or accounts)
    )


def test_service_account_usernames_are_parsed_and_nothing_else():
    assert service_account(JOBSET) == ("jobset-system", "jobset-controller-manager")
    for other in ("system:kube-scheduler", "system:kube-controller-manager", "system:serviceaccount:ns",
                  "system:serviceaccount::x", "system:serviceaccount:ns:", "system:serviceaccount:a:b:c"):  # fmt: skip
        assert service_account(other) is None, other


def test_a_present_running_service_account_passes():
    config = OwnerPrincipals(jobset=Principals(usernames=(JOBSET,)))
    assert principal_problems(config, seen(("jobset-system", "jobset-controller-manager"))) == []


@pytest.mark.parametrize(
    ("world", "says"),
    [
        (seen(namespaces=("jobset-system",)), "namespace kubeflow-system does not exist"),
        (seen(namespaces=("kubeflow-system",)), "ServiceAccount kubeflow-system/jobset-controller-manager does not"),
        (
            seen(("kubeflow-system", "jobset-controller-manager"), running=(("kubeflow-system", "other"),)),
            "no running pod in kubeflow-system runs as ServiceAccount jobset-controller-manager",
        ),
    ],
    ids=["namespace missing", "service account missing", "no pod runs as it"],
)
def test_a_name_not_there_fails_naming_the_value_key_and_what_to_set(world: Seen, says: str):
    config = OwnerPrincipals(jobset=Principals(usernames=(SQUATTABLE,)))
    (problem,) = principal_problems(config, world)
    assert problem.startswith(f"webhook.owners.jobset.usernames names {SQUATTABLE}, but {says}"), problem
    assert "set webhook.owners.jobset.usernames to the ServiceAccount JobSet runs as" in problem


def test_kube_controller_managers_controllers_need_no_pod_of_their_own():
    gc = "system:serviceaccount:kube-system:generic-garbage-collector"
    config = OwnerPrincipals(garbageCollector=Principals(usernames=(gc,)))
    account = ("kube-system", "generic-garbage-collector")
    assert principal_problems(config, seen(account, running=(("kube-system", "x"),))) == []
    assert wanted(config).pod_namespaces == frozenset()
    # A ServiceAccount elsewhere is a pod's, whatever the role; a Deployment's, wherever it runs.
    elsewhere = OwnerPrincipals(garbageCollector=Principals(usernames=("system:serviceaccount:gc:gc",)))
    assert wanted(elsewhere).pod_namespaces == {"gc"}
    kueue = OwnerPrincipals(kueue=Principals(usernames=("system:serviceaccount:kube-system:kueue",)))
    assert wanted(kueue).pod_namespaces == {"kube-system"}
    assert (
        "no running pod in kube-system"
        in principal_problems(kueue, seen(("kube-system", "kueue"), running=(("kube-system", "x"),)))[0]
    )


def test_the_controllers_value_is_proven_too():
    config = OwnerPrincipals(controllers=Principals(usernames=(SQUATTABLE,)))
    (problem,) = principal_problems(config, seen(namespaces=("jobset-system",)))
    assert problem.startswith("webhook.controllers.usernames names"), problem


def test_certificate_users_are_taken_as_configured():
    config = OwnerPrincipals(scheduler=Principals(usernames=("system:kube-scheduler",)),
                             jobController=Principals(usernames=(owners.KCM,)))  # fmt: skip
    assert principal_problems(config, seen()) == []
    assert wanted(config).namespaces == frozenset()


def test_groups_fail_on_a_components_role():
    config = OwnerPrincipals(
        trainer=Principals(groups=("system:serviceaccounts:kubeflow-system",)),
        kueue=Principals(groups=("system:masters",)),
    )
    problems = principal_problems(config, seen())
    assert [p.split(" names ")[0] for p in problems] == ["webhook.kueue.groups", "webhook.owners.trainer.groups"]
    assert "name its ServiceAccount in webhook.owners.trainer.usernames instead" in problems[1]


def test_running_pods_are_read_by_their_service_account():
    pods = [pod("a", "x"), pod("a", "y", phase="Pending"), pod("a", "z", deleting=True), pod("b", None)]
    assert running_as(pods) == {("a", "x"), ("b", "default")}


def test_every_owner_role_of_a_component_is_proven_and_break_glass_is_not():
    assert set(OwnerPrincipals.model_fields) == set(ROLES)
    aliases = {OwnerPrincipals.model_fields[f].alias or f for f in ROLES}
    assert aliases == {"kueue", "controllers", "multikueue", "managerAgent"} | (
        set(Config().owners.model_dump()) - {owners.BREAK_GLASS, owners.KUBELET}
    )
    assert set(ROLES) >= DEPLOYED


# -- the defaults: one principal per component install ---------------------------------------------------------------


def test_the_defaults_name_one_principal_per_component():
    assert owners.DEFAULT_USERNAMES[owners.JOBSET] == (JOBSET,)
    assert SQUATTABLE not in DEFAULT_CONTROLLER_USERNAMES
    for role, usernames in owners.DEFAULT_USERNAMES.items():
        assert owners.KCM not in usernames, role
        assert len({service_account(u)[0] if service_account(u) else u for u in usernames}) <= 1, role
    assert owners.KCM not in DEFAULT_CONTROLLER_USERNAMES
    assert DEFAULT_KUEUE_USERNAME == "system:serviceaccount:kueue-system:kueue-controller-manager"


def test_the_defaults_pass_where_each_component_runs_as_upstream_installs_it():
    config = Config()
    given = OwnerPrincipals.model_validate(
        {"kueue": config.kueue.model_dump(), "controllers": config.controllers.model_dump()}
        | {k: v for k, v in config.owners.model_dump().items() if k not in (owners.BREAK_GLASS, owners.KUBELET)}
    )
    want = wanted(given)
    world = Seen(want.namespaces, want.service_accounts, want.service_accounts)
    assert principal_problems(given, world) == []
