"""Upgrading from the previous release while jobs run, are held and are being re-admitted, then rolling back (tier C).

The previous release is the git tag ``PREVIOUS_TAG`` (its commit ``PREVIOUS_COMMIT``): its artifacts are built from that commit, by that tree's
own scripts/release (``previous_release``), and the current ones are the session's (``released``,
tests/charts/conftest.py). Both are installed from their artifacts alone: the packaged chart, and the image imported
into the real node's containerd from its OCI archive under the name and digest the chart pins.

On the previous release, three dispatch jobs on the real node: RUN runs; HELD is held (Hold, as the supervisor API
writes it); READMIT is being re-admitted (its Workload deactivated and reactivated, while its user program ignores
SIGTERM, so the old pod stays Terminating and the gate must keep the readmission waiting until it stopped). Then
docs/install.md's ``helm upgrade`` to the current release, and ``helm rollback`` to the previous one; after each,
from the cluster's objects and the pods alone (never dispatch's answers): RUN's pod is the same container, never
restarted; the hold is kept and Release runs the job again; READMIT's new execution started only once its old pod
had stopped; a readmission after the rollback goes through the gate again (A rises). Over the whole test, for every
job: A rose only while suspended and with each admission, no two executions shared an identity (R = A + J strictly
rose), and each execution's program saw the DISPATCH_EPOCH and DISPATCH_ATTEMPT of its own A and J. Then the jobs
stop and ``helm uninstall`` leaves nothing of dispatch's but what docs/install.md says stays.

Hold and Release are written as the supervisor API writes them (harness/jobs.py ``write_as_the_api``, plans from
agent/domain/operations.py): the plans are the same in both releases.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from ulid import ULID

from agent.domain.operations import Hold, plan_hold, plan_open, plan_release
from charts.readme import COMMANDS
from contract.keys import ADMISSION_CHECK_NAME, LABEL_JOBSET_NAME
from contract.prologue import PROLOGUE_CONFIGMAP
from contract.trainjob import Submission
from harness.jobs import create_as_start, workload_of, write_as_the_api
from harness.kube_http import KubeHttp
from harness.pytest_plugin import TierC
from harness.real_node import real_node_pod_spec
from harness.sandbox import site
from harness.sandbox.on_node import deployment_pods
from tests.agent.gate import kit
from tests.agent.gate.kit import KUEUE_V, TRAINER_V, eventually
from tests.agent.gate.test_readmission_gate import LOCAL_QUEUE
from tests.charts.helm import ROOT, run_helm
from tests.charts.test_chart_on_a_kubelet import only_the_real_node  # noqa: F401  (fixture)
from tests.charts.test_install_from_release import DOCUMENTED, dispatch_objects, load_release_image
from tests.charts.test_release import VERSION, release
from tests.docs.test_quickstart import RELEASE, RELEASE_NS, clean_cluster  # noqa: F401  (clean_cluster: fixture)
from tests.previous_release import PREVIOUS_TAG, PREVIOUS_VERSION, cached_release, previous_commit, release_cache
from tests.prologue.test_prologue_on_a_kubelet import USER_PROGRAM, LogFollower, expect

GRACE = 45
"""READMIT's pods' termination grace period: its program ignores SIGTERM, so its old pod lives this long after
its eviction, across the upgrade (the gate must wait for it)."""
STUBBORN_PROGRAM = USER_PROGRAM.replace(
    "signal.signal(signal.SIGTERM, said)", "signal.signal(signal.SIGTERM, signal.SIG_IGN)"
)
QUOTA = {"cpu": "4", "memory": "4Gi"}


# -- the previous release's artifacts -----------------------------------------------------------------------


@contextlib.contextmanager
def current_image_kept() -> Iterator[None]:
    """scripts/build-image keeps only the newest archive in the node cache: the previous tree's build would delete
    the one the tier C lane built (and imports at a session's start). Hard links keep it; the previous tree's
    archive, once turned into its OCI archive, is not kept."""
    node_dir = subprocess.run([str(ROOT / "controlplane" / "build-node.sh"), "--print-dir"], capture_output=True,
                              text=True, check=True).stdout.strip()  # fmt: skip
    images = Path(node_dir) / "images"
    before = {p.name for p in images.glob("dispatch-k8s-*.tar")}
    keep = Path(tempfile.mkdtemp(prefix=".kept-", dir=images))  # below images/: build-image's clean-up is maxdepth 1
    try:
        for name in before:
            os.link(images / name, keep / name)
        yield
    finally:
        for name in before:
            if not (images / name).exists():
                os.link(keep / name, images / name)
        for archive in images.glob("dispatch-k8s-*.tar"):
            if archive.name not in before:
                archive.unlink()
        shutil.rmtree(keep, ignore_errors=True)


def previous_tree(into: Path) -> Path:
    """The tag's files (`git archive`), committed in a repository of their own: scripts/release wants a clean tree."""
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", previous_commit()], capture_output=True, check=False)
    assert archive.returncode == 0, f"git archive {PREVIOUS_TAG}: {archive.stderr.decode()}"
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    git = ["git", "-c", "user.name=release test", "-c", "user.email=release@test.invalid"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", PREVIOUS_TAG]):
        subprocess.run([*git, *args], cwd=into, check=True, capture_output=True)
    return into


@pytest.fixture(scope="module")
def previous_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The folder the previous release's own scripts/release built from its tag (its image from the same private
    docker engine as the lane's: most layers come from its cache), once per machine (``cached_release``)."""

    def build(out: Path) -> None:
        tree = previous_tree(tmp_path_factory.mktemp("previous") / "src")
        with current_image_kept():
            result = release(tree, PREVIOUS_VERSION, "--out", str(out), timeout=1500)
        assert result.returncode == 0, (
            f"{PREVIOUS_TAG}'s scripts/release exited {result.returncode}:\n{result.stderr[-4000:]}"
        )

    started = time.monotonic()
    folder, built = cached_release(build, release_cache())
    said = f"built in {time.monotonic() - started:.0f}s" if built else f"from {folder}"
    print(f"{PREVIOUS_TAG}'s release {said}")
    return folder


def test_the_previous_tree_is_the_tags_files(tmp_path: Path) -> None:
    tree = previous_tree(tmp_path / "previous")
    assert (tree / "VERSION").read_text().strip() == PREVIOUS_VERSION
    assert (tree / "scripts" / "release").is_file()
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True, check=True)
    assert status.stdout == ""


# -- installing from artifacts ---------------------------------------------------------------------------------


def load_image(tier_c: TierC, folder: Path, version: str) -> str:
    """A release's image on the node (test_install_from_release.py ``load_release_image``); its digest."""
    return load_release_image(tier_c, folder, version)[1]


def upgrade_argv(chart: Path) -> list[str]:
    """docs/install.md's upgrade (charts/readme.py COMMANDS) with the release's package; its `--set image.tag` is
    the unpackaged chart's: a package pins its image."""
    words = [w for w in COMMANDS["upgrade"].replace("\\\n", " ").split() if w]
    assert words[:3] == ["helm", "upgrade", "dispatch-k8s"], words
    assert words[-2:] == ["--set", "image.tag=0.2.0"], words
    swap = {"dispatch-k8s": RELEASE, "dispatch-system": RELEASE_NS, "charts/dispatch-k8s": str(chart)}
    return [swap.get(w, w) for w in words[1:-2]]


def rolled_out(admin: KubeHttp, digest: str) -> list[dict[str, Any]]:
    """Every pod of the release's Deployment runs the image of ``digest`` (as the kubelet resolved it), none other."""
    d = admin.get("apps/v1", "Deployment", RELEASE, RELEASE_NS)
    status = d.get("status") or {}
    assert status.get("observedGeneration") == d["metadata"]["generation"], status
    assert status.get("updatedReplicas") == status.get("readyReplicas") == status.get("replicas") == 2, status
    pods = deployment_pods(admin, RELEASE_NS, RELEASE)
    ids = {s["imageID"] for p in pods for s in p["status"].get("containerStatuses") or []}
    assert len(pods) == 2, [p["metadata"]["name"] for p in pods]
    assert all(i.endswith(digest) for i in ids), ids
    return pods


# -- the jobs ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Job:
    label: str
    sub: Submission
    trainjob: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.trainjob["metadata"]["name"])


