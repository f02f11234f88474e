"""kubeconfig files for the local API server, for Go components, kubectl-style tools and Python clients."""

from __future__ import annotations

import base64
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
    embed: bool = False,
) -> dict[str, Any]:
    """A single-context kubeconfig; files are referenced by absolute path, a token inline. ``impersonate``:
    (username, groups) the client acts as (client-go's ``as`` and ``as-groups``), with the credentials' right.
    ``embed``: the CA, client certificate and key inline (``*-data``), for a reader that refuses file paths
    (Kueue's MultiKueue)."""
    user_entry: dict[str, Any] = {}
    if credentials.client_cert_file is not None and embed:
        user_entry["client-certificate-data"] = _data(credentials.client_cert_file)
        user_entry["client-key-data"] = _data(credentials.client_key_file)
    elif credentials.client_cert_file is not None:
        user_entry["client-certificate"] = str(credentials.client_cert_file)
        user_entry["client-key"] = str(credentials.client_key_file)
    if credentials.token is not None:
        user_entry["token"] = credentials.token
    if impersonate is not None:
        user_entry["as"], user_entry["as-groups"] = impersonate[0], list(impersonate[1])
    cluster_entry: dict[str, Any] = {"server": credentials.server}
    if embed:
        cluster_entry["certificate-authority-data"] = _data(credentials.ca_file)
    else:
        cluster_entry["certificate-authority"] = str(credentials.ca_file)
    context = f"{user}@{cluster}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster,
                "cluster": cluster_entry,
            }
        ],
        "users": [{"name": user, "user": user_entry}],
        "contexts": [{"name": context, "context": {"cluster": cluster, "user": user}}],
        "current-context": context,
    }


def _data(path: Path | None) -> str:
    """A file's bytes as a kubeconfig's ``*-data`` field holds them."""
    assert path is not None
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(
    path: Path, credentials: Credentials, user: str, *, impersonate: tuple[str, Sequence[str]] | None = None
) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(kubeconfig(credentials, user, impersonate=impersonate), sort_keys=False))
    path.chmod(0o600)
    return path
