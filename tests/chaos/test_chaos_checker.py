"""The chaos campaign's independent checker, on hand-made run folders: one test per kind of violation, and the
clean histories it must pass."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from chaos import checker
from chaos.checker import check_run, explain, load_jsonl, load_ledger

ROOT = Path(__file__).resolve().parents[2]
JOB_ID = "01ARZ3NDEKTSV4RRFFQ69G5FAV"
N = 3
NAME = f"dj-{JOB_ID.lower()}-s{N}"
NS = "chaos"
JOB = f"{NS}/{NAME}"
T = 1_764_662_400.0  # the campaign's clock, seconds since the epoch


# -- building a run folder -----------------------------------------------------------------------------------


def write_life(
    run: Path,
    life: str,
    start: float,
    end: float,
    a: int,
    j: int = 0,
    *,
    term: float | None = None,
    rc: int | None = None,
    epoch: str | None = None,
    attempt: str | None = None,
    name: str = NAME,
    node: str = "node-1",
    cut: bool = True,
    step: float = 0.2,
) -> None:
    """A life's ledger file: start, a heartbeat every `step` until `end`, SIGTERM at `term`, exit `rc` at `end`;
    and, as a killed process leaves it, a last line cut off mid-write (a time far later, to show it is ignored)."""
    epoch = str(N * 10**6 + a + j) if epoch is None else epoch
    attempt = f"{JOB_ID}.{N}.0.{a}.{j}" if attempt is None else attempt
    lines = [
        f"start t={start:.6f} ns={NS} job={name} pod=uid-{life} podname={name}-node-0-0-{life} node={node} "
        f"epoch={epoch} attempt={attempt} life={life}"
    ]
    beats = [start + k * step for k in range(1, int((end - start) / step + 1))]
    for t in (t for t in beats if t < end - 1e-6):
        lines.append(f"hb t={t:.6f} life={life}")
        if term is not None and t - step < term <= t:
            lines.append(f"term t={term:.6f} life={life}")  # the signal's time, written after a heartbeat
    lines.append(f"exit t={end:.6f} life={life} rc={rc}" if rc is not None else f"hb t={end:.6f} life={life}")
    text = "\n".join(lines) + "\n"
    if cut:
        text += f"hb t={end + 500:.6f} li"
    folder = run / "ledger" / NS / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{life}.log").write_text(text)


def call(op: str, t0: float, t1: float | None = None, *, ok: bool = True, cut: bool = False, **extra: Any) -> dict:
    error = extra.pop("error", None if ok else ("cut" if cut else "conflict"))
    return {"t0": T + t0, "t1": T + (t0 + 0.1 if t1 is None else t1), "op": op, "namespace": NS, "job": NAME,
            "uid": "uid-tj", "ok": ok, "error": error, "cut": cut, **extra}  # fmt: skip


def status(t0: float, *, phase: str = "Running", ceased: bool = False, final: bool = False) -> dict:
    return call("final-status" if final else "status", t0, phase=phase, ceased=ceased, ceasedReason="test")


def write_calls(run: Path, *calls: dict) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
    if not (run / "observed.jsonl").exists():
        (run / "observed.jsonl").write_text("")  # the campaign's watch ran and saw nothing


def admitted(t: float, *, uid: str = "uid-wl", since: float | None = None, on: bool = True) -> dict:
    """observed.jsonl: the campaign's watch received, at T + t, the job's Workload Admitted (or not); `since`: from
    a list after a broken watch, last live at T + since."""
    record = {"t": T + t, "kind": "workload", "namespace": NS, "name": f"trainjob-{NAME}", "uid": uid, "job": NAME,
              "event": "LISTED" if since is not None else "MODIFIED", "admission": on,
              "conditions": {"QuotaReserved": "True" if on else "False", "Admitted": "True" if on else "False"},
              "admitted_by": ["kueue-admission"]}  # fmt: skip
    return {**record, "since": T + since} if since is not None else record


def pod(t: float, phase: str, *, uid: str = "uid-pod") -> dict:
    return {"t": T + t, "kind": "pod", "namespace": NS, "name": f"{NAME}-node-0-0-x", "uid": uid, "job": NAME,
            "event": "MODIFIED", "phase": phase, "node": "node-1", "deleting": False}  # fmt: skip


def probe(sent: float, t: float) -> dict:
    return {"t": T + t, "kind": "probe", "sent": T + sent}


def write_observed(run: Path, *records: dict) -> None:
    run.mkdir(parents=True, exist_ok=True)
    (run / "observed.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def write_schedule(run: Path, *entries: dict) -> None:
    (run / "schedule.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))


def rules(run: Path) -> list[int]:
    return [v.rule for v in check_run(run).violations]


def the_one(run: Path, rule: int) -> checker.Violation:
    violations = check_run(run).violations
    assert [v.rule for v in violations] == [rule], [v.message for v in violations]
    return violations[0]


# -- the checker stands alone --------------------------------------------------------------------------------


def test_the_checker_imports_the_standard_library_only():
    tree = ast.parse((ROOT / "chaos" / "checker.py").read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import"
            imported.add(node.module.split(".")[0])
    assert imported
    assert imported <= sys.stdlib_module_names, imported - sys.stdlib_module_names


# -- reading the records -------------------------------------------------------------------------------------


def test_a_cut_off_last_line_is_ignored(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 2, a=1, rc=0)
    (life,) = load_ledger(tmp_path / "ledger")
    assert (life.start, life.last) == (T + 1, T + 2)  # not the cut line's T + 502
    assert (life.namespace, life.job, life.life, life.r, life.a, life.j) == (NS, NAME, "aa", 1, 1, 0)
    assert life.exit_rc == 0
    assert life.lines == 6
    assert life.max_gap == pytest.approx(0.2)


def test_a_file_without_a_complete_start_line_is_a_note_not_a_life(tmp_path):
    folder = tmp_path / "ledger" / NS / NAME
    folder.mkdir(parents=True)
    (folder / "bb.log").write_text(f"start t={T} ns={NS} job={NAME} pod=x")
    write_calls(tmp_path, call("open", 0))
    report = check_run(tmp_path)
    assert report.lives == 0
    assert any("bb.log" in note and "no complete start line" in note for note in report.notes)


def test_load_jsonl_skips_a_cut_off_last_line_and_refuses_a_bad_one(tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"a": 1}\n\n{"a": 2}\n{"a": ')
    assert load_jsonl(path) == [{"a": 1}, {"a": 2}]
    path.write_text('{"a": 1}\nnot json\n{"a": 2}\n')
    with pytest.raises(ValueError, match=":2:"):
        load_jsonl(path)
    assert load_jsonl(tmp_path / "missing.jsonl") == []


def test_an_empty_run_folder_passes(tmp_path):
    report = check_run(tmp_path)
    assert report.ok
    assert (report.jobs, report.lives, report.max_gap) == (0, 0, 0.0)


def test_max_gap_and_heartbeat_make_the_resolution(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 3, a=1, step=0.5)
    write_life(tmp_path, "bb", T + 10, T + 12, a=2, step=1.25)
    (tmp_path / "campaign.json").write_text(json.dumps({"seed": 1, "heartbeat_seconds": 0.25}))
    write_calls(tmp_path, call("open", 0))
    report = check_run(tmp_path)
    assert report.ok, report.violations
    assert report.max_gap == pytest.approx(1.25)
    assert report.resolution == pytest.approx(1.5)
    assert "1.500 s" in checker.summarize(report)


# -- rule 1 --------------------------------------------------------------------------------------------------


def test_two_lives_sharing_r(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, j=1, rc=1)
    write_life(tmp_path, "bb", T + 8, T + 12, a=2, j=0)  # R 2 again, another token
    write_calls(tmp_path, call("open", 0))
    v = the_one(tmp_path, 1)
    assert "share the R 2" in v.message
    assert v.lives == ("aa", "bb")
    assert v.at == T + 8


def test_two_lives_sharing_a_token(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, rc=143)
    write_life(tmp_path, "bb", T + 8, T + 12, a=1)
    write_calls(tmp_path, call("open", 0))
    messages = [v.message for v in check_run(tmp_path).violations]
    assert rules(tmp_path) == [1, 1]
    assert any(f"share the attempt token {JOB_ID}.{N}.0.1.0" in m for m in messages)


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"epoch": f"{N * 10**6 + 5}"}, "R 5 is not A + J = 1 + 0"),
        ({"attempt": f"{JOB_ID}.{N + 1}.0.1.0", "epoch": f"{(N + 1) * 10**6 + 1}"}, "is not the job name's"),
        ({"attempt": f"{'01ARZ3NDEKTSV4RRFFQ69G5FAW'}.{N}.0.1.0"}, "is not the job name's"),
        ({"epoch": f"{N * 10**6}"}, "is not G*10^12"),
        ({"epoch": f"0{N * 10**6 + 1}"}, "is not G*10^12"),
        ({"attempt": f"{JOB_ID}.{N}.0.1"}, "is not <JobID>"),
        ({"attempt": f"{JOB_ID.lower()}.{N}.0.1.0"}, "is not <JobID>"),
        ({"attempt": f"{JOB_ID}.{N}.0.0.1"}, "A = 0"),
        ({"name": "dj-not-a-ulid-s3"}, "is not dj-<JobID lowercased>-s<N>"),
    ],
)
def test_a_malformed_or_foreign_identity(tmp_path, kw, says):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, **kw)
    write_calls(tmp_path, {**call("open", 0), "job": kw.get("name", NAME)})
    v = the_one(tmp_path, 1)
    assert says in v.message
    assert v.lives == ("aa",)


# -- rule 2 --------------------------------------------------------------------------------------------------


def test_r_not_rising(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=3, rc=143)
    write_life(tmp_path, "bb", T + 8, T + 12, a=2)
    write_calls(tmp_path, call("open", 0))
    v = the_one(tmp_path, 2)
    assert v.lives == ("aa", "bb")
    assert "(R 2)" in v.message
    assert "higher R 3" in v.message


# -- rule 3 --------------------------------------------------------------------------------------------------


def test_overlap(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 9, a=1, term=T + 5, rc=143)
    write_life(tmp_path, "bb", T + 8, T + 12, a=2)
    write_calls(tmp_path, call("open", 0))
    v = the_one(tmp_path, 3)
    assert v.lives == ("aa", "bb")
    assert v.at == T + 8
    assert "1.000 s later" in v.message


def test_two_copies_of_a_job_on_two_workers_overlap(tmp_path):
    """Across clusters the ledger is one: a job's executions on every worker are judged together."""
    write_life(tmp_path, "aa", T + 1, T + 9, a=4, node="chaos-mk-worker-1")
    write_life(tmp_path, "bb", T + 8, T + 12, a=8, node="chaos-mk-worker-2")
    write_calls(tmp_path, call("open", 0))
    assert the_one(tmp_path, 3).lives == ("aa", "bb")