class Site:
    """The test's queue, runtime and jobs, and the histories of their TrainJobs and pods."""

    def __init__(self, tier_c: TierC, namespace: str, runtime: dict[str, Any], names: dict[str, str]) -> None:
        self.admin, self.ns, self.runtime = tier_c.tier_b.admin, namespace, runtime
        self.queue, self.flavor, self.priority = names["queue"], names["flavor"], names["priority"]
        self.jobs: list[Job] = []
        self.image = tier_c.node.artifacts.base_image
        self.trainjobs = kit.Recorder(self.admin, self.admin.collection_path(TRAINER_V, "TrainJob", namespace))
        self.pods = kit.Recorder(self.admin, self.admin.collection_path("v1", "Pod", namespace))
        self.logs: dict[str, LogFollower] = {}
        """Pod uid -> its container's log, followed from when it ran."""

    def start(self, label: str, program: str) -> Job:
        sub = Submission(job_id=str(ULID()), n=1, g=0, attempt=0,
                         namespace=self.ns, image=self.image, command=["python3", "-c", program], queue=LOCAL_QUEUE,
                         priority_class=self.priority)  # fmt: skip
        job = Job(label, sub, create_as_start(self.admin, sub, self.runtime))
        eventually(lambda: self.workload(job), 30, f"{label}: Kueue made its Workload")  # Open reads it too
        write_as_the_api(self.admin, job.trainjob, lambda t, w: plan_open(t).writes)
        return job

    def trainjob(self, job: Job) -> dict[str, Any]:
        return self.admin.get(TRAINER_V, "TrainJob", job.name, self.ns)

    def workload(self, job: Job) -> dict[str, Any]:
        return workload_of(self.admin, self.ns, job.trainjob["metadata"]["uid"])

    def live_pods(self, job: Job) -> list[dict[str, Any]]:
        return [p for p in self.admin.list("v1", "Pod", self.ns, label_selector=f"{LABEL_JOBSET_NAME}={job.name}")
                if not p["metadata"].get("deletionTimestamp")]  # fmt: skip

    def running(self, job: Job, a: int, within: float = 180) -> dict[str, Any]:
        """The job's one pod of admission A (J 0) Running, and its program's output as the contract says."""

        def probe() -> dict[str, Any]:
            pods = self.live_pods(job)
            assert [kit.pod_a_j(p) for p in pods] == [(a, 0)], [(p["metadata"]["name"], kit.pod_a_j(p)) for p in pods]
            assert pods[0]["status"].get("phase") == "Running", pods[0]["status"]
            return pods[0]

        pod = eventually(probe, within, f"{job.label}: its pod of A={a} Running")
        uid = pod["metadata"]["uid"]
        if uid not in self.logs:
            self.logs[uid] = LogFollower(self.admin, self.ns, pod["metadata"]["name"])
        log = self.logs[uid]
        eventually(lambda: _assert(len(log.values()) >= 4), 60, f"{job.label}: the program's output")
        assert log.values() == expect(job.sub, pod), (job.label, log.lines)
        return pod

    def hold(self, job: Job) -> dict[str, str]:
        hold = Hold(instance=secrets.token_hex(4), since=kit.now(), who="upgrade-test", reason=f"hold {job.label}")
        write_as_the_api(self.admin, job.trainjob, lambda t, w: plan_hold(t, w, hold).writes)
        return hold.annotations()

    def release(self, job: Job) -> None:
        write_as_the_api(self.admin, job.trainjob, lambda t, w: plan_release(t, w).writes)

    def held(self, job: Job, annotations: dict[str, str]) -> None:
        """Held as Hold left it: the hold's annotations on the TrainJob and its Workload, the Workload inactive,
        the TrainJob suspended, and no pod of it but one being deleted."""
        tj, wl = self.trainjob(job), self.workload(job)
        for obj in (tj, wl):
            kept = {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k in annotations}
            assert kept == annotations, (job.label, obj["kind"], kept)
        assert wl["spec"].get("active") is False, (job.label, wl["spec"])
        assert tj["spec"].get("suspend") is True, (job.label, tj["spec"])
        assert self.live_pods(job) == [], (job.label, [p["metadata"]["name"] for p in self.live_pods(job)])

    def same_container(self, job: Job, before: dict[str, Any]) -> None:
        """The job's pod is the one read before, its container the same, never restarted."""
        (pod,) = self.live_pods(job)
        assert pod["metadata"]["uid"] == before["metadata"]["uid"], (job.label, pod["metadata"]["name"])
        (now,), (then,) = pod["status"]["containerStatuses"], before["status"]["containerStatuses"]
        assert (now["containerID"], now["restartCount"], pod["status"]["phase"]) == (then["containerID"], 0, "Running")
        assert len([line for line in self.logs[pod["metadata"]["uid"]].lines if line.startswith("PID=")]) == 1

    def started_after_stopped(self, old: dict[str, Any], new: dict[str, Any]) -> None:
        """In the pods' history (one watch: the API server's order), ``new`` appeared only after ``old`` had stopped:
        its phase final (its container exited) or the pod deleted."""
        events = self.pods.events()
        old_uid, new_uid = old["metadata"]["uid"], new["metadata"]["uid"]
        stopped = next(i for i, (kind, p) in enumerate(events) if p["metadata"]["uid"] == old_uid
                       and (kind == "DELETED" or p["status"].get("phase") in ("Failed", "Succeeded")))  # fmt: skip
        appeared = next(i for i, (_, p) in enumerate(events) if p["metadata"]["uid"] == new_uid)
        assert stopped < appeared, (old["metadata"]["name"], "still ran when", new["metadata"]["name"], "appeared")

    def histories(self, jobs: dict[str, list[int]]) -> None:
        """For each job (label -> A at each admission, in order): A rose only while suspended and with each
        admission; its pods' R = A + J strictly rose, one execution per admission; each execution's program saw a
        higher DISPATCH_EPOCH than the one before."""
        by_label = {j.label: j for j in self.jobs}
        pods = self.pods.first_seen()
        for label, admissions in jobs.items():
            job = by_label[label]
            assert kit.assert_a_rises_before_each_admission(self.trainjobs.versions(job.name)) == admissions, label
            mine = [p for p in pods if (p["metadata"].get("labels") or {}).get(LABEL_JOBSET_NAME) == job.name]
            assert kit.assert_r_strictly_increases(mine) == [(a, 0) for a in admissions], label
            epochs = [int(self.logs[p["metadata"]["uid"]].values()["DISPATCH_EPOCH"]) for p in mine
                      if p["metadata"]["uid"] in self.logs]  # fmt: skip
            assert len(epochs) == len(admissions), (label, epochs)
            assert epochs == sorted(set(epochs)), (label, epochs)


