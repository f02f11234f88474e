"""Which webhook configurations get our caBundle, and the patch that sets it: pure functions over the
objects as the API returns them (plain dicts).

Only a configuration that has one of our names AND carries our label is ever touched: a name alone could
be someone else's object, and the label alone could be put on anything by anyone who can edit it. The
write is a JSON Patch that sets ``clientConfig.caBundle`` on every entry and nothing else, preconditioned
on the resourceVersion read (a ``replace`` of ``/metadata/resourceVersion``: the API server turns a stale
value into 409 Conflict), so a concurrent edit is re-read, never overwritten.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any, Final

from contract.keys import NAME

LABEL: Final = "app.kubernetes.io/name"
LABEL_VALUE: Final = NAME
KINDS: Final = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def is_ours(obj: Mapping[str, Any] | None, names: Iterable[str]) -> bool:
    if not obj:
        return False
    meta = obj.get("metadata") or {}
    return meta.get("name") in set(names) and (meta.get("labels") or {}).get(LABEL) == LABEL_VALUE


def bundles(obj: Mapping[str, Any]) -> list[bytes]:
    """The caBundle of every webhook entry, decoded (an absent or broken one is empty)."""
    out = []
    for hook in obj.get("webhooks") or []:
        raw = (hook.get("clientConfig") or {}).get("caBundle") or ""
        try:
            out.append(base64.b64decode(raw, validate=True))
        except (binascii.Error, ValueError):
            out.append(b"")
    return out


def carries(obj: Mapping[str, Any], bundle: bytes) -> bool:
    """Every entry has exactly ``bundle`` (a configuration without entries carries anything)."""
    return all(b == bundle for b in bundles(obj))


def all_injected(configurations: Iterable[Mapping[str, Any] | None], bundle: bytes) -> bool:
    """Every configuration of ours that exists carries ``bundle``; a missing one (None) needs nothing: no API
    server calls a webhook that is not configured. Readiness and promotion both ask this."""
    return all(carries(c, bundle) for c in configurations if c is not None)


def injection_patch(obj: Mapping[str, Any], bundle: bytes) -> list[dict[str, Any]] | None:
    """The JSON Patch giving every entry ``bundle``, or None when nothing is to change."""
    if carries(obj, bundle):
        return None
    value = base64.b64encode(bundle).decode()
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]}
    ]
    for i, hook in enumerate(obj.get("webhooks") or []):
        # "add" on an object member sets it whether or not it exists; a missing clientConfig cannot pass
        # the API server's validation, so it is there.
        if (hook.get("clientConfig") or {}).get("caBundle") != value:
            ops.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value})
    return ops
