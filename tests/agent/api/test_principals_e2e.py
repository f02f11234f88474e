"""Tier B: Preflight proves the owners' principals on the real API server (agent/api/principals.py). With the chart's
defaults it passes: kube-controller-manager runs its controllers under their ServiceAccounts, and Kueue, Trainer and
JobSet run under theirs (the harness's stand-in Deployments, harness/tier_b.py). A name that is not there fails,
naming the value key: its namespace missing, its ServiceAccount missing, or no pod running as it."""

from __future__ import annotations

import secrets

import pytest

from agent.api.models import PreflightRequest
from agent.api.principals import OwnerPrincipals, Principals
from agent.api.settings import ApiSettings
from tests.agent.api import test_e2e as base
from tests.agent.api.cluster import allowed, running_agent
from tests.agent.api.test_e2e import E2E, RUNTIME
from webhook import owners
from webhook.config import Config

controller = base.controller
e2e = base.e2e

pytestmark = [pytest.mark.e2e, pytest.mark.asyncio]


def chart_defaults() -> OwnerPrincipals:
    """What the chart gives the agent with its default values: the policies' principals but break-glass's and the
    kubelets'."""
    config = Config()
    roles = {k: v for k, v in config.owners.model_dump().items() if k not in (owners.BREAK_GLASS, owners.KUBELET)}
    return OwnerPrincipals.model_validate(
        {"kueue": config.kueue.model_dump(), "controllers": config.controllers.model_dump(), **roles}
    )


async def _preflight(e2e: E2E, tmp_path, name: str, given: OwnerPrincipals):
    settings = ApiSettings(leaseNamespace=e2e.ns, probeSeconds=base.PROBE_SECONDS, owners=given)
    directory = tmp_path / name
    directory.mkdir()
    token = e2e.who.tokens["supervisor"]
    async with running_agent(e2e.cp, directory, settings) as agent, agent.client(token) as api:
        await allowed(agent, token, e2e.ns)
        return await api.preflight(PreflightRequest.model_validate({"namespace": e2e.ns, "runtime": {"name": RUNTIME}}))


async def test_preflight_proves_the_defaults_and_fails_on_a_name_not_there(e2e: E2E, tmp_path):
    caps = await _preflight(e2e, tmp_path, "defaults", chart_defaults())
    assert (caps.trainer, caps.observe_only) == (True, False), caps

    # A ServiceAccount with no pod running as it: created here, nothing runs as it.
    idle = f"idle-{secrets.token_hex(3)}"
    e2e.cp.ensure_service_account("kueue-system", idle)
    absent_ns = f"absent-{secrets.token_hex(3)}"
    given = chart_defaults().model_copy(
        update={
            "jobset": Principals(usernames=(f"system:serviceaccount:{absent_ns}:jobset-controller-manager",)),
            "trainer": Principals(usernames=("system:serviceaccount:kubeflow-system:no-such-account",)),
            "kueue": Principals(usernames=(f"system:serviceaccount:kueue-system:{idle}",)),
        }
    )
    caps = await _preflight(e2e, tmp_path, "missing", given)
    assert (caps.trainer, caps.observe_only) == (False, True), caps
    reason = caps.trainer_reason
    for says in (
        f"webhook.owners.jobset.usernames names system:serviceaccount:{absent_ns}:jobset-controller-manager, but "
        f"namespace {absent_ns} does not exist",
        "webhook.owners.trainer.usernames names system:serviceaccount:kubeflow-system:no-such-account, but "
        "ServiceAccount kubeflow-system/no-such-account does not exist",
        f"webhook.kueue.usernames names system:serviceaccount:kueue-system:{idle}, but no running pod in "
        f"kueue-system runs as ServiceAccount {idle}",
        "set webhook.owners.jobset.usernames to the ServiceAccount JobSet runs as on this cluster",
    ):
        assert says in reason, reason


async def test_preflight_on_a_worker_proves_multikueue_s_and_the_manager_agent_s_service_accounts(e2e: E2E, tmp_path):
    """A worker's multicluster.multikueue and multicluster.managerAgent act from the manager: a ServiceAccount named
    for them must exist (no pod runs as it here); a user's name is taken as configured, and the report says so."""
    remote = f"remote-{secrets.token_hex(3)}"
    e2e.cp.ensure_service_account(e2e.ns, remote)  # nothing runs as it: it is the manager's, used from there
    present = f"system:serviceaccount:{e2e.ns}:{remote}"
    given = chart_defaults().model_copy(
        update={"multikueue": Principals(usernames=("multikueue-manager",)),
                "manager_agent": Principals(usernames=(present,))}
    )  # fmt: skip
    caps = await _preflight(e2e, tmp_path, "remote", given)
    assert (caps.trainer, caps.observe_only) == (True, False), caps
    assert (
        "multicluster.multikueue.usernames names the user multikueue-manager, whose name cannot be read from the "
        "API: that only the manager's MultiKueue presents it is taken as configured"
    ) in caps.trainer_reason, caps.trainer_reason
    assert present not in caps.trainer_reason

    missing = f"system:serviceaccount:{e2e.ns}:no-such-manager-agent"
    given = given.model_copy(update={"manager_agent": Principals(usernames=(missing,))})
    caps = await _preflight(e2e, tmp_path, "remote-missing", given)
    assert (caps.trainer, caps.observe_only) == (False, True), caps
    assert (
        f"multicluster.managerAgent.usernames names {missing}, but ServiceAccount {e2e.ns}/no-such-manager-agent "
        "does not exist"
    ) in (caps.observe_only_reason or ""), caps
