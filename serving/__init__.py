"""What the servers (the webhook, the agent and the certificate controller) need to serve: the Kubernetes client,
the list-then-watch, TLS that follows its files, logs, flags and Prometheus text.

Layer: of this project's packages, imports ``contract`` only (pyproject.toml, import-linter).
"""
