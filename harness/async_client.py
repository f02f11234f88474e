"""kubernetes_asyncio clients for the local control plane."""

from __future__ import annotations

from kubernetes_asyncio import client

from harness.kube_http import Credentials


def configuration(credentials: Credentials) -> client.Configuration:
    config = client.Configuration(host=credentials.server)
    config.ssl_ca_cert = str(credentials.ca_file)
    if credentials.client_cert_file is not None:
        config.cert_file = str(credentials.client_cert_file)
        config.key_file = str(credentials.client_key_file)
    if credentials.token is not None:
        config.api_key = {"BearerToken": credentials.token}
        config.api_key_prefix = {"BearerToken": "Bearer"}
    return config


def api_client(credentials: Credentials) -> client.ApiClient:
    """An ApiClient for these credentials; use it as `async with api_client(creds) as api:`."""
    return client.ApiClient(configuration(credentials))