@pytest.mark.parametrize(("start_b", "overlap"), [(9.0, True), (9.001, False)])
def test_overlap_is_a_start_at_or_before_the_last_line(tmp_path, start_b, overlap):
    write_life(tmp_path, "aa", T + 1, T + 9, a=1, rc=143)
    write_life(tmp_path, "bb", T + start_b, T + 12, a=2)
    write_calls(tmp_path, call("open", 0))
    assert rules(tmp_path) == ([3] if overlap else [])


def test_overlap_of_two_lives_that_started_at_once(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1)
    write_life(tmp_path, "bb", T + 1, T + 5, a=1, j=1)
    write_calls(tmp_path, call("open", 0))
    assert rules(tmp_path) == [3]


# -- rule 4 --------------------------------------------------------------------------------------------------


def test_start_before_open(tmp_path):
    write_life(tmp_path, "aa", T + 5, T + 9, a=1)
    write_calls(tmp_path, call("start", 0), call("open", 10))
    v = the_one(tmp_path, 4)
    assert "before the first Open" in v.message


def test_a_life_with_no_open_at_all(tmp_path):
    write_life(tmp_path, "aa", T + 5, T + 9, a=1)
    write_calls(tmp_path, call("start", 0), call("open", 1, ok=False, error="rejected"))
    v = the_one(tmp_path, 4)
    assert "no Open call may have opened the job" in v.message


