"""Creation: only dispatch creates a dispatch TrainJob, and only in the contract's canonical form."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.admission import admission_count
from contract.errors import ContractError, Problem
from contract.gates import has_dispatch_gate
from contract.keys import (
    ANNOTATION_COMMENT,
    ENV_K8S_WORKDIR,
    ENV_RESERVED_PREFIX,
    GATE,
    KIND_TRAINING_RUNTIME,
    LABEL_JOB_ID,
    LABEL_SUBMISSION,
    PREFIX,
    PROLOGUE_MOUNT_DIR,
    PROLOGUE_VOLUME,
    RUNTIME_PATCH_MANAGER,
    TRAINER_CONTAINER,
)
from contract.multicluster import MULTIKUEUE_MANAGED_BY
from contract.names import TrainJobName, parse_name
from contract.objects import annotations, dig, labels
from contract.ownership import is_kueue_mode, runtime_patches
from contract.prologue import PROLOGUE_PATH, SPEC_PROLOGUE, inline_prologue_argv
from contract.runtime_patch import paths_overlap, prologue_mount, prologue_volume
from contract.trainer import escape_expansion, prefixes_from_env, trainer_command, trainer_env
from contract.trainjob import comment
from contract.upstream import TRAINER_GROUP
from webhook.runtime_facts import RuntimeFacts, facts_or_none

SPEC_PROLOGUE_WARNING = (
    "this TrainJob runs the spec's original prologue, which the site allows: in some shells it can run "
    "nothing and report success, or compute a repeated or non-numeric DISPATCH_EPOCH (see docs/prologue.md)"
)
# The spec's text as the kubelet would see it either way: its $(...) forms name no variable.
_SPEC_COMMANDS = [inline_prologue_argv([], text) for text in (SPEC_PROLOGUE, escape_expansion(SPEC_PROLOGUE))]
_LABELS_AT_BIRTH = {LABEL_JOB_ID, LABEL_SUBMISSION}
_ANNOTATIONS_AT_BIRTH = {ANNOTATION_COMMENT}


def _p(rule: str, field: str, seen: object, accepted: str) -> Problem:
    return Problem(f"creation.{rule}", field, seen, accepted)


def _identity_from_env(env: list[Any], name: TrainJobName) -> tuple[int, int] | Problem:
    """G and attempt, read back from the prologue's two prefixes and checked against the name."""
    try:
        job_id, g, n, attempt = prefixes_from_env(env)
    except ContractError as exc:
        return _p("env", "spec.trainer.env", exc.field, f"the contract's DISPATCH_K8S_* prefixes: {exc.message}")
    if (job_id, n) != (name.job_id, name.n):
        return _p("env", "spec.trainer.env", [job_id, n], f"prefixes of JobID {name.job_id} and N {name.n}")
    return g, attempt


def _env_problems(env: object, name: TrainJobName) -> tuple[list[Problem], int | None]:
    """The env contract: the job's own variables sorted, none under DISPATCH_, then dispatch's exactly."""
    if not isinstance(env, list) or not all(isinstance(e, Mapping) for e in env):
        return [_p("env", "spec.trainer.env", env, "a list of variables")], None
    identity = _identity_from_env(env, name)
    if isinstance(identity, Problem):
        return [identity], None
    g, attempt = identity
    # Within bounds: prefixes_from_env checked G, N and attempt, and the name the JobID.
    expected = trainer_env(job_id=name.job_id, g=g, n=name.n, attempt=attempt, env={}, workdir=None)
    known = {e["name"] for e in expected} | {ENV_K8S_WORKDIR}
    names = [e.get("name") for e in env]
    problems = [
        _p(
            "env-reserved",
            f"spec.trainer.env[{n}]",
            n,
            f"names starting with {ENV_RESERVED_PREFIX} are dispatch's",
        )
        for n in names
        if isinstance(n, str) and n.startswith(ENV_RESERVED_PREFIX) and n not in known
    ]
    first = next((i for i, n in enumerate(names) if n in known), len(env))
    user, ours = env[:first], env[first:]
    user_names = [e.get("name") for e in user]
    if user_names != sorted(user_names, key=str) or any(set(e) - {"name", "value"} for e in user):
        problems.append(
            _p("env", "spec.trainer.env", user_names, "the job's own variables first, sorted, plain values")
        )
    workdir = ours[len(expected) :]
    workdir_ok = not workdir or (
        len(workdir) == 1 and workdir[0].get("name") == ENV_K8S_WORKDIR and set(workdir[0]) == {"name", "value"}
    )
    if ours[: len(expected)] != expected or not workdir_ok:
        problems.append(
            _p(
                "env",
                "spec.trainer.env",
                [e.get("name") for e in ours],
                f"after the job's own: {', '.join(e['name'] for e in expected)}[, {ENV_K8S_WORKDIR}]",
            )
        )
    return problems, attempt


