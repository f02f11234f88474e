"""The rules, one module per concern, each holding the webhook's Python check and its CEL twin (the admission policy
the API server enforces in-process) side by side: ``reserved_keys``, ``identity``, ``unsuspend``, ``record_start``,
``workloads``, ``jobsets``, ``jobs``, ``pods``, ``owners``, ``multicluster``, ``runtime_copy``, ``creation``
(Python only: it reads the runtime copy, which no policy can). ``common`` holds what several Python checks read.

A Python check is a pure function of the objects (old and new as the API server sends them), who is writing, and at
most one looked-up object, returning Problems; a policy is a function of the config returning the policy's document.

May import ``contract``, ``webhook.cel``, ``webhook.config``, ``webhook.configurations``, ``webhook.owners``,
``webhook.dependents``, ``webhook.runtime_facts`` and, below them, ``common`` and ``multicluster`` (which import no
other concern) and ``pods`` (imported by ``owners``); never ``webhook.admission``, ``webhook.policies`` or the server,
which import these.
"""
