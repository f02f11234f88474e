"""MultiKueue: the names, and the formulas that number each dispatch on the manager (docs/multicluster.md).

A dispatch is one admission on the manager. Its execution runs on a worker as a new TrainJob, so a new
JobSet, where J starts again at 0 and may reach maxRestarts: the dispatch with count A runs R = A + J with
0 <= J <= maxRestarts. So on the manager the readmission gate raises A by K = maxRestarts + 1, not by 1,
before it sets its check Ready (MultiKueue copies the TrainJob to a worker once every other check is Ready):
the ranges [A, A + K - 1] of successive dispatches never overlap, and R only rises across them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final, Literal

from contract.admission import Raise, admission_count, admission_floor, raise_to
from contract.errors import ContractError, Problem
from contract.identity import R_BOUND
from contract.keys import (
    ANNOTATION_FENCED,
    ANNOTATION_UNVERIFIED,
    FENCED_POWERED_OFF,
    FENCED_TRUE,
    UNVERIFIED_TRUE,
)
from contract.objects import add_op, dig, labels
from contract.objects import annotations as annotations_of

MULTIKUEUE_CONTROLLER: Final = "kueue.x-k8s.io/multikueue"
"""The ``spec.controllerName`` of Kueue's MultiKueue AdmissionCheck."""
MULTIKUEUE_MANAGED_BY: Final = "kueue.x-k8s.io/multikueue"
"""The ``spec.managedBy`` Kueue's defaulting sets on a TrainJob whose queue has the MultiKueue check."""
IGNORE_MAX_RESTARTS: Final = "RestartJobSetAndIgnoreMaxRestarts"
"""The JobSet failure-policy action that restarts without counting: J could pass maxRestarts."""
MAX_RESTARTS_FIELD: Final = "spec.template.spec.failurePolicy.maxRestarts"
DEFAULT_MIN_DISPATCHES: Final = 1000
MULTIKUEUE_CONFIG_KIND: Final = "MultiKueueConfig"
"""The kind a MultiKueue AdmissionCheck's ``spec.parameters`` names: its ``spec.clusters`` are the workers."""
MULTIKUEUE_ORIGIN_LABEL: Final = "kueue.x-k8s.io/multikueue-origin"
"""The label MultiKueue puts on the remote Workload and the remote TrainJob it creates on a worker."""
PREBUILT_WORKLOAD: Final = "kueue.x-k8s.io/prebuilt-workload-name"
"""On a worker's copy, a label or (Kueue's WorkloadIdentifierAnnotations) an annotation: the name of the remote
Workload MultiKueue made for it, the manager Workload's name."""

ROLE_SINGLE: Final = ""
ROLE_MANAGER: Final = "manager"
ROLE_WORKER: Final = "worker"
Role = Literal["", "manager", "worker"]
"""A cluster's part (the chart's ``multicluster.role``, the agent's and the webhook's ``multiclusterRole``): one
cluster alone (""), a MultiKueue manager that queues and numbers dispatch jobs but runs none, or a worker that
runs the copies a manager dispatched to it and never numbers them."""


def managed_by_multikueue(trainjob: Mapping[str, Any] | None) -> bool:
    """The TrainJob is a manager's, run by MultiKueue on a worker: Kueue's defaulting set its ``spec.managedBy``
    (immutable) because its queue lists a MultiKueue check."""
    return bool(dig(trainjob, "spec", "managedBy") == MULTIKUEUE_MANAGED_BY)


def is_copy(obj: Mapping[str, Any] | None) -> bool:
    """A copy MultiKueue made on a worker (a remote Workload or remote TrainJob): it carries the origin label."""
    value = dig(obj, "metadata", "labels", MULTIKUEUE_ORIGIN_LABEL)
    return isinstance(value, str) and value != ""


