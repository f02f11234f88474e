"""The admission webhook and the admission policies it renders for the API server (docs/webhook.md).

Layer: of this project's packages, imports ``contract`` and ``serving`` only; never ``agent`` or ``certs``
(pyproject.toml, import-linter).
"""