def test_start_while_held(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 6, a=1, term=T + 3, rc=143)
    write_life(tmp_path, "bb", T + 12, T + 15, a=2)
    write_calls(tmp_path, call("open", 0), call("hold", 2, 2.5), call("release", 20))
    v = the_one(tmp_path, 4)
    assert v.lives == ("bb",)
    assert "while held" in v.message


def test_a_hold_not_known_to_have_landed_holds_nothing(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 6, a=1, term=T + 3, rc=143)
    write_life(tmp_path, "bb", T + 12, T + 15, a=2)
    write_calls(tmp_path, call("open", 0), call("hold", 2, 2.5, ok=False, cut=True))
    assert check_run(tmp_path).ok


def test_start_after_stop(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 6, a=1, term=T + 3, rc=143)
    write_life(tmp_path, "bb", T + 12, T + 15, a=2)
    write_calls(tmp_path, call("open", 0), call("stop", 2, 2.5))
    v = the_one(tmp_path, 4)
    assert v.lives == ("bb",)
    assert "after stop" in v.message


def test_a_new_admission_while_held_is_a_violation_even_with_status_reads(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 6, a=1, term=T + 3, rc=143)
    write_life(tmp_path, "bb", T + 12, T + 15, a=2)  # A rose while held: a new execution
    write_calls(tmp_path, call("open", 0), status(1.5), call("hold", 2, 2.5), {**status(3), "a": 1})
    write_observed(tmp_path, admitted(0.5), admitted(4, on=False), admitted(11))
    assert the_one(tmp_path, 4).lives == ("bb",)