def records_only(role: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> bool:
    """The unsuspend of this TrainJob records A and never raises it: on a worker, MultiKueue's copy (the origin
    label on the old object or the new, so a write cannot escape by removing it). The manager numbered that
    dispatch; a raise here would number an execution the manager never numbered, and a second start of the copy
    (A already recorded as started) is refused instead (docs/multicluster.md, guarantee 3)."""
    return role == ROLE_WORKER and (is_copy(old) or is_copy(new))


def max_restarts(runtime_spec: Mapping[str, Any]) -> int:
    """The JobSet failure policy's maxRestarts in a runtime's spec: the highest J a dispatch can reach (0 when
    absent: JobSet then never restarts the group)."""
    value = dig(runtime_spec, "template", "spec", "failurePolicy", "maxRestarts")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ContractError(MAX_RESTARTS_FIELD, f"{value!r} is not a count")
    return value


def step(runtime_spec: Mapping[str, Any]) -> int:
    """K = maxRestarts + 1: how far A rises per dispatch, so that no two dispatches share an R."""
    return max_restarts(runtime_spec) + 1


def dispatches_afforded(a: int, restarts: int) -> int:
    """How many more dispatches a job at count ``a`` can number: the n-th gets A = a + n K and runs R up to
    a + n K + maxRestarts, which must stay below R_BOUND, so n <= (R_BOUND - 1 - maxRestarts - a) / K."""
    return max(0, (R_BOUND - 1 - restarts - a) // (restarts + 1))


def multikueue_checks(admission_checks: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The names of the AdmissionChecks whose controller is MultiKueue."""
    return frozenset(
        dig(ac, "metadata", "name")
        for ac in admission_checks
        if dig(ac, "spec", "controllerName") == MULTIKUEUE_CONTROLLER
    )


def multikueue_config_of(admission_check: Mapping[str, Any] | None) -> str | None:
    """The MultiKueueConfig a MultiKueue AdmissionCheck's parameters name, or None (no such check, or its
    parameters name something else: Kueue then keeps the check inactive)."""
    params = dig(admission_check, "spec", "parameters")
    if not isinstance(params, Mapping) or params.get("kind") != MULTIKUEUE_CONFIG_KIND:
        return None
    name = params.get("name")
    return name if isinstance(name, str) and name else None


def config_clusters(config: Mapping[str, Any] | None) -> list[str]:
    """The MultiKueueClusters a MultiKueueConfig lists: the workers a dispatch through it may run on."""
    clusters = dig(config, "spec", "clusters")
    return [c for c in clusters if isinstance(c, str) and c] if isinstance(clusters, list) else []


def is_fenced(cluster: Mapping[str, Any] | None) -> bool:
    """An administrator fenced the MultiKueueCluster's worker (``ANNOTATION_FENCED``: exactly ``FENCED_TRUE`` or
    ``FENCED_POWERED_OFF``): the manager claims nothing there and renews no contact, so its agent stops the copies
    there; the gate trusts the fence as far as ``plan_workers`` says."""
    return dig(cluster, "metadata", "annotations", ANNOTATION_FENCED) in (FENCED_TRUE, FENCED_POWERED_OFF)


def is_powered_off(cluster: Mapping[str, Any] | None) -> bool:
    """The fence declares the worker shut down (``FENCED_POWERED_OFF``): nothing of it runs, read or not."""
    return bool(dig(cluster, "metadata", "annotations", ANNOTATION_FENCED) == FENCED_POWERED_OFF)


def listed_multikueue_checks(workload: Mapping[str, Any] | None, checks: Collection[str]) -> list[str]:
    """The MultiKueue checks the Workload lists (Kueue copies the ClusterQueue's checks into its
    ``status.admissionChecks``), sorted; ``checks`` are the MultiKueue checks' names, identified by fresh reads.
    Which checks a Workload lists never decides MultiKueue mode: the TrainJob's ``spec.managedBy`` does
    (``managed_by_multikueue``; agent/domain/decide.py ``dispatch_mode`` fails closed on a check it cannot identify)."""
    entries = dig(workload, "status", "admissionChecks")
    names = {e.get("name") for e in entries if isinstance(e, Mapping)} if isinstance(entries, list) else set()
    return sorted(n for n in names & set(checks) if isinstance(n, str))


def multikueue_problems(runtime_spec: Mapping[str, Any]) -> list[Problem]:
    """What a runtime must not have in a MultiKueue queue, beyond docs/webhook.md's runtime requirements: a
    failure-policy rule that restarts without counting lets J pass maxRestarts, into the next dispatch's
    range; and a maxRestarts that is not a count."""
    problems = []
    try:
        max_restarts(runtime_spec)
    except ContractError as exc:
        problems.append(Problem("runtime.max-restarts", exc.field, dig(runtime_spec, *_MAX_RESTARTS), exc.message))
    rules = dig(runtime_spec, "template", "spec", "failurePolicy", "rules")
    for i, rule in enumerate(rules if isinstance(rules, list) else []):
        if isinstance(rule, Mapping) and rule.get("action") == IGNORE_MAX_RESTARTS:
            problems.append(
                Problem(
                    "runtime.multikueue-ignore-max-restarts",
                    f"spec.template.spec.failurePolicy.rules[{i}].action",
                    IGNORE_MAX_RESTARTS,
                    "must not be used in a MultiKueue queue: J could pass maxRestarts and repeat the R of the "
                    "next dispatch, which starts at A + maxRestarts + 1",
                )
            )
    return problems


_MAX_RESTARTS = ("template", "spec", "failurePolicy", "maxRestarts")


def raise_dispatch(trainjob: Mapping[str, Any], k: int) -> Raise:
    """A and the floor := max(A, floor) + K, as one JSON Patch preconditioned on the TrainJob as read.

    Refuses (ContractError) when the TrainJob is not suspended (Trainer lets A change only then), when
    dispatch's entry is gone, when neither A nor the floor is there (raising from nothing could repeat an R),
    and when the dispatch's range [A, A + K - 1] would reach R_BOUND."""
    if dig(trainjob, "spec", "suspend") is not True:
        raise ContractError("spec.suspend", "A can change only while the TrainJob is suspended")
    if k < 1:
        raise ContractError("K", f"{k} is not a step: K = maxRestarts + 1 is at least 1")
    a, floor = admission_count(trainjob), admission_floor(trainjob)
    if a is None and floor is None:
        raise ContractError(
            "spec.runtimePatches",
            "neither A nor the admission floor is there; raising A from nothing could repeat an R",
        )
    new_a = max(a or 0, floor or 0) + k
    if new_a + k - 1 >= R_BOUND:
        raise ContractError(
            "A",
            f"raising A to {new_a} (by K {k}) lets this dispatch reach R {new_a + k - 1}, past the epoch bound "
            f"{R_BOUND}: the job's dispatches are spent",
        )
    return raise_to(trainjob, new_a)


def budget_problem(runtime_spec: Mapping[str, Any], a: int, min_dispatches: int) -> str | None:
    """Start's refusal, naming the figures, of a job whose runtime affords fewer dispatches from count ``a``
    than the site's minDispatches; None when it affords enough."""
    restarts = max_restarts(runtime_spec)
    afforded = dispatches_afforded(a, restarts)
    if afforded >= min_dispatches:
        return None
    return (
        f"the runtime's maxRestarts {restarts} (K = {restarts + 1}) affords {afforded} dispatch(es) from A {a} "
        f"(floor(({R_BOUND} - 1 - {restarts} - {a}) / {restarts + 1})), fewer than the site's minDispatches "
        f"{min_dispatches}: lower {MAX_RESTARTS_FIELD}"
    )


# -- The stale copy: a worker's copy starts only under the A its remote Workload was stamped with ----------------


def unverified(obj: Mapping[str, Any] | None) -> bool:
    """MultiKueue's copy carries dispatch's mark ``ANNOTATION_UNVERIFIED`` (any value: only its absence lets it
    start)."""
    return ANNOTATION_UNVERIFIED in annotations_of(obj)


def prebuilt_workload(copy: Mapping[str, Any] | None) -> str | None:
    """The remote Workload a worker's copy names as its prebuilt one: a label, or (Kueue's
    ``WorkloadIdentifierAnnotations``) an annotation of the same key; None when it names none."""
    for found in (labels(copy), annotations_of(copy)):
        value = found.get(PREBUILT_WORKLOAD)
        if isinstance(value, str) and value:
            return value
    return None


def mark_copy_ops(trainjob: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The mutation at the creation of MultiKueue's copy on a worker: the mark ``ANNOTATION_UNVERIFIED``, and
    ``spec.suspend: true`` (Kueue's defaulting suspends it too; the copy starts only by an unsuspend, which the
    unsuspend rules judge)."""
    ops = (
        []
        if unverified(trainjob)
        else [add_op(trainjob, ("metadata", "annotations", ANNOTATION_UNVERIFIED), UNVERIFIED_TRUE)]
    )
    if dig(trainjob, "spec", "suspend") is not True:
        ops.append(add_op(trainjob, ("spec", "suspend"), True))
    return ops
