"""The agent across MultiKueue clusters: on a manager, the look at each worker before a dispatch (``workers``,
``worker_pass``, ``worker_reads``), the runtime copy's replicas there (``replicas``), what a job left on them
(``worker_remains``), a lost worker's quota (``lost_quota``), Preflight's proof of a worker (``worker_proof``,
``kueue_config``) and the contact and claims it renews (``contact``, ``contact_lease``, ``claims``); on a worker, the
verification of MultiKueue's copies and their deletion once contact or claim is lost (``copies``,
``copy_verdicts``). Pure modules decide, the others read and write; none imports ``agent.gate``.
"""