@pytest.mark.parametrize("op", ["hold", "stop"])
def test_a_late_process_of_the_execution_admitted_before_is_a_note_not_a_violation(tmp_path, op):
    """Its container was being created when the Hold or Stop landed: it comes up just after the call returned, and
    is stopped at once. An execution starts at its admission, not at its first line, and the campaign's watch saw
    the admission before the call: this is the same execution, not a new one."""
    write_life(tmp_path, "aa", T + 3, T + 7, a=1, term=T + 3.01, rc=143)
    write_calls(tmp_path, call("open", 0), call(op, 2, 2.5))
    write_observed(tmp_path, admitted(1.5))
    report = check_run(tmp_path)
    assert report.ok, report.violations
    assert any("came up at" in n and "may have begun before the call landed" in n for n in report.notes)


def test_an_admission_during_a_hold_is_flagged_though_a_later_status_shows_its_a(tmp_path):
    """A wrong admission while held, before the first Status read after the Hold: that read already shows the
    raised A, which the checker once took for the A in force at the Hold. The watch saw the admission after the
    Hold returned, beyond its delay: a new execution while held."""
    write_life(tmp_path, "aa", T + 1, T + 3, a=1, term=T + 2.6, rc=143)
    write_life(tmp_path, "bb", T + 7, T + 12, a=2)
    write_calls(tmp_path, call("open", 0), call("hold", 2, 2.5), {**status(8, phase="Held"), "a": 2})
    write_observed(tmp_path, admitted(0.5), admitted(3, on=False), admitted(6))
    v = the_one(tmp_path, 4)
    assert v.lives == ("bb",)
    assert "while held" in v.message
    assert "may have happened by 08:00:05.000" in v.message  # seen at 6.0, less the watch delay of 1 s


@pytest.mark.parametrize("op", ["hold", "stop"])
def test_a_jobset_restart_after_a_hold_or_stop_is_flagged(tmp_path, op):
    """The same A, J + 1, after the call returned: JobSet restarted the job after the Hold or Stop had ended its
    execution (its predecessor's last line came after the call), whatever A Status reports."""
    write_life(tmp_path, "aa", T + 1, T + 3, a=1, term=T + 2.6, rc=143)
    write_life(tmp_path, "bb", T + 3.5, T + 6, a=1, j=1)
    write_calls(tmp_path, call("open", 0), call(op, 2, 2.5), {**status(5), "a": 1})
    write_observed(tmp_path, admitted(0.5))
    v = the_one(tmp_path, 4)
    assert v.lives == ("bb",)
    assert "(A=1, J=1)" in v.message
    assert "its predecessor (A=1, J=0) life aa last wrote at 08:00:03.000" in v.message


@pytest.mark.parametrize("op", ["hold", "stop"])
def test_a_jobset_restart_whose_predecessor_failed_before_the_call_is_a_note(tmp_path, op):
    """The rank failed before the Hold or Stop was sent, so JobSet's restart (J + 1) was under way when it landed:
    its process may come up after the call returned."""
    write_life(tmp_path, "aa", T + 1, T + 1.8, a=1, rc=1)
    write_life(tmp_path, "bb", T + 2.7, T + 4, a=1, j=1, term=T + 2.8, rc=143)
    write_calls(tmp_path, call("open", 0), call(op, 2, 2.5))
    write_observed(tmp_path, admitted(0.5), pod(1.9, "Failed"))
    report = check_run(tmp_path)
    assert report.ok, report.violations
    assert any("life bb (A=1, J=1)" in n for n in report.notes), report.notes


def test_a_jobset_restart_without_a_predecessor_in_the_ledger_is_excused_by_a_pod_seen_failed(tmp_path):
    write_life(tmp_path, "bb", T + 2.7, T + 4, a=1, j=1, term=T + 2.8, rc=143)
    write_calls(tmp_path, call("open", 0), call("hold", 2, 2.5))
    write_observed(tmp_path, admitted(0.5), pod(1.9, "Failed"))
    assert check_run(tmp_path).ok
    write_observed(tmp_path, admitted(0.5), pod(4.0, "Failed"))  # failed only after the Hold returned
    assert the_one(tmp_path, 4).lives == ("bb",)


