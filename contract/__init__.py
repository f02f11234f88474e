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
* ``runtime_requirements``: what a runtime must not allow (a trainer restarting in place, a mount over the prologue).
* ``patches``: the merged pod template Trainer renders from the runtime and the runtime-patch entries.
* ``foreign``: resets of the execution identity that the agent detects and reports.
* ``multicluster``: MultiKueue's names and the numbering of each dispatch on the manager.
* ``claims``: the claim, under which a MultiKueue worker runs a copy only while the manager wants it there.
* ``workerlook``: what of a job may still run on a MultiKueue worker.
* ``objects``: reading plain objects as the API returns them, without trusting their shape.
* ``upstream``: every upstream group, version and resource, once, and their REST paths.
* ``errors``: ``ContractError``.

Everything here is a pure function of plain data (objects as the API returns them, as dicts) and raises
``ContractError`` naming the field when a value breaks the contract.

Layer: the bottom one; imports none of this project's other packages.
"""
