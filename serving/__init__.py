"""What the webhook and the agent both need to serve: the Kubernetes client and Prometheus text."""
