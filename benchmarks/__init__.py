"""The benchmarks behind docs/performance.md: the webhook's, the policies' and the agent's costs.

Layer: the top one, beside ``chaos``: imports every layer below (``harness``, ``charts``, the servers, ``serving``,
``contract``); never ``chaos`` or the tests (pyproject.toml, import-linter).
"""
