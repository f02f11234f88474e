"""The agent's plumbing: the Kubernetes client (``kube``) with its watch-fed reads (``caches``), shared pod LISTs
(``pod_lists``) and Events (``events``); the work queue (``queue``); leader election (``leader``); metrics and the
health server. Imports contract, serving, ``agent.constants`` and ``agent.domain``.
"""
