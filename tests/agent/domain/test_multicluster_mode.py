"""How the manager's gate decides MultiKueue mode, and the stamp's life (docs/multicluster.md, "Numbering each
dispatch"): the mode comes from the TrainJob's ``spec.managedBy``, never from a cache of the AdmissionChecks, and
fails closed when the Workload's MultiKueue check cannot be identified; a held Workload loses its stamp but keeps
the record of the highest A ever stamped on it (``dispatched-spent``); and a raise whose stamp never landed is
reused rather than burned again, while no A that was ever stamped is reused."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.domain.decide import Action, Blocker, decide
from agent.domain.multikueue_mode import Mode, dispatch_mode, highest_stamped, other_checks, reusable_a
from agent.domain.start import multikueue_start_problems
from agent.multicluster.lost_quota import checks_to_look_at
from contract.admission import admission_count, approved_admission
from contract.keys import (
    ANNOTATION_ADMISSION_STARTED,
    ANNOTATION_DISPATCHED,
    ANNOTATION_DISPATCHED_SPENT,
    ANNOTATION_HOLD_INSTANCE,
)
from contract.multicluster import MULTIKUEUE_CONTROLLER, MULTIKUEUE_MANAGED_BY
from tests.agent.domain.test_gate import CHECK, NOW, opened
from tests.contract.test_multicluster import MK_CHECK, managed, mk_workload, spec
from tests.harness.kubelet import apply_json_patch

K = 3
"""K for spec(2): maxRestarts 2."""


def ac(name: str, controller: str = MULTIKUEUE_CONTROLLER) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"controllerName": controller}}


def gate(tj: dict[str, Any], wl: dict[str, Any], *, problem: str | None = None, blockers=(), multikueue=None):
    return decide(
        workload=wl,
        check=CHECK,
        trainjob=tj,
        jobset=None,
        pods=[],
        blockers=list(blockers),
        now=NOW,
        multikueue=dispatch_mode(tj, {}).multikueue if multikueue is None else multikueue,
        multikueue_problem=problem,
        runtime_spec=spec(K - 1),
    )


def stamped(wl: dict[str, Any], a: int | None, spent: int | None = None) -> dict[str, Any]:
    wl = copy.deepcopy(wl)
    notes = wl["metadata"].setdefault("annotations", {})
    if a is not None:
        notes[ANNOTATION_DISPATCHED] = str(a)
    if spent is not None:
        notes[ANNOTATION_DISPATCHED_SPENT] = str(spent)
    return wl


def bump(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server stores a write: a new resourceVersion."""
    obj = copy.deepcopy(obj)
    obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    return obj


# -- the mode: spec.managedBy decides; the Workload's MultiKueue check, read fresh, must be identified ---------------


def test_the_checks_read_for_the_mode_are_every_check_the_workload_lists_but_dispatch_s_own():
    assert other_checks(mk_workload(), frozenset({CHECK})) == [MK_CHECK]
    assert other_checks(mk_workload(), frozenset({CHECK, MK_CHECK})) == []
    assert other_checks({"status": {}}, frozenset({CHECK})) == []


def test_a_trainjob_multikueue_manages_is_in_multikueue_mode_with_the_checks_read_fresh():
    tj = managed(opened())
    assert dispatch_mode(tj, {MK_CHECK: ac(MK_CHECK)}) == Mode(True, (MK_CHECK,), None)
    # A check of another controller beside it changes nothing.
    assert dispatch_mode(tj, {MK_CHECK: ac(MK_CHECK), "prov": ac("prov", "x/y")}) == Mode(True, (MK_CHECK,), None)


