"""MultiKueue: the names, and the formulas that number each dispatch on the manager (docs/multicluster.md).

A dispatch is one admission on the manager. Its execution runs on a worker as a new TrainJob, so a new
JobSet, where J starts again at 0 and may reach maxRestarts: the dispatch with count A runs R = A + J with
0 <= J <= maxRestarts. So on the manager the readmission gate raises A by K = maxRestarts + 1, not by 1,
before it sets its check Ready (MultiKueue copies the TrainJob to a worker once every other check is Ready):
the ranges [A, A + K - 1] of successive dispatches never overlap, and R only rises across them.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final, Literal

from contract.admission import Raise, admission_count, admission_floor, parse_count, preconditions, raise_to
from contract.claims import DEFAULT_ORIGIN, copy_claim
from contract.errors import ContractError, Problem
from contract.identity import R_BOUND
from contract.keys import (
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_DISPATCHED,
    ANNOTATION_FENCED,
    ANNOTATION_UNVERIFIED,
    ANNOTATION_VERIFIED_CONTACT,
    ANNOTATION_VERIFIED_COPY,
    CONTACT_HOLDER,
    FENCED_POWERED_OFF,
    FENCED_TRUE,
    LABEL_CLAIM,
    LEASE_MANAGER_CONTACT,
    UNVERIFIED_TRUE,
)
from contract.objects import add_op, dig, labels, micro_time, parse_rfc3339, pointer
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


class CopyAction(Enum):
    NOTHING = "nothing"
    """Not an unverified dispatch copy: nothing to do."""
    WAIT = "wait"
    """Cannot be verified yet, or never: the copy stays marked and does not start (``reason`` says why)."""
    VERIFY = "verify"
    """Its A is its dispatch's: record it on the remote Workload (if not yet) and remove the mark."""
    DELETE = "delete"
    """Stale: it carries an A other than its dispatch's. Deleted: the remote Workload it adopted (Kueue's controller
    reference) goes with it and the manager dispatches again; not adopted yet, MultiKueue makes the copy again."""


@dataclass(frozen=True)
class CopyVerdict:
    action: CopyAction
    reason: str
    workload_patch: list[dict[str, Any]] | None = None
    """Preconditioned on the remote Workload as read: the record ``ANNOTATION_VERIFIED_COPY`` of this copy."""
    copy_patch: list[dict[str, Any]] | None = None
    """Preconditioned on the copy as read: the removal of its mark. Written after ``workload_patch`` landed."""
    final: bool = False
    """A wait that no later read of the same Workload ends (no stamp, an unreadable one, another copy verified
    there): not looked at again but on a change of the copy."""


def verify_copy(
    copy: Mapping[str, Any], workload: Mapping[str, Any] | None, *, contact: int | None, claim: str | None
) -> CopyVerdict:
    """On a worker, what dispatch's agent does with MultiKueue's copy ``copy`` of a dispatch TrainJob, given the
    remote Workload it names (None: not found), the contact epoch with the manager (``contact_epoch``; None:
    no renewal of the contact Lease seen within its duration, so no copy starts) and the approval its claim names
    (contract/claims.py; None: no claim for it seen renewed within the claim's duration, so it does not start).

    The copy was made from MultiKueue's cache of the manager's TrainJob, which may show an earlier dispatch's A;
    the remote Workload was cloned from the cache entry showing the manager gate's Ready, so its stamp
    ``ANNOTATION_DISPATCHED`` is this dispatch's A. A copy starts only with that A, and only one copy per remote
    Workload: a copy MultiKueue creates again under the same Workload would start a second execution with the A
    the first one ran (its J at 0 in a new JobSet), so it is never verified (docs/multicluster.md, "The stale
    copy")."""
    if not (is_copy(copy) and unverified(copy)):
        return CopyVerdict(CopyAction.NOTHING, "not an unverified copy")
    name = prebuilt_workload(copy)
    if name is None:
        return CopyVerdict(CopyAction.WAIT, f"the copy names no remote Workload ({PREBUILT_WORKLOAD})")
    if workload is None:
        return CopyVerdict(CopyAction.WAIT, f"its remote Workload {name} is not there (yet)")
    if not is_copy(workload) or dig(workload, "metadata", "name") != name:
        return CopyVerdict(CopyAction.WAIT, f"Workload {name} is not MultiKueue's copy")
    if contact is None:
        return CopyVerdict(CopyAction.WAIT, NO_CONTACT)
    try:
        a = admission_count(copy)
        stamp = annotations_of(workload).get(ANNOTATION_DISPATCHED)
        if stamp is None:
            return CopyVerdict(
                CopyAction.WAIT,
                f"its remote Workload {name} carries no {ANNOTATION_DISPATCHED}: the manager's dispatch-k8s did not "
                "stamp this dispatch, so its A cannot be verified here",
                final=True,
            )
        stamped = parse_count(f"annotation {ANNOTATION_DISPATCHED}", stamp)
    except ContractError as exc:
        return CopyVerdict(CopyAction.WAIT, f"cannot be verified: {exc}", final=True)
    if a != stamped:
        return CopyVerdict(
            CopyAction.DELETE,
            f"the copy carries A {a}, its dispatch was stamped {stamped} ({ANNOTATION_DISPATCHED} on Workload {name}): "
            "made from a stale view of the manager's TrainJob; deleted, the job goes back through the manager",
        )
    needs = copy_claim(copy)
    if needs is None:
        return CopyVerdict(
            CopyAction.WAIT,
            f"the copy carries no gate's approval ({ANNOTATION_APPROVED_ADMISSION}) to claim",
            final=True,
        )
    if claim != needs[1]:
        return CopyVerdict(CopyAction.WAIT, unclaimed_message(needs, claim))
    uid = dig(copy, "metadata", "uid")
    verified = annotations_of(workload).get(ANNOTATION_VERIFIED_COPY)
    if verified is not None and verified != uid:
        return CopyVerdict(
            CopyAction.WAIT,
            f"another copy (uid {verified}) was let start under Workload {name} before: a second one would repeat "
            f"A {a}; it never starts, and the job goes back through the manager when evicted there",
            final=True,
        )
    remove = [*preconditions(copy), {"op": "remove", "path": pointer("metadata", "annotations", ANNOTATION_UNVERIFIED)}]
    record = (
        None
        if verified == uid
        else [
            *preconditions(workload),
            add_op(workload, ("metadata", "annotations", ANNOTATION_VERIFIED_COPY), uid),
            {
                "op": "add",
                "path": pointer("metadata", "annotations", ANNOTATION_VERIFIED_CONTACT),
                "value": str(contact),
            },
        ]
    )
    return CopyVerdict(
        CopyAction.VERIFY,
        f"A {a} is the stamp of its dispatch on Workload {name}",
        workload_patch=record,
        copy_patch=remove,
    )


