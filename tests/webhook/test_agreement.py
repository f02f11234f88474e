"""Where a rule lives both in the webhook and in a policy, they agree: each update of a dispatch TrainJob below, by
dispatch and by Kueue (the principals that own a TrainJob's updates), is sent to the real API server with the field
policies alone (a dry run) and given to the webhook's pure ``validate``; both allow it or both refuse it. The cases
walk the rules that decide identity and start: the raise of A and the floor, the record of A, the unsuspend (the
choke point), holds, the queue, the JobSet's UID, reserved keys and other runtime-patch entries.

A stranger is the owner policies' (tests/webhook/test_owners_on_the_api_server.py): they refuse it every write on the TrainJob, where
the webhook, which has no such rule, judges it field by field. The record of A is the mutating policy's
(tests/webhook/test_record_start.py): an unsuspend is sent here with the record the mutation adds."""

from __future__ import annotations

import copy
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from ulid import ULID

from agent.domain.decide import Action, decide
from contract.admission import (
    admission_path,
    admission_started,
    approval_ops,
    preconditions,
    raise_admission,
    unsuspend_ops,
)
from contract.gates import is_opened_by_dispatch
from contract.keys import (
    ANNOTATION_ADMISSION_FLOOR,
    ANNOTATION_ADMISSION_GATED_BY,
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_APPROVED_ADMISSION,
    ANNOTATION_HOLD_WHO,
    ANNOTATION_JOBSET_UID,
    ANNOTATION_OPENED,
    LABEL_QUEUE_NAME,
)
from contract.trainjob import build_trainjob
from harness import chart_admission
from harness.fixtures import runtime, submission
from harness.kube_http import ApiError
from harness.principals import Principals, principals
from tests.agent.domain.test_gate import CHECK, NOW, workload
from tests.harness.kubelet import apply_json_patch
from tests.webhook.test_record_start import set_a
from tests.webhook.test_webhook_rules import request
from webhook.admission import validate
from webhook.config import Config
from webhook.config import Principals as ConfigPrincipals
from webhook.policies import admission_policies
from webhook.review import Lookups, User

pytestmark = pytest.mark.cluster
KUEUE_SA = chart_admission.KUEUE_SA


@pytest.fixture
def who(control_plane, namespace) -> Principals:
    return principals(control_plane, namespace)


@pytest.fixture
def actors(control_plane, namespace, who) -> dict[str, tuple[Any, User]]:
    """dispatch and Kueue: each a client of the API server and the User the webhook sees."""
    kueue, kueue_name = chart_admission.kueue(control_plane, namespace, [namespace])
    return {"dispatch": (who.dispatch, User(who.dispatch_username)), "kueue": (kueue, User(kueue_name))}


@pytest.fixture
def config(namespace, who) -> Config:
    return Config(
        dispatch=ConfigPrincipals(usernames=(who.dispatch_username,)),
        kueue=ConfigPrincipals(usernames=(f"system:serviceaccount:{namespace}:{KUEUE_SA}",)),
    )


@pytest.fixture
def field_policies(control_plane, namespace, config) -> Iterator[None]:
    suffix = secrets.token_hex(3)
    docs = admission_policies(config, namespace="dispatch-system", owners_too=False)
    docs = [d for d in docs if d["kind"].startswith("Validating")]
    for doc in docs:
        doc["metadata"]["name"] += f"-{suffix}"
        if "policyName" in doc["spec"]:
            doc["spec"]["policyName"] += f"-{suffix}"
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
            }
        control_plane.admin.create(doc)
    yield
    for doc in docs:
        control_plane.admin.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


def _annotate(key: str, value: str | None) -> Callable[[dict[str, Any]], None]:
    def change(tj: dict[str, Any]) -> None:
        notes = tj["metadata"].setdefault("annotations", {})
        if value is None:
            notes.pop(key, None)
        else:
            notes[key] = value

    return change


