"""The one mapping of the API server's answers to the API's typed errors (a read, a write, a create that failed;
a refusal of the functional core), and the webhooks' refusal of a TrainJob whose runtime copy they have not seen
yet. Pure.
"""

from __future__ import annotations

from typing import Final

from agent.api.errors import ApiError, ErrorKind
from agent.api.kube import KubeError
from agent.domain.operations import Refused

RUNTIME_NOT_SEEN: Final = (
    "not found",  # Kueue's TrainJob webhook: "runtime '<name>' not found"
    "must be created before the TrainJob",  # Trainer's: "specified trainingRuntime must be created before ..."
)


def runtime_not_yet_seen(exc: KubeError) -> bool:
    """A webhook refused a TrainJob because it has not seen its runtime copy yet.

    Kueue's and Trainer's webhooks read runtimes from their informer caches, which lag the copy Start has
    just created by a moment: a refusal to retry briefly, not an answer.
    """
    return exc.webhook_denial and "untime" in exc.message and any(p in exc.message for p in RUNTIME_NOT_SEEN)


def refused(exc: Refused) -> ApiError:
    return ApiError(ErrorKind(exc.kind), exc.message)


def read_failed(exc: KubeError, what: str) -> ApiError:
    return ApiError(ErrorKind.UNAVAILABLE, f"cannot read {what}: {exc.describe()}")


def write_failed(exc: KubeError, what: str) -> ApiError:
    """A write (patch or delete) the API server refused.

    409 is the resourceVersion or uid precondition, 422 a JSON Patch ``test`` of the uid that failed: the
    object changed or is another one, so re-read and retry. A refusal by an admission webhook is final.
    Anything else (the agent's own RBAC, the API server failing) is the agent's problem, worth a retry.
    """
    if exc.status in (409, 422) and not exc.webhook_denial:
        return ApiError(ErrorKind.CONFLICT, f"{what}: the object is not as read ({exc.describe()}); re-read and retry")
    if exc.status == 404:
        return ApiError(ErrorKind.NOT_FOUND, f"{what}: the object is gone ({exc.describe()})")
    if exc.webhook_denial or exc.status in (400, 422):
        return ApiError(ErrorKind.REJECTED, f"{what}: the API server refused it: {exc.describe()}")
    return ApiError(ErrorKind.UNAVAILABLE, f"{what}: {exc.describe()}")


def create_failed(exc: KubeError, what: str, namespace: str) -> ApiError:
    if exc.status == 404:
        return ApiError(ErrorKind.INVALID, f"cannot create {what}: {exc.describe()}", field="namespace")
    if exc.webhook_denial or exc.status in (400, 422):
        return ApiError(ErrorKind.REJECTED, f"the API server refused {what} in {namespace}: {exc.describe()}")
    return ApiError(ErrorKind.UNAVAILABLE, f"cannot create {what}: {exc.describe()}")
