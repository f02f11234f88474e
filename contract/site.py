"""The site's configured labels and annotations: none may use a prefix the contract reserves."""

from __future__ import annotations

from collections.abc import Mapping

from contract.errors import ContractError
from contract.keys import RESERVED_KEY_PREFIXES


def reserved_prefix(key: str) -> str | None:
    """The reserved prefix ``key`` begins with, or None."""
    return next((p for p in RESERVED_KEY_PREFIXES if key.startswith(p)), None)


def check_site_keys(kind: str, keys: Mapping[str, object]) -> None:
    """Refuse a site's ``labels`` or ``annotations`` (``kind``) that use a reserved prefix."""
    for key, value in keys.items():
        if not isinstance(key, str) or not key:
            raise ContractError(f"site {kind}", f"key {key!r} must be a non-empty string")
        prefix = reserved_prefix(key)
        if prefix is not None:
            raise ContractError(
                f"site {kind}.{key}",
                f"begins with {prefix}, which is reserved; reserved prefixes are {', '.join(RESERVED_KEY_PREFIXES)}",
            )
        if not isinstance(value, str):
            raise ContractError(f"site {kind}.{key}", f"value must be a string, got {value!r}")
