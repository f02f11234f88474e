from typing import Any

import pytest

from contract.runtime_requirements import runtime_problems
from harness.fixtures import runtime


def spec() -> dict[str, Any]:
    return runtime()["spec"]


def trainer_job(s: dict[str, Any]) -> dict[str, Any]:
    return s["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]


def rules(s: dict[str, Any], allow: bool = False) -> list[str]:
    return [p.rule for p in runtime_problems(s, allow_rank_restart=allow)]


def test_the_stock_shape_passes():
    assert rules(spec()) == []


def test_restart_policy_must_be_never():
    s = spec()
    trainer_job(s)["template"]["spec"]["restartPolicy"] = "OnFailure"
    assert rules(s) == rules(s, allow=True) == ["runtime.restart-policy"]
    del trainer_job(s)["template"]["spec"]["restartPolicy"]
    assert rules(s) == ["runtime.restart-policy"]


@pytest.mark.parametrize("limit", [None, 1, 6])
def test_backoff_limit_must_be_stated_zero(limit):
    s = spec()
    if limit is None:
        del trainer_job(s)["backoffLimit"]
    else:
        trainer_job(s)["backoffLimit"] = limit
    problems = runtime_problems(s, allow_rank_restart=True)
    assert [p.rule for p in problems] == ["runtime.backoff-limit"]
    assert "saw" in str(problems[0])
    assert "must be stated as 0" in str(problems[0])


@pytest.mark.parametrize("container", [{"restartPolicy": "Always"}, {"restartPolicyRules": [{"action": "Restart"}]}])
def test_container_restart_rules_restart_in_place(container):
    s = spec()
    trainer_job(s)["template"]["spec"]["containers"][0].update(container)
    assert rules(s, allow=True) == ["runtime.container-restart"]


def test_other_containers_may_restart():
    s = spec()
    trainer_job(s)["template"]["spec"]["containers"].append({"name": "sidecar", "restartPolicy": "Always"})
    trainer_job(s)["template"]["spec"]["containers"].append("junk")
    assert rules(s) == []


@pytest.mark.parametrize(
    "change",
    [
        lambda s: trainer_job(s).update(backoffLimitPerIndex=1),
        lambda s: trainer_job(s).update(podFailurePolicy={"rules": [{"action": "Count"}, {"action": "Ignore"}]}),
    ],
)
def test_rank_restart_refused_unless_allowed(change):
    s = spec()
    change(s)
    assert rules(s) == ["runtime.rank-restart"]
    assert rules(s, allow=True) == []


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.parametrize(
    "failure",
    [
        {"rules": [{"action": "RestartJob"}]},
        {"rules": [{"action": "RestartJobAndIgnoreMaxRestarts", "targetReplicatedJobs": ["node"]}]},
    ],
)
def test_restart_of_the_trainer_job_is_refused_even_where_rank_restart_is_allowed(failure, allow):
    """RestartJob recreates every rank of the trainer Job, healthy ones too, and keeps J: a whole group
    rerun under one identity, not the replacement of a failed rank that allowRankRestart waives."""
    s = spec()
    s["template"]["spec"]["failurePolicy"] = failure
    assert rules(s, allow=allow) == ["runtime.job-restart"]


@pytest.mark.parametrize("allow", [False, True])
def test_in_place_restart_is_refused_even_where_rank_restart_is_allowed(allow):
    """allowRankRestart waives what replaces a failed rank; an in-place restart restarts the whole group's
    healthy pods, raising neither A nor J."""
    s = spec()
    s["template"]["spec"]["failurePolicy"] = {"restartStrategy": "InPlaceRestart", "maxRestarts": 3}
    assert rules(s, allow=allow) == ["runtime.in-place-restart"]


@pytest.mark.parametrize(
    "failure",
    [
        {
            "restartStrategy": "BlockingRecreate",
            "rules": [{"action": "RestartJobSet"}, {"action": "FailJobSet"}],
        },
        {"rules": [{"action": "RestartJob", "targetReplicatedJobs": ["dataset-initializer"]}, "junk"]},
        "junk",
    ],
)
def test_restarts_that_raise_j_or_spare_the_trainer_pass(failure):
    s = spec()
    s["template"]["spec"]["failurePolicy"] = failure
    trainer_job(s)["podFailurePolicy"] = {
        "rules": [{"action": "FailJob", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    assert rules(s) == []


def test_no_trainer_job():
    s = spec()
    s["template"]["spec"]["replicatedJobs"].pop()
    problems = runtime_problems(s, allow_rank_restart=False)
    assert [p.rule for p in problems] == ["runtime.trainer-job"]
    assert "0 replicated jobs carry" in str(problems[0])


def node_container(s: dict[str, Any]) -> dict[str, Any]:
    return trainer_job(s)["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("allow", [False, True])
@pytest.mark.parametrize(
    "path",
    [
        "/var/run/dispatch-k8s/prologue",  # at: replaces the directory
        "/var/run/dispatch-k8s/prologue/prologue.sh",  # below: replaces the file
        "/var/run/dispatch-k8s",  # above
        "/var",
        "/",
    ],
)
def test_a_trainer_mount_over_the_prologue_is_refused(path, allow):
    """dispatch's runtime patch mounts the prologue at /var/run/dispatch-k8s/prologue and the trainer runs the file
    there: a mount of the runtime's own at, above or below it could shadow the text."""
    s = spec()
    node_container(s)["volumeMounts"] = [{"name": "data", "mountPath": "/data"}, {"name": "x", "mountPath": path}]
    problems = runtime_problems(s, allow_rank_restart=allow)
    assert [p.rule for p in problems] == ["runtime.prologue-mount"]
    assert problems[0].field.endswith("containers[node].volumeMounts[1].mountPath")
    assert problems[0].seen == path
    assert "neither at, above nor below /var/run/dispatch-k8s/prologue" in problems[0].accepted


@pytest.mark.parametrize(
    "path",
    ["/var/run/dispatch-k8s//prologue/prologue.sh", "/var/run/dispatch-k8s/./prologue", "/data/", "//data",
     "/x/../var/run/dispatch-k8s/prologue", "data", "", None],
)  # fmt: skip
def test_a_trainer_mount_path_not_written_canonically_is_refused(path):
    """The runtime-copies policy compares paths as text; both read only canonical ones, so they agree."""
    s = spec()
    node_container(s)["volumeMounts"] = [{"name": "x", "mountPath": path}]
    problems = runtime_problems(s, allow_rank_restart=True)
    assert [p.rule for p in problems] == ["runtime.prologue-mount"]
    assert "canonically" in problems[0].accepted


def test_a_trainer_device_over_the_prologue_is_refused():
    s = spec()
    node_container(s)["volumeDevices"] = [{"name": "disk", "devicePath": "/var/run/dispatch-k8s/prologue/prologue.sh"}]
    assert [p.field for p in runtime_problems(s, allow_rank_restart=False)] == [
        "spec.template.spec.replicatedJobs[node].template.spec.template.spec.containers[node].volumeDevices[0].devicePath"
    ]


def test_a_runtime_volume_under_the_prologue_volume_name_is_refused():
    """Trainer's strategic merge would join it with dispatch's volume of that name."""
    s = spec()
    trainer_job(s)["template"]["spec"]["volumes"] = [{"name": "dispatch-prologue", "emptyDir": {}}]
    problems = runtime_problems(s, allow_rank_restart=True)
    assert [p.rule for p in problems] == ["runtime.prologue-mount"]
    assert "renamed" in problems[0].accepted


def test_mounts_beside_the_prologue_and_in_other_containers_pass():
    s = spec()
    node_container(s)["volumeMounts"] = [
        {"name": "a", "mountPath": "/var/run/dispatch-k8s/prologues"},
        {"name": "b", "mountPath": "/var/run/secrets"},
        {"name": "c", "mountPath": "/opt"},
    ]
    node_container(s)["volumeDevices"] = [{"name": "d", "devicePath": "/dev/xvda"}]
    trainer_job(s)["template"]["spec"]["containers"].append(
        {"name": "sidecar", "volumeMounts": [{"name": "e", "mountPath": "/var/run/dispatch-k8s/prologue"}]}
    )
    s["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["volumes"] = [
        {"name": "dispatch-prologue", "emptyDir": {}}
    ]  # another replicated job: dispatch's patch does not touch it
    assert rules(s) == []
