"""The test harness: control planes, the servers as processes, clusters and lanes the tests and campaigns run on.

Layer: beside ``charts`` (neither imports the other); of this project's packages, imports ``webhook``, ``agent``,
``certs``, ``serving`` and ``contract``; never ``chaos``, ``benchmarks`` or the tests (pyproject.toml,
import-linter).
"""
