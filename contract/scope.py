"""The namespaces dispatch polices: every namespace but kube-system, dispatch's own and the site's exemptions
(the chart's ``scope.exemptNamespaces``), of those the site's label selector selects (``scope.namespaceSelector``).

One definition for both sides: the webhook configurations and the policy bindings carry it as their
``namespaceSelector`` (``namespace_selector``), and the agent refuses to start or open a job in a namespace it
leaves out (``out_of_scope``), since a job there would run unpoliced. ``selects`` is a LabelSelector's meaning as
the API server evaluates it (apimachinery's ``LabelSelectorAsSelector``). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

NAME_LABEL: Final = "kubernetes.io/metadata.name"
"""The label the API server sets on every namespace to its name (it cannot be set to anything else)."""
ALWAYS_EXEMPT: Final = ("kube-system",)
"""Never policed, with dispatch's own namespace: the webhook must never lock out the components that would fix it."""
OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
"""A LabelSelector requirement's operators."""
SCOPE_VALUES: Final = "scope.exemptNamespaces and scope.namespaceSelector"
"""The chart's values that set the scope, as refusals name them."""


def exempt(own_namespace: str, exempt_namespaces: Iterable[str] = ()) -> list[str]:
    """The namespaces never policed, sorted: kube-system, ``own_namespace`` and the site's."""
    return sorted({*ALWAYS_EXEMPT, own_namespace, *exempt_namespaces})


def namespace_selector(
    own_namespace: str, exempt_namespaces: Iterable[str] = (), selector: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The LabelSelector of the namespaces policed: not exempt by name (``exempt``), and selected by ``selector``
    (empty or None: every namespace). A LabelSelector's requirements all hold at once, so the name's comes first
    and the selector's follow it."""
    selector = selector or {}
    out: dict[str, Any] = {
        "matchExpressions": [
            {"key": NAME_LABEL, "operator": "NotIn", "values": exempt(own_namespace, exempt_namespaces)},
            *[dict(e) for e in selector.get("matchExpressions") or ()],
        ]
    }
    if selector.get("matchLabels"):
        out["matchLabels"] = dict(selector["matchLabels"])
    return out


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``selector`` (a LabelSelector; empty or None selects everything) selects an object with ``labels``."""
    selector = selector or {}
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or ():
        key, operator, values = requirement["key"], requirement["operator"], requirement.get("values") or ()
        if operator == "In" and labels.get(key) not in values:
            return False
        if operator == "NotIn" and key in labels and labels[key] in values:
            return False
        if operator == "Exists" and key not in labels:
            return False
        if operator == "DoesNotExist" and key in labels:
            return False
        if operator not in OPERATORS:
            raise ValueError(f"{operator!r} is not a LabelSelector operator (one of {', '.join(OPERATORS)})")
    return True


def always_exempt(namespace: str, own_namespace: str) -> bool:
    """Whether ``namespace`` is out of scope whatever the site's values say (kube-system, dispatch's own)."""
    return namespace in ALWAYS_EXEMPT or namespace == own_namespace


def out_of_scope(
    namespace: str,
    labels: Mapping[str, str] | None,
    *,
    own_namespace: str,
    exempt_namespaces: Iterable[str] = (),
    selector: Mapping[str, Any] | None = None,
) -> str | None:
    """Why dispatch's webhook and policies do not police ``namespace`` (its ``labels`` as read; None when they were
    not read, which is enough only while ``selector`` is empty), or None when they do."""
    if namespace in exempt(own_namespace, exempt_namespaces):
        if always_exempt(namespace, own_namespace):
            return (
                f"namespace {namespace} is excluded from dispatch's admission webhook and policies (kube-system and "
                f"dispatch's own namespace {own_namespace} always are)"
            )
        return (
            f"namespace {namespace} is exempt from dispatch's admission webhook and policies (scope.exemptNamespaces)"
        )
    if not selector or not (selector.get("matchLabels") or selector.get("matchExpressions")):
        return None
    if labels is None:
        raise ValueError("a namespace selector needs the namespace's labels")
    if not selects(selector, {**labels, NAME_LABEL: namespace}):
        return (
            f"namespace {namespace} is not selected by scope.namespaceSelector (its labels: "
            f"{_labels_text(labels)}), so dispatch's admission webhook and policies do not police it"
        )
    return None


def _labels_text(labels: Mapping[str, str]) -> str:
    shown = {k: v for k, v in sorted(labels.items()) if k != NAME_LABEL}
    return ", ".join(f"{k}={v}" for k, v in shown.items()) or "none but its name"
