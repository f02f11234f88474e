"""No stranger pins a dispatch job's objects: the policy ``dispatch-k8s-dependents``.

An object whose owner reference says ``blockOwnerDeletion: true`` holds its owner's foreground deletion until the
object is gone; Stop deletes the TrainJob in the foreground (agent/api/service.py ``STOP_PROPAGATION``), and the
garbage collector deletes each of the job's objects in the foreground in turn once it has blocking dependents.
Anyone who may create some object in the namespace could therefore add such a reference to one of the job's objects,
with a finalizer of their own, and Stop would never complete. Kubernetes would ask for delete rights on the owner
(``OwnerReferencesPermissionEnforcement``), but that admission plugin is off by default.

So a new blocking reference to a dispatch job's object (found by kind, API group and name, as the owner policies
know them: CEL cannot look an object up by uid) is refused unless its writer makes that kind's dependents (``OWNED``).
A reference that does not block is not refused: the garbage collector deletes that object with the job without
waiting for it, so Stop completes regardless, and a user may still tie an object of their own to the job's life. A
reference already in the old object, unchanged, is not judged again, so the controllers' updates of their own
objects and the garbage collector's removal of references pass. The table is data, rendered into one policy over
every namespaced resource, whose match condition sends the API server's CEL only writes that carry such a
reference (docs/performance.md measures what the others pay).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

from webhook import owners
from webhook.cel import is_principal, q, validating_policy
from webhook.config import Config
from webhook.configurations import NAME

DEPENDENTS: Final = f"{NAME}-dependents"


@dataclass(frozen=True)
class Owned:
    """A kind of a dispatch job's objects as an owner reference names it, and who makes its dependents."""

    kind: owners.Kind
    pattern: str
    """The names of the job's objects of this kind (webhook/owners.py)."""
    makers: tuple[str, ...]
    """The roles that make blocking dependents of it (webhook/owners.py)."""
    usernames: tuple[str, ...] = ()
    """Makers that are no role of their own: Kubernetes' controllers named by their ServiceAccounts."""
    titled: str = ""
    """What ``usernames`` are, for the refusal."""


# Verified against the sources the harness builds: trainer v2.2.1 (the JobSet, the MPI ConfigMap and SSH Secret,
# the status server's ConfigMap, coscheduling's and Volcano's PodGroups, all controller references to the TrainJob),
# kueue v0.19.2 (the Workload of a TrainJob, including a prebuilt one it adopts; a ProvisioningRequest, its
# PodTemplates and a concurrent-admission variant of a Workload), jobset v0.11.1 (its Jobs, the headless Service,
# its PVCs), kube-controller-manager v1.36 (a Job's pods; a pod's ephemeral PVCs and ResourceClaims). dispatch's
# runtime copy refers to its TrainJob without blocking (contract/trainjob.py).
OWNED: Final = (
    Owned(owners.TRAINJOBS, owners.NAME_PATTERN, (owners.DISPATCH, owners.KUEUE, owners.TRAINER)),
    Owned(owners.RUNTIME_COPIES, owners.NAME_PATTERN, (owners.DISPATCH,)),
    Owned(owners.JOBSETS, owners.NAME_PATTERN, (owners.JOBSET,)),
    Owned(owners.JOBS, owners.CHILD_NAME_PATTERN, (owners.JOB_CONTROLLER,)),
    Owned(
        owners.PODS,
        owners.CHILD_NAME_PATTERN,
        (owners.JOB_CONTROLLER,),
        owners.POD_DEPENDENT_MAKERS,
        "kube-controller-manager's ephemeral volume and resource claim controllers",
    ),
    Owned(owners.WORKLOADS, owners.WORKLOAD_NAME_PATTERN, (owners.KUEUE,)),
)

PINS: Final = "with blockOwnerDeletion: true holds the deletion of a dispatch job (its Stop) until this object is gone"
WHAT_TO_DO: Final = (
    "Set blockOwnerDeletion to false (the object is still deleted with the job, without holding it) or remove the "
    "reference"
)


def _prefix(pattern: str) -> str:
    """The literal start of a name pattern (``^dj-[0-9a-z]...`` -> ``dj-``): the match condition's cheap test."""
    return pattern[1 : pattern.index("[")]


def _prefixes() -> tuple[str, ...]:
    return tuple(sorted({_prefix(o.pattern) for o in OWNED}))


