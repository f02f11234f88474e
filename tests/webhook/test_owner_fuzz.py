"""Default deny under fire (tier B): a stranger holding every right on Kueue's, JobSet's, Trainer's and the batch
kinds and on pods tries random writes on a running dispatch job's objects: every operation and subresource, random
changes to random fields (stripping the marks of belonging among them), and random creates that claim to belong.
Nothing may be accepted, whether the policies stand alone or beside the webhook, and the job's executions keep
distinct identities. The seed is printed with every failure."""

from __future__ import annotations

import copy
import json
import os
import random
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from contract.keys import GATE, POD_FINALIZER, PREFIX
from harness.kube_http import ApiError, KubeHttp
from tests.agent.gate import kit
from tests.agent.gate.kit import JOBSET_V, KUEUE_V, TRAINER_V
from tests.agent.gate.test_readmission_gate import Gate, gate, ns  # noqa: F401 (the fixtures)
from tests.webhook.test_tampering import Guarded, _opened_running, _stranger
from webhook import owners
from webhook.rules.owners import owner_policy_name

pytestmark = pytest.mark.e2e
SEED = int(os.environ.get("DISPATCH_FUZZ_SEED", "18"))
"""Another seed explores other writes: ``DISPATCH_FUZZ_SEED=7 .venv/bin/pytest tests/webhook/test_owner_fuzz.py``."""
WRITES = 240
STRANGER_RULES: list[dict[str, Any]] = [
    {"apiGroups": [group], "resources": ["*"], "verbs": ["*"]}
    for group in ("trainer.kubeflow.org", "kueue.x-k8s.io", "jobset.x-k8s.io", "batch", "")
]
"""`edit`, and more: every verb on every resource of those groups in the namespace (pods and their subresources
among them). What refuses the writes below is dispatch's admission alone."""

# (api version, kind, the subresources a write may target)
KINDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "trainjob": (TRAINER_V, "TrainJob", ("", "status")),
    "copy": (TRAINER_V, "TrainingRuntime", ("",)),
    "jobset": (JOBSET_V, "JobSet", ("", "status")),
    "job": ("batch/v1", "Job", ("", "status")),
    "pod": ("v1", "Pod", ("", "status", "ephemeralcontainers", "resize", "binding")),
    "workload": (KUEUE_V, "Workload", ("", "status")),
}
CLAIMING_NAMES = {
    "trainjob": lambda _: f"dj-{secrets.token_hex(13)}-s1",
    "copy": lambda _: f"dj-{secrets.token_hex(13)}-s2",
    "jobset": lambda _: f"dj-{secrets.token_hex(13)}-s3",
    "job": lambda job: f"{job}-node-{secrets.token_hex(2)}",
    "pod": lambda job: f"{job}-node-0-0-{secrets.token_hex(3)}",
    "workload": lambda job: f"trainjob-{job}-{secrets.token_hex(3)}",
}
"""A new object's name that claims a dispatch job: dispatch's name pattern, or a child of the running job."""
VALUES: tuple[Any, ...] = ("", "0", "1", "999999", 0, 1, 7, True, False, None, {}, [], "dj-x", GATE, PREFIX + "x")
KEYS: tuple[str, ...] = (PREFIX + "admission", PREFIX + "opened", PREFIX + "job-id", "jobset.sigs.k8s.io/jobset-name",
                         "jobset.sigs.k8s.io/restart-attempt", "kueue.x-k8s.io/admission-gated-by", "example.com/x")  # fmt: skip


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))