def test_multikueue_mode_fails_closed_when_the_workload_s_multikueue_check_cannot_be_identified():
    tj = managed(opened())
    # Deleted (and not recreated yet): a cache would simply not list it; the mode still comes from managedBy.
    gone = dispatch_mode(tj, {MK_CHECK: None})
    assert (gone.multikueue, gone.checks) == (True, ())
    assert gone.problem is not None
    assert f"AdmissionCheck {MK_CHECK}: not found" in gone.problem
    assert MULTIKUEUE_MANAGED_BY in gone.problem
    assert "never approved on the one-cluster path" in gone.problem
    unreadable = dispatch_mode(tj, {MK_CHECK: "503 Service Unavailable"})
    assert unreadable.problem is not None
    assert f"AdmissionCheck {MK_CHECK}: cannot be read: 503 Service Unavailable" in unreadable.problem
    # Kueue dropped the missing check from the Workload's list: managed, yet no MultiKueue check listed.
    none = dispatch_mode(tj, {})
    assert (none.multikueue, none.checks) == (True, ())
    assert none.problem is not None
    assert "lists no MultiKueue check" in none.problem
    # One MultiKueue check identified, another listed check not: still a hold (it may be a MultiKueue check too).
    partly = dispatch_mode(tj, {MK_CHECK: ac(MK_CHECK), "mk-2": None})
    assert (partly.multikueue, partly.checks) == (True, (MK_CHECK,))
    assert partly.problem is not None
    assert "AdmissionCheck mk-2: not found" in partly.problem


def test_a_trainjob_multikueue_does_not_manage_in_a_multikueue_queue_is_held_naming_the_mismatch():
    tj = opened()
    mismatch = dispatch_mode(tj, {MK_CHECK: ac(MK_CHECK)})
    assert (mismatch.multikueue, mismatch.checks) == (False, (MK_CHECK,))
    assert mismatch.problem is not None
    assert f"lists the MultiKueue check {MK_CHECK}" in mismatch.problem
    assert "spec.managedBy is not" in mismatch.problem
    # An unknown check could be a MultiKueue one as well: fail closed.
    unknown = dispatch_mode(tj, {MK_CHECK: None})
    assert unknown.problem is not None
    assert f"AdmissionCheck {MK_CHECK}: not found" in unknown.problem
    # Neither MultiKueue's nor listing a MultiKueue check: one cluster alone.
    assert dispatch_mode(tj, {"prov": ac("prov", "x/y")}) == Mode(False, (), None)
    assert dispatch_mode(tj, {}) == Mode(False, (), None)
    assert dispatch_mode(None, {}) == Mode(False, (), None)


def test_the_gate_holds_on_a_mode_problem_and_never_approves_on_the_one_cluster_path():
    tj, wl = managed(opened()), mk_workload()
    problem = dispatch_mode(tj, {MK_CHECK: None}).problem
    d = gate(tj, wl, problem=problem)
    assert (d.action, d.trainjob_patch, d.new_a) == (Action.HOLD, None, None)
    assert d.message == problem
    assert d.check_write is not None
    assert d.check_write["status"]["admissionChecks"][0]["state"] == "Pending"
    # The mismatch the other way is held too, neither raised nor approved.
    plain = opened()
    problem = dispatch_mode(plain, {MK_CHECK: ac(MK_CHECK)}).problem
    d = gate(plain, wl, problem=problem)
    assert (d.action, d.trainjob_patch, d.message) == (Action.HOLD, None, problem)
    # A TrainJob that is not dispatch's is still approved at once: the gate does not apply to it.
    stranger = managed(opened())
    stranger["metadata"]["name"] = "not-dispatch"
    stranger["spec"]["runtimePatches"] = []
    assert gate(stranger, wl, problem="x").action is Action.APPROVE


# -- the stamp: cleared on every hold of a Workload MultiKueue manages, the record of the highest A kept ------------


def test_the_admission_stamps_the_a_and_records_it_as_the_highest_ever_stamped():
    tj, wl = managed(opened()), mk_workload()
    d = gate(tj, wl)
    assert (d.action, d.new_a) == (Action.ADMIT, K)
    after = apply_json_patch(wl, d.workload_patch)
    notes = after["metadata"]["annotations"]
    assert (notes[ANNOTATION_DISPATCHED], notes[ANNOTATION_DISPATCHED_SPENT]) == (str(K), str(K))
    assert highest_stamped(after) == K


def test_a_hold_clears_the_stamp_in_a_patch_preconditioned_on_the_workload_and_keeps_the_record():
    tj, wl = managed(opened()), stamped(mk_workload(), K, K)
    d = gate(tj, wl, blockers=[Blocker("p", "Running", worker="w-1")])
    assert d.action is Action.HOLD
    assert d.workload_patch is not None
    assert d.workload_patch[:2] == [
        {"op": "test", "path": "/metadata/uid", "value": "wl-uid"},
        {"op": "replace", "path": "/metadata/resourceVersion", "value": "500"},
    ]
    after = apply_json_patch(wl, d.workload_patch)
    assert ANNOTATION_DISPATCHED not in after["metadata"]["annotations"]
    assert after["metadata"]["annotations"][ANNOTATION_DISPATCHED_SPENT] == str(K)
    # Cleared: the next hold writes nothing to the Workload.
    assert gate(tj, bump(after), blockers=[Blocker("p", "Running", worker="w-1")]).workload_patch is None