def test_after_a_stop_one_admission_per_stop_is_no_longer_allowed(tmp_path):
    """The campaign's case: Status read A=0 (queued), the job was admitted (A=1) and its pod created, then Stop
    returned, and the container came up 0.3 s later; no Status after the Stop answered (the TrainJob was gone).
    The watch saw the admission before the Stop: noted. A second admission after the Stop, which no read would
    show, is seen by the watch and flagged."""
    write_life(tmp_path, "aa", T + 2.8, T + 3, a=1, term=T + 2.9, rc=143)
    write_calls(tmp_path, call("open", 0), {**status(1), "a": 0}, call("stop", 2, 2.5))
    write_observed(tmp_path, admitted(1.53))  # 0.47 s before the Stop was sent
    report = check_run(tmp_path)
    assert report.ok, report.violations
    assert any("came up at" in n for n in report.notes), report.notes
    write_life(tmp_path, "bb", T + 8, T + 10, a=2)
    write_observed(tmp_path, admitted(1.53), admitted(3.5, on=False), admitted(7.5))
    assert the_one(tmp_path, 4).lives == ("bb",)


def test_after_a_stop_a_wrong_admission_is_flagged_though_one_more_a_was_once_allowed(tmp_path):
    """Status read A=1 before the Stop and none answered after it. The checker once allowed one more A after every
    Stop (an admission that may have been in flight), so one wrong admission per Stop went unseen. The watch saw
    this one after the Stop returned, beyond its delay: flagged."""
    write_life(tmp_path, "aa", T + 0.6, T + 2.6, a=1, term=T + 2.5, rc=143)
    write_life(tmp_path, "bb", T + 4, T + 4.5, a=2, term=T + 4.1, rc=143)
    write_calls(tmp_path, call("open", 0), {**status(1), "a": 1}, call("stop", 2, 2.5))
    write_observed(tmp_path, admitted(0.5), admitted(2.7, on=False), admitted(3.6))
    v = the_one(tmp_path, 4)
    assert v.lives == ("bb",)
    assert "after stop" in v.message


def test_after_a_stop_a_late_process_is_excused_only_within_the_stop_latency(tmp_path):
    bound = checker.STOP_LATENCY_SECONDS
    write_life(tmp_path, "aa", T + 2.5 + bound, T + 2.5 + bound + 1, a=1)
    write_calls(tmp_path, call("open", 0), call("stop", 2, 2.5))
    write_observed(tmp_path, admitted(1.5))
    assert check_run(tmp_path).ok
    write_life(tmp_path, "aa", T + 2.6 + bound, T + 2.6 + bound + 1, a=1)
    v = the_one(tmp_path, 4)
    assert f"the bound is {bound:g} s" in v.message


def test_after_a_hold_an_admission_seen_later_than_its_delay_is_a_new_execution(tmp_path):
    """A Hold keeps the TrainJob and its admission: a process that comes up after it is excused only by an
    admission the watch saw before the Hold returned, or within the watch's delay after it."""
    write_life(tmp_path, "aa", T + 4, T + 7, a=1, term=T + 4.1, rc=143)
    write_calls(tmp_path, call("open", 0), {**status(1), "a": 0}, call("hold", 2, 2.5))
    write_observed(tmp_path, admitted(3.5))  # may have happened at 2.5: when the Hold returned
    assert check_run(tmp_path).ok
    write_observed(tmp_path, admitted(3.6))
    assert the_one(tmp_path, 4).lives == ("aa",)
    write_observed(tmp_path, probe(0, 0.05), admitted(2.6))  # a measured delay of 0.05 s
    assert the_one(tmp_path, 4).lives == ("aa",)


def test_an_admission_found_by_a_list_after_a_broken_watch_may_be_as_old_as_the_break(tmp_path):
    write_life(tmp_path, "aa", T + 4, T + 7, a=1, term=T + 4.1, rc=143)
    write_calls(tmp_path, call("open", 0), call("hold", 2, 2.5))
    write_observed(tmp_path, admitted(10, since=1.5))  # the watch broke at 1.5, the list came at 10
    assert check_run(tmp_path).ok
    write_observed(tmp_path, admitted(10, since=3.6))  # broken only after the Hold returned
    assert the_one(tmp_path, 4).lives == ("aa",)


def test_a_late_process_with_no_admission_seen_is_a_violation(tmp_path):
    write_life(tmp_path, "aa", T + 3, T + 7, a=1, term=T + 3.01, rc=143)
    write_calls(tmp_path, call("open", 0), {**status(4), "a": 1}, call("stop", 2, 2.5))  # Status says A=1: no excuse
    assert the_one(tmp_path, 4).lives == ("aa",)


