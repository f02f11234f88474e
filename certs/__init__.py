"""The certificate controller ``dispatch-certs``: makes and rotates the TLS certificates the webhook and the agent
API serve with, and injects their CA bundle into dispatch-k8s's own webhook configurations (docs/certs.md).

Layer: of this project's packages, imports ``contract`` and ``serving`` only; never ``webhook`` or ``agent``
(pyproject.toml, import-linter).
"""
