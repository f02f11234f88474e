"""The objects an operation acts on, decided from what was read: the TrainJob the request names (dispatch's, the
same uid: ``own``), its one Workload (``workload_of``), and the namespaces out of dispatch's scope, which
Preflight, Start, Open and Release refuse (``excluded_namespace``). Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agent.api.errors import ApiError, ErrorKind
from agent.api.models import ObjectRef
from agent.api.settings import NamespaceScope
from agent.domain.kueue_objects import controlled_workloads
from agent.domain.workload import owner_trainjob
from contract.objects import dig
from contract.ownership import is_dispatch
from contract.scope import SCOPE_VALUES, always_exempt, out_of_scope


def own(trainjob: Mapping[str, Any] | None, ref: ObjectRef) -> Mapping[str, Any]:
    """The TrainJob as read, when it is dispatch's and the object the supervisor means (the same UID).

    The agent acts with its own ClusterRole, so it must never be a confused deputy: a TrainJob that is not
    dispatch's (contract/ownership.py) is refused on every route, before its uid is compared, and no refusal
    says what the uid of the object read is (it would be the one thing a caller needs to aim another route
    at an object it may not touch itself)."""
    where = f"TrainJob {ref.namespace}/{ref.name}"
    if trainjob is None:
        raise ApiError(ErrorKind.NOT_FOUND, f"{where} does not exist")
    if not is_dispatch(trainjob):
        raise not_dispatchs(where)
    if dig(trainjob, "metadata", "uid") != ref.uid:
        raise ApiError(ErrorKind.CONFLICT, f"{where} is a different object of the same name (not uid {ref.uid})")
    return trainjob


def not_dispatchs(where: str) -> ApiError:
    return ApiError(
        ErrorKind.REJECTED,
        f"{where} is not dispatch's (its name is not dj-<ULID>-s<N> and it has no runtime patch entry of "
        "dispatch's): the agent does not act on it",
    )


def excluded_namespace(
    namespace: str, own_namespace: str, scope: NamespaceScope | None = None, labels: Mapping[str, str] | None = None
) -> ApiError | None:
    """Preflight, Start, Open and Release refuse the namespaces the webhook and the policies leave out: kube-system
    and dispatch's own (so that they can never lock out the components that would fix them), and those the site's
    ``scope`` leaves out (contract/scope.py decides, from the namespace's ``labels`` as read now; None: not read,
    enough while the scope has no selector). A job there would run unpoliced."""
    scope = scope or NamespaceScope()
    why = out_of_scope(
        namespace,
        labels,
        own_namespace=own_namespace,
        exempt_namespaces=scope.exempt_namespaces,
        selector=scope.namespace_selector.as_kubernetes(),
    )
    if why is None:
        return None
    change = (
        ""
        if always_exempt(namespace, own_namespace)
        else f', or have a cluster admin change the chart\'s {SCOPE_VALUES} (docs/install.md, "Scope")'
    )
    return ApiError(
        ErrorKind.INVALID,
        f"{why}, so a job there would not be policed: use another namespace{change}",
        field="namespace",
    )


def needs_labels(scope: NamespaceScope) -> bool:
    """Whether deciding ``excluded_namespace`` needs the namespace's labels: only a selector reads them."""
    selector = scope.namespace_selector
    return bool(selector.match_labels or selector.match_expressions)


class SeveralWorkloads(ApiError):
    """Several Workloads claim the TrainJob as their controller: the agent does not pick one (``conflict``)."""

    def __init__(self, claiming: Sequence[Mapping[str, Any]], uid: str) -> None:
        names = ", ".join(sorted(str(dig(w, "metadata", "name")) for w in claiming))
        owner = owner_trainjob(claiming[0])
        where = f"TrainJob {dig(claiming[0], 'metadata', 'namespace')}/{owner[0] if owner else '?'}"
        super().__init__(
            ErrorKind.CONFLICT,
            f"{len(claiming)} Workloads claim {where} (uid {uid}) as their controller: {names}; Kueue creates one "
            "per TrainJob and the agent does not pick one: retry once only one is left",
        )


def workload_of(workloads: Iterable[Mapping[str, Any]], uid: str) -> Mapping[str, Any] | None:
    """The Workload Kueue created for the TrainJob: the one it controls (``controlled_workloads``); None
    when there is none. Several claiming it so are refused (``SeveralWorkloads``), never picked from: which
    one Kueue admits, and which one a Hold must deactivate, would be a guess."""
    claiming = controlled_workloads(workloads, uid)
    if len(claiming) > 1:
        raise SeveralWorkloads(claiming, uid)
    return claiming[0] if claiming else None
