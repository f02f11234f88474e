"""The readmission gate's shell. The controller (watches, the work queue, leadership: controller.py, with its index of
Workloads, index.py) runs one pass over a Workload at a time per worker (``reconcile``, reconcile.py: the order of
reads and writes is the safety argument), each with the ``Pass`` it builds once (context.py: the client, the reads,
our check names, the settings). Beside the workers the leader runs one runnable per concern (runnable.py): the Active
condition (active.py), the pod finalizer's releaser (releaser.py), the JobSet UID record (jobset_record.py), the round
over a manager's workers (worker_round.py) and agent/multicluster's loops. The decision itself is
``agent.domain.decide``.
"""