def test_the_watch_delay_is_the_largest_a_probe_measured():
    records = [probe(0, 0.02), probe(1, 1.3), probe(2, 2.01), {"t": T, "kind": "watch", "event": "broken"}]
    observed = checker.observe(records)
    assert (observed.delay, observed.probes) == (pytest.approx(0.3), 3)
    assert checker.observe([]).delay == checker.WATCH_DELAY_SECONDS


def test_each_clusters_watch_has_its_own_delay():
    """The MultiKueue arm watches each worker: a stalled API server on one widens only that worker's resolution."""
    on = lambda r, c: {**r, "cluster": c}  # noqa: E731
    records = [on(probe(0, 10), "worker-1"), on(probe(1, 1.2), "worker-2"),
               on(admitted(5), "worker-2"), on(admitted(6, uid="uid-wl-2"), "worker-1")]  # fmt: skip
    observed = checker.observe(records)
    assert observed.delay == pytest.approx(10)
    assert [(round(s.lo - T, 3), s.hi - T) for s in observed.admissions[JOB]] == [(4.8, 5), (-4.0, 6)]


def test_a_workers_copy_admitted_before_its_trainjob_exists_is_the_jobs_admission():
    """On a worker, MultiKueue's copy of the Workload is admitted before the TrainJob that owns it is created
    there: its first records name no job; the uid, once a record names its job, says whose they were."""
    early = {**admitted(1), "job": ""}
    later = {**admitted(3), "event": "MODIFIED"}
    observed = checker.observe([early, later], delay=0.5)
    assert [(s.lo - T, s.hi - T) for s in observed.admissions[JOB]] == [(0.5, 1)]


def test_observe_counts_transitions_not_records():
    records = [admitted(1), admitted(2), admitted(3, on=False), admitted(4), admitted(5, uid="uid-other"),
               pod(1, "Running"), pod(2, "Failed"), pod(3, "Failed")]  # fmt: skip
    observed = checker.observe(records, delay=0.5)
    assert [(s.lo - T, s.hi - T) for s in observed.admissions[JOB]] == [(0.5, 1), (3.5, 4), (4.5, 5)]
    assert [(s.lo - T, s.hi - T) for s in observed.failures[JOB]] == [(1.5, 2)]


# -- rule 5 --------------------------------------------------------------------------------------------------


def test_ceased_contradicted_by_a_later_heartbeat(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 20, a=1)
    write_calls(tmp_path, call("open", 0), status(10, ceased=True))
    v = the_one(tmp_path, 5)
    assert "still alive" in v.message
    assert v.at == pytest.approx(T + 10.1)


def test_ceased_then_a_start_without_a_dispatch_call(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, rc=1)
    write_life(tmp_path, "bb", T + 12, T + 15, a=1, j=1)  # JobSet restarted it by itself
    write_calls(tmp_path, call("open", 0), status(8, ceased=True))
    v = the_one(tmp_path, 5)
    assert v.lives == ("bb",)
    assert "with no Open or Release since" in v.message


def test_ceased_contradicted_by_a_life_alive_throughout_the_status_read(tmp_path):
    # The Release that started it overlaps the Status call, but the life ran before and after that call.
    write_life(tmp_path, "aa", T + 1, T + 20, a=1)
    write_calls(tmp_path, call("open", 0), call("release", 0.5, 12), status(10, ceased=True))
    v = the_one(tmp_path, 5)
    assert "still alive" in v.message


def test_a_release_answered_after_a_ceased_status_read_may_have_started_the_next_life(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, term=T + 3, rc=143)
    write_life(tmp_path, "bb", T + 12, T + 20, a=2)
    write_calls(
        tmp_path, call("open", 0), call("hold", 2), call("release", 7, 11), status(8, phase="Held", ceased=True)
    )
    assert check_run(tmp_path).ok


def test_a_release_that_may_have_landed_after_the_hold_leaves_no_certain_hold(tmp_path):
    write_life(tmp_path, "aa", T + 5, T + 9, a=1)
    write_calls(tmp_path, call("open", 0), call("hold", 2, 3), call("release", 2.5, 2.6))
    assert check_run(tmp_path).ok


def test_final_complete_without_exit_0(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, rc=143)
    write_calls(tmp_path, call("open", 0), status(30, phase="Complete", ceased=True, final=True))
    v = the_one(tmp_path, 5)
    assert "no life of the job exited with rc=0" in v.message