def _key_problems(trainjob: Mapping[str, Any], name: TrainJobName) -> list[Problem]:
    """``job-id`` and ``submission`` match the name, and no other dispatch key is there at birth."""
    problems = []
    have_labels, have_annotations = labels(trainjob), annotations(trainjob)
    if have_labels.get(LABEL_JOB_ID) != name.job_id or have_labels.get(LABEL_SUBMISSION) != str(name.n):
        problems.append(
            _p(
                "labels",
                "metadata.labels",
                {k: have_labels.get(k) for k in sorted(_LABELS_AT_BIRTH)},
                f"{LABEL_JOB_ID}={name.job_id} and {LABEL_SUBMISSION}={name.n}",
            )
        )
    extra = sorted(k for k in have_labels if k.startswith(PREFIX) and k not in _LABELS_AT_BIRTH)
    extra += sorted(k for k in have_annotations if k.startswith(PREFIX) and k not in _ANNOTATIONS_AT_BIRTH)
    if extra:
        problems.append(_p("keys", "metadata", extra, "no other dispatch keys at creation"))
    return problems


def _command_problems(spec: Mapping[str, Any], *, allow_spec_prologue: bool) -> tuple[list[Problem], list[str]]:
    """The trainer runs the prologue (or, where the site allows it, the spec's original text, with a warning), and
    has a command of its own to exec."""
    problems, warnings = [], []
    command = dig(spec, "trainer", "command")
    if command != trainer_command():
        if allow_spec_prologue and command in _SPEC_COMMANDS:
            warnings.append(SPEC_PROLOGUE_WARNING)
        else:
            shown = (
                [*command[:2], "<text>", *command[3:]] if isinstance(command, list) and len(command) > 3 else command
            )
            problems.append(_p("prologue", "spec.trainer.command", shown, f"/bin/sh {PROLOGUE_PATH}"))
    args = dig(spec, "trainer", "args")
    if not isinstance(args, list) or not args or not all(isinstance(a, str) for a in args):
        problems.append(_p("args", "spec.trainer.args", args, "the job's command and arguments, at least one word"))
    return problems, warnings


def creation_problems(
    trainjob: Mapping[str, Any],
    runtime_copy: Mapping[str, Any] | RuntimeFacts | None,
    *,
    allow_spec_prologue: bool,
    allow_rank_restart: bool,
) -> tuple[list[Problem], list[str]]:
    """Everything that keeps a dispatch TrainJob written by dispatch from the canonical form, and warnings.

    ``runtime_copy`` is the TrainingRuntime it refers to as read, or its facts (webhook/runtime_facts.py,
    what the webhook keeps): the rules read nothing of it but those, and answer the same on either."""
    runtime = facts_or_none(runtime_copy)
    try:
        name = parse_name(dig(trainjob, "metadata", "name"))
    except ContractError as exc:
        return [_p("name", "metadata.name", dig(trainjob, "metadata", "name"), exc.message)], []
    have_annotations = annotations(trainjob)
    problems = _key_problems(trainjob, name)

    spec = dig(trainjob, "spec") or {}
    ref = dig(spec, "runtimeRef") or {}
    if {"apiGroup": TRAINER_GROUP, **ref} != {
        "apiGroup": TRAINER_GROUP,
        "kind": KIND_TRAINING_RUNTIME,
        "name": str(name),
    }:
        problems.append(_p("runtime-ref", "spec.runtimeRef", dict(ref), f"the runtime copy: TrainingRuntime {name}"))

    found, warnings = _command_problems(spec, allow_spec_prologue=allow_spec_prologue)
    problems += found

    env_problems, attempt = _env_problems(dig(spec, "trainer", "env"), name)
    problems += env_problems
    if attempt is not None and have_annotations.get(ANNOTATION_COMMENT) != comment(name.n, attempt):
        problems.append(
            _p(
                "comment",
                f"metadata.annotations[{ANNOTATION_COMMENT}]",
                have_annotations.get(ANNOTATION_COMMENT),
                comment(name.n, attempt),
            )
        )

    ours = [
        p for p in runtime_patches(trainjob) if isinstance(p, Mapping) and p.get("manager") == RUNTIME_PATCH_MANAGER
    ]
    if len(ours) != 1:
        problems.append(
            _p("runtime-patch", "spec.runtimePatches", len(ours), "exactly one entry of dispatch's manager")
        )
    else:
        problems += _patch_problems(trainjob, ours[0], runtime, name)

    if is_kueue_mode(trainjob):
        if not has_dispatch_gate(trainjob):
            problems.append(
                _p(
                    "gate",
                    "metadata.annotations[kueue.x-k8s.io/admission-gated-by]",
                    have_annotations.get("kueue.x-k8s.io/admission-gated-by"),
                    f"Kueue mode is created gated by {GATE}",
                )
            )
    elif spec.get("suspend") is not True:
        problems.append(_p("suspend", "spec.suspend", spec.get("suspend"), "plain mode is created suspended"))

    if runtime is None:
        problems.append(
            _p(
                "runtime-copy",
                "spec.runtimeRef.name",
                str(name),
                "the runtime copy exists before its TrainJob",
            )
        )
    else:
        problems += runtime.problems(allow_rank_restart=allow_rank_restart)
        if dig(trainjob, "spec", "managedBy") == MULTIKUEUE_MANAGED_BY:  # set by Kueue's defaulting, before us
            problems += runtime.multikueue_problems()
    return problems, warnings


