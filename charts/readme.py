"""The chart's README.md (what `helm show readme` prints), from values.yaml's comments, in helm-docs' style.

A comment that starts with ``# --`` describes the key right below it, and the ``#`` lines that follow it
continue the description. Each value is a row: its dotted key, its type (from values.schema.json), its
default and its description. The install, upgrade and uninstall commands are the ones
tests/charts/test_lifecycle.py runs with the real helm against a real API server (COMMANDS); the test's Pod
command is run as a process by tests/charts/test_helm_test.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Final

import yaml

SOURCES: Final = "values.yaml (its `# --` comments), values.schema.json and Chart.yaml"

COMMANDS: Final = {
    "install": (
        "helm install dispatch-k8s charts/dispatch-k8s --namespace dispatch-system --create-namespace \\\n"
        "  --set image.repository=registry.example/dispatch-k8s"
    ),
    "status": "kubectl -n dispatch-system rollout status deployment/dispatch-k8s",
    "test": "helm test dispatch-k8s --namespace dispatch-system",
    "upgrade": (
        "helm upgrade dispatch-k8s charts/dispatch-k8s --namespace dispatch-system --reset-then-reuse-values \\\n"
        "  --set image.tag=0.2.0"
    ),
    "uninstall": "helm uninstall dispatch-k8s --namespace dispatch-system",
}
"""The README's commands; tests/charts/test_lifecycle.py runs install, upgrade and uninstall (with its own release,
namespace and chart path)."""

FREE_MAPS: Final = frozenset(
    {"nodeSelector", "podLabels", "podAnnotations", "annotations", "labels", "matchLabels", "commonLabels",
     "metricsNamespaceSelector", "requests", "limits", "affinity"}
)  # fmt: skip
"""Maps whose keys are the user's: documented as one value."""

_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_][-A-Za-z0-9_.]*):(?:\s|$)")


def comments(values_text: str) -> dict[str, str]:
    """Dotted key -> its ``# --`` description."""
    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: list[str] | None = None
    for line in values_text.splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            pending = [stripped[4:].strip()]
            continue
        if stripped.startswith("#"):
            if pending is not None:
                pending.append(stripped[1:].strip())
            continue
        match = _KEY.match(line)
        if not match:
            if not stripped:
                pending = None
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        if pending is not None:
            found[".".join(k for _, k in stack)] = " ".join(p for p in pending if p)
        pending = None
    return found


def _schema_at(schema: dict[str, Any], path: list[str]) -> dict[str, Any]:
    node = schema
    for key in path:
        node = _resolve(schema, node).get("properties", {}).get(key, {})
    return _resolve(schema, node)


def _resolve(schema: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in node:
        node = schema["definitions"][node["$ref"].rsplit("/", 1)[1]]
    return node


def _type(node: dict[str, Any]) -> str:
    kind = node.get("type")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind:
        return str(kind)
    if "oneOf" in node:
        return " or ".join(sorted({str(o.get("type")) for o in node["oneOf"]}))
    return ""


def rows(values: dict[str, Any], schema: dict[str, Any], described: dict[str, str]) -> list[tuple[str, str, str, str]]:
    """(key, type, default, description) of every value, in values.yaml's order."""
    out: list[tuple[str, str, str, str]] = []

    def walk(node: Any, path: list[str]) -> None:
        key = ".".join(path)
        if isinstance(node, dict) and node and path[-1] not in FREE_MAPS:
            if key in described:
                out.append((key, "object", "", described[key]))
            for child, value in node.items():
                walk(value, [*path, child])
            return
        default = json.dumps(node, ensure_ascii=False)
        out.append((key, _type(_schema_at(schema, path)), default, described.get(key, "")))

    for top, value in values.items():
        walk(value, [top])
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(chart_dir: Path) -> str:
    chart = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    values_text = (chart_dir / "values.yaml").read_text()
    values = yaml.safe_load(values_text)
    schema = json.loads((chart_dir / "values.schema.json").read_text())
    table = "\n".join(
        f"| `{key}` | {kind} | {f'`{_cell(default)}`' if default else ''} | {_cell(text)} |"
        for key, kind, default, text in rows(values, schema, comments(values_text))
    )
    c = COMMANDS
    return f"""<!-- Generated by charts/generate.py from {SOURCES}: do not edit. -->
# {chart["name"]}

{" ".join(chart["description"].split())}

Version {chart["version"]}, app version {chart["appVersion"]}; Kubernetes `{chart["kubeVersion"]}`. The full guide,
with what every part does and why, is docs/install.md in the repository.

## Install

```sh
{c["install"]}
{c["status"]}
```

Install into `dispatch-system`: the supervisor's adapter looks for the agent's Lease there unless told
otherwise. Then name the AdmissionCheck (`admissionCheck.name`) in the ClusterQueues that should apply
dispatch's readmission gate.

## Test

```sh
{c["test"]}
```

A Pod runs `dispatch-webhook selftest`: a server-side dry run of a dispatch TrainJob, sent through the API
server in `helmTest.namespace`, must come back denied by dispatch-k8s. It proves that the API server reaches
the webhook (the Service, a ready pod, the injected caBundle), which the pods' readiness does not.

## Upgrade

```sh
{c["upgrade"]}
```

The certificates and the injected caBundle survive an upgrade; a changed configuration rolls the pods.

## Uninstall

```sh
{c["uninstall"]}
```

Take the AdmissionCheck out of every ClusterQueue first. A pre-delete hook deletes the webhook configurations
before anything else, so nothing is left failing closed on a webhook that is gone, then the prologue's ConfigMap
the agent made in each namespace a job ran in.

## Values

Every value is typed in `values.schema.json`, which refuses unknown keys at every level.

| Key | Type | Default | Description |
|-----|------|---------|-------------|
{table}
"""
