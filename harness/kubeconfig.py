"""kubeconfig files for the local API server, for Go components, kubectl-style tools and Python clients."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from harness.kube_http import Credentials


def kubeconfig(
    credentials: Credentials,
    user: str,
    cluster: str = "dispatch-local",
    *,
    impersonate: tuple[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """A single-context kubeconfig; files are referenced by absolute path, a token inline. ``impersonate``:
    (username, groups) the client acts as (client-go's ``as`` and ``as-groups``), with the credentials' right."""
    user_entry: dict[str, Any] = {}
    if credentials.client_cert_file is not None:
        user_entry["client-certificate"] = str(credentials.client_cert_file)
        user_entry["client-key"] = str(credentials.client_key_file)
    if credentials.token is not None:
        user_entry["token"] = credentials.token
    if impersonate is not None:
        user_entry["as"], user_entry["as-groups"] = impersonate[0], list(impersonate[1])
    context = f"{user}@{cluster}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": {
                    "server": credentials.server,
                    "certificate-authority": str(credentials.ca_file),
                },
            }
        ],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
    }


def write_kubeconfig(
    path: Path, credentials: Credentials, user: str, *, impersonate: tuple[str, Sequence[str]] | None = None
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(credentials, user, impersonate=impersonate), sort_keys=False))
    path.chmod(0o600)
    return path