def test_clearing_a_stamp_written_without_the_record_records_it_first():
    tj, wl = managed(opened()), stamped(mk_workload(), 6, 3)  # an older agent's stamp above the record, or none
    after = apply_json_patch(wl, gate(tj, wl, problem="x").workload_patch)
    assert ANNOTATION_DISPATCHED not in after["metadata"]["annotations"]
    assert after["metadata"]["annotations"][ANNOTATION_DISPATCHED_SPENT] == "6"
    bare = stamped(mk_workload(), 6)
    after = apply_json_patch(bare, gate(tj, bare, problem="x").workload_patch)
    assert after["metadata"]["annotations"] == {ANNOTATION_DISPATCHED_SPENT: "6"}


def test_every_hold_of_a_multikueue_job_clears_the_stamp_and_no_other_hold_does():
    tj, wl = managed(opened()), stamped(mk_workload(), K, K)
    unopened = managed(opened())
    unopened["metadata"]["annotations"].pop("dispatch.phpboyscout.uk/opened")
    for d in (
        gate(tj, wl, problem="the check cannot be identified"),
        gate(tj, wl, blockers=[Blocker("", "cannot be read", worker="w-2")]),
        gate(unopened, wl),
        decide(
            workload=wl,
            check=CHECK,
            trainjob=tj,
            jobset=None,
            pods=[],
            blockers=[],
            now=NOW,
            multikueue=True,
            runtime_spec=None,
        ),
    ):
        assert d.action is Action.HOLD, d.message
        assert d.workload_patch is not None, d.message
        assert ANNOTATION_DISPATCHED not in apply_json_patch(wl, d.workload_patch)["metadata"]["annotations"]
    # One cluster alone (a stamp there is nobody's to clear), and a TrainJob the gate cannot read yet: untouched.
    assert gate(opened(), wl, blockers=[Blocker("p", "Running")], multikueue=False).workload_patch is None
    d = decide(workload=wl, check=CHECK, trainjob=None, jobset=None, pods=[], blockers=[], now=NOW, multikueue=True)
    assert (d.action, d.workload_patch) == (Action.HOLD, None)
    # An unreadable stamp is left as it is: a worker never verifies a copy under it, and it is no record to lose.
    garbled = stamped(mk_workload(), None)
    garbled["metadata"]["annotations"][ANNOTATION_DISPATCHED] = "03"
    assert gate(tj, garbled, problem="x").workload_patch is None


def test_the_deactivation_of_a_held_workload_clears_the_stamp_in_the_same_patch():
    tj = managed(opened())
    tj["status"] = {"jobsStatus": [{"name": "node", "active": 0}]}
    wl = stamped(mk_workload(), K, K)
    wl["metadata"]["annotations"][ANNOTATION_HOLD_INSTANCE] = "h-1"
    d = gate(tj, wl)
    assert d.action is Action.HOLD
    assert d.workload_patch is not None
    assert [op["op"] for op in d.workload_patch].count("test") == 1  # one precondition, one patch
    after = apply_json_patch(wl, d.workload_patch)
    assert after["spec"]["active"] is False
    assert ANNOTATION_DISPATCHED not in after["metadata"]["annotations"]
    assert after["metadata"]["annotations"][ANNOTATION_DISPATCHED_SPENT] == str(K)


# -- the bound on burned raises: a raise whose stamp never landed is reused; a stamped A never is --------------------


def raised_by(tj: dict[str, Any], wl: dict[str, Any]) -> dict[str, Any]:
    """The TrainJob once the gate's raise for ``wl`` landed (and its stamp did not)."""
    d = gate(tj, wl)
    assert d.trainjob_patch is not None
    return bump(apply_json_patch(tj, d.trainjob_patch))


