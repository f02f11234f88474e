"""``kueue.x-k8s.io/admission-gated-by``: a comma list of gates, dispatch's among them until Open."""

from __future__ import annotations

from contract.keys import ANNOTATION_ADMISSION_GATED_BY, ANNOTATION_OPENED, GATE, OPENED_TRUE
from contract.objects import annotations as annotations_of


def parse_gates(value: object) -> list[str]:
    """The gates in the annotation's value, split on commas and trimmed as Kueue does."""
    if not isinstance(value, str):
        return []
    return [gate.strip() for gate in value.split(",") if gate.strip()]


def gates_of(obj: object) -> list[str]:
    return parse_gates(annotations_of(obj).get(ANNOTATION_ADMISSION_GATED_BY))


def has_dispatch_gate(obj: object) -> bool:
    return GATE in gates_of(obj)


def without_dispatch_gate(value: object) -> str | None:
    """The annotation's value once dispatch's gate is removed; None means delete the annotation.

    An absent key is the one state every reader agrees means ungated, so an empty list is deleted
    rather than left as "".
    """
    rest = [gate for gate in parse_gates(value) if gate != GATE]
    return ",".join(rest) if rest else None


def is_opened_by_dispatch(obj: object) -> bool:
    """Did dispatch open the job? Its opened mark ``dispatch.phpboyscout.uk/opened: "true"``, which Open writes
    in both modes, and no gate of dispatch's left on it.

    The one answer of every place that lets an execution start: the readmission gate approves an admission
    only for such a job (agent/domain/decide.py), and the webhook (``update.unsuspend``) and the policy
    ``dispatch-k8s-unsuspend`` (its CEL says the same, webhook/policies.py) refuse any unsuspend of another.
    Were the gate to approve a job the unsuspend rules refuse, Kueue would admit it, reserve its quota, and
    its unsuspend would be refused for ever. A job past Kueue's gate without the mark (opened before Open
    wrote it) is not opened by this answer, whatever its floor: Open writes the mark for it."""
    return annotations_of(obj).get(ANNOTATION_OPENED) == OPENED_TRUE and not has_dispatch_gate(obj)
