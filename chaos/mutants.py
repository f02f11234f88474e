"""Mutants: broken variants of dispatch, each with one mechanism disabled, that the campaign's checker must catch by
the rule that guards that mechanism (docs/reliability.md, "Mutants").

The product carries no switch for any of this. A mutant is the campaign's own variant of the source: the product's
packages copied to a folder of the run, a named, exact source substitution applied to the copy (each edit's ``old``
snippet must occur exactly once, or the mutant is refused: a refactor cannot silently turn a mutant into the
product), the image built from that copy, and that image installed in place of the product's for the arm.

dispatch's defence is layered: the choke point (the unsuspend and Job-resume policies, the webhook's
``update.unsuspend``, the record-start MutatingAdmissionPolicy) also enforces what the gate decides. A mutant of the
gate alone would then be refused there, and prove only that the choke point works. So each mutant names the parts
of the choke point that must also be off for its mechanism to be truly off (``disarm``), and the campaign removes
exactly those after the arm's Preflight, as the naive arm does (chaos/naive.py ``disarm_choke_point``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from harness.binaries import REPO_ROOT
from harness.kube_http import KubeHttp
from harness.sandbox import on_node
from harness.tier_b import HARNESS_POLICY_PREFIX
from webhook.configurations import NAME
from webhook.rules.jobs import JOB_RESUME
from webhook.rules.record_start import RECORD_START
from webhook.rules.unsuspend import START_APPROVAL, UNSUSPEND

ADMISSION_V: Final = "admissionregistration.k8s.io/v1"
PRODUCT: Final = ("contract", "serving", "webhook", "agent", "certs", "prologue")
"""The product's packages: every one the Dockerfile copies (tests/charts/test_image.py keeps that list complete)."""
CONTEXT_FILES: Final = ("Dockerfile", ".dockerignore", "pyproject.toml", "README.md", "requirements/lock.txt")
IMAGE_REPOSITORY: Final = "dispatch-k8s.local/dispatch-k8s-mutant"
ONE_CLUSTER: Final = "one-cluster"
MULTICLUSTER: Final = "multicluster"


class MutantError(RuntimeError):
    """A mutant that cannot be made as defined: its snippet is gone or ambiguous, or its image did not build."""


@dataclass(frozen=True)
class Edit:
    """One exact substitution: ``old`` must occur exactly once in ``file`` (relative to the tree's root)."""

    file: str
    old: str
    new: str


@dataclass(frozen=True)
class Mutant:
    name: str
    mechanism: str
    """What is disabled, in the words of the spec."""
    rule: int
    """The checker's rule that guards the mechanism: the one that must catch it."""
    edits: tuple[Edit, ...]
    disarm: tuple[str, ...] = ()
    """Parts of the choke point removed after the arm's Preflight (``DISARMS``)."""
    needs: str = ""
    """Empty when the campaign can run it here; else what it needs that the campaign does not have."""
    arm: str = ONE_CLUSTER
    """Where it runs: the one-cluster campaign (its image installed by the chart) or the MultiKueue arm (its tree
    run by the agents)."""
    also: tuple[int, ...] = ()
    """Other rules that catch the same mechanism off (across clusters a copy that may not run shows as an overlap,
    a repeated identity or a falling R, depending on the timing)."""

    @property
    def rules(self) -> tuple[int, ...]:
        return (self.rule, *self.also)


# -- the table ------------------------------------------------------------------------------------------------------

_GATE = "agent/domain/decide.py"
_BLOCKERS_HOLD = "    if blockers:\n        return hold(hold_message(blockers))\n"
_OPEN_CHECK = (
    "    if not is_opened_by_dispatch(trainjob):\n"
    "        return (\n"
    "            f\"dispatch has not opened this TrainJob (no {ANNOTATION_OPENED} mark, or dispatch's gate is still "
    'on "\n'
    '            "it): nothing runs before dispatch\'s Open"\n'
    "        )\n"
)
_HOLD_CHECK = (
    '    for where, obj in (("TrainJob", trainjob), ("Workload", workload)):\n'
    "        hold = hold_in_force(obj)\n"
    "        if hold is not None:\n"
)

