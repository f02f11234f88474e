"""The API's JSON client: the agent's one client, serving/client.py, under the name the API modules import it by."""

from __future__ import annotations

from serving.client import JSON_PATCH, Kube, KubeError, selector

__all__ = ["JSON_PATCH", "Kube", "KubeError", "selector"]
