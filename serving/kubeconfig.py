"""Where the kubeconfig is, and the namespace its context names, read as kubectl finds them: ``--kubeconfig``,
``$KUBECONFIG``, ``~/.kube/config``, else the pod's ServiceAccount; ``--context`` picks a context.

PyYAML only, no Kubernetes client: the command-line client (``dispatch-agent VERB``, ``kubectl dispatch``) reads
its default namespace here on every call; it loads ``serving.kube`` (kubernetes_asyncio) only for the
kubeconfig user's credentials.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import yaml


class KubeConfigError(RuntimeError):
    pass


def kubeconfig_files(flag: str | None, environ: Mapping[str, str] = os.environ) -> str | None:
    """Where the configuration comes from, in kubectl's order: ``--kubeconfig``; else the files of
    ``$KUBECONFIG`` that exist (a list, merged, the first to name a context winning); else ``~/.kube/config``
    if it exists; else None: the pod's ServiceAccount (in-cluster)."""
    if flag:
        if not os.path.exists(os.path.expanduser(flag)):
            raise KubeConfigError(f"cannot configure the Kubernetes client from {flag}: no such file")
        return flag
    listed = [p for p in environ.get("KUBECONFIG", "").split(os.pathsep) if p]
    if listed:
        existing = [p for p in listed if os.path.exists(os.path.expanduser(p))]
        return os.pathsep.join(existing) if existing else None
    home = os.path.expanduser("~/.kube/config")
    return home if os.path.exists(home) else None


def _merged_contexts(files: str) -> tuple[dict[str, Any], Any]:
    """The contexts by name and the current context's name, merged as kubernetes_asyncio's loader merges them
    (``serving.kube.load_configuration`` takes the credentials from it): the first file to name a context
    wins, the last to set ``current-context``."""
    contexts: dict[str, Any] = {}
    current = None
    for path in files.split(os.pathsep):
        path = os.path.expanduser(path)
        if not path or not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            doc = yaml.safe_load(f) or {}
        for entry in doc.get("contexts") or []:
            contexts.setdefault(entry["name"], entry)
        if "current-context" in doc:
            current = doc["current-context"]
    return contexts, current


def context_namespace(kubeconfig: str | None, context: str | None = None) -> str | None:
    """The namespace the kubeconfig's context names (kubectl's default for -n), or None."""
    try:
        files = kubeconfig_files(kubeconfig)
        if files is None:
            return None
        contexts, current = _merged_contexts(files)
        chosen = contexts.get(context if context else current)
        namespace = ((chosen or {}).get("context") or {}).get("namespace")
    except (KubeConfigError, yaml.YAMLError, OSError, TypeError, KeyError, AttributeError):
        return None
    return namespace if isinstance(namespace, str) and namespace else None