MUTANTS: Final[tuple[Mutant, ...]] = (
    Mutant(
        "no-raise",
        "the raise of A at a readmission: the gate sets its check Ready and the execution starts under the A the job "
        "already ran with (only the first start, from A = 0, is numbered, else the prologue refuses every execution)",
        1,
        (
            # The number of the next execution, in Python (the gate's approval, the webhook's record of A):
            Edit(
                "contract/admission.py",
                "    if a is not None and a > (started_before or 0) and a >= (floor or 0):\n        return a, False\n",
                "    if a is not None and a > 0:\n        return a, False\n",
            ),
            # ... and in CEL: the MutatingAdmissionPolicy record-start that raises A in Kueue's unsuspend.
            Edit(
                "webhook/rules/record_start.py",
                '"expression": "variables.readable && variables.kueue && (variables.current <= variables.before || "\n'
                '            "variables.current < variables.floor)",',
                '"expression": "variables.readable && variables.kueue && variables.current == 0",',
            ),
        ),
        disarm=("record-start", "unsuspend", "job-resume"),
    ),
    Mutant(
        "no-wait",
        "the wait for the previous execution's pods: the gate admits whatever pods may still run (so node loss is "
        "trusted on NotReady and dispatch's pod finalizer holds nothing back)",
        3,
        (Edit(_GATE, _BLOCKERS_HOLD, ""),),
    ),
    Mutant(
        "holds-ignored",
        "Hold: the gate ignores a hold in force, and Hold no longer deactivates the Workload (Kueue's own means of "
        "keeping a held job out)",
        4,
        (
            Edit(_GATE, _HOLD_CHECK, _HOLD_CHECK.replace("hold = hold_in_force(obj)", "hold = None")),
            Edit(
                "agent/domain/operations.py",
                '            ops.append({"op": "add", "path": pointer("spec", "active"), "value": False})\n',
                "            pass\n",
            ),
        ),
        disarm=("unsuspend",),
    ),
    Mutant(
        "open-not-awaited",
        "the start gate: Start creates the TrainJob without dispatch's admission gate, the webhook does not close it "
        "at birth, the gate does not wait for Open, and the Preflight does not report the leak",
        4,
        (
            Edit("contract/trainjob.py", "        annotations[ANNOTATION_ADMISSION_GATED_BY] = GATE\n", ""),
            Edit("webhook/admission.py", "        if not has_dispatch_gate(new):\n", "        if False:\n"),
            Edit(
                "agent/domain/start.py",
                "    if GATE not in gates_of(workload):\n",
                "    if False:\n",
            ),
            Edit(_GATE, _OPEN_CHECK, ""),
            # The Preflight's proof of the start gate (a closed probe stays closed), which would otherwise refuse
            # every Start of the campaign: the mechanism off, the proof of it must not stand in for it.
            Edit("agent/api/service/capabilities.py", "    elif probe.leaks:\n", "    elif False:\n"),
            # ... and the webhook's creation rule that a Kueue-mode dispatch TrainJob is created gated.
            Edit(
                "webhook/rules/creation.py",
                "    if is_kueue_mode(trainjob):\n        if not has_dispatch_gate(trainjob):\n",
                "    if is_kueue_mode(trainjob):\n        if False:\n",
            ),
        ),
        disarm=("unsuspend",),
    ),
    Mutant(
        "early-ceased",
        "Status's Ceased waits for no pod, while the TrainJob is there or once it is gone: Ceased while pods may "
        "still run",
        5,
        (
            Edit(
                "agent/domain/status.py",
                "    if waiting:\n"
                '        return False, f"{len(waiting)} pod(s) may still run: " + ", ".join(b.pod for b in waiting)\n',
                "",
            ),
            # ... and once the TrainJob is gone (Status after Stop): its pods left on the cluster no longer count.
            Edit(
                "agent/multicluster/worker_remains.py",
                '    here = [o for o in left_here if "/pod/" in o or "/jobset/" in o]\n',
                '    here = [o for o in left_here if "/jobset/" in o]\n',
            ),
        ),
    ),
    # Across clusters: run on the MultiKueue arm (scripts/chaos --multicluster), whose agents run from the tree.
    Mutant(
        "no-worker-look",
        "the manager's look at the workers before a dispatch: the gate approves a dispatch whatever of an earlier "
        "execution may still run on a worker (it still prepares each worker's replica, so the job can run)",
        3,
        (
            Edit(
                "agent/gate/reconcile.py",
                "        blockers = [*blockers, *remote]\n",
                "        blockers = [*blockers, *(b for b in remote if b.unprepared)]\n",
            ),
        ),
        arm=MULTICLUSTER,
        also=(1, 2),
    ),
    Mutant(
        "no-claim-check",
        "the worker's check of the manager's claim and contact: a copy starts without a live claim or a renewal "
        "seen, and no copy is deleted as unclaimed or out of contact",
        3,
        (
            Edit(
                "agent/multicluster/copy_verdicts.py",
                "    if contact is None:\n        return CopyVerdict(CopyAction.WAIT, NO_CONTACT)\n",
                "    if contact is None:\n        contact = 0\n",
            ),
            Edit(
                "agent/multicluster/copy_verdicts.py",
                "    if claim != needs[1]:\n"
                "        return CopyVerdict(CopyAction.WAIT, unclaimed_message(needs, claim))\n",
                "",
            ),
            Edit(
                "agent/multicluster/contact.py",
                "                if verdict.action is not CopyAction.DELETE:\n",
                "                if True:\n",
            ),
        ),
        arm=MULTICLUSTER,
        also=(1, 2),
    ),
    Mutant(
        "raise-by-one",
        "MultiKueue mode's raise by K = maxRestarts + 1: the gate raises A by 1, so a worker's restarts (J) can "
        "repeat the R of the next dispatch",
        1,
        (Edit(_GATE, "    return k, raise_dispatch(trainjob, k)\n", "    return k, raise_dispatch(trainjob, 1)\n"),),
        arm=MULTICLUSTER,
        also=(2, 3),
    ),
)
"""Every mutant, by name. ``needs`` marks those the campaign cannot run here."""