def mutate(rng: random.Random, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with one to three random changes: a field set, removed, or a label, annotation, finalizer or owner
    reference added or stripped (the marks a write would strip to escape, or add to claim). ``metadata`` itself
    stays a mapping (its fields may become anything), so that every change after the first has one to work on."""
    new = copy.deepcopy(obj)
    meta = new.setdefault("metadata", {})
    for _ in range(rng.randint(1, 3)):
        choice = rng.randrange(6)
        if choice == 0:
            part = rng.choice(("labels", "annotations"))
            if not isinstance(meta.get(part), dict):  # an earlier change made it something else
                meta[part] = {}
            meta[part][rng.choice(KEYS)] = str(rng.choice(VALUES[:7]))
        elif choice == 1:
            for part in ("labels", "annotations", "ownerReferences", "finalizers"):
                if rng.random() < 0.5:
                    meta.pop(part, None)
        elif choice == 2:
            if not isinstance(meta.get("finalizers"), list):
                meta["finalizers"] = []
            meta["finalizers"].append(rng.choice((POD_FINALIZER, "example.com/stuck")))
        else:
            paths = [p for p in _leaves(new) if p and p != ("metadata",) and p[0] in ("spec", "status", "metadata")
                     and p[:2] not in (("metadata", "name"), ("metadata", "namespace"), ("metadata", "resourceVersion"))]  # fmt: skip
            if not paths:  # an earlier change removed every field it may change
                continue
            *parent_path, last = rng.choice(paths)
            parent: Any = new
            for part in parent_path:
                parent = parent[part]
            if rng.random() < 0.3 and isinstance(parent, dict):
                del parent[last]
            else:
                parent[last] = rng.choice(VALUES)
    return new


def changed(old: Any, new: Any, path: str = "") -> list[str]:
    """The paths where ``new`` differs from ``old`` (a failure says what the accepted write changed)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [p for k in sorted(old.keys() | new.keys(), key=str)
                for p in changed(old.get(k, _ABSENT), new.get(k, _ABSENT), f"{path}.{k}")]  # fmt: skip
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [p for i, (a, b) in enumerate(zip(old, new, strict=True)) for p in changed(a, b, f"{path}[{i}]")]
    if old == new:
        return []
    return [f"{path or '.'} = {json.dumps(new, default=str)[:80]}" if new is not _ABSENT else f"{path} removed"]


_ABSENT = object()


def _objects(g: Guarded, name: str) -> dict[str, dict[str, Any]]:
    admin, ns_ = g.admin, g.namespace
    tj = admin.get(TRAINER_V, "TrainJob", name, ns_)
    (job,) = admin.list("batch/v1", "Job", ns_, label_selector=f"jobset.sigs.k8s.io/jobset-name={name}")[:1]
    objects = {
        "trainjob": tj,
        "copy": admin.get(TRAINER_V, "TrainingRuntime", name, ns_),
        "jobset": admin.get(JOBSET_V, "JobSet", name, ns_),
        "job": job,
        "pod": kit.running(kit.pods_of(admin, ns_, name))[0],
        "workload": kit.workload_of(admin, ns_, tj["metadata"]["uid"]),
    }
    for key, obj in objects.items():  # a LIST's items carry neither
        obj.setdefault("apiVersion", KINDS[key][0])
        obj.setdefault("kind", KINDS[key][1])
    return objects


def attempt(rng: random.Random, stranger: KubeHttp, objects: dict[str, dict[str, Any]]) -> tuple[str, int, str]:
    """One random write; (what it was, the HTTP status, the answer's message) — status 0 when it was accepted."""
    key = rng.choice(sorted(KINDS))
    api_version, kind, subresources = KINDS[key]
    obj = objects[key]
    path = stranger.object_path(obj)
    operation = rng.choice(("CREATE", "UPDATE", "UPDATE", "DELETE"))
    sub = rng.choice(subresources) if operation == "UPDATE" else ""
    what = f"{operation} {kind}{'/' + sub if sub else ''}"
    try:
        if operation == "CREATE":
            claim = mutate(rng, obj)
            meta = claim["metadata"]
            for server_side in ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation"):
                meta.pop(server_side, None)
            # It claims to belong by its name, whatever else the mutation stripped: a name that claims nothing
            # makes the stranger's own object, which is theirs to create.
            meta["name"] = CLAIMING_NAMES[key](objects["trainjob"]["metadata"]["name"])
            stranger.request("POST", stranger.collection_path(api_version, kind, obj["metadata"]["namespace"]), claim)
        elif operation == "DELETE":
            if key == "pod":  # a pod's delete is anyone's, by design: the finalizer keeps the evidence
                return what + " (skipped: allowed by design)", 403, ""
            stranger.request("DELETE", path, query={"dryRun": "All"})
        elif sub == "binding":
            body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": obj["metadata"]["name"]},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": rng.choice(("kwok-node-0", "x"))}}  # fmt: skip
            stranger.request("POST", f"{path}/binding", body)
        else:
            body = mutate(rng, obj)
            what += f" changing {', '.join(changed(obj, body)) or 'nothing'}"
            stranger.request("PUT", f"{path}/{sub}" if sub else path, body)
    except ApiError as err:
        try:
            message = json.loads(err.body).get("message", err.body)
        except ValueError:
            message = err.body
        return what, err.status, message
    return what, 0, "accepted"


