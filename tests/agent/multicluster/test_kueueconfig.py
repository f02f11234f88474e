"""Preflight's check that the contact Lease's duration is below Kueue's workerLostTimeout (agent/multicluster/kueue_config.py):
Go durations as Kueue decodes them, the timeout read from Kueue's Configuration (its default when absent), and the
problem Preflight reports, naming both values or the ConfigMap (docs/multicluster.md, "Contact with the manager",
"Plumbing")."""

from __future__ import annotations

from typing import Any

import pytest

from agent.api.settings import ApiSettings
from agent.config import AgentConfig, served_api_settings
from agent.multicluster.kueue_config import contact_problem, go_duration_seconds, unreadable, worker_lost_timeout

WHERE, KEY = "kueue-system/kueue-manager-config", "controller_manager_config.yaml"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15m", 900), ("90s", 90), ("1h30m", 5400), ("1.5h", 5400), ("500ms", 0.5), ("0", 0), ("2m30.5s", 150.5),
     ("-1s", -1)],
)  # fmt: skip
def test_go_durations_read_as_go_reads_them(text, seconds):
    assert go_duration_seconds(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "15 m", "m", "1d", "15M", "1h 30m", "--1s"])
def test_what_go_refuses_is_no_duration(text):
    with pytest.raises(ValueError, match="is not a duration"):
        go_duration_seconds(text)


def config(lost: str | None = None, **extra: Any) -> str:
    multikueue = {"gcInterval": "1m"} | ({"workerLostTimeout": lost} if lost is not None else {})
    return f"apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\nmultiKueue: {multikueue}\n" + "".join(
        f"{k}: {v}\n" for k, v in extra.items()
    )


def test_the_timeout_is_read_from_kueue_s_configuration_and_is_kueue_s_default_when_absent():
    assert worker_lost_timeout(config("5m")) == ("5m", 300)
    assert worker_lost_timeout(config()) == ("15m", 900)
    assert worker_lost_timeout("kind: Configuration\n") == ("15m", 900)
    assert worker_lost_timeout("") == ("15m", 900)
    with pytest.raises(ValueError, match=r"multiKueue\.workerLostTimeout: '5 min' is not a duration"):
        worker_lost_timeout(config("5 min"))
    with pytest.raises(ValueError, match="not a YAML mapping"):
        worker_lost_timeout("- a\n- b\n")


def configmap(text: str | None) -> dict[str, Any]:
    return {"metadata": {"name": "kueue-manager-config"}, "data": {} if text is None else {KEY: text}}


def test_a_contact_duration_below_the_timeout_passes():
    assert contact_problem(configmap(config("15s")), where=WHERE, key=KEY, contact_seconds=8) is None
    assert contact_problem(configmap(config()), where=WHERE, key=KEY, contact_seconds=60) is None


@pytest.mark.parametrize("contact", [15, 60])
def test_a_contact_duration_not_below_the_timeout_fails_naming_both_values(contact):
    """Equal fails too: the worker's copies must be gone before Kueue may dispatch the job elsewhere."""
    problem = contact_problem(configmap(config("15s")), where=WHERE, key=KEY, contact_seconds=contact)
    assert problem is not None
    assert f"workerContactSeconds ({contact}s) is not below Kueue's multiKueue.workerLostTimeout (15s, " in problem
    assert f"ConfigMap {WHERE}, key {KEY}" in problem


def test_kueue_s_configuration_missing_or_unreadable_fails_naming_the_configmap():
    absent = contact_problem(None, where=WHERE, key=KEY, contact_seconds=60) or ""
    assert f"ConfigMap {WHERE}, key {KEY}) is not there" in absent
    no_key = contact_problem(configmap(None), where=WHERE, key=KEY, contact_seconds=60) or ""
    assert f"has no key {KEY}" in no_key
    bad = contact_problem(configmap(config("soon")), where=WHERE, key=KEY, contact_seconds=60) or ""
    assert "'soon' is not a duration" in bad
    assert "(60s) is not proven below" in bad
    forbidden = unreadable(WHERE, KEY, 60, "HTTP 403 Forbidden")
    assert f"ConfigMap {WHERE}, key {KEY}) cannot be read: HTTP 403 Forbidden" in forbidden


def test_the_api_proves_the_contact_duration_the_controller_renews_with():
    config = AgentConfig.model_validate({"workerContactSeconds": 30, "api": {"kueueConfig": {"namespace": "kq"}}})
    served = served_api_settings(config)
    assert served.worker_contact_seconds == 30
    assert (served.kueue_config.namespace, served.kueue_config.name, served.kueue_config.key) == (
        "kq", "kueue-manager-config", KEY
    )  # fmt: skip
    assert ApiSettings().worker_contact_seconds == AgentConfig().worker_contact_seconds