def test_exit_0_but_final_status_not_complete(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, rc=0)
    write_calls(tmp_path, call("open", 0), status(30, phase="Running", ceased=False, final=True))
    v = the_one(tmp_path, 5)
    assert "exited with rc=0" in v.message
    assert "phase 'Running'" in v.message


def test_exit_0_then_held_may_say_held(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, rc=0)
    write_calls(tmp_path, call("open", 0), call("hold", 6), status(30, phase="Held", ceased=True, final=True))
    assert check_run(tmp_path).ok


def test_complete_but_not_ceased(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, rc=0)
    write_calls(tmp_path, call("open", 0), status(30, phase="Complete", ceased=False, final=True))
    v = the_one(tmp_path, 5)
    assert "ceased=False" in v.message


def test_no_final_status_is_a_note(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, rc=0)
    write_calls(tmp_path, call("open", 0))
    report = check_run(tmp_path)
    assert report.ok
    assert report.notes == (f"{JOB}: no final-status call: its final Status is not judged",)


# -- clean histories -----------------------------------------------------------------------------------------


def test_preempted_then_readmitted_after_the_old_life_ended(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 9, a=1, term=T + 5, rc=143, node="node-1")
    write_life(tmp_path, "bb", T + 12, T + 20, a=2, rc=0, node="node-2")
    write_calls(
        tmp_path, call("start", -1), call("open", 0), status(10), status(40, phase="Complete", ceased=True, final=True)
    )
    report = check_run(tmp_path)
    assert report.ok, report.violations
    assert (report.jobs, report.lives) == (1, 2)


def test_a_jobset_restart_raises_j(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 4, a=1, j=0, rc=1)
    write_life(tmp_path, "bb", T + 5, T + 9, a=1, j=1, rc=0)
    write_calls(tmp_path, call("open", 0), status(40, phase="Complete", ceased=True, final=True))
    assert check_run(tmp_path).ok


def test_hold_then_release_then_a_new_life(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 8, a=1, term=T + 3.5, rc=143)
    write_life(tmp_path, "bb", T + 12, T + 20, a=2, rc=0)
    write_calls(
        tmp_path,
        call("open", 0),
        call("hold", 3, 3.2),
        status(9, phase="Held", ceased=True),
        call("release", 10),
        status(40, phase="Complete", ceased=True, final=True),
    )
    assert check_run(tmp_path).ok, check_run(tmp_path).violations


def test_a_cut_open_followed_by_a_start(tmp_path):
    write_life(tmp_path, "aa", T + 5, T + 9, a=1, rc=0)
    write_calls(
        tmp_path, call("open", 0, 30, ok=False, cut=True), status(40, phase="Complete", ceased=True, final=True)
    )
    assert check_run(tmp_path).ok


def test_an_open_that_answered_after_the_start_may_have_taken_effect_at_its_t0(tmp_path):
    write_life(tmp_path, "aa", T + 5, T + 9, a=1, rc=0)
    write_calls(tmp_path, call("open", 0, 30), status(40, phase="Complete", ceased=True, final=True))
    assert check_run(tmp_path).ok


def test_ceased_then_release_then_a_new_life(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 5, a=1, term=T + 3, rc=143)
    write_life(tmp_path, "bb", T + 12, T + 20, a=2)
    write_calls(tmp_path, call("open", 0), call("hold", 2), status(8, phase="Held", ceased=True), call("release", 10))
    assert check_run(tmp_path).ok


# -- for a human ---------------------------------------------------------------------------------------------


def test_explain_names_the_two_lives_and_the_faults_around(tmp_path):
    write_life(tmp_path, "aa", T + 1, T + 9, a=1, term=T + 5, rc=143, node="node-1")
    write_life(tmp_path, "bb", T + 8, T + 12, a=2, node="node-2")
    write_calls(tmp_path, call("open", 0))
    schedule = [
        {"t": T - 500, "fault": "etcd-pause", "target": "etcd", "action": "inject", "detail": ""},
        {"t": T - 300, "fault": "webhook-stop", "target": "webhook-0", "action": "inject", "detail": ""},
        {"t": T - 200, "fault": "webhook-stop", "target": "webhook-0", "action": "heal", "detail": ""},
        {"t": T + 4, "fault": "kubelet-stop", "target": "node-1", "action": "inject", "detail": "SIGSTOP"},
        {"t": T + 30, "fault": "kubelet-stop", "target": "node-1", "action": "heal", "detail": ""},
        {"t": T + 200, "fault": "containerd-kill", "target": "node-2", "action": "inject", "detail": ""},
    ]
    text = explain(check_run(tmp_path), schedule, window=60)
    assert f"rule 3 (no two executions at once), job {JOB}" in text
    for life, node in (("aa", "node-1"), ("bb", "node-2")):
        assert f"life {life}: pod {NAME}-node-0-0-{life} (uid uid-{life}) on node {node}" in text
    assert f"epoch {N * 10**6 + 2} (R 2), attempt {JOB_ID}.{N}.0.2.0" in text
    lines = text.splitlines()
    assert (
        "-4.0 s  08:00:04.000  inject kubelet-stop on node-1 (SIGSTOP)"
        in lines[lines.index("  nemesis within 60 s:") + 1]
    )
    assert "+22.0 s  08:00:30.000  heal kubelet-stop on node-1" in lines[lines.index("  nemesis within 60 s:") + 2]
    assert "containerd-kill" not in text  # outside the window
    assert "inject etcd-pause on etcd" in text  # still in force
    assert "webhook-stop" not in text  # healed long before