@pytest.fixture(params=["policies alone", "policies + webhook"])
def fuzzed(gate: Gate, ns: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Guarded]:  # noqa: F811
    g = Guarded(gate, ns, _stranger(gate, ns, rules=STRANGER_RULES), request.param, tmp_path / "webhook")
    try:
        yield g
    finally:
        g.disarm()


def test_no_random_write_of_a_stranger_is_accepted(fuzzed: Guarded) -> None:
    g = fuzzed
    tj, pods = _opened_running(g)
    name = tj["metadata"]["name"]
    g.arm()
    rng = random.Random(SEED)
    try:
        kit.eventually(lambda: _refused_by_policy(g, name), 30, "the policies in force")
        outcomes: dict[str, int] = {}
        for i in range(WRITES):
            what, status, message = attempt(rng, g.stranger, _objects(g, name))
            assert status != 0, f"seed {SEED}, write {i}: {what} was accepted"
            # Refused by admission (403), or by the API server's validation of a write the fuzz broke (422/400):
            # never stored.
            assert status in (400, 403, 404, 409, 422), f"seed {SEED}, write {i}: {what}: {status} {message}"
            outcomes[str(status)] = outcomes.get(str(status), 0) + 1
        assert outcomes.get("403", 0) > WRITES // 2, outcomes
        # Nothing the stranger did reset the job's identity: it runs as it ran, with distinct R.
        assert kit.assert_r_strictly_increases(pods.first_seen()) == [(1, 0)]
    finally:
        pods.stop()


PROBES: dict[str, str] = {"trainjob": "PUT", "copy": "DELETE", "jobset": "DELETE", "workload": "PUT", "pod": "PUT"}
"""Per kind, a dry-run write that tier B's own owner policies let the stranger make (a ServiceAccount is dispatch
there: harness/tier_b.py ``policy_config``) and the chart's refuse, so a refusal that names the test's own policy
says that policy is in force; a refusal by tier B's (the API server names the first policy that refused) says
nothing of it. A Job has no such write: tier B's policy refuses every write on it to all but its controllers."""
OWNER_KINDS = {"trainjob": owners.TRAINJOBS, "copy": owners.RUNTIME_COPIES, "jobset": owners.JOBSETS,
               "workload": owners.WORKLOADS, "pod": owners.PODS}  # fmt: skip


def _refused_by_policy(g: Guarded, name: str) -> None:
    """The chart's owner policies, as this test bound them, in force for each kind the fuzz writes (each policy
    loads on its own refresh, so one refusing says nothing of the others)."""
    objects = _objects(g, name)
    for key, method in PROBES.items():
        obj = objects[key]
        ours = next(p["metadata"]["name"] for p in g.policies if p["kind"] == "ValidatingAdmissionPolicy"
                    and p["metadata"]["name"].startswith(owner_policy_name(OWNER_KINDS[key]) + "-"))  # fmt: skip
        try:
            g.stranger.request(method, g.stranger.object_path(obj), obj if method == "PUT" else None,
                               query={"dryRun": "All"})  # fmt: skip
        except ApiError as err:
            body = err.body
        else:
            body = "admitted"
        assert f"ValidatingAdmissionPolicy '{ours}'" in body, f"{key}: {body}"
