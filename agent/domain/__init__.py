"""The agent's decisions, pure: functions of the objects as the API returns them, no I/O.

The gate's decision (``decide``), a Workload read without trusting its shape (``workload``), node loss
(``node_loss``), pod ownership (``pod_owners``), dispatch's pod finalizer (``pod_finalizer``), our
AdmissionChecks' Active condition (``admission_check``), and what the API's Start, Open, Hold, Release, Stop and
Status plan and compute (``start``, ``operations``, ``status``). Imports contract, serving and ``agent.constants``
only.
"""