def _both(*changes: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    def change(tj: dict[str, Any]) -> None:
        for c in changes:
            c(tj)

    return change


def _unsuspend_recorded(tj: dict[str, Any]) -> None:
    """An unsuspend with the record the mutation adds in the same write (A as admission-started)."""
    tj["spec"]["suspend"] = False
    *parents, key = admission_path(tj)
    node: Any = tj
    for part in parents:
        node = node[part]
    tj["metadata"].setdefault("annotations", {})[ANNOTATION_ADMISSION_STARTED] = node[key]


def _foreign_entry(pod: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    entry = {"manager": "example.com/mine", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": "node", "template": {"spec": {"template": pod}}}]}}}}  # fmt: skip
    return lambda tj: tj["spec"]["runtimePatches"].append(copy.deepcopy(entry))


# By concern (webhook/rules/<concern>.py holds the rule and its policy side by side), each case: (base: "gated" = as
# Start creates it; "raised" = opened, A raised to 1, suspended), the change.
CASES: dict[str, dict[str, tuple[str, Callable[[dict[str, Any]], None]]]] = {
    "identity": {
        "raise A and the floor by one": ("raised", _both(set_a("2"), _annotate(ANNOTATION_ADMISSION_FLOOR, "2"))),
        "raise A by five": ("raised", _both(set_a("6"), _annotate(ANNOTATION_ADMISSION_FLOOR, "6"))),
        "lower A": ("raised", set_a("0")),
        "remove the floor": ("raised", _annotate(ANNOTATION_ADMISSION_FLOOR, None)),
        "the record outside an unsuspend": ("raised", _annotate(ANNOTATION_ADMISSION_STARTED, "1")),
        "switch the queue": ("raised", lambda tj: tj["metadata"]["labels"].update({LABEL_QUEUE_NAME: "elsewhere"})),
        "record a JobSet UID": ("raised", _annotate(ANNOTATION_JOBSET_UID, "js-1")),
        "an entry with Kueue's kind of content": ("raised", _foreign_entry({"spec": {"nodeSelector": {"zone": "a"}}})),
        "an entry setting A": (
            "raised",
            _foreign_entry({"metadata": {"annotations": {"dispatch.phpboyscout.uk/admission": "0"}}}),
        ),
        "an entry mounting over the shell": (
            "raised",
            _foreign_entry({"spec": {"volumes": [{"name": "x", "emptyDir": {}}]}}),
        ),
    },
    "unsuspend": {
        "unsuspend, recorded": ("raised", _unsuspend_recorded),
        "unsuspend, A raised in it by one": (
            "raised",
            _both(set_a("2"), _annotate(ANNOTATION_ADMISSION_FLOOR, "2"), _unsuspend_recorded),
        ),
        "unsuspend, A raised in it by five": (
            "raised",
            _both(set_a("6"), _annotate(ANNOTATION_ADMISSION_FLOOR, "6"), _unsuspend_recorded),
        ),
        "unsuspend a job never opened": ("gated", _unsuspend_recorded),
        "unsuspend, approved": ("approved", _unsuspend_recorded),
        "unsuspend with the approval of another A": (
            "approved",
            _both(set_a("2"), _annotate(ANNOTATION_ADMISSION_FLOOR, "2"), _unsuspend_recorded),
        ),
        "write the gate's approval": ("raised", _annotate(ANNOTATION_APPROVED_ADMISSION, "1/wl-uid")),
        "change the gate's approval": ("approved", _annotate(ANNOTATION_APPROVED_ADMISSION, "2/wl-uid")),
        "unsuspend under a hold": ("raised", _both(_annotate(ANNOTATION_HOLD_WHO, "ops"), _unsuspend_recorded)),
    },
    "reserved-keys": {
        "remove dispatch's gate": ("gated", _annotate(ANNOTATION_ADMISSION_GATED_BY, None)),
        "a label of one's own": ("raised", lambda tj: tj["metadata"]["labels"].update({"team": "a"})),
        "a reserved label": ("raised", lambda tj: tj["metadata"]["labels"].update({"dispatch.phpboyscout.uk/x": "1"})),
    },
}


def _base(who: Principals, namespace: str, kind: str) -> dict[str, Any]:
    """ "gated": as Start creates it; "opened": opened, A 0, suspended (a Kueue-mode job before its first
    admission); "raised": opened, A raised to 1, suspended; "unmarked": the same without the opened mark (a
    Kueue-mode job opened before Open wrote it); "held": raised, with a hold of dispatch's; "approved": raised,
    with the readmission gate's approval of A 1."""
    sub = submission(namespace=namespace, job_id=str(ULID()), queue="team-a-queue")
    tj = who.dispatch.create(build_trainjob(sub, runtime()["spec"]))
    if kind == "gated":
        return tj
    opened = copy.deepcopy(tj)
    opened["metadata"]["annotations"].pop(ANNOTATION_ADMISSION_GATED_BY)
    if kind != "unmarked":
        opened["metadata"]["annotations"][ANNOTATION_OPENED] = "true"
    if kind == "held":
        opened["metadata"]["annotations"][ANNOTATION_HOLD_WHO] = "ops"
    tj = who.dispatch.request("PUT", who.dispatch.object_path(tj), opened)
    if kind == "opened":
        return tj
    tj = _raise(who, tj)
    return _patch(who, tj, [*preconditions(tj), *approval_ops(tj, 1, "wl-uid")]) if kind == "approved" else tj


def _patch(who: Principals, tj: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    return who.dispatch.request("PATCH", who.dispatch.object_path(tj), ops, content_type="application/json-patch+json")


def _raise(who: Principals, tj: dict[str, Any]) -> dict[str, Any]:
    return who.dispatch.request(
        "PATCH", who.dispatch.object_path(tj), raise_admission(tj).patch, content_type="application/json-patch+json"
    )


def _policies_allow(http: Any, old: dict[str, Any], new: dict[str, Any]) -> bool:
    try:
        http.request("PUT", http.object_path(old), new, query={"dryRun": "All"})
    except ApiError as err:
        if err.status not in (403, 422):
            raise
        return False
    return True


@pytest.mark.parametrize(
    ("concern", "case"),
    [pytest.param(concern, case, id=f"{concern}: {case}") for concern, cases in CASES.items() for case in cases],
)
def test_the_webhook_and_the_policies_agree(
    control_plane, namespace, who, actors, config, field_policies, concern, case
):
    base, change = CASES[concern][case]
    outcomes = {}
    for actor, (http, user) in actors.items():
        old = _base(who, namespace, base)
        new = copy.deepcopy(old)
        change(new)
        webhook = validate(request("UPDATE", new, old, user=user), config, Lookups()).allowed
        policies = _policies_settled(http, old, new, webhook)
        outcomes[actor] = (webhook, policies)
    assert all(w == p for w, p in outcomes.values()), f"{concern}, {case}: (webhook, policies) per actor {outcomes}"


def _policies_settled(http: Any, old: dict[str, Any], new: dict[str, Any], webhook: bool) -> bool:
    """The policies' answer. They load asynchronously: a write the webhook refuses is asked again until the
    policies refuse it too, or 30 s pass."""
    policies = _policies_allow(http, old, new)
    deadline = time.monotonic() + 30
    while policies and not webhook and time.monotonic() < deadline:
        time.sleep(0.2)
        policies = _policies_allow(http, old, new)
    return policies


def test_the_cases_are_not_all_alike(control_plane, namespace, who, actors, config):
    """The table has teeth: the webhook allows some cases and refuses others, for each actor."""
    seen: dict[str, set[bool]] = {actor: set() for actor in actors}
    for base, change in (c for cases in CASES.values() for c in cases.values()):
        for actor, (_, user) in actors.items():
            old = _base(who, namespace, base)
            new = copy.deepcopy(old)
            change(new)
            seen[actor].add(validate(request("UPDATE", new, old, user=user), config, Lookups()).allowed)
    assert all(s == {True, False} for s in seen.values()), seen


@pytest.mark.parametrize("base", ["gated", "opened", "raised", "unmarked", "held"])
def test_the_gate_approves_only_what_the_unsuspend_rules_let_start(
    control_plane, namespace, who, actors, config, field_policies, base
):
    """One answer for whether dispatch opened a job: the readmission gate approves Kueue's admission exactly when
    Kueue's unsuspend that follows (with the raise and the record admission writes into it) is allowed by the
    webhook and by the policies. A job the gate approved but the unsuspend rules refuse would hold its quota and
    never start (a Kueue-mode job past its gate without the opened mark, whatever its floor); one they would
    allow but the gate refuses would never be admitted."""
    old = _base(who, namespace, base)
    meta = old["metadata"]
    owner = {"apiVersion": old["apiVersion"], "kind": "TrainJob", "name": meta["name"], "uid": meta["uid"],
             "controller": True}  # fmt: skip
    decision = decide(
        workload=workload(owner=owner), check=CHECK, trainjob=old, jobset=None, pods=[], blockers=[], now=NOW
    )
    if decision.trainjob_patch is not None:
        old = _patch(who, old, decision.trainjob_patch)  # the gate's approval, before its Ready
    # Kueue's unsuspend of the TrainJob as it is, with what admission adds to the write (the raise when due,
    # the record).
    new = copy.deepcopy(old)
    new["spec"]["suspend"] = False
    new = apply_json_patch(new, unsuspend_ops(new, admission_started(old), kueue=True))
    http, user = actors["kueue"]
    webhook = validate(request("UPDATE", new, old, user=user), config, Lookups()).allowed
    policies = _policies_settled(http, old, new, webhook)
    approves = decision.action is Action.ADMIT
    assert (approves, webhook, policies) in ((True, True, True), (False, False, False)), (
        f"{base}: gate {decision.action.value} ({decision.message}), webhook {webhook}, policies {policies}"
    )
    assert approves == (base in ("opened", "raised"))
    assert is_opened_by_dispatch(old) == (base in ("opened", "raised", "held"))