def test_a_raise_whose_stamp_never_landed_is_reused_without_a_second_raise():
    tj, wl = managed(opened()), mk_workload()
    raised = raised_by(tj, wl)  # A 3 and its approval for this Workload; the stamp refused (409)
    assert (admission_count(raised), approved_admission(raised)) == (K, K)
    assert reusable_a(raised, wl) == K
    d = gate(raised, bump(wl))
    assert (d.action, d.new_a, d.trainjob_patch) == (Action.ADMIT, K, None)  # nothing to write to the TrainJob
    assert apply_json_patch(bump(wl), d.workload_patch)["metadata"]["annotations"][ANNOTATION_DISPATCHED] == str(K)
    assert d.message.startswith(f"the next dispatch starts with A {K}, raised by K = maxRestarts + 1 = {K}")


def test_an_a_once_stamped_is_never_reused_even_once_its_stamp_is_cleared():
    tj, wl = managed(opened()), mk_workload()
    raised = raised_by(tj, wl)
    d = gate(raised, wl)
    landed = bump(apply_json_patch(wl, d.workload_patch))  # stamped A 3; the Ready then refused, or it dispatched
    assert reusable_a(raised, landed) is None
    cleared = bump(apply_json_patch(landed, gate(raised, landed, problem="x").workload_patch))
    assert ANNOTATION_DISPATCHED not in cleared["metadata"]["annotations"]
    assert reusable_a(raised, cleared) is None
    again = gate(raised, cleared)
    assert (again.action, again.new_a) == (Action.ADMIT, 2 * K)


def test_a_raise_is_not_reused_for_another_workload_after_it_started_or_past_a_later_floor():
    tj, wl = managed(opened()), mk_workload()
    raised = raised_by(tj, wl)
    other = copy.deepcopy(wl)
    other["metadata"]["uid"] = "wl-uid-2"  # Kueue made a new Workload: the old one may have carried the stamp
    assert reusable_a(raised, other) is None
    assert gate(raised, other).new_a == 2 * K
    started = copy.deepcopy(raised)
    started["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = str(K)
    assert reusable_a(started, wl) is None
    floored = copy.deepcopy(raised)
    floored["metadata"]["annotations"]["dispatch.phpboyscout.uk/admission-floor"] = str(K + 1)
    assert reusable_a(floored, wl) is None
    legacy = stamped(wl, K)  # a stamp without the record (an older agent): it counts as stamped
    assert reusable_a(raised, legacy) is None
    unreadable = stamped(wl, None, None)
    unreadable["metadata"]["annotations"][ANNOTATION_DISPATCHED_SPENT] = "x"
    assert reusable_a(raised, unreadable) is None
    running = copy.deepcopy(raised)
    running["spec"]["suspend"] = False
    assert reusable_a(running, wl) is None


# A pass of the manager's gate, and what landed of its writes (each preconditioned: a refusal writes nothing).
TJ_REFUSED, STAMP_REFUSED, READY_REFUSED, DISPATCHED, HELD, NEW_WORKLOAD = range(6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(range(6)), min_size=1, max_size=40))
def test_no_stamped_a_is_ever_stamped_again_and_each_burned_raise_costs_a_landed_stamp(events):
    """A model of the manager: any interleaving of refused writes, dispatches, holds (which clear the stamp) and new
    Workloads. Every A stamped on any Workload (what a worker's copy can be verified under) is stamped once only, it
    only rises; and the raises are at most the stamps that landed plus the Workloads the job had."""
    tj, wl = managed(opened()), mk_workload()
    ever_stamped: list[int] = []
    raises = 0
    serial = 0
    for event in events:
        if event == NEW_WORKLOAD:
            serial += 1
            wl = mk_workload()
            wl["metadata"]["uid"] = f"wl-uid-{serial}"
            continue
        if event == HELD:
            d = gate(tj, wl, problem="held")
            if d.workload_patch is not None:
                wl = bump(apply_json_patch(wl, d.workload_patch))
            continue
        d = gate(tj, wl)
        assert d.action is Action.ADMIT, d.message
        if event == TJ_REFUSED:
            continue
        if d.trainjob_patch is not None:
            before = admission_count(tj)
            tj = bump(apply_json_patch(tj, d.trainjob_patch))
            raises += admission_count(tj) != before
        if event == STAMP_REFUSED:
            continue
        wl = bump(apply_json_patch(wl, d.workload_patch))
        assert d.new_a not in ever_stamped
        assert all(d.new_a > a for a in ever_stamped)
        ever_stamped.append(d.new_a)
        if event == DISPATCHED:  # the Ready landed: the dispatch ran; its manager unsuspend recorded A, then evicted
            tj["metadata"]["annotations"][ANNOTATION_ADMISSION_STARTED] = str(d.new_a)
            tj = bump(tj)
    assert raises <= len(ever_stamped) + serial + 1


