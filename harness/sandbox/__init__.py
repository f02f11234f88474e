"""The one-command sandbox (`scripts/sandbox`, `python -m harness.sandbox`): tier B, dispatch installed from
its chart as rendered by the real helm, the webhook and the agent as local processes under the chart's
ServiceAccount, and a short scenario through the agent's API, printed as a table."""
