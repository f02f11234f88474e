"""``kueue.x-k8s.io/admission-gated-by``: a comma list of gates, dispatch's among them until Open."""

from __future__ import annotations

from contract.keys import ANNOTATION_ADMISSION_GATED_BY, GATE
from contract.objects import annotations


def parse_gates(value: object) -> list[str]:
    """The gates in the annotation's value, split on commas and trimmed as Kueue does."""
    if not isinstance(value, str):
        return []
    return [gate.strip() for gate in value.split(",") if gate.strip()]


def gates_of(obj: object) -> list[str]:
    return parse_gates(annotations(obj).get(ANNOTATION_ADMISSION_GATED_BY))


def has_dispatch_gate(obj: object) -> bool:
    return GATE in gates_of(obj)


def without_dispatch_gate(value: object) -> str | None:
    """The annotation's value once dispatch's gate is removed; None means delete the annotation.

    An absent key is the one state every reader agrees means ungated, so an empty list is deleted
    rather than left as "".
    """
    rest = [gate for gate in parse_gates(value) if gate != GATE]
    return ",".join(rest) if rest else None