# -- Contact with the manager: a worker that lost it stops its copies, and one that regains it stops the old ones ---

NO_CONTACT: Final = (
    f"no renewal of the manager's contact Lease {LEASE_MANAGER_CONTACT} seen here within its duration: the manager's "
    "dispatch agent cannot reach this worker (multicluster.workerCredentials there, multicluster.managerAgent here), "
    "so no copy starts"
)


def contact_epoch(lease: Mapping[str, Any] | None) -> int | None:
    """The contact epoch the Lease ``LEASE_MANAGER_CONTACT`` shows (its ``leaseTransitions``), None without one."""
    if lease is None or dig(lease, "spec", "holderIdentity") != CONTACT_HOLDER:
        return None
    transitions = dig(lease, "spec", "leaseTransitions")
    return transitions if isinstance(transitions, int) and transitions >= 0 else 0


def contact_origin(lease: Mapping[str, Any] | None) -> str | None:
    """The MultiKueue origin of the manager that renews the contact Lease (its ``LABEL_CLAIM``); None: unlabelled."""
    value = labels(lease).get(LABEL_CLAIM)
    return value if isinstance(value, str) else None


def contact_lease(
    lease: Mapping[str, Any] | None, *, namespace: str, now: dt.datetime, duration: int, origin: str = DEFAULT_ORIGIN
) -> tuple[bool, dict[str, Any]]:
    """The manager's renewal of its contact Lease on a worker: ``(create, body)``. A body to update carries the
    Lease's resourceVersion as read (a PUT that fails if anyone wrote it since). When the Lease was last renewed
    more than ``duration`` ago (or is not the manager's), the renewal starts a new contact epoch
    (``leaseTransitions`` + 1): the worker's agent then deletes every copy it let start in an earlier one, which
    outlived a loss of contact however short its own watch of the Lease was. Judged by the manager's clock, which
    wrote the renewTime it compares with; the worker judges the loss itself by its own clock (``ContactWatch``)."""
    stamp = micro_time(now)
    spec = {"holderIdentity": CONTACT_HOLDER, "leaseDurationSeconds": duration, "renewTime": stamp}
    if lease is None:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE_MANAGER_CONTACT, "namespace": namespace, "labels": {LABEL_CLAIM: origin}},
            "spec": {**spec, "acquireTime": stamp, "leaseTransitions": 0},
        }
        return True, body
    last = parse_rfc3339(dig(lease, "spec", "renewTime"))
    old = dig(lease, "spec", "leaseDurationSeconds")
    gap = max(duration, old if isinstance(old, int) else 0)
    epoch = contact_epoch(lease)
    if epoch is None or last is None or (now - last).total_seconds() > gap:
        transitions = dig(lease, "spec", "leaseTransitions")
        spec |= {
            "acquireTime": stamp,
            "leaseTransitions": (transitions if isinstance(transitions, int) and transitions >= 0 else 0) + 1,
        }
    meta = lease.get("metadata") or {}
    metadata = {**meta, "labels": {**(meta.get("labels") or {}), LABEL_CLAIM: origin}}
    return False, {**lease, "metadata": metadata, "spec": {**(lease.get("spec") or {}), **spec}}