BY_NAME: Final[Mapping[str, Mutant]] = {m.name: m for m in MUTANTS}
RUNNABLE: Final = tuple(m.name for m in MUTANTS if not m.needs and m.arm == ONE_CLUSTER)
"""Those the one-cluster campaign runs (scripts/chaos --arm mutant:NAME)."""
ACROSS: Final = tuple(m.name for m in MUTANTS if not m.needs and m.arm == MULTICLUSTER)
"""Those the MultiKueue arm runs (scripts/chaos --multicluster --arm mutant:NAME)."""


def mutant(name: str) -> Mutant:
    found = BY_NAME.get(name)
    if found is None:
        raise MutantError(f"no mutant {name!r}; the mutants are {sorted(BY_NAME)}")
    return found


# -- the source, pure -----------------------------------------------------------------------------------------------


def substitute(text: str, edit: Edit) -> str:
    """``text`` with ``edit`` applied; MutantError unless its ``old`` occurs exactly once and the result differs."""
    found = text.count(edit.old)
    if found != 1:
        raise MutantError(
            f"{edit.file}: the snippet of the substitution occurs {found} times, not once: the source changed under "
            f"the mutant, whose table (chaos/mutants.py) must follow it; the snippet:\n{edit.old}"
        )
    changed = text.replace(edit.old, edit.new, 1)
    if changed == text:
        raise MutantError(f"{edit.file}: the substitution changes nothing")
    return changed


def apply(tree: Path, m: Mutant) -> list[str]:
    """Applies ``m``'s edits to the tree at ``tree`` in place; returns the files changed."""
    changed: list[str] = []
    for edit in m.edits:
        path = tree / edit.file
        path.write_text(substitute(path.read_text(), edit))
        changed.append(edit.file)
    return changed


