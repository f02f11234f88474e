from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from tests.charts.helm import Rendered, template

VALUES_DIR = Path(__file__).parent / "values"
LEASE_NAMESPACE = "dispatch-leases"
"""The Lease's namespace in custom.yaml; the cluster tests put a namespace of theirs in its place."""
VALUE_SETS = ("defaults", "observability", "minimal", "custom")
"""defaults; NetworkPolicy and ServiceMonitor on; every optional part off; most knobs turned."""


def value_set(name: str, *, lease_namespace: str = LEASE_NAMESPACE) -> dict[str, Any]:
    if name == "defaults":
        return {}
    text = (
        (VALUES_DIR / f"{name}.yaml")
        .read_text()
        .replace(f"namespace: {LEASE_NAMESPACE}", f"namespace: {lease_namespace}")
    )
    return yaml.safe_load(text)


@functools.cache
def _rendered(name: str) -> Rendered:
    return template(value_set(name))


def rendered(name: str) -> Rendered:
    """The value set as `helm template` renders it into dispatch-system (cached: helm runs once per set)."""
    cached = _rendered(name)
    return Rendered(copy.deepcopy(cached.docs), cached.release, cached.namespace)