def outlived_contact(
    copy: Mapping[str, Any], workload: Mapping[str, Any] | None, *, epoch: int | None, lost: bool
) -> CopyVerdict:
    """On a worker, whether dispatch's agent deletes the copy ``copy`` it let start (not marked), given its remote
    Workload and the contact with the manager: ``lost`` (no renewal seen for the Lease's duration; the manager may
    dispatch the job elsewhere), or an ``epoch`` above the one the copy started under (contact was lost and
    regained since). A finished copy is kept (the manager copies its final status from it); a copy whose Workload
    is gone is going already."""
    if not is_copy(copy) or unverified(copy) or dig(copy, "metadata", "deletionTimestamp"):
        return CopyVerdict(CopyAction.NOTHING, "not a running copy")
    if workload is None or dig(workload, "metadata", "deletionTimestamp"):
        return CopyVerdict(CopyAction.NOTHING, "its remote Workload is gone")
    if annotations_of(workload).get(ANNOTATION_VERIFIED_COPY) != dig(copy, "metadata", "uid"):
        return CopyVerdict(CopyAction.NOTHING, "not the copy let start under its remote Workload")
    if any(
        c.get("type") == "Finished" and c.get("status") == "True" for c in dig(workload, "status", "conditions") or []
    ):
        return CopyVerdict(CopyAction.NOTHING, "finished")
    if lost:
        return CopyVerdict(
            CopyAction.DELETE,
            f"the manager's dispatch agent has not renewed its contact Lease {LEASE_MANAGER_CONTACT} here within its "
            "duration: the manager may dispatch the job to another worker; deleted, so it does not run on",
        )
    started = annotations_of(workload).get(ANNOTATION_VERIFIED_CONTACT)
    try:
        under = parse_count(f"annotation {ANNOTATION_VERIFIED_CONTACT}", started) if started is not None else -1
    except ContractError:
        under = -1  # unreadable: as old as can be
    if epoch is not None and under < epoch:
        return CopyVerdict(
            CopyAction.DELETE,
            f"it started under contact epoch {under if under >= 0 else 'unknown'} and the manager's contact Lease "
            f"{LEASE_MANAGER_CONTACT} shows {epoch}: contact with the manager was lost since, and the job may run "
            "elsewhere; deleted, so it does not run on",
        )
    return CopyVerdict(CopyAction.NOTHING, "in contact since it started")


def unclaimed_message(needs: tuple[str, str], claim: str | None) -> str:
    name, approval = needs
    seen = f"it names {claim}" if claim else "none seen renewed within its duration"
    return (
        f"the manager's dispatch agent does not claim this copy here now (claim {name} for {approval}: {seen}): "
        "the manager does not want it to run on this worker (not dispatched here, evicted, stopped, fenced, or "
        "Kueue cannot reach this worker)"
    )


def unclaimed(copy: Mapping[str, Any], workload: Mapping[str, Any] | None, *, claim: str | None) -> CopyVerdict:
    """On a worker, whether dispatch's agent deletes the copy ``copy`` it let start, given its remote Workload and
    the approval its claim names, live (None: no claim for it seen renewed within the claim's duration). A copy
    runs on only under a live claim for exactly it; a finished copy is kept (the manager copies its final
    status from it)."""
    if not is_copy(copy) or unverified(copy) or dig(copy, "metadata", "deletionTimestamp"):
        return CopyVerdict(CopyAction.NOTHING, "not a running copy")
    if workload is not None and annotations_of(workload).get(ANNOTATION_VERIFIED_COPY) != dig(copy, "metadata", "uid"):
        return CopyVerdict(CopyAction.NOTHING, "not the copy let start under its remote Workload")
    if _finished(copy) or _finished(workload):
        return CopyVerdict(CopyAction.NOTHING, "finished")
    needs = copy_claim(copy)
    if needs is not None and claim == needs[1]:
        return CopyVerdict(CopyAction.NOTHING, "claimed")
    return CopyVerdict(
        CopyAction.DELETE, f"{unclaimed_message(needs or ('?', '?'), claim)}; deleted, so it does not run on"
    )


def unclaimed_marked(copy: Mapping[str, Any], *, claim: str | None, waited: float, duration: float) -> CopyVerdict:
    """On a worker, whether a copy still marked, which has waited ``waited`` seconds (by the agent's clock) for a
    claim, is deleted: after ``duration`` without one, the manager does not want it here (a fenced worker, one
    Kueue reached but the manager's agent cannot); deleted, its remote Workload goes with it and the job goes
    back through the manager."""
    if not is_copy(copy) or not unverified(copy) or dig(copy, "metadata", "deletionTimestamp"):
        return CopyVerdict(CopyAction.NOTHING, "not a marked copy")
    needs = copy_claim(copy)
    if (needs is not None and claim == needs[1]) or waited < duration:
        return CopyVerdict(CopyAction.NOTHING, "claimed, or not waited long enough")
    return CopyVerdict(
        CopyAction.DELETE,
        f"{unclaimed_message(needs or ('?', '?'), claim)} for {waited:.0f} s; deleted, the job goes back through the "
        "manager",
    )


def _finished(obj: Mapping[str, Any] | None) -> bool:
    return any(
        isinstance(c, Mapping) and c.get("type") in ("Finished", "Complete", "Failed") and c.get("status") == "True"
        for c in dig(obj, "status", "conditions") or []
    )


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
