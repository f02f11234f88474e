"""What several concerns read of a TrainJob write: whether it unsuspends, and the identity counts as the rules
read them (a count, a ContractError naming why it is not one, or None when absent).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.admission import parse_count
from contract.errors import ContractError
from contract.keys import (
    ANNOTATION_ADMISSION,
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_STARTED,
    RUNTIME_PATCH_MANAGER,
)
from contract.objects import annotations, dig

FLOOR_FIELD = f"metadata.annotations[{ANNOTATION_ADMISSION_FLOOR}]"

A_FIELD = f"spec.runtimePatches[{RUNTIME_PATCH_MANAGER}] annotation {ANNOTATION_ADMISSION}"


def count_or_error(read: Any, obj: Mapping[str, Any]) -> int | ContractError | None:
    try:
        return read(obj)
    except ContractError as exc:
        return exc


def suspended(obj: Mapping[str, Any] | None) -> bool:
    return obj is not None and dig(obj, "spec", "suspend") is True


def unsuspends(old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """The write starts an execution: the TrainJob was suspended and is not any more."""
    return old is not None and new is not None and suspended(old) and not suspended(new)


def started_admission(obj: Mapping[str, Any]) -> int | ContractError | None:
    """A recorded at the last unsuspend, or None before the first."""
    value = annotations(obj).get(ANNOTATION_ADMISSION_STARTED)
    if value is None:
        return None
    try:
        return parse_count(f"annotation {ANNOTATION_ADMISSION_STARTED}", value)
    except ContractError as exc:
        return exc
