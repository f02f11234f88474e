"""The agent's decisions, pure: functions of the objects as the API returns them, no I/O.

The gate's decision (``decide``; MultiKueue mode and the stamp's life, ``multikueue_mode``), a Workload read without
trusting its shape (``workload``), node loss (``node_loss``; what a Pod and its Node say, ``node_evidence``), pod
ownership (``pod_owners``), dispatch's pod finalizer (``pod_finalizer``), our
AdmissionChecks' Active condition (``admission_check``), and what the API's Start, Open, Hold, Release, Stop and
Status plan and compute (``start``, ``operations``, ``status``; Kueue's objects as they read them,
``kueue_objects``). Imports contract, serving and ``agent.constants``
only.
"""