def test_explain_says_when_no_fault_is_near(tmp_path):
    write_life(tmp_path, "aa", T + 5, T + 9, a=1)
    write_calls(tmp_path, call("open", 10))
    assert "no nemesis action within 60 s" in explain(check_run(tmp_path), [])


# -- the command line ----------------------------------------------------------------------------------------


def test_main_exit_codes(tmp_path, capsys):
    clean, broken = tmp_path / "clean", tmp_path / "broken"
    write_life(clean, "aa", T + 1, T + 5, a=1, rc=0)
    write_calls(clean, call("open", 0), status(40, phase="Complete", ceased=True, final=True))
    assert checker.main([str(clean)]) == 0
    assert "violations 0" in capsys.readouterr().out
    write_life(broken, "aa", T + 1, T + 9, a=1)
    write_life(broken, "bb", T + 8, T + 12, a=2)
    write_calls(broken, call("open", 0))
    write_schedule(broken, {"t": T + 7, "fault": "kubelet-kill", "target": "node-1", "action": "inject", "detail": ""})
    assert checker.main([str(broken)]) == 1
    out = capsys.readouterr().out
    assert "rule 3 (no two executions at once): 1" in out
    assert "inject kubelet-kill on node-1" in out
    (broken / "calls.jsonl").write_text("garbage\n")
    assert checker.main([str(broken)]) == 2
    with pytest.raises(SystemExit) as exc:
        checker.main([str(tmp_path / "missing")])
    assert exc.value.code == 2


def test_python_m_chaos_checker(tmp_path):
    write_life(tmp_path, "aa", T + 5, T + 9, a=1)
    write_calls(tmp_path, call("open", 10))
    done = subprocess.run(
        [sys.executable, "-m", "chaos.checker", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 1, done.stderr
    assert "rule 4 (nothing starts before Open, while held or after Stop): 1" in done.stdout


def _lives(run: Path) -> list[checker.Life]:
    return load_ledger(run / "ledger")


@pytest.mark.parametrize(
    ("rule", "lives", "calls"),
    [
        (1, [("aa", 1, 5, 1, 0, 143), ("bb", 8, 12, 1, 0, None)], [call("open", 0)]),
        (2, [("aa", 1, 5, 3, 0, 143), ("bb", 8, 12, 2, 0, None)], [call("open", 0)]),
        (3, [("aa", 1, 9, 1, 0, None), ("bb", 8, 12, 2, 0, None)], [call("open", 0)]),
        (4, [("aa", 5, 9, 1, 0, None)], [call("open", 10)]),
        (5, [("aa", 1, 20, 1, 0, None)], [call("open", 0), status(10, ceased=True)]),
    ],
)
def test_check_flags_each_rule_by_that_rule(tmp_path, rule, lives, calls):
    for life, start, end, a, j, rc in lives:
        write_life(tmp_path, life, T + start, T + end, a=a, j=j, rc=rc)
    report = checker.check(_lives(tmp_path), calls, observed=checker.observe([admitted(0.5)]))
    assert {v.rule for v in report.violations} == {rule}, [v.message for v in report.violations]


def test_preflight_is_no_job_and_a_record_without_times_is_a_note():
    report = checker.check(
        [],
        [
            {"op": "preflight", "t0": T, "t1": T + 1, "namespace": NS, "job": None, "ok": True},
            {"op": "open", "job": NAME},
        ],
    )
    assert report.ok
    assert report.jobs == 0
    assert report.notes == ("1 call record(s) without op, t0 or t1: ignored",)
