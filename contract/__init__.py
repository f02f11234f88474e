"""The dispatch contract: every name, key and formula of the spec, once, shared by webhook and agent.

Modules, by what they hold:

* ``keys``: the names, labels, annotations, environment variables and fixed values of the spec's tables.
* ``names``: TrainJob names ``dj-<lowercase JobID>-s<N>`` and the JobID.
* ``identity``: R = A + J, DISPATCH_EPOCH, DISPATCH_ATTEMPT and the prologue's two prefixes.
* ``ownership``: is this dispatch's? (name or runtime-patch manager, never labels); Kueue or plain mode.
* ``gates``: the ``kueue.x-k8s.io/admission-gated-by`` list and dispatch's gate in it.
* ``admission``: A, the floor, and the raise of A as one preconditioned JSON Patch.
* ``trainer``: the canonical ``spec.trainer`` (prologue command, args, env contract).
* ``runtime_patch``: dispatch's runtime patch entry on the trainer replicated job.
* ``trainjob``: the TrainJob and its runtime copy, as Start creates them.
* ``site``: the reserved-prefix check for a site's labels and annotations.
* ``prologue``: the prologue's text, embedded from prologue/dispatch-prologue.sh.

Everything here is a pure function of plain data (objects as the API returns them, as dicts) and raises
``ContractError`` naming the field when a value breaks the contract.
"""
