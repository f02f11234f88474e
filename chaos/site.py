"""What the campaign's site sets up around dispatch: ClusterQueues gated by dispatch's check, priorities, the
trainer's runtime on the real worker nodes with the ledger mounted, and a supervisor bound to the chart's
supervisor roles.

The trainer (TRAINER, bash, run after dispatch's prologue in the image built here) appends to the host-side
ledger through a hostPath: a `start` line with the identity the prologue exported, a heartbeat every
HEARTBEAT_SECONDS, `term` when it gets SIGTERM and `exit` when it ends by itself. It works for CHAOS_WORK
seconds, or fails its rank (exit 1) while J < CHAOS_FAIL_UNTIL_J, so JobSet restarts it; on SIGTERM it goes on
for CHAOS_STOP seconds (a checkpoint being saved) before it exits. A process that outlives its pod goes on
writing: the ledger does not depend on the API.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chaos.env import WORKER_LABEL
from harness.cluster import ControlPlane
from harness.real_node import REAL_NODE_TAINT
from harness.sandbox import site
from harness.sandbox.install import TOKEN_SECONDS
from harness.tier_b import TierB

HEARTBEAT_SECONDS = 0.2
RUNTIME = "chaos-train"
"""The trainer's ClusterTrainingRuntime, one per arm (`chaos-train-<arm>`): each arm's ledger is its own."""
QUEUES = ("chaos-a", "chaos-b")
PRIORITIES = {"chaos-low": 10, "chaos-mid": 100, "chaos-high": 1000}
JOB_CPU = "100m"
OTHERS_CPU = "300m"
QUOTA = {"cpu": "500m", "memory": "8Gi"}
"""Room for five dispatch jobs per queue; another party's job takes three of them."""
MAX_RESTARTS = 3
STOP_SECONDS = 4
"""How long the trainer takes to stop on SIGTERM: the gate must wait for it."""
GRACE_SECONDS = STOP_SECONDS + 10
LEDGER_MOUNT = "/ledger"

TRAINER = r"""
d="$CHAOS_LEDGER/$POD_NAMESPACE/$JOB_NAME"
mkdir -p "$d"
life=$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')
f="$d/$life.log"
j=${DISPATCH_ATTEMPT##*.}
term=
trap 'term=$EPOCHREALTIME' TERM
line() { printf '%s t=%s life=%s%s\n' "$1" "$EPOCHREALTIME" "$life" "$2" >> "$f"; }
printf 'start t=%s ns=%s job=%s pod=%s podname=%s node=%s epoch=%s attempt=%s life=%s\n' "$EPOCHREALTIME" \
  "$POD_NAMESPACE" "$JOB_NAME" "$POD_UID" "$POD_NAME" "$NODE_NAME" "$DISPATCH_EPOCH" "$DISPATCH_ATTEMPT" "$life" >> "$f"
stopping=
while :; do
  line hb
  if [ -n "$term" ]; then
    if [ -z "$stopping" ]; then printf 'term t=%s life=%s\n' "$term" "$life" >> "$f"; stopping=$SECONDS; fi
    if [ $((SECONDS - stopping)) -ge "$CHAOS_STOP" ]; then line exit " rc=143"; exit 143; fi
  elif [ "$j" -lt "$CHAOS_FAIL_UNTIL_J" ] && [ "$SECONDS" -ge "$CHAOS_FAIL_AFTER" ]; then
    line exit " rc=1"; exit 1
  elif [ "$SECONDS" -ge "$CHAOS_WORK" ]; then
    line exit " rc=0"; exit 0
  fi
  sleep 0.2 & wait $!
done
"""
"""The trainer's program (``bash -c TRAINER``); every value it needs comes from the environment."""


def ledger_dir(run_dir: Path) -> Path:
    return run_dir / "ledger"


