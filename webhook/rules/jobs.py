"""A dispatch trainer Job resumes only with A raised (the policy ``dispatch-k8s-job-resume``; a policy only, no
webhook rule: it must hold while the webhook is down).
"""

from __future__ import annotations

from typing import Any, Final

from contract import upstream
from contract.keys import ANNOTATION_ADMISSION
from webhook.cel import CANONICAL_COUNT, q, validating_policy
from webhook.configurations import NAME, gvr

JOB_RESUME: Final = f"{NAME}-job-resume"

JOB_RESUMED_WITH_A_RAISED: Final = (
    "a dispatch trainer Job is resumed (spec.suspend true -> false) only with A raised in its pod template "
    f"(annotation {ANNOTATION_ADMISSION}), or at its first start: resumed under the A it ran with, its ranks would "
    "run again with the identity of an execution that already ran. Kueue suspends the Job of a TrainJob whose "
    "Workload is not admitted (a TrainJob being deleted, an eviction) and JobSet resumes it; the next execution "
    "comes with the next admission, which raises A (Hold and Release the TrainJob to readmit it)"
)


def _template_a(obj: str) -> str:
    return f"{obj}.spec.template.metadata.?annotations[?{q(ANNOTATION_ADMISSION)}]"


def job_resume_policy() -> dict[str, Any]:
    """On a dispatch trainer Job (its pod template carries A), for everyone: an update that resumes it raises A in
    its pod template, unless it is the Job's first start (``metadata.generation`` 1: its spec never changed since
    JobSet created it suspended). JobSet resumes a Job in one update that merges the JobSet's pod template (A
    included) and sets ``suspend: false`` (jobset v0.11.1 ``resumeJob``), so every legitimate resume after a
    suspension carries the A of a new admission. Kueue (v0.19.2 ``shouldSuspendChildJob``) also suspends a child
    Job, or JobSet, whose TrainJob has no admitted Workload, e.g. one being deleted by a foreground delete (Stop);
    Trainer then resumes the JobSet, since its TrainJob is not suspended, and JobSet resumes the Job: without this
    rule its rank would start again under the A and J of the execution that just ended."""
    canonical = q(CANONICAL_COUNT)
    return validating_policy(
        JOB_RESUME,
        [gvr(upstream.JOBS)],
        ["UPDATE"],
        {
            "matchConditions": [
                {
                    "name": "dispatch-trainer-jobs",
                    "expression": f"{_template_a('oldObject')}.hasValue() || {_template_a('object')}.hasValue()",
                },
                {
                    "name": "resumes",
                    "expression": "oldObject.spec.?suspend.orValue(false) == true && "
                    "object.spec.?suspend.orValue(false) == false",
                },
            ],
            "variables": [
                {"name": "oldA", "expression": f"{_template_a('oldObject')}.orValue('')"},
                {"name": "newA", "expression": f"{_template_a('object')}.orValue('')"},
            ],
            "validations": [
                {
                    "expression": "oldObject.metadata.?generation.orValue(0) == 1 || ("
                    f"variables.oldA.matches({canonical}) && variables.newA.matches({canonical}) && "
                    "int(variables.newA) > int(variables.oldA))",
                    "messageExpression": f"{q(JOB_RESUMED_WITH_A_RAISED)} + ': saw A ' + "
                    "(variables.oldA == '' ? 'absent' : variables.oldA) + ' -> ' + "
                    "(variables.newA == '' ? 'absent' : variables.newA)",
                    "reason": "Forbidden",
                },
            ],
        },
    )
