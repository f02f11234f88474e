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
refused, for everyone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.errors import Problem
from contract.objects import dig


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
