"""The spec's tables, transcribed: a changed constant must be a deliberate change of the contract."""

from contract import keys


def test_names_table():
    assert keys.FIELD_MANAGER == "dispatch.phpboyscout.uk/adapter"
    assert keys.RUNTIME_PATCH_MANAGER == "dispatch.phpboyscout.uk/adapter"
    assert keys.GATE == "dispatch.phpboyscout.uk/gate"
    assert keys.ADMISSION_CHECK_CONTROLLER == "dispatch.phpboyscout.uk/admission"
    assert keys.TRAINJOB_NAME_MAX == 37


def test_trainjob_labels_and_annotations():
    assert (keys.LABEL_JOB_ID, keys.LABEL_SUBMISSION) == (
        "dispatch.phpboyscout.uk/job-id",
        "dispatch.phpboyscout.uk/submission",
    )
    assert (keys.LABEL_QUEUE_NAME, keys.LABEL_PRIORITY_CLASS) == (
        "kueue.x-k8s.io/queue-name",
        "kueue.x-k8s.io/priority-class",
    )
    assert keys.ANNOTATION_COMMENT == "dispatch.phpboyscout.uk/comment"
    assert keys.ANNOTATION_ADMISSION_GATED_BY == "kueue.x-k8s.io/admission-gated-by"
    assert keys.ANNOTATION_OPENED == "dispatch.phpboyscout.uk/opened"
    assert keys.ANNOTATION_ADMISSION_FLOOR == "dispatch.phpboyscout.uk/admission-floor"
    assert keys.ANNOTATION_JOBSET_UID == "dispatch.phpboyscout.uk/jobset-uid"
    hold = tuple(f"dispatch.phpboyscout.uk/hold-{k}" for k in ("instance", "since", "who", "until", "reason"))
    assert hold == keys.HOLD_ANNOTATIONS


def test_env_variables():
    assert [
        keys.ENV_JOB_ID, keys.ENV_SUBMISSION, keys.ENV_EPOCH, keys.ENV_ATTEMPT, keys.ENV_K8S_EPOCH_PREFIX,
        keys.ENV_K8S_TOKEN_PREFIX, keys.ENV_K8S_ADMISSION, keys.ENV_K8S_RESTART, keys.ENV_K8S_WORKDIR,
        keys.ENV_PUBLISH_DEST,
    ] == [
        "DISPATCH_JOB_ID", "DISPATCH_SUBMISSION", "DISPATCH_EPOCH", "DISPATCH_ATTEMPT",
        "DISPATCH_K8S_EPOCH_PREFIX", "DISPATCH_K8S_TOKEN_PREFIX", "DISPATCH_K8S_ADMISSION",
        "DISPATCH_K8S_RESTART", "DISPATCH_K8S_WORKDIR",
        "DISPATCH_PUBLISH_DEST",
    ]  # fmt: skip


def test_runtime_patch_and_copy():
    assert keys.ANNOTATION_ADMISSION == "dispatch.phpboyscout.uk/admission"
    assert keys.ADMISSION_AT_CREATION == "0"
    assert keys.CREDENTIAL_VOLUME_PREFIX == "dispatch-credential-"
    assert keys.CREDENTIAL_DEFAULT_MODE == 0o400
    assert keys.PUBLISH_VOLUME == "dispatch-publish"
    assert keys.PUBLISH_MOUNT_PATH == "/opt/dispatch"
    assert keys.PUBLISH_IMAGE_PULL_POLICY == "IfNotPresent"
    assert keys.ANNOTATION_RUNTIME_SOURCE == "dispatch.phpboyscout.uk/runtime-source"


def test_read_from_others_and_fixed_names():
    assert keys.NAME == "dispatch-k8s"
    assert keys.LABEL_WORKLOAD_JOB_UID == "kueue.x-k8s.io/job-uid"
    assert keys.LABEL_JOBSET_NAME == "jobset.sigs.k8s.io/jobset-name"
    assert keys.LABEL_RESTART_ATTEMPT == "jobset.sigs.k8s.io/restart-attempt"
    assert keys.LABEL_JOB_COMPLETION_INDEX == "batch.kubernetes.io/job-completion-index"
    assert (keys.LABEL_ANCESTOR_STEP, keys.ANCESTOR_TRAINER) == (
        "trainer.kubeflow.org/trainjob-ancestor-step",
        "trainer",
    )
    assert (keys.TAINT_UNREACHABLE, keys.TAINT_NOT_READY, keys.TAINT_OUT_OF_SERVICE) == (
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/out-of-service",
    )
    assert keys.RESERVED_KEY_PREFIXES == (
        "dispatch.phpboyscout.uk/",
        "kueue.x-k8s.io/",
        "trainer.kubeflow.org/",
        "jobset.sigs.k8s.io/",
    )
    assert keys.TRAINER_CONTAINER == "node"
    assert (keys.LEASE_NAMESPACE, keys.LEASE_NAME) == ("dispatch-system", "dispatch-admission")
    assert keys.PROBE_IMAGE == "dispatch.invalid/never:probe"
    assert (keys.PROBE_NODE_SELECTOR_KEY, keys.PROBE_NODE_SELECTOR_VALUE) == (
        "dispatch.phpboyscout.uk/probe",
        "never",
    )
    assert (keys.PROLOGUE_SHELL, keys.PROLOGUE_ARGV0, keys.PROLOGUE_REFUSAL_EXIT) == (
        "/bin/sh",
        "dispatch-prologue",
        125,
    )
