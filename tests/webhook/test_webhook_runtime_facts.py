"""What the webhook keeps of a runtime copy (webhook/runtime_facts.py): the creation rules answer on the facts
exactly as on the whole copy, for generated copies, however the facts reached the rules (a LIST page, a
watch event, a GET), and the facts are the two readings the rules make of the whole copy."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from contract.errors import ContractError
from contract.runtime_patch import trainer_replicated_job
from contract.runtime_requirements import runtime_problems
from contract.trainjob import build_trainjob
from harness.fixtures import runtime, submission
from tests.webhook.test_webhook_rules import DISPATCH, request
from webhook.admission import lookups_needed, validate
from webhook.config import Config
from webhook.kube import RuntimeCopies
from webhook.review import Lookups
from webhook.runtime_facts import RuntimeFacts, requirements_of, runtime_facts

ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"


def _absent_or(*values: Any) -> st.SearchStrategy[Any]:
    """A field's value, or ``...`` for "the field is absent"."""
    return st.sampled_from([..., *values])


def _set(obj: dict[str, Any], key: str, value: Any) -> None:
    if value is ...:
        obj.pop(key, None)
    else:
        obj[key] = value


container = st.fixed_dictionaries(
    {"name": st.sampled_from(["node", "sidecar"])},
    optional={
        "restartPolicy": st.sampled_from([None, "Never", "Always", "OnFailure"]),
        "restartPolicyRules": st.sampled_from([None, [], [{"action": "Restart", "exitCodes": {"operator": "In"}}]]),
    },
)
failure_rule = st.fixed_dictionaries(
    {"action": st.sampled_from(["RestartJob", "RestartJobAndIgnoreMaxRestarts", "RestartJobSet", "FailJobSet"])},
    optional={
        # 5 is no list: ``name in 5`` raises, as it would on the whole copy (no API server returns it).
        "targetReplicatedJobs": st.sampled_from([None, [], ["node"], ["other"], ["node", "other"], 5])
    },
)


@st.composite
def runtime_copies(draw: st.DrawFn) -> dict[str, Any]:
    """A runtime copy as read, varied in everything the requirements and the trainer-job lookup look at."""
    rt = runtime(trainer_job=draw(st.sampled_from(["node", "trainer", ""])))
    jobs = rt["spec"]["template"]["spec"]["replicatedJobs"]
    trainer = jobs[1]
    job_spec = trainer["template"]["spec"]
    pod = job_spec["template"]["spec"]
    _set(pod, "restartPolicy", draw(_absent_or("Never", "OnFailure", "Always", None)))
    _set(job_spec, "backoffLimit", draw(_absent_or(0, 1, 6, None)))
    _set(job_spec, "backoffLimitPerIndex", draw(_absent_or(None, 0, 2)))
    pf = draw(st.lists(st.sampled_from(["Ignore", "FailJob", "Count", "FailIndex"]), max_size=3))
    if pf:
        job_spec["podFailurePolicy"] = {"rules": [{"action": a} for a in pf]}
    pod["containers"] = draw(st.lists(container, min_size=0, max_size=3)) or pod["containers"]
    failure: dict[str, Any] = {}
    _set(failure, "restartStrategy", draw(_absent_or("InPlaceRestart", "Recreate", "BlockingRecreate")))
    rules = draw(st.lists(failure_rule, max_size=3))
    if rules:
        failure["rules"] = rules
    if failure:
        rt["spec"]["template"]["spec"]["failurePolicy"] = failure
    labelled = draw(st.sampled_from(["one", "none", "two"]))
    if labelled == "none":
        del trainer["template"]["metadata"]["labels"][ANCESTOR]
    elif labelled == "two":
        jobs[0]["template"]["metadata"]["labels"][ANCESTOR] = "trainer"
    shape = draw(st.sampled_from(["whole", "whole", "whole", "no spec", "empty spec", "job spec a list"]))
    if shape == "no spec":
        del rt["spec"]
    elif shape == "empty spec":
        rt["spec"] = {}
    elif shape == "job spec a list":
        trainer["template"]["spec"] = [job_spec]  # ill-typed: the rules raise on it
    rt["kind"] = "TrainingRuntime"
    rt["metadata"].update({"namespace": "team-a", "uid": draw(st.sampled_from(["u1", "u2"]))})
    return rt