def make_tree(m: Mutant, dest: Path, *, source: Path = REPO_ROOT) -> Path:
    """The build context of ``m``'s image at ``dest`` (which must not exist): the product's packages and the files
    the Dockerfile reads, as they are in ``source``'s work tree, with ``m`` applied."""
    if dest.exists():
        raise MutantError(f"{dest} exists")
    dest.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for package in PRODUCT:
        shutil.copytree(source / package, dest / package, ignore=ignore)
    for file in CONTEXT_FILES:
        (dest / file).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source / file, dest / file)
    apply(dest, m)
    return dest


def fingerprint(m: Mutant) -> str:
    """12 hex digits naming ``m``'s edits (the image's tag): a changed table is a new image."""
    return hashlib.sha256(json.dumps([[e.file, e.old, e.new] for e in m.edits]).encode()).hexdigest()[:12]


# -- the image ------------------------------------------------------------------------------------------------------

_BUILD = r"""
set -euo pipefail
cd "$ROOT"
source controlplane/docker.sh
source controlplane/lock.sh
node_dir=$(controlplane/build-node.sh --print-dir)
[[ -f $node_dir/images/base.tar ]] || {
	echo "mutants: no base image in $node_dir: run controlplane/build-node.sh" >&2
	exit 1
}
source controlplane/node.env
# The private engine's data root is the node cache's: one build there at a time (as scripts/build-image).
cache_lock "$node_dir"
tmp=$(mktemp -d /tmp/dispatch-k8s-mutant.XXXXXX)
trap 'docker_down; rm -rf "$tmp"' EXIT
docker_up "$node_dir/docker"
# The wheelhouse base scripts/build-image made for the product (the same lock file), else one made here as it does.
base=$(docker_cli images --format '{{.Repository}}:{{.Tag}}' dispatch-k8s.local/python-wheelhouse | head -1)
if [[ -z $base ]]; then
	docker_cli load -q -i "$node_dir/images/base.tar" >&2
	"$VENV/bin/pip" download -q -d "$tmp/base/wheelhouse" --only-binary=:all: -r requirements/lock.txt >&2
	"$VENV/bin/pip" download -q -d "$tmp/base/wheelhouse" --only-binary=:all: "setuptools>=77" wheel >&2
	{
		echo "FROM dispatch-k8s.local/debian-python:$DEBIAN_SUITE"
		echo "COPY wheelhouse /opt/wheelhouse"
		echo "ENV PIP_FIND_LINKS=/opt/wheelhouse PIP_NO_INDEX=1 PIP_DISABLE_PIP_VERSION_CHECK=1"
	} >"$tmp/base/Dockerfile"
	base=dispatch-k8s.local/python-wheelhouse:mutants
	docker_cli build -q -t "$base" "$tmp/base" >&2
fi
docker_cli build -q --network=none --build-arg "PYTHON_IMAGE=$base" -t "$TAG" "$TREE" >&2
docker_cli save -o "$OUT.tmp" "$TAG"
mv "$OUT.tmp" "$OUT"
# Only the mutant's tag goes; its layers are the product's but for the mutated package's.
docker_cli rmi "$TAG" >/dev/null
"""


