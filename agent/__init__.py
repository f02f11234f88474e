"""The agent: the readmission gate (Kueue's AdmissionCheck), the controllers that keep a dispatch job's identity
and the API (``agent.api``) that starts, stops and reports jobs (docs/agent.md, docs/api.md).

Layer: of this project's packages, imports ``contract`` and ``serving`` only; never ``webhook`` or ``certs``
(pyproject.toml, import-linter).
"""
