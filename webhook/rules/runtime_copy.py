"""Runtime copies: made by dispatch only, meeting the runtime requirements, and never edited after.

The spec reports a copy with ``metadata.generation`` above 1 as foreign; the webhook prevents the edit
instead. Metadata (the ownerReference Start adds once the TrainJob exists) may change. In CEL: the policy
``dispatch-k8s-runtime-copies`` (``runtime_copies_policy``): never restarted in place nor the trainer Job alone,
nothing mounted over the prologue, the spec never changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contract import upstream
from contract.errors import Problem
from contract.keys import (
    ANCESTOR_TRAINER,
    ANNOTATION_RUNTIME_SOURCE,
    LABEL_ANCESTOR_STEP,
    LABEL_JOB_ID,
    LABEL_SUBMISSION,
    PROLOGUE_MOUNT_DIR,
    PROLOGUE_VOLUME,
    TRAINER_CONTAINER,
)
from contract.names import TrainJobName
from contract.objects import annotations, dig, labels
from contract.runtime_requirements import runtime_problems
from webhook import owners
from webhook.cel import q, validating_policy
from webhook.configurations import NAME, claims, gvr


def copy_creation_problems(
    runtime: Mapping[str, Any], name: TrainJobName, *, allow_rank_restart: bool
) -> list[Problem]:
    """``name`` is the copy's own, parsed: a runtime copy is named as its TrainJob."""
    problems = runtime_problems(dig(runtime, "spec") or {}, allow_rank_restart=allow_rank_restart)
    have = labels(runtime)
    if have.get(LABEL_JOB_ID) != name.job_id or have.get(LABEL_SUBMISSION) != str(name.n):
        problems.append(
            Problem(
                "runtime-copy.labels",
                "metadata.labels",
                {k: have.get(k) for k in (LABEL_JOB_ID, LABEL_SUBMISSION)},
                f"{LABEL_JOB_ID}={name.job_id} and {LABEL_SUBMISSION}={name.n}",
            )
        )
    if not annotations(runtime).get(ANNOTATION_RUNTIME_SOURCE):
        problems.append(
            Problem(
                "runtime-copy.source",
                f"metadata.annotations[{ANNOTATION_RUNTIME_SOURCE}]",
                None,
                "<kind>/<name>@<resourceVersion> of the runtime copied",
            )
        )
    return problems


def copy_update_problems(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[Problem]:
    if dig(old, "spec") != dig(new, "spec"):
        return [
            Problem(
                "runtime-copy.immutable",
                "spec",
                "changed",
                "a runtime copy's spec never changes after creation",
            )
        ]
    return []


RUNTIME_COPIES: Final = f"{NAME}-runtime-copies"


# A failure rule restarting one Job (not the JobSet) that can hit the trainer job: no targets means every
# replicated job; otherwise a target named like the replicated job labelled as the trainer's ancestor step.
_NO_TRAINER_JOB_RESTART: Final = (
    "!object.spec.?template.?spec.?failurePolicy.?rules.orValue([]).exists(r, "
    "r.?action.orValue('') in ['RestartJob', 'RestartJobAndIgnoreMaxRestarts'] && "
    "(r.?targetReplicatedJobs.orValue([]).size() == 0 || r.targetReplicatedJobs.exists(t, "
    "object.spec.?template.?spec.?replicatedJobs.orValue([]).exists(j, j.?name.orValue('') == t && "
    f"j.?template.?metadata.?labels[?'{LABEL_ANCESTOR_STEP}'].orValue('') == '{ANCESTOR_TRAINER}'))))"
)


# runtime.prologue-mount (contract.runtime_requirements.prologue_mount_problems): in the trainer job, no volume under
# the prologue volume's name, and the trainer container's mount and device paths canonical and clear of the
# prologue's directory. CEL cannot normalise a path, so, as the webhook's rule, it reads only canonical ones.
_CANONICAL: Final = (
    "p.startsWith('/') && !p.contains('//') && !p.contains('/./') && !p.contains('/../') && !p.endsWith('/.') && "
    "!p.endsWith('/..') && (p == '/' || !p.endsWith('/'))"
)


_CLEAR_OF_PROLOGUE: Final = (
    f"!p.startsWith('{PROLOGUE_MOUNT_DIR}/') && !'{PROLOGUE_MOUNT_DIR}/'.startsWith(p == '/' ? p : p + '/')"
)


_NO_MOUNT_OVER_PROLOGUE: Final = (
    "object.spec.?template.?spec.?replicatedJobs.orValue([]).all(j, "
    f"j.?template.?metadata.?labels[?'{LABEL_ANCESTOR_STEP}'].orValue('') != '{ANCESTOR_TRAINER}' || "
    f"(j.?template.?spec.?template.?spec.?volumes.orValue([]).all(v, v.?name.orValue('') != '{PROLOGUE_VOLUME}') && "
    "j.?template.?spec.?template.?spec.?containers.orValue([]).all(c, "
    f"c.?name.orValue('') != '{TRAINER_CONTAINER}' || "
    "(c.?volumeMounts.orValue([]).map(m, m.?mountPath.orValue('')) + "
    "c.?volumeDevices.orValue([]).map(d, d.?devicePath.orValue(''))).all(p, "
    f"{_CANONICAL} && {_CLEAR_OF_PROLOGUE}))))"
)


def runtime_copies_policy() -> dict[str, Any]:
    """``dispatch-k8s-runtime-copies``: ``runtime.in-place-restart``, ``runtime.job-restart``,
    ``runtime.prologue-mount`` and ``runtime-copy.immutable`` in CEL."""
    return validating_policy(
        RUNTIME_COPIES,
        [gvr(upstream.TRAINING_RUNTIMES)],
        ["CREATE", "UPDATE"],
        {
            "matchConditions": [{"name": "dispatch-objects", "expression": claims("trainingruntimes")}],
            "validations": [
                {
                    "expression": "object.spec.?template.?spec.?failurePolicy.?restartStrategy.orValue('') != "
                    "'InPlaceRestart'",
                    "message": "a dispatch runtime never restarts in place (InPlaceRestart keeps A and J), even "
                    "with allowRankRestart",
                    "reason": "Forbidden",
                },
                {
                    # runtime-copy.immutable: the rules read the copy's spec at the TrainJob's create, and Trainer
                    # reads it at every reconcile.
                    "expression": f"request.operation != 'UPDATE' || "
                    f"!oldObject.metadata.name.matches({q(owners.NAME_PATTERN)}) || object.spec == oldObject.spec",
                    "message": "a runtime copy's spec never changes after creation",
                    "reason": "Forbidden",
                },
                {
                    "expression": _NO_TRAINER_JOB_RESTART,
                    "message": "a dispatch runtime's failure rules never RestartJob the trainer job (it reruns every "
                    "rank under the same A and J), even with allowRankRestart; RestartJobSet raises J",
                    "reason": "Forbidden",
                },
                {
                    "expression": _NO_MOUNT_OVER_PROLOGUE,
                    "message": f"a dispatch runtime's trainer job has no volume named {PROLOGUE_VOLUME}, and its "
                    f"{TRAINER_CONTAINER} container mounts nothing at, above or below {PROLOGUE_MOUNT_DIR}, where "
                    "dispatch mounts the prologue; its mount paths are written canonically (no //, . or .. segment, "
                    "no trailing /)",
                    "reason": "Forbidden",
                },
            ],
        },
    )
