"""Start's pure decisions: whether an existing TrainJob or runtime copy of the name is this Start's (a retry
takes it up), and the patch that makes the runtime copy its TrainJob's (Preflight's probe too).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent.domain.start import readback_changes
from contract.admission import preconditions
from contract.keys import LABEL_JOB_ID, LABEL_SUBMISSION
from contract.objects import add_op, dig, labels
from contract.trainjob import Submission


def existing_problems(built: Mapping[str, Any], existing: Mapping[str, Any]) -> list[str]:
    """Why an existing TrainJob of the name is not the one this Start would create, still as created.

    Start is idempotent for a retry: the same request (JobID, N, attempt, G, the same image, command, env,
    credentials...) finds what it created and goes on from there. Anything else of the name — another
    request's object, or ours after Open or a raise of A, or one being deleted — is a conflict.
    """
    problems = readback_changes(built, existing)
    if dig(existing, "metadata", "deletionTimestamp"):
        problems.append("it is being deleted")
    return problems


def copy_problems(copy_read: Mapping[str, Any], sub: Submission) -> list[str]:
    """Why an existing TrainingRuntime of the name cannot serve as this Start's runtime copy.

    One left by an earlier Start that stopped before creating the TrainJob carries our labels and no owner
    yet; it is taken as it is (its spec is what the TrainJob is then built against).
    """
    problems = []
    have = labels(copy_read)
    if have.get(LABEL_JOB_ID) != sub.job_id or have.get(LABEL_SUBMISSION) != str(sub.n):
        problems.append("it does not carry this job's job-id and submission labels")
    if dig(copy_read, "metadata", "ownerReferences"):
        problems.append("it belongs to another (perhaps deleted) TrainJob")
    if dig(copy_read, "metadata", "deletionTimestamp"):
        problems.append("it is being deleted")
    return problems


def owner_patch(copy_read: Mapping[str, Any], owner_ref: Mapping[str, Any]) -> list[dict[str, Any]]:
    """JSON Patch adding the runtime copy's ownerReference to its TrainJob; empty when it is there."""
    refs = dig(copy_read, "metadata", "ownerReferences")
    if isinstance(refs, list) and any(isinstance(r, Mapping) and r.get("uid") == owner_ref["uid"] for r in refs):
        return []
    ops = preconditions(copy_read)
    if isinstance(refs, list):
        ops.append({"op": "add", "path": "/metadata/ownerReferences/-", "value": dict(owner_ref)})
    else:
        ops.append(add_op(copy_read, ("metadata", "ownerReferences"), [dict(owner_ref)]))
    return ops