def build_image(m: Mutant, work: Path, *, source: Path = REPO_ROOT) -> on_node.Image:
    """``m``'s image, built from its tree in ``work`` (the arm's run folder) the way scripts/build-image builds the
    product's, into an archive in ``work`` (never the node cache's images folder, whose product archive
    scripts/build-image keeps alone)."""
    tree = make_tree(m, work / "tree", source=source)
    tag = f"{IMAGE_REPOSITORY}:{m.name}-{fingerprint(m)}"
    out = work / f"image-{m.name}.tar"
    env = {**os.environ, "ROOT": str(source), "TREE": str(tree), "TAG": tag, "OUT": str(out),
           "VENV": str(source / os.environ.get("DISPATCH_K8S_VENV", ".venv"))}  # fmt: skip
    done = subprocess.run(["bash", "-c", _BUILD], env=env, capture_output=True, text=True, timeout=1200, check=False)
    (work / "build.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not out.is_file():
        raise MutantError(f"the image of mutant {m.name} did not build ({work / 'build.log'}):\n{done.stderr[-2000:]}")
    return on_node.Image(out, tag)


# -- the choke point ------------------------------------------------------------------------------------------------

DISARMS: Final = {
    "unsuspend": "the unsuspend policy's binding (A rose since the last start, recorded, opened, no hold in force) "
    "and the webhook's update.unsuspend (unsuspends no longer sent to it)",
    "job-resume": "the Job-resume policy's binding (a dispatch Job resumes only with A raised)",
    "start-approval": "tier B's harness-wide start-approval policy's binding (a Kueue-mode start carries the gate's "
    "approval of its A)",
    "record-start": "the MutatingAdmissionPolicies record-start (the chart's and tier B's) replaced by the mutant's "
    "own, rendered from its tree",
}


def rendered_record_start(tree: Path, namespace: str) -> dict[str, Any]:
    """The MutatingAdmissionPolicy record-start as the mutant's tree renders it (its own interpreter run on the tree:
    the campaign's process runs the product)."""
    code = (
        "import json, sys; from webhook.rules.record_start import record_start_policy; "
        f"print(json.dumps([d for d in record_start_policy({namespace!r}) "
        "if d['kind'] == 'MutatingAdmissionPolicy']))"
    )
    done = subprocess.run([str(REPO_ROOT / ".venv" / "bin" / "python"), "-c", code], cwd=tree, capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": str(tree)})  # fmt: skip
    (policy,) = json.loads(done.stdout)
    return dict(policy)


def _replace_record_start(admin: KubeHttp, tree: Path, removed: list[str]) -> None:
    spec = rendered_record_start(tree, "dispatch-system")["spec"]
    for prefix in (NAME, HARNESS_POLICY_PREFIX):
        name = RECORD_START.replace(NAME, prefix, 1)
        found = admin.get_or_none(ADMISSION_V, "MutatingAdmissionPolicy", name)
        if found is None:
            continue
        # The product's match constraints stay (its namespaces); the mutant's decision replaces the product's.
        found["spec"] = {**found["spec"], "variables": spec["variables"], "mutations": spec["mutations"]}
        admin.request("PUT", f"/apis/{ADMISSION_V}/mutatingadmissionpolicies/{name}", found)
        removed.append(f"MutatingAdmissionPolicy {name}: the mutant's decision")


def disarm(admin: KubeHttp, m: Mutant, tree: Path) -> list[str]:
    """Removes the parts of the choke point ``m`` names (``DISARMS``), nothing else; returns what it did."""
    from chaos import naive  # the naive arm's patch of the webhook configuration, reused as it is

    done: list[str] = []
    for part in m.disarm:
        if part == "unsuspend":
            naive.unbind(admin, "ValidatingAdmissionPolicyBinding", UNSUSPEND, done)
            config = admin.get_or_none(ADMISSION_V, "ValidatingWebhookConfiguration", NAME)
            webhook = naive.trainjob_updates_webhook()
            ops = naive.skip_unsuspends_patch(config, webhook) if config is not None else None
            if ops:
                admin.request("PATCH", f"/apis/{ADMISSION_V}/validatingwebhookconfigurations/{NAME}", ops,
                              content_type=naive.JSON_PATCH)  # fmt: skip
                done.append(f"ValidatingWebhookConfiguration {NAME}: unsuspends no longer sent to {webhook}")
        elif part == "job-resume":
            naive.unbind(admin, "ValidatingAdmissionPolicyBinding", JOB_RESUME, done)
        elif part == "start-approval":
            naive.unbind(
                admin, "ValidatingAdmissionPolicyBinding", START_APPROVAL.replace(NAME, HARNESS_POLICY_PREFIX, 1), done
            )
        elif part == "record-start":
            _replace_record_start(admin, tree, done)
        else:
            raise MutantError(f"mutant {m.name}: no part {part!r} of the choke point; the parts are {sorted(DISARMS)}")
    return done


def caught(violations_by_rule: Mapping[str, int], m: Mutant) -> bool:
    """The checker caught ``m`` by a rule that guards its mechanism."""
    return any(violations_by_rule.get(str(rule), 0) > 0 for rule in m.rules)


def arm_name(m: Mutant) -> str:
    """The arm's name (its folder, its namespace's suffix): a DNS label."""
    return f"mutant-{m.name}"
