"""Runtime requirements: a runtime whose trainer may restart in place would let two executions share an
identity, because a restart in place raises neither A nor J.

Each rule returns the problems it finds as (field, seen, accepted) so that the webhook's denial and
Start's refusal can both say what to fix. See docs/webhook.md for the reason behind each rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.errors import ContractError, Problem
from contract.keys import PROLOGUE_MOUNT_DIR, PROLOGUE_VOLUME, TRAINER_CONTAINER
from contract.multicluster import multikueue_problems
from contract.objects import dig
from contract.runtime_patch import canonical_path, paths_overlap, trainer_replicated_job

_RESTART_ONE_JOB = ("RestartJob", "RestartJobAndIgnoreMaxRestarts")


def runtime_problems(
    runtime_spec: Mapping[str, Any], *, allow_rank_restart: bool, multikueue: bool = False
) -> list[Problem]:
    """Every way the runtime's trainer job could run a second execution under the same identity;
    ``multikueue``: in a MultiKueue queue, also what lets J pass maxRestarts (contract/multicluster.py)."""
    if multikueue:
        return [
            *runtime_problems(runtime_spec, allow_rank_restart=allow_rank_restart),
            *multikueue_problems(runtime_spec),
        ]
    try:
        job = trainer_replicated_job(runtime_spec)
    except ContractError as exc:
        return [Problem("runtime.trainer-job", exc.field, None, exc.message)]
    name = job["name"]
    base = f"spec.template.spec.replicatedJobs[{name}].template.spec"
    job_spec = dig(job, "template", "spec") or {}
    pod_spec = dig(job_spec, "template", "spec") or {}
    failure = dig(runtime_spec, "template", "spec", "failurePolicy") or {}
    problems = [
        *_in_place_problems(job_spec, pod_spec, base),
        *prologue_mount_problems(pod_spec, base),
        *_group_restart_problems(failure if isinstance(failure, Mapping) else {}, name),
    ]
    if allow_rank_restart:
        return problems
    return problems + _rank_restart_problems(job_spec, base)


def _in_place_problems(job_spec: Mapping[str, Any], pod_spec: Mapping[str, Any], base: str) -> list[Problem]:
    """The kubelet or the Job controller running the trainer again in place, under the same A and J."""
    problems: list[Problem] = []
    if pod_spec.get("restartPolicy") != "Never":
        problems.append(Problem(
            "runtime.restart-policy",
            f"{base}.template.spec.restartPolicy",
            pod_spec.get("restartPolicy"),
            "must be Never: the kubelet restarting the trainer in place raises neither A nor J",
        ))  # fmt: skip
    if job_spec.get("backoffLimit") != 0:
        problems.append(Problem(
            "runtime.backoff-limit",
            f"{base}.backoffLimit",
            job_spec.get("backoffLimit"),
            "must be stated as 0: the Job controller would replace a failed rank with the same J",
        ))  # fmt: skip
    for c in pod_spec.get("containers") or []:
        if not isinstance(c, Mapping) or c.get("name") != TRAINER_CONTAINER:
            continue
        if c.get("restartPolicy") not in (None, "Never") or c.get("restartPolicyRules"):
            problems.append(Problem(
                "runtime.container-restart",
                f"{base}.template.spec.containers[{TRAINER_CONTAINER}]",
                c.get("restartPolicy") or c.get("restartPolicyRules"),
                "restartPolicy and restartPolicyRules must be unset: they restart the trainer in place",
            ))  # fmt: skip
    return problems


def _group_restart_problems(failure: Mapping[str, Any], name: str) -> list[Problem]:
    """JobSet's failure policy restarting the trainer group or Job without raising J; allowRankRestart waives
    neither: both rerun healthy ranks too."""
    problems: list[Problem] = []
    if failure.get("restartStrategy") == "InPlaceRestart":
        # It restarts the healthy pods of the whole group in place, not a failed rank, and raises neither A nor J.
        problems.append(Problem(
            "runtime.in-place-restart",
            "spec.template.spec.failurePolicy.restartStrategy",
            "InPlaceRestart",
            "must be Recreate or BlockingRecreate: an in-place restart of the group keeps A and J",
        ))  # fmt: skip
    for i, rule in enumerate(failure.get("rules") or []):
        if not isinstance(rule, Mapping) or rule.get("action") not in _RESTART_ONE_JOB:
            continue
        if not rule.get("targetReplicatedJobs") or name in rule["targetReplicatedJobs"]:
            # JobSet recreates the whole trainer Job, every rank, healthy ones included, and bumps only
            # job-restart-attempt, never J (status.restarts).
            problems.append(Problem(
                "runtime.job-restart",
                f"spec.template.spec.failurePolicy.rules[{i}].action",
                rule["action"],
                "must not target the trainer job: restarting one Job reruns every rank under the same A and J; "
                "RestartJobSet raises J",
            ))  # fmt: skip
    return problems


def _rank_restart_problems(job_spec: Mapping[str, Any], base: str) -> list[Problem]:
    """A failed rank retried under the same J: refused unless the site sets allowRankRestart."""
    unless = " (or the site sets allowRankRestart)"
    problems: list[Problem] = []
    if job_spec.get("backoffLimitPerIndex") is not None:
        problems.append(Problem(
            "runtime.rank-restart",
            f"{base}.backoffLimitPerIndex",
            job_spec["backoffLimitPerIndex"],
            "must be unset: it retries a failed rank under the same J" + unless,
        ))  # fmt: skip
    rules = dig(job_spec, "podFailurePolicy", "rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if isinstance(rule, Mapping) and rule.get("action") == "Ignore":
            problems.append(Problem(
                "runtime.rank-restart",
                f"{base}.podFailurePolicy.rules[{i}].action",
                "Ignore",
                "an ignored failure lets the Job replace the rank under the same J" + unless,
            ))  # fmt: skip
    return problems


def prologue_mount_problems(pod_spec: Mapping[str, Any], base: str) -> list[Problem]:
    """The trainer runs the prologue from PROLOGUE_MOUNT_DIR, which dispatch's runtime patch mounts: a volume of the
    runtime's under the patch's volume name would be merged into it (Trainer's strategic merge joins volumes by
    name), and a mount or device of the trainer container at, above or below the directory would hide or replace
    the file. Paths must be canonical (contract.runtime_patch.canonical_path), as the runtime-copies policy reads
    them as text. Not waived by allowRankRestart."""
    problems = []
    volumes = pod_spec.get("volumes")
    for v in volumes if isinstance(volumes, list) else []:
        if isinstance(v, Mapping) and v.get("name") == PROLOGUE_VOLUME:
            problems.append(
                Problem(
                    "runtime.prologue-mount",
                    f"{base}.template.spec.volumes[{PROLOGUE_VOLUME}]",
                    PROLOGUE_VOLUME,
                    "must be renamed: dispatch's runtime patch mounts the prologue under this name, and Trainer merges "
                    "volumes by name",
                )
            )
    containers = pod_spec.get("containers")
    for c in containers if isinstance(containers, list) else []:
        if not isinstance(c, Mapping) or c.get("name") != TRAINER_CONTAINER:
            continue
        where = f"{base}.template.spec.containers[{TRAINER_CONTAINER}]"
        for field, key in (("volumeMounts", "mountPath"), ("volumeDevices", "devicePath")):
            items = c.get(field)
            for i, item in enumerate(items if isinstance(items, list) else []):
                path = item.get(key) if isinstance(item, Mapping) else None
                path = path if isinstance(path, str) else ""
                if not canonical_path(path):
                    accepted = "must be an absolute path written canonically (no //, . or .. segment, no trailing /)"
                elif paths_overlap(path, PROLOGUE_MOUNT_DIR):
                    accepted = f"must be neither at, above nor below {PROLOGUE_MOUNT_DIR}: the prologue is there"
                else:
                    continue
                problems.append(Problem("runtime.prologue-mount", f"{where}.{field}[{i}].{key}", path, accepted))
    return problems
