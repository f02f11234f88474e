"""What the servers (the webhook, the agent and the certificate controller) need to serve: the Kubernetes client,
the list-then-watch, TLS that follows its files, logs, flags and Prometheus text."""