def _assert(value: Any) -> Any:
    assert value
    return value


@pytest.fixture
def job_site(tier_c: TierC, only_the_real_node: None, clean_cluster: None) -> Iterator[Site]:  # noqa: F811
    """A gated ClusterQueue on the chart's AdmissionCheck, a priority, a runtime on the real node (its pods stop
    within GRACE), and a namespace with a LocalQueue into the queue. Removed afterwards (jobs first)."""
    admin, cp = tier_c.tier_b.admin, tier_c.tier_b.control_plane
    suffix = secrets.token_hex(3)
    names = {k: f"upgrade-{k}-{suffix}" for k in ("flavor", "queue", "priority", "runtime")}
    runtime = site.training_runtime(names["runtime"], cpu="100m", memory="64Mi", image=tier_c.node.artifacts.base_image,
                                    failure_policy={"maxRestarts": 0})  # fmt: skip
    pod = runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod.update(real_node_pod_spec(tier_c.node.name), terminationGracePeriodSeconds=GRACE)
    pod["containers"][0]["imagePullPolicy"] = "Never"
    objects = [
        site.resource_flavor(names["flavor"]),
        site.priority_class(names["priority"], 10),
        runtime,
    ]
    ns = cp.create_namespace("upgrade-jobs")
    made: list[dict[str, Any]] = []
    the_site: Site | None = None
    try:
        for obj in objects:
            made.append(admin.create(obj))
        admin.create(site.local_queue(ns, LOCAL_QUEUE, names["queue"]))
        the_site = Site(tier_c, ns, admin.get(TRAINER_V, "ClusterTrainingRuntime", names["runtime"]), names)
        yield the_site
    finally:
        if the_site is not None:
            the_site.trainjobs.stop()
            the_site.pods.stop()
        for tj in admin.list(TRAINER_V, "TrainJob", ns):
            admin.delete(TRAINER_V, "TrainJob", tj["metadata"]["name"], ns)
        admin.delete(KUEUE_V, "ClusterQueue", names["queue"])
        for obj in reversed(made):
            admin.delete(obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        cp.delete_namespace(ns)


def _helm(tier_c: TierC, *argv: str) -> str:
    kubeconfig = str(tier_c.tier_b.control_plane.admin_kubeconfig)
    return run_helm(*argv, "--kubeconfig", kubeconfig, timeout=600).stdout


@pytest.mark.e2e
@pytest.mark.node
@pytest.mark.timeout(3600)  # the two releases' builds run in its setup when it runs alone
def test_upgrade_from_the_previous_release_and_roll_back_with_jobs_running_held_and_readmitted(
    tier_c: TierC, previous_release: Path, released: Path, job_site: Site
) -> None:
    admin, s = tier_c.tier_b.admin, job_site
    timings: dict[str, float] = {}
    began = time.monotonic()
    before = set(dispatch_objects(admin))
    old_digest = load_image(tier_c, previous_release, PREVIOUS_VERSION)
    new_digest = load_image(tier_c, released, VERSION)
    assert old_digest != new_digest, "the two releases' images are the same: nothing to upgrade"

    # 1. The previous release, from its package alone.
    # The test writes as the supervisor API (Start's creates, Open, Hold, Release) and as an operator (an eviction)
    # with the harness's admin: dispatch's principal and break-glass, as tier B's own policies have them
    # (harness/tier_b.py). The upgrade keeps them (--reset-then-reuse-values).
    _helm(tier_c, "install", RELEASE, str(previous_release / f"dispatch-k8s-{PREVIOUS_VERSION}.tgz"),
          "--namespace", RELEASE_NS, "--create-namespace", "--set", "webhook.dispatch.groups={system:masters}",
          "--set", "webhook.owners.breakGlass.groups={system:masters}", "--wait", "--timeout", "5m")  # fmt: skip
    eventually(lambda: rolled_out(admin, old_digest), 120, "the previous release's pods")
    admin.create(site.gated_cluster_queue(s.queue, check=ADMISSION_CHECK_NAME, flavor=s.flavor, quota=QUOTA))
    eventually(lambda: _assert(kit.condition_true(admin.get(KUEUE_V, "ClusterQueue", s.queue), "Active")), 60,
               "the ClusterQueue Active: the previous release's agent serves the check")  # fmt: skip
    timings["install"] = time.monotonic() - began

    # 2. Jobs through it: RUN runs, HELD is held, READMIT is being re-admitted.
    run, held, readmit = (s.start("RUN", USER_PROGRAM), s.start("HELD", USER_PROGRAM),
                          s.start("READMIT", STUBBORN_PROGRAM))  # fmt: skip
    s.jobs = [run, held, readmit]
    run_pod = s.running(run, a=1)
    s.running(held, a=1)
    first_readmit = s.running(readmit, a=1)
    hold_held = s.hold(held)
    eventually(lambda: s.held(held, hold_held), 90, "HELD held: evicted, its pod gone")

    # An operator's eviction (the Workload deactivated, then active again): the job must be admitted again, and its
    # old pod, which ignores SIGTERM, stays Terminating for GRACE seconds, across the upgrade.
    wl = s.workload(readmit)
    admin.merge_patch(KUEUE_V, "Workload", wl["metadata"]["name"], {"spec": {"active": False}}, s.ns)

    def stopping() -> None:
        assert s.trainjob(readmit)["spec"].get("suspend") is True, "READMIT suspended"
        old = admin.get("v1", "Pod", first_readmit["metadata"]["name"], s.ns)
        assert old["metadata"].get("deletionTimestamp"), "READMIT's old pod is being deleted"

    eventually(stopping, 60, "READMIT evicted, its old pod stopping")
    admin.merge_patch(KUEUE_V, "Workload", wl["metadata"]["name"], {"spec": {"active": True}}, s.ns)
    timings["jobs"] = time.monotonic() - began

    # 3. docs/install.md's upgrade, to the current release's package.
    _helm(tier_c, *upgrade_argv(released / f"dispatch-k8s-{VERSION}.tgz"), "--wait", "--timeout", "5m")
    eventually(lambda: rolled_out(admin, new_digest), 120, "the current release's pods")
    timings["upgrade"] = time.monotonic() - began
    s.same_container(run, run_pod)
    s.held(held, hold_held)
    readmitted = s.running(readmit, a=2, within=GRACE + 120)
    s.started_after_stopped(first_readmit, readmitted)
    time.sleep(5)  # a held job that something admitted would show by now
    s.held(held, hold_held)
    s.release(held)
    s.running(held, a=2)
    # A hold written on the current release, to be released on the previous one.
    hold_run = s.hold(run)
    eventually(lambda: s.held(run, hold_run), 90, "RUN held: evicted, its pod gone")
    s.histories({"RUN": [1], "HELD": [1, 2], "READMIT": [1, 2]})

    # 4. Back to the previous release.
    held_pod, readmit_pod = s.running(held, a=2), s.running(readmit, a=2)
    _helm(tier_c, "rollback", RELEASE, "1", "--namespace", RELEASE_NS, "--wait", "--timeout", "5m")
    eventually(lambda: rolled_out(admin, old_digest), 120, "the previous release's pods again")
    timings["rollback"] = time.monotonic() - began
    s.same_container(held, held_pod)
    s.same_container(readmit, readmit_pod)
    s.held(run, hold_run)
    s.release(run)
    s.running(run, a=2)
    s.histories({"RUN": [1, 2], "HELD": [1, 2], "READMIT": [1, 2]})
    for job in s.jobs:  # nothing stuck: every job admitted and running its second execution
        assert kit.condition_true(s.workload(job), "Admitted"), (job.label, kit.conditions(s.workload(job)))

    # 5. The jobs stop, then the uninstall leaves only what docs/install.md says stays.
    for job in s.jobs:
        admin.delete(TRAINER_V, "TrainJob", job.name, s.ns)
        admin.delete(TRAINER_V, "TrainingRuntime", job.name, s.ns)
    eventually(lambda: _assert(not admin.list("v1", "Pod", s.ns)), GRACE + 60, "the jobs' pods gone")
    admin.delete(KUEUE_V, "ClusterQueue", s.queue)  # docs/install.md: first take the check out of every ClusterQueue
    out = _helm(tier_c, "uninstall", RELEASE, "--namespace", RELEASE_NS)
    assert "uninstalled" in out, out

    # The release uninstalled is the previous one (rolled back to), whose pre-delete hook does not delete the
    # prologue's ConfigMaps (CHANGELOG.md): docs/install.md says one left that way stays.
    stays = DOCUMENTED | {("ConfigMap", s.ns, PROLOGUE_CONFIGMAP)}

    def only_the_documented() -> None:
        left = {what: marks for uid, (what, marks) in dispatch_objects(admin).items() if uid not in before}
        assert set(left) <= stays, sorted(left.items())

    eventually(
        only_the_documented, 180, "after helm uninstall, nothing of dispatch's but the agent's Lease", interval=2
    )
    timings["uninstall"] = time.monotonic() - began
    print("upgrade test, seconds since start:", {k: round(v) for k, v in timings.items()})
