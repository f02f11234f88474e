"""The admission webhook and the admission policies it renders for the API server (docs/webhook.md).

The server's path (``server`` -> ``review`` -> ``admission`` -> ``rules``) and the policies' (``policies`` ->
``rules``, ``owners``, ``dependents``, all rendered with ``cel``); ``configurations`` builds the webhook
configurations, ``kube`` and ``runtime_facts`` read the runtime copies, ``config``, ``cli``, ``metrics`` and
``selftest`` the rest. Every name of an upstream group, version and resource comes from ``contract.upstream``.

Layer: of this project's packages, imports ``contract`` and ``serving`` only; never ``agent`` or ``certs``
(pyproject.toml, import-linter).
"""