def _names_one(r: str) -> str:
    """CEL: owner reference ``r`` names a dispatch job's object, by its name's start alone."""
    name = f"{r}.?name.orValue('')"
    return " || ".join(f"{name}.startsWith({q(p)})" for p in _prefixes())


def _blocks(r: str) -> str:
    return f"{r}.?blockOwnerDeletion.orValue(false) == true"


def match_condition() -> str:
    """CEL: the write carries a blocking reference to what may be a dispatch job's object, other than in the old
    object's references (a create, or an update that changes them). Every other write stops here."""
    refs = "object.?metadata.?ownerReferences.orValue([])"
    return (
        f"{refs}.exists(r, {_blocks('r')} && ({_names_one('r')})) && "
        f"(oldObject == null || oldObject.?metadata.?ownerReferences.orValue([]) != {refs})"
    )


def _group(r: str, group: str) -> str:
    version = f"{r}.?apiVersion.orValue('')"
    return f"{version} == 'v1'" if group == "" else f"{version}.startsWith({q(group + '/')})"


def _to(owned: Owned) -> str:
    """CEL: the new blocking references to objects of ``owned``'s kind of a dispatch job."""
    k = owned.kind
    return (
        f"variables.added.filter(r, r.?kind.orValue('') == {q(k.kind)} && {_group('r', k.group)} && "
        f"r.?name.orValue('').matches({q(owned.pattern)}))"
    )


ADDED: Final = (
    f"object.metadata.ownerReferences.filter(r, {_blocks('r')} && "
    "!(oldObject != null && oldObject.metadata.?ownerReferences.orValue([]).exists(o, o == r)))"
)
"""CEL: the blocking references the old object does not have, as they are (one changed counts as new)."""


def _variable(owned: Owned) -> str:
    return f"to{owned.kind.kind}"


def _roles() -> list[str]:
    return sorted({r for o in OWNED for r in o.makers} | {owners.BREAK_GLASS})


def _maker_test(owned: Owned) -> str:
    tests = [f"variables.{r}" for r in (*owned.makers, owners.BREAK_GLASS)]
    if owned.usernames:
        tests.append(f"request.userInfo.username in {json.dumps(list(owned.usernames))}")
    return " || ".join(tests)


def _makers(owned: Owned) -> str:
    return ", ".join([*(owners.ROLE_TITLES[r] for r in owned.makers), *([owned.titled] if owned.titled else [])])


def _validation(owned: Owned) -> dict[str, str]:
    v = f"variables.{_variable(owned)}"
    kind = owned.kind.kind
    made_by = f"such a reference to a dispatch job's {kind} is made only by {_makers(owned)} (or break-glass)"
    return {
        "expression": f"size({v}) == 0 || {_maker_test(owned)}",
        "messageExpression": "request.kind.kind + ' ' + object.metadata.?name.orValue(object.metadata.?generateName"
        f".orValue('')) + ': its owner reference to {kind} ' + {v}[0].?name.orValue('') + ' ' + {q(PINS)} + '; ' + "
        f"{q(made_by)} + ', and ' + request.userInfo.username + ' is none of them. ' + {q(WHAT_TO_DO)}",
        "reason": "Forbidden",
    }


def dependents_policy(config: Config) -> dict[str, Any]:
    """The policy (its binding is the other policies', webhook/policies.py ``admission_policies``)."""
    variables = [
        {"name": "added", "expression": ADDED},
        *({"name": _variable(o), "expression": _to(o)} for o in OWNED),
        *({"name": r, "expression": is_principal(config.principals(r))} for r in _roles()),
    ]
    spec = {
        "matchConditions": [{"name": "blocking-references-to-dispatch-objects", "expression": match_condition()}],
        "variables": variables,
        "validations": [_validation(o) for o in OWNED],
    }
    policy = validating_policy(DEPENDENTS, [], ["CREATE", "UPDATE"], spec)
    # Every namespaced kind (an owner is in its dependent's namespace). Not the subresources: a status write keeps
    # the owner references as they were (ResetObjectMetaForStatus, and pods/status's own).
    policy["spec"]["matchConstraints"]["resourceRules"] = [
        {"apiGroups": ["*"], "apiVersions": ["*"], "resources": ["*"], "operations": ["CREATE", "UPDATE"],
         "scope": "Namespaced"}
    ]  # fmt: skip
    return policy