# -- the shell: reconcile reads each listed check fresh, and a failed read is a reason, never a guess ---------------


class _Checks:
    """The one read ``agent.gate.reconcile._mode`` makes: a GET of an AdmissionCheck."""

    def __init__(self, found: dict[str, Any]) -> None:
        self.found, self.asked = found, []

    async def get_admission_check(self, name: str) -> dict[str, Any] | None:
        self.asked.append(name)
        value = self.found.get(name)
        if isinstance(value, Exception):
            raise value
        return value


def test_reconcile_reads_every_check_the_workload_lists_but_its_own_and_reports_a_failed_read():
    import asyncio

    from agent.gate.reconcile import _mode

    tj, wl = managed(opened()), mk_workload()
    kube = _Checks({MK_CHECK: ac(MK_CHECK)})
    assert asyncio.run(_mode(kube, wl, tj, frozenset({CHECK}))) == Mode(True, (MK_CHECK,), None)
    assert kube.asked == [MK_CHECK]
    broken = _Checks({MK_CHECK: RuntimeError("connection refused")})
    mode = asyncio.run(_mode(broken, wl, tj, frozenset({CHECK})))
    assert mode.problem is not None
    assert f"AdmissionCheck {MK_CHECK}: cannot be read: RuntimeError: connection refused" in mode.problem
    # Not the Workload's own dispatch TrainJob: nothing is read, and one cluster's mode.
    other = _Checks({})
    stranger = copy.deepcopy(tj)
    stranger["metadata"]["uid"] = "someone-else"
    assert asyncio.run(_mode(other, wl, stranger, frozenset({CHECK}))) == Mode(False)
    assert other.asked == []


# -- the other decisions of MultiKueue mode: the lost worker's quota, Start ---------------------------------------


def test_the_kept_quota_looks_at_the_workers_of_the_checks_read_fresh_and_stays_on_one_it_cannot_identify():
    """The release's look covers the MultiKueue checks identified by fresh reads; a check that cannot be read, or is
    not there (as a watch cache that misses it would have it), keeps the quota: its workers would go unread."""
    tj = managed(opened())
    assert checks_to_look_at(tj, {MK_CHECK: ac(MK_CHECK)}) == ((MK_CHECK,), None)
    for found in ({MK_CHECK: None}, {MK_CHECK: "403 Forbidden"}, {}):
        checks, problem = checks_to_look_at(tj, found)
        assert checks == ()
        assert problem is not None
        assert "never approved on the one-cluster path" in problem
    checks, problem = checks_to_look_at(tj, {MK_CHECK: ac(MK_CHECK), "other": None})
    assert problem is not None
    assert "AdmissionCheck other: not found" in problem


def test_start_decides_multikueue_by_managed_by_and_refuses_a_check_it_cannot_identify():
    read = managed(opened())
    runtime = spec(K - 1)
    assert multikueue_start_problems(read, {MK_CHECK: ac(MK_CHECK)}, runtime, min_dispatches=1) == []
    for found, says in (
        ({MK_CHECK: None}, f"AdmissionCheck {MK_CHECK}: not found"),
        ({MK_CHECK: "403 Forbidden"}, f"AdmissionCheck {MK_CHECK}: cannot be read: 403 Forbidden"),
    ):
        refused = multikueue_start_problems(read, found, runtime, min_dispatches=1)
        assert len(refused) == 1
        assert says in refused[0]
        assert "not whether MultiKueue copies this TrainJob" in refused[0]
    # Not MultiKueue's by managedBy, in a queue with a MultiKueue check: the gate would hold it forever.
    mismatch = multikueue_start_problems(opened(), {MK_CHECK: ac(MK_CHECK)}, runtime, min_dispatches=1)
    assert len(mismatch) == 1
    assert f"lists the MultiKueue check {MK_CHECK}, but spec.managedBy is not" in mismatch[0]
    # One cluster's queue: nothing of MultiKueue's to check.
    assert multikueue_start_problems(opened(), {CHECK + "-x": ac(CHECK + "-x", "x/y")}, runtime, min_dispatches=1) == []