def _downward(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def runtime(name: str, image: str, ledger: Path) -> dict[str, Any]:
    """The trainer on the real worker nodes (their label selected, the real-node taint tolerated), in the image
    built here (imported, never pulled), the ledger mounted; JobSet may restart it MAX_RESTARTS times."""
    obj = site.training_runtime(
        name, cpu=JOB_CPU, memory="64Mi", image=image, failure_policy={"maxRestarts": MAX_RESTARTS}
    )
    pod = obj["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    pod["nodeSelector"] = {WORKER_LABEL: "true"}
    pod["tolerations"] = [{"key": REAL_NODE_TAINT, "operator": "Exists", "effect": "NoSchedule"}]
    pod["terminationGracePeriodSeconds"] = GRACE_SECONDS
    pod["volumes"] = [{"name": "ledger", "hostPath": {"path": str(ledger), "type": "Directory"}}]
    container = pod["containers"][0]
    container["imagePullPolicy"] = "Never"
    container["volumeMounts"] = [{"name": "ledger", "mountPath": LEDGER_MOUNT}]
    container["env"] = [
        {"name": "CHAOS_LEDGER", "value": LEDGER_MOUNT},
        _downward("POD_UID", "metadata.uid"),
        _downward("POD_NAME", "metadata.name"),
        _downward("POD_NAMESPACE", "metadata.namespace"),
        _downward("NODE_NAME", "spec.nodeName"),
        _downward("JOB_NAME", "metadata.labels['jobset.sigs.k8s.io/jobset-name']"),
    ]
    return obj


def prepare(cp: ControlPlane, tb: TierB, *, namespace: str, check: str, image: str, run_dir: Path,
            runtime_name: str, roles: tuple[str, str], also: tuple[str, ...] = ()) -> Path:  # fmt: skip
    """The queues, priorities, runtime and namespace; the supervisor's ServiceAccount bound to the chart's
    supervisor and Preflight roles. Returns the file holding the supervisor's token. ``also``: checks every queue
    lists besides dispatch's (MultiKueue's, on a manager)."""
    ledger = ledger_dir(run_dir)
    ledger.mkdir(parents=True, exist_ok=True)
    ledger.chmod(0o1777)  # the trainer may run as any user
    prepare_queues(cp, tb, namespace=namespace, check=check, image=image, ledger=ledger, runtime_name=runtime_name,
                   also=also)  # fmt: skip
    admin = cp.admin
    supervisor_role, preflight_role = roles
    cp.ensure_service_account(namespace, "supervisor")
    subject = {"kind": "ServiceAccount", "name": "supervisor", "namespace": namespace}
    admin.apply(site.binding("RoleBinding", "supervisor", "ClusterRole", supervisor_role, subject, namespace))
    admin.apply(site.binding("ClusterRoleBinding", f"{namespace}-preflight", "ClusterRole", preflight_role, subject))
    token = run_dir / "supervisor.token"
    token.write_text(cp.service_account_token(namespace, "supervisor", expiration_seconds=TOKEN_SECONDS) + "\n")
    token.chmod(0o600)
    return token


def prepare_queues(cp: ControlPlane, tb: TierB, *, namespace: str, check: str, image: str, ledger: Path,
                   runtime_name: str, also: tuple[str, ...] = ()) -> None:  # fmt: skip
    """The namespace, the trainer's runtime, the priorities and the queues gated by ``check`` (and ``also``): what
    a cluster that runs or queues the campaign's jobs needs (on MultiKueue, the manager and every worker)."""
    admin = cp.admin
    admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    admin.apply(runtime(runtime_name, image, ledger))
    for name, value in PRIORITIES.items():
        admin.apply(site.priority_class(name, value))
    for queue in QUEUES:
        admin.apply(site.gated_cluster_queue(queue, check=check, flavor=tb.resource_flavor, quota=QUOTA, also=also))
        admin.apply(site.local_queue(namespace, queue, queue))


def others_job(name: str, namespace: str, queue: str, runtime_name: str) -> dict[str, Any]:
    """Another party's urgent TrainJob on kwok's nodes (not dispatch's: the gate approves it at once)."""
    return site.preemptor(name, namespace, queue=queue, priority_class="chaos-high", runtime=runtime_name,
                          cpu=OTHERS_CPU, memory="64Mi")  # fmt: skip
