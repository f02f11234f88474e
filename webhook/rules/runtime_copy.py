"""Runtime copies: made by dispatch only, meeting the runtime requirements, and never edited after.

The spec reports a copy with ``metadata.generation`` above 1 as foreign; the webhook prevents the edit
instead. Metadata (the ownerReference Start adds once the TrainJob exists) may change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.errors import Problem
from contract.keys import ANNOTATION_RUNTIME_SOURCE, LABEL_JOB_ID, LABEL_SUBMISSION
from contract.names import TrainJobName
from contract.objects import annotations, dig, labels
from contract.runtime_requirements import runtime_problems


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
