"""The readmission gate's shell: the controller (watches, the work queue, leadership, its side loops), one pass over
a Workload (``reconcile``: the order of reads and writes is the safety argument), the pod finalizer's releaser and
the JobSet UID record. The decision itself is ``agent.domain.decide``.
"""