def _outcome(compute: Any) -> Any:
    """What a call returns, or the exception it raised (type and text), to compare two calls."""
    try:
        return compute()
    except Exception as exc:
        return ("raised", type(exc), str(exc))


def _verdict(rt: Any, trainjob: dict[str, Any], config: Config) -> Any:
    req = request("CREATE", trainjob, user=DISPATCH)
    return _outcome(lambda: validate(req, config, Lookups(runtimes=dict.fromkeys(lookups_needed(req, config), rt))))


class _NoApi:
    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"no API call expected: {name}")


class _Store:
    def __init__(self, obj: dict[str, Any]) -> None:
        self.obj = obj

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        return copy.deepcopy(self.obj)


def _through_the_store(obj: dict[str, Any]) -> list[RuntimeFacts | None]:
    """The facts as the webhook's lookup returns them: from a LIST page, from a watch event, from a GET."""
    out: list[RuntimeFacts | None] = []
    name = obj["metadata"]["name"]
    for path in ("page", "event", "get"):
        copies = RuntimeCopies(_NoApi(), _Store(obj).get)  # type: ignore[arg-type]  # the handler calls drive it
        copies.begin()
        if path == "page":
            copies.page([copy.deepcopy(obj)])
        copies.end()
        if path == "event":
            copies.event("ADDED", copy.deepcopy(obj))
        copies._on_live(path != "get")
        out.append(asyncio.run(copies("team-a", name)))
        assert (copies.hits, copies.misses) == ((0, 1) if path == "get" else (1, 0))
    return out


@settings(max_examples=400, deadline=None)
@given(
    rt=runtime_copies(),
    patched_job=st.sampled_from(["node", "trainer"]),
    allow_rank_restart=st.booleans(),
    allow_spec_prologue=st.booleans(),
)
def test_the_rules_answer_on_the_facts_as_on_the_whole_copy(
    rt: dict[str, Any], patched_job: str, allow_rank_restart: bool, allow_spec_prologue: bool
) -> None:
    sub = submission()
    rt["metadata"]["name"] = sub.name
    trainjob = build_trainjob(sub, runtime(trainer_job=patched_job)["spec"])
    config = Config(allowRankRestart=allow_rank_restart, allowSpecPrologue=allow_spec_prologue)
    expected = _verdict(copy.deepcopy(rt), trainjob, config)
    for facts in _through_the_store(rt):
        assert facts is not None
        assert facts.uid == rt["metadata"]["uid"]
        assert _verdict(facts, trainjob, config) == expected

    # The facts are what the rules read of the whole copy, for either setting of allowRankRestart.
    facts = runtime_facts(rt)
    spec = rt.get("spec")
    for allow in (False, True):
        assert _outcome(lambda a=allow: facts.problems(allow_rank_restart=a)) == _outcome(
            lambda a=allow: runtime_problems(spec or {}, allow_rank_restart=a)
        )

    def trainer() -> str | None:
        try:
            return str(trainer_replicated_job(spec)["name"])
        except ContractError:
            return None

    assert _outcome(facts.trainer_job) == _outcome(trainer)


def test_copies_of_one_source_share_one_value_and_different_answers_are_never_merged():
    good = runtime()["spec"]
    assert requirements_of(copy.deepcopy(good)) is requirements_of(copy.deepcopy(good))
    assert requirements_of(good).strict == ()
    in_place = copy.deepcopy(good)
    in_place["template"]["spec"]["failurePolicy"] = {"restartStrategy": "InPlaceRestart"}
    assert requirements_of(in_place) is not requirements_of(good)
    # Equal but printed differently (a denial quotes what it saw): two values, not one.
    one, other = copy.deepcopy(good), copy.deepcopy(good)
    for spec, rules in ((one, [{"a": 1, "b": 2}]), (other, [{"b": 2, "a": 1}])):
        spec["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"] = [
            {"name": "node", "restartPolicyRules": rules}
        ]
    assert requirements_of(one) == requirements_of(other)
    assert repr(requirements_of(one)) != repr(requirements_of(other))
    assert requirements_of(one) is not requirements_of(other)
