"""The operations, as the imperative shell: read, decide with the pure core, write, answer.

Every write goes through ``Kube`` with dispatch's field manager; every update after creation is a JSON
Patch preconditioned on the uid and resourceVersion read (the core writes the ``test``/``replace`` ops).

One module per operation group, each a class of the operations' methods over ``ServiceBase`` (base.py: the
client, the settings, the reads and writes they share), composed into ``Service``; a route's ``operation``
(agent/api/routes.py) names its method: ``start`` (start.py); ``open``, ``hold``, ``release``, ``stop``
(lifecycle.py); ``status``, ``list`` (status.py); ``watch`` (watching.py, over the change feed of
agent/api/feed.py); ``output`` (output.py); ``preflight`` (preflight.py);
``capabilities`` and the observe-only refusal (observe_only.py); the MultiKueue workers' reads (workers.py).
Their pure decisions sit next to them: failures.py, targets.py, start_decisions.py, lifecycle_decisions.py,
listing.py, probe.py, heartbeat.py, capabilities.py, verdict.py; and agent/domain's.
"""

from __future__ import annotations

from agent.api.service.lifecycle import LifecycleOps
from agent.api.service.output import OutputOps
from agent.api.service.preflight import PreflightOps
from agent.api.service.start import StartOps
from agent.api.service.status import StatusOps
from agent.api.service.watching import WatchOps


class Service(StartOps, LifecycleOps, StatusOps, OutputOps, PreflightOps, WatchOps):
    """Every operation of the API over one client: ``Service(kube, settings)``."""