def _patch_problems(
    trainjob: Mapping[str, Any],
    entry: Mapping[str, Any],
    runtime: RuntimeFacts | None,
    name: TrainJobName,
) -> list[Problem]:
    problems = []
    try:
        a = admission_count(trainjob)
    except ContractError as exc:
        return [_p("runtime-patch", "spec.runtimePatches", exc.field, exc.message)]
    if a != 0:
        problems.append(_p("admission", "spec.runtimePatches[dispatch].admission", a, 'A is "0" at creation'))
    jobs = dig(entry, "trainingRuntimeSpec", "template", "spec", "replicatedJobs") or [{}]
    meta = dig(jobs[0], "template", "spec", "template", "metadata") or {}
    if (meta.get("labels") or {}) != {LABEL_JOB_ID: name.job_id, LABEL_SUBMISSION: str(name.n)}:
        problems.append(
            _p(
                "runtime-patch",
                "spec.runtimePatches[dispatch] pod labels",
                meta.get("labels"),
                "job-id and submission",
            )
        )
    problems += _prologue_mount_problems(jobs[0])
    if runtime is not None:
        trainer = runtime.trainer_job()
        if trainer is None:
            return problems  # runtime_problems reports it
        if jobs[0].get("name") != trainer:
            problems.append(
                _p(
                    "runtime-patch",
                    "spec.runtimePatches[dispatch].replicatedJobs[0].name",
                    jobs[0].get("name"),
                    f"the runtime copy's trainer job, {trainer}",
                )
            )
    return problems


def _prologue_mount_problems(job: Mapping[str, Any]) -> list[Problem]:
    """The prologue's ConfigMap volume and its mount in the trainer container, exactly as the contract builds
    them (contract/runtime_patch.py), and no other mount of the entry over its directory: the command runs the
    file there. Written at creation only: Trainer keeps a patch entry's volumes and mounts immutable."""
    spec = dig(job, "template", "spec", "template", "spec") or {}
    volumes = spec.get("volumes") if isinstance(spec.get("volumes"), list) else []
    named = [v for v in volumes if isinstance(v, Mapping) and v.get("name") == PROLOGUE_VOLUME]
    problems = []
    if named != [prologue_volume()]:
        problems.append(
            _p(
                "prologue-volume",
                "spec.runtimePatches[dispatch] pod volumes",
                named,
                f"one volume {PROLOGUE_VOLUME}: {prologue_volume()}",
            )
        )
    containers = spec.get("containers") if isinstance(spec.get("containers"), list) else []
    trainer = [c for c in containers if isinstance(c, Mapping) and c.get("name") == TRAINER_CONTAINER]
    mounts = (trainer[0].get("volumeMounts") if len(trainer) == 1 else None) or []
    mounts = mounts if isinstance(mounts, list) else []
    ours = [m for m in mounts if isinstance(m, Mapping) and m.get("name") == PROLOGUE_VOLUME]
    over = [
        m.get("mountPath")
        for m in mounts
        if isinstance(m, Mapping)
        and m.get("name") != PROLOGUE_VOLUME
        and isinstance(m.get("mountPath"), str)
        and paths_overlap(m["mountPath"], PROLOGUE_MOUNT_DIR)
    ]
    if ours != [prologue_mount()] or over:
        problems.append(
            _p(
                "prologue-volume",
                f"spec.runtimePatches[dispatch] container {TRAINER_CONTAINER} volumeMounts",
                {"prologue": ours, "over its directory": over},
                f"the one mount {prologue_mount()}, and no other at or over {PROLOGUE_MOUNT_DIR}",
            )
        )
    return problems
