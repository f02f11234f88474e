import hashlib
import posixpath
import re

import pytest

from contract.errors import ContractError
from contract.prologue import PROLOGUE
from contract.runtime_patch import (
    Credential,
    Publish,
    check_credentials,
    runtime_patch,
    trainer_replicated_job,
)
from contract.trainer import trainer_command
from harness.fixtures import JOB_ID, runtime

PROLOGUE_VOLUME = {
    "name": "dispatch-prologue",
    "configMap": {
        "name": "dispatch-k8s-prologue-" + hashlib.sha256(PROLOGUE.encode()).hexdigest()[:10],
        "items": [{"key": "prologue.sh", "path": "prologue.sh"}],
        "defaultMode": 0o444,
    },
}
PROLOGUE_MOUNT = {"name": "dispatch-prologue", "mountPath": "/var/run/dispatch-k8s/prologue", "readOnly": True}


def trainer_job():
    return trainer_replicated_job(runtime()["spec"])


def pod_template(entry):
    (job,) = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    return job["template"]["spec"]["template"]


def test_trainer_replicated_job_is_found_by_the_ancestor_label_not_the_name():
    assert trainer_replicated_job(runtime(trainer_job="workers")["spec"])["name"] == "workers"


@pytest.mark.parametrize("count", [0, 2])
def test_exactly_one_trainer_job(count):
    spec = runtime()["spec"]
    jobs = spec["template"]["spec"]["replicatedJobs"]
    trainer = jobs[1]
    jobs[:] = [jobs[0]] + [trainer] * count
    with pytest.raises(ContractError, match=f"{count} replicated jobs carry"):
        trainer_replicated_job(spec)
    with pytest.raises(ContractError):
        trainer_replicated_job(None)


def test_trainer_job_needs_a_name():
    spec = runtime()["spec"]
    del spec["template"]["spec"]["replicatedJobs"][1]["name"]
    with pytest.raises(ContractError, match="has no name"):
        trainer_replicated_job(spec)


