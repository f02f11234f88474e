"""Is this dispatch's? The name, or a runtime patch entry with dispatch's manager; never labels.

Labels are not consulted, so stripping them does not wave a job past the readmission gate or the
webhook.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contract.keys import LABEL_QUEUE_NAME, RUNTIME_PATCH_MANAGER
from contract.names import is_dispatch_name
from contract.objects import dig, labels


def runtime_patches(trainjob: object) -> list[Any]:
    value = dig(trainjob, "spec", "runtimePatches")
    return value if isinstance(value, list) else []


def dispatch_patch_index(trainjob: object) -> int | None:
    """The index of dispatch's runtime patch entry, or None."""
    for i, entry in enumerate(runtime_patches(trainjob)):
        if isinstance(entry, Mapping) and entry.get("manager") == RUNTIME_PATCH_MANAGER:
            return i
    return None


def dispatch_patch(trainjob: object) -> Mapping[str, Any] | None:
    i = dispatch_patch_index(trainjob)
    return None if i is None else runtime_patches(trainjob)[i]


def is_dispatch(trainjob: object) -> bool:
    """The spec's test: the name matches ``dj-<ULID>-s<N>`` or dispatch's runtime patch is there."""
    return is_dispatch_name(dig(trainjob, "metadata", "name")) or dispatch_patch_index(trainjob) is not None


def is_kueue_mode(trainjob: object) -> bool:
    """Kueue mode is the queue-name label being set; plain mode otherwise."""
    return bool(labels(trainjob).get(LABEL_QUEUE_NAME))
