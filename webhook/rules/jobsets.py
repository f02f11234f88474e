"""A dispatch TrainJob's JobSet: J lives in it.

J is ``status.restarts``, stamped on every Job and pod. Trainer recreates a deleted JobSet with
``restarts: 0``, so deleting a running dispatch job's JobSet, or lowering ``restarts``, would repeat an R.
Who deletes it legitimately: dispatch, the garbage collector once the TrainJob is deleted (deleting the
TrainJob stays open to anyone who may), Trainer (``activeDeadlineSeconds``) and JobSet (TTL after it
finished). JobSet writes its status and never lowers ``restarts``.

Trainer (v2.2.1) creates the JobSet with the TrainJob's ``spec.suspend``, whenever the TrainJob is not finished
and has none, even while the TrainJob is being deleted: a TrainJob kept by a finalizer (Stop's foreground
deletion) after the garbage collector deleted its JobSet would get a new one, running, with J at 0 and the pods'
A unchanged. Every legitimate create is suspended (dispatch creates its TrainJobs closed), so a running one is
refused, for everyone. In CEL: the policy ``dispatch-k8s-jobsets`` (``jobset_policy``: J never falls, created
suspended); the delete is the owner policy's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from contract import upstream
from contract.errors import Problem
from contract.keys import KIND_TRAINJOB
from contract.objects import dig
from webhook import owners
from webhook.cel import q, validating_policy
from webhook.configurations import NAME, claims, gvr


def jobset_delete_problems(*, allowed: bool, username: str) -> list[Problem]:
    """``allowed``: the writer is dispatch or one of the controllers that delete JobSets."""
    if allowed:
        return []
    return [
        Problem(
            "jobset.delete",
            "userInfo.username",
            username,
            "a dispatch job's JobSet holds J; Trainer would recreate it with restarts 0: delete the TrainJob instead",
        )
    ]


def jobset_create_problems(new: Mapping[str, Any]) -> list[Problem]:
    suspend = dig(new, "spec", "suspend")
    if suspend is True:
        return []
    return [
        Problem(
            "jobset.create-suspended",
            "spec.suspend",
            "absent" if suspend is None else repr(suspend),
            "a dispatch JobSet is created suspended, as Trainer makes it while its TrainJob is suspended: one created "
            "running would start an execution whose J starts again at 0 under an A already used. Create it "
            "suspended; a TrainJob that Trainer first saw unsuspended gets its JobSet once suspended again: Hold and "
            "Release it, and it is readmitted with A raised",
        )
    ]


def jobset_status_problems(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> list[Problem]:
    before, after = dig(old, "status", "restarts"), dig(new, "status", "restarts")
    if isinstance(before, int) and not isinstance(before, bool) and (not isinstance(after, int) or after < before):
        return [
            Problem(
                "jobset-status.restarts",
                "status.restarts",
                f"{before} -> {after}",
                "J (restarts) never falls: pods of the next Jobs would repeat an R",
            )
        ]
    return []


JOBSET_POLICY: Final = f"{NAME}-jobsets"


def _dispatch_jobset(obj: str) -> str:
    """CEL: ``obj`` is a dispatch job's JobSet: named as its TrainJob (``dj-<ULID>-s<N>``, Trainer names it so),
    or with an owner reference to such a TrainJob. The owner policies' test (webhook/owners.py), not the
    ``dj-`` prefix ``claims`` matches on: a stranger's JobSet called ``dj-resnet`` is created as its owner likes."""
    pattern = q(owners.NAME_PATTERN)
    return (
        f"{obj}.metadata.?name.orValue('').matches({pattern}) || "
        f"{obj}.metadata.?ownerReferences.orValue([]).exists(r, r.?kind.orValue('') == {q(KIND_TRAINJOB)} && "
        f"r.?name.orValue('').matches({pattern}))"
    )


JOBSET_CREATED_SUSPENDED: Final = (
    "a dispatch JobSet is created suspended (spec.suspend: true): Trainer makes it while its TrainJob is suspended; "
    "a JobSet created running would start an execution whose J starts again at 0 under an A already used (as "
    "Trainer's recreation of the JobSet of a TrainJob being deleted would). Create it suspended; a TrainJob that "
    "Trainer first saw unsuspended gets its JobSet once suspended again: Hold and Release it, and it is readmitted "
    "with A raised"
)


def jobset_policy() -> dict[str, Any]:
    """On a dispatch job's JobSet, for everyone: J (``jobsets/status`` restarts) never falls, and the JobSet is
    created suspended. Trainer v2.2.1 copies the TrainJob's ``spec.suspend`` into the JobSet it creates, and
    creates one whenever the TrainJob is not finished and has none, ``deletionTimestamp`` or not; so a TrainJob
    kept by a finalizer after the garbage collector deleted its JobSet (a foreground delete: Stop) would get a
    new, running JobSet, with J at 0 and the pods' A unchanged. Every legitimate create is suspended: dispatch
    creates its TrainJobs closed, so Trainer first sees them suspended."""
    policy = validating_policy(
        JOBSET_POLICY,
        [gvr(upstream.JOBSETS), gvr(upstream.JOBSETS, "status")],
        ["CREATE", "UPDATE"],
        {
            "matchConditions": [{"name": "dispatch-objects", "expression": claims("jobsets")}],
            "validations": [
                {
                    "expression": "oldObject == null || "
                    "oldObject.?status.?restarts.orValue(0) <= object.?status.?restarts.orValue(0)",
                    "messageExpression": "'J (restarts) of a dispatch job never falls: saw ' + "
                    "string(oldObject.?status.?restarts.orValue(0)) + ' -> ' + "
                    "string(object.?status.?restarts.orValue(0))",
                    "reason": "Forbidden",
                },
                {
                    "expression": f"request.operation != 'CREATE' || !({_dispatch_jobset('object')}) || "
                    "object.?spec.?suspend.orValue(false) == true",
                    "message": JOBSET_CREATED_SUSPENDED,
                    "reason": "Forbidden",
                },
            ],
        },
    )
    # The JobSet's create, and the status writes: its other updates are the owner policy's (Trainer, Kueue and
    # the garbage collector alone), and Trainer's unsuspend of a JobSet it made suspended is legitimate.
    policy["spec"]["matchConstraints"]["resourceRules"] = [
        {
            "apiGroups": [upstream.JOBSETS.group],
            "apiVersions": [upstream.JOBSETS.version],
            "resources": [resource],
            "operations": [operation],
        }
        for resource, operation in (("jobsets", "CREATE"), ("jobsets/status", "UPDATE"))
    ]
    return policy