def test_minimal_entry():
    entry = runtime_patch(job_id=JOB_ID, n=3, trainer_job=trainer_job())
    assert entry["manager"] == "dispatch.phpboyscout.uk/adapter"
    (job,) = entry["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert job["name"] == "node"
    assert pod_template(entry) == {
        "metadata": {
            "labels": {"dispatch.phpboyscout.uk/job-id": JOB_ID, "dispatch.phpboyscout.uk/submission": "3"},
            "annotations": {"dispatch.phpboyscout.uk/admission": "0"},
            # the evidence a deleted pod leaves until the agent proves its processes gone (issue 10, item 11)
            "finalizers": ["dispatch.phpboyscout.uk/may-still-run"],
        },
        # the prologue's ConfigMap, mounted where the trainer's command runs it from: never optional, so a pod
        # without it does not start
        "spec": {"volumes": [PROLOGUE_VOLUME], "containers": [{"name": "node", "volumeMounts": [PROLOGUE_MOUNT]}]},
    }


def test_the_prologue_volume_names_this_versions_configmap_and_the_command_runs_its_file():
    name = "dispatch-k8s-prologue-" + hashlib.sha256(PROLOGUE.encode()).hexdigest()[:10]
    assert PROLOGUE_VOLUME["configMap"]["name"] == name
    assert (
        posixpath.join(PROLOGUE_MOUNT["mountPath"], PROLOGUE_VOLUME["configMap"]["items"][0]["path"])
        == (trainer_command()[1])
    )
    assert "optional" not in PROLOGUE_VOLUME["configMap"]


def test_credentials_and_publish_image():
    entry = runtime_patch(
        job_id=JOB_ID,
        n=3,
        trainer_job=trainer_job(),
        credentials=[Credential("a", "/creds/a"), Credential("b", "/creds/b")],
        publish=Publish(image="reg/publish:1"),
    )
    spec = pod_template(entry)["spec"]
    assert spec["volumes"] == [
        PROLOGUE_VOLUME,
        {
            "name": "dispatch-credential-0",
            "secret": {"secretName": "a", "defaultMode": 0o400, "optional": True},
        },
        {
            "name": "dispatch-credential-1",
            "secret": {"secretName": "b", "defaultMode": 0o400, "optional": True},
        },
        {"name": "dispatch-publish", "image": {"reference": "reg/publish:1", "pullPolicy": "IfNotPresent"}},
    ]
    assert spec["containers"] == [
        {
            "name": "node",
            "volumeMounts": [
                PROLOGUE_MOUNT,
                {"name": "dispatch-credential-0", "mountPath": "/creds/a", "readOnly": True},
                {"name": "dispatch-credential-1", "mountPath": "/creds/b", "readOnly": True},
                {"name": "dispatch-publish", "mountPath": "/opt/dispatch", "readOnly": True},
            ],
        }
    ]
    assert "initContainers" not in spec


def test_publish_through_the_runtimes_init_container():
    entry = runtime_patch(
        job_id=JOB_ID, n=3, trainer_job=trainer_job(), publish=Publish(init_container="fetch-publish")
    )
    spec = pod_template(entry)["spec"]
    assert spec["volumes"] == [PROLOGUE_VOLUME, {"name": "dispatch-publish", "emptyDir": {}}]
    assert spec["initContainers"] == [
        {
            "name": "fetch-publish",
            "env": [{"name": "DISPATCH_PUBLISH_DEST", "value": "/opt/dispatch"}],
            "volumeMounts": [{"name": "dispatch-publish", "mountPath": "/opt/dispatch"}],
        }
    ]
    assert spec["containers"][0]["volumeMounts"] == [
        PROLOGUE_MOUNT,
        {"name": "dispatch-publish", "mountPath": "/opt/dispatch", "readOnly": True},
    ]


@pytest.mark.parametrize(
    ("publish", "field"),
    [
        (Publish(), "publish"),
        (Publish(image="x", init_container="fetch-publish"), "publish"),
        (Publish(init_container="not-there"), "publish.initContainer"),
        (Publish(image=" "), "publish.image"),
    ],
)
def test_publish_refusals(publish, field):
    with pytest.raises(ContractError) as err:
        runtime_patch(job_id=JOB_ID, n=1, trainer_job=trainer_job(), publish=publish)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("creds", "says"),
    [
        ([Credential("a", "/opt/dispatch")], "overlaps /opt/dispatch"),
        ([Credential("a", "/opt")], "overlaps /opt/dispatch"),
        ([Credential("a", "/opt/dispatch/x")], "overlaps /opt/dispatch"),
        ([Credential("a", "/var/run/dispatch-k8s/prologue")], "overlaps /var/run/dispatch-k8s/prologue"),
        ([Credential("a", "/var/run")], "overlaps /var/run/dispatch-k8s/prologue, where the prologue is"),
        ([Credential("a", "/var/run/dispatch-k8s/prologue/prologue.sh")], "overlaps /var/run/dispatch-k8s/prologue"),
        ([Credential("a", "/c"), Credential("b", "/c/d")], "overlaps another credential"),
        ([Credential("a", "/c"), Credential("b", "/c")], "overlaps another credential"),
        ([Credential("a", "relative")], "absolute, normalised"),
        ([Credential("a", "/x/../y")], "absolute, normalised"),
        ([Credential("a", "/x/")], "absolute, normalised"),
        ([Credential("a", "/")], "absolute, normalised"),
        ([Credential("Bad_Name", "/c")], "not a Secret name"),
        ([Credential("a" * 254, "/c")], "not a Secret name"),
    ],
)
def test_credential_refusals(creds, says):
    with pytest.raises(ContractError, match=re.escape(says)) as err:
        check_credentials(creds)
    assert says in str(err.value)


def test_sibling_paths_do_not_overlap():
    check_credentials([Credential("a", "/opt/dispatcher"), Credential("b", "/c"), Credential("c", "/cd")])
    check_credentials([Credential("a", "/var/run/dispatch-k8s/prologues"), Credential("b", "/var/run/secrets")])
