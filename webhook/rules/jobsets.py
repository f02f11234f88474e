"""A dispatch TrainJob's JobSet: J lives in it.

J is ``status.restarts``, stamped on every Job and pod. Trainer recreates a deleted JobSet with
``restarts: 0``, so deleting a running dispatch job's JobSet, or lowering ``restarts``, would repeat an R.
Who deletes it legitimately: dispatch, the garbage collector once the TrainJob is deleted (deleting the
TrainJob stays open to anyone who may), Trainer (``activeDeadlineSeconds``) and JobSet (TTL after it
finished). JobSet writes its status and never lowers ``restarts``.
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
