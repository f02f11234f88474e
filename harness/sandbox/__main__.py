"""The sandbox: a local cluster with dispatch installed from its chart, and one job run through it.

    python -m harness.sandbox                    # run the scenario, then keep the cluster up until Ctrl-C
    python -m harness.sandbox --no-wait          # run the scenario and stop (exit 0 when it passed, 1 when not)
    python -m harness.sandbox --supervisor go    # the supervisor's part by the Go client's example supervisor
    python -m harness.sandbox --multicluster     # a MultiKueue manager and two workers: a worker lost, the job moving

`scripts/sandbox` builds what is missing first. See README.md, "Run the sandbox".
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import sys
from dataclasses import dataclass
from pathlib import Path

from ulid import ULID

from contract.keys import ADMISSION_CHECK_NAME
from harness.binaries import BUILD_SCRIPT, TIER_B_BINARIES, MissingBinaryError, locate, locate_node
from harness.cluster import ControlPlane, new_run_dir, start_control_plane
from harness.multicluster import WORKER_LOST_TIMEOUT, MultiCluster, start_multicluster
from harness.processes import stop_everything
from harness.real_node import RealNode, start_real_node
from harness.sandbox import go_supervisor, install, on_node, scenario, table, trainer
from harness.sandbox import multicluster as sandbox_multicluster
from harness.sandbox.steps import Progress, StepFailed
from harness.service_network import ServiceNetwork, start_service_network
from harness.tier_b import TierB, start_tier_b

SANDBOX_BINARIES = (*TIER_B_BINARIES, "helm")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="scripts/sandbox", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-wait",
        "--ci",
        dest="no_wait",
        action="store_true",
        help="stop once the scenario has run: exit 0 if it passed, 1 if not (for CI)",
    )
    parser.add_argument(
        "--supervisor",
        choices=("python", "go"),
        default="python",
        help="who drives the job through the agent's API: python (default), the scenario with the Python client "
        "(preemption, the gate's hold, a stranger's refused writes); go, the Go client's example supervisor "
        "(clients/go/examples/supervisor, built here): Preflight, Start, Open, a Hold and Release, Status, Output "
        "and Stop, with the webhook and the agent as local processes and the job's pods on kwok's nodes",
    )
    parser.add_argument(
        "--multicluster",
        action="store_true",
        help="the multi-cluster story instead (docs/multicluster.md): a MultiKueue manager and two workers, three "
        "control planes here, dispatch's agent on the manager; one job runs on a worker, the worker is lost, and "
        "once it is fenced the job moves to the other worker with R above anything the lost one could reach",
    )
    return parser


def _failed(exc: StepFailed | KeyboardInterrupt) -> int:
    """The exit code of a run that did not pass, once it said why: 1 naming the failed step and the logs to read,
    130 when interrupted."""
    if isinstance(exc, KeyboardInterrupt):
        print("\nsandbox: interrupted", file=sys.stderr)
        return 130
    print(f"\nsandbox: step '{exc.step}' failed: {exc.reason}", file=sys.stderr)
    for log in exc.logs:
        print(f"  read {log}", file=sys.stderr)
    return 1


def _multicluster(out: Progress, run_dir: Path, no_wait: bool) -> int:
    """`--multicluster`: harness.sandbox.multicluster's story, printed; the clusters stay up until Ctrl-C."""
    work = run_dir / "sandbox"
    work.mkdir(parents=True, exist_ok=True)
    out.line("dispatch-k8s sandbox: a MultiKueue manager and two workers, dispatch on the manager, and one job that")
    out.line("loses its worker and moves (docs/multicluster.md)")
    out.line(f"  run folder {run_dir}")
    out.line("  the job's pods on kwok's nodes, which run no containers: its identity is the pods' A and J")
    out.line()
    mc: MultiCluster | None = None
    try:
        with out.step("clusters", timeout=600, logs=[run_dir.parent]) as done:
            mc = start_multicluster()
            done.detail = (
                f"a manager and {', '.join(mc.cluster_names)}: three control planes, each tier B, MultiKueue Active "
                f"(workerLostTimeout {WORKER_LOST_TIMEOUT})"
            )
        cp = mc.manager.control_plane
        logs = [cp.supervisor.log_dir / "dispatch-agent.log", cp.supervisor.log_dir / "kueue.log"]
        story = sandbox_multicluster.run(out, mc, work, str(ULID()), logs)
        out.line()
        for line in sandbox_multicluster.table(story):
            out.line(line)
        first, second = story.executions
        out.line()
        out.line(
            f"R only rises: the execution on {second.worker} starts at R = {second.a}, above every R the one on the "
            f"lost {first.worker} can reach ({first.reachable[0]}..{first.reachable[1]}), even if it still runs."
        )
        out.line()
        if no_wait:
            return 0
        out.line("The clusters stay up until Ctrl-C.")
        for role, tb in [("manager", mc.manager), *((w.name, w.tier_b) for w in mc.workers)]:
            out.line(f"  {role:9} kubeconfig (admin) {tb.control_plane.admin_kubeconfig}")
        out.line(f"  logs      {run_dir.parent}")
        _until_interrupted(out)
        return 0
    except (StepFailed, KeyboardInterrupt) as exc:
        return _failed(exc)
    finally:
        if mc is not None:
            count = sum(len(cp.supervisor.processes) for cp in mc.control_planes)
            mc.stop()
            out.line(f"Stopped {count} processes. The run folder stays: {run_dir}")
        stop_everything()


def _env_file(path: Path, cp: ControlPlane, setup: scenario.Setup) -> Path:
    bin_dir = Path(sys.executable).parent
    resolve = " ".join(f"{host}:{address}" for host, address in setup.resolve.items())
    lines = [
        f"export KUBECONFIG={shlex.quote(str(cp.admin_kubeconfig))}",
        f"export DISPATCH_AGENT_SERVER={shlex.quote(setup.api_url)}",
        f"export DISPATCH_AGENT_TOKEN_FILE={shlex.quote(str(setup.token_file))}",
        f"export DISPATCH_AGENT_CA_FILE={shlex.quote(str(setup.ca_file))}",
        *([f"export DISPATCH_AGENT_RESOLVE={shlex.quote(resolve)}"] if resolve else []),
        f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"',
    ]
    path.write_text("# The sandbox's cluster and agent API, for kubectl-style tools and dispatch-agent.\n"
                    + "\n".join(lines) + "\n")  # fmt: skip
    return path


@dataclass(frozen=True)
class Installed:
    """dispatch as the scenario reaches it."""

    check: str
    api_url: str
    ca_file: Path
    resolve: dict[str, str]
    logs: list[Path]


def _as_processes(out: Progress, cp: ControlPlane, work: Path, logs: Path) -> Installed:
    """The chart rendered and applied but for its pods; the webhook and the agent as local processes."""
    with out.step("chart", timeout=120, logs=[work / "helm.log"]) as done:
        rendered, applied = install.install(cp, work)
        n = sum(applied.applied.values())
        done.detail = f"helm {rendered.helm_version} template: {len(rendered.docs)} objects; applied {n}"
        skipped = [
            f"{kind} {name}" + ("" if kind in install.NOT_APPLIED else f" ({why})")
            for kind, name, why in applied.skipped
        ]
        done.more.append("not applied (they need pods): " + ", ".join(skipped))

    with out.step("webhook", timeout=90, logs=[logs / "dispatch-webhook.log", work / "dispatch-certs.log"]) as done:
        certs = install.generate_certs(work)
        sa, kubeconfig = install.service_account_kubeconfig(cp, rendered)
        webhook_sa, webhook_kubeconfig = install.webhook_kubeconfig(cp, rendered, work)
        _, webhook_url = install.start_webhook(cp, work, certs, webhook_kubeconfig)
        configs = install.apply_webhook_configurations(cp, rendered, webhook_url, certs)
        principal = f"system:serviceaccount:{install.NAMESPACE}:{webhook_sa}"
        done.detail = (
            f"dispatch-webhook on {webhook_url} as {principal} "
            "(its own ServiceAccount: the token kube-controller-manager wrote into the chart's Secret)"
        )
        done.more.append(f"the chart's {configs} webhook configurations, pointed there: the API server calls it")

    with out.step("helm test", timeout=200, logs=[work / "selftest.log"]) as done:
        principal, said = install.helm_test(cp, rendered, work)
        done.detail = f"dispatch-webhook selftest as {principal}: passed"
        done.more.append(said.partition(": HTTP ")[0])

    with out.step("agent", timeout=90, logs=[logs / "dispatch-agent.log"]) as done:
        _, api_url, _ = install.start_agent(cp, work, certs, kubeconfig)
        done.detail = (
            f"dispatch-agent as system:serviceaccount:{install.NAMESPACE}:{sa} (dispatch; a TokenRequest token), "
            f"leading; its API on {api_url}"
        )
    check = rendered.of("AdmissionCheck")[0]["metadata"]["name"]
    return Installed(check, api_url, certs.ca, {}, [logs / "dispatch-agent.log", logs / "dispatch-webhook.log"])


def _on_the_node(out: Progress, cp: ControlPlane, node: RealNode, image: on_node.Image, work: Path) -> Installed:
    """`helm install` for real: the chart's pods on the real node, reached through their Service."""
    pod_logs = [node.pod_logs_dir]
    with out.step("chart", timeout=420, logs=[work / "helm.log", *pod_logs]) as done:
        version, pods = on_node.helm_install(cp, node, image, work)
        done.detail = (
            f"helm {version} install --wait: {len(pods)} pod(s) Ready on {node.name} (kubelet, containerd, runc), "
            f"image {image.ref}"
        )
        done.more.append(
            "the certificate controller in the pod generated the certificate and injected the CA; "
            "the webhook and the agent run in the pod, not here"
        )

    with out.step("helm test", timeout=200, logs=[work / "helm.log", *pod_logs]) as done:
        said = on_node.helm_test(cp, work)
        done.detail = f"helm test: its pod ran on {node.name}; the API server reached the webhook through its Service"
        done.more.append(said.strip())

    with out.step("agent", timeout=90, logs=pod_logs) as done:
        api = on_node.agent_api(cp, work, pods)
        address = next(iter(api.resolve.values()))
        done.detail = f"pod {api.lease_holder} leads; its API on {api.api_url} (the Service's ClusterIP {address})"
    return Installed(ADMISSION_CHECK_NAME, api.api_url, api.ca_file, api.resolve, [work / "helm.log", *pod_logs])


def _keep_up(out: Progress, cp: ControlPlane, setup: scenario.Setup, env: Path, logs: Path) -> None:
    out.line("The cluster stays up until Ctrl-C.")
    out.line(f"  kubeconfig (admin)  {cp.admin_kubeconfig}")
    out.line(f"  agent API           {setup.api_url}   CA {setup.ca_file}")
    for host, address in setup.resolve.items():
        out.line(f"{'':22}{host} is the Service's ClusterIP {address} (--resolve {host}:{address})")
    out.line(f"  supervisor token    {setup.token_file}")
    out.line(f"  logs                {logs}")
    out.line(f"  try the CLI         . {env}")


def _until_interrupted(out: Progress) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.sigwait({signal.SIGINT, signal.SIGTERM})
    out.line()


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = Progress()
    try:
        locate().require(SANDBOX_BINARIES)
    except MissingBinaryError as exc:
        print(f"sandbox: {exc}\n(scripts/sandbox builds them: it runs {BUILD_SCRIPT} first)", file=sys.stderr)
        return 2
    if args.multicluster:
        return _multicluster(out, new_run_dir(), args.no_wait)
    in_go = args.supervisor == "go"
    # The Go example's job runs a placeholder image that no real node has: with it, kwok's nodes run the job.
    placeholder = (None, "the Go example supervisor's job runs a placeholder image")
    image, not_here = placeholder if in_go else on_node.available()

    run_dir = new_run_dir()
    work = run_dir / "sandbox"
    work.mkdir(parents=True, exist_ok=True)
    logs = run_dir / "logs"
    out.line("dispatch-k8s sandbox: a local Kubernetes cluster with dispatch installed, and one job run through it")
    out.line(f"  run folder {run_dir}")
    if image is None:
        out.line(f"  no real node ({not_here}): the webhook and the agent run as local processes,")
        out.line("  and the job's pods on kwok's nodes, which run no containers: its identity is Status's alone")
    if in_go:
        out.line("  the supervisor: the Go client's example (clients/go/examples/supervisor), not the scenario")
    out.line()
    cp: ControlPlane | None = None
    node: RealNode | None = None
    network: ServiceNetwork | None = None
    try:
        if in_go:
            with out.step("go build", timeout=600, logs=[work / "go-build.log"]) as done:
                binary, go_version = go_supervisor.build(work, work / "go-build.log")
                done.detail = f"clients/go/examples/supervisor with {go_version}: {binary}"

        with out.step("cluster", timeout=420, logs=[logs]) as done:
            cp = start_control_plane(run_dir)
            tb: TierB = start_tier_b(cp)
            done.detail = (
                f"tier B: kube-apiserver, etcd, controller-manager, scheduler, kwok ({len(tb.node_names)} nodes), "
                "Kueue, JobSet, Trainer"
            )
            if image is not None:
                node = start_real_node(cp, "real-node-0", locate_node().require(), images=[image.archive])
                network = start_service_network(cp, node, locate_node().require())
                done.detail = done.detail.replace("tier B", "tier C")
                done.more.append(
                    f"a real node {node.name} (kubelet, containerd, runc; the image imported) and kube-proxy"
                )

        if node is not None and image is not None:
            installed = _on_the_node(out, cp, node, image, work)
        else:
            installed = _as_processes(out, cp, work, logs)

        scenario_logs = [*installed.logs, logs / "kueue.log"]
        with out.step("queues", timeout=120, logs=scenario_logs) as done:
            setup = scenario.prepare(
                cp, tb, check=installed.check,
                roles=(f"{install.RELEASE}-supervisor", f"{install.RELEASE}-preflight"),
                api_url=installed.api_url, ca_file=installed.ca_file, work=work,
                logs=[*scenario_logs, work / "status.jsonl"], resolve=installed.resolve,
                real=scenario.RealNodeJob(node.name, image.ref) if node is not None and image is not None else None,
                stop_seconds=go_supervisor.STOP_SECONDS if in_go else scenario.STOP_SECONDS,
            )  # fmt: skip
            done.detail = (
                f"ClusterQueue {setup.local_queue} (AdmissionCheck {installed.check}, room for one job) Active; "
                f"LocalQueue {setup.namespace}/{setup.local_queue}"
            )
            done.more.append(
                f"ServiceAccounts {setup.namespace}/supervisor (bound to the chart's supervisor and Preflight roles) "
                f"and {setup.namespace}/stranger (may edit TrainJobs, Workloads and JobSets)"
            )
            if setup.real is not None:
                done.more.append(
                    f"ClusterTrainingRuntime {setup.runtime}: its trainer on {setup.real.node}, in {setup.real.image} "
                    f"(python -c: prints DISPATCH_EPOCH and DISPATCH_ATTEMPT, trains {trainer.WORK_SECONDS}s; "
                    f"{trainer.STOP_SECONDS}s to stop on SIGTERM)"
                )

        if in_go:
            argv = go_supervisor.command(binary, setup)
            go_supervisor.kwok_log(tb.container_log)
            with out.step("supervisor", timeout=600, logs=[work / "supervisor.log", *setup.logs]) as done:
                out.partial(f"{binary.name} as {setup.namespace}/supervisor, its lines as it prints them:")
                go_supervisor.run(argv, work / "supervisor.log", out.below, setup.logs)
                done.detail = "exit 0: every step did what the API says"
            out.line()
            out.line(
                f"The Go example supervisor ran one job through the agent's API as {setup.namespace}/supervisor: "
                f"{', '.join(go_supervisor.STEPS)}."
            )
            out.line(f"Not in this run (the default story's, scripts/sandbox without --supervisor go): "
                     f"{go_supervisor.NOT_COVERED}.")  # fmt: skip
            out.line()
            if args.no_wait:
                return 0
            env = _env_file(work / "env.sh", cp, setup)
            _keep_up(out, cp, setup, env, logs)
            out.line(f"{'':22}dispatch-agent list --namespace {setup.namespace} -o table")
            out.line(f"  run it again        (cd {go_supervisor.MODULE} && {shlex.join(argv)})")
            _until_interrupted(out)
            return 0

        with out.step("scenario", timeout=600, logs=setup.logs) as done:
            names: list[str] = []

            def on_step(name: str) -> None:
                out.partial(("" if not names else ", ") + name)
                names.append(name)

            runner = scenario.Scenario(setup, on_step)
            result = asyncio.run(runner.run())
            done.more.append("Preflight proved the start gate and the readmission gate; every call as the supervisor")
            if result.printed:
                done.more.append(
                    "each execution's container printed the identity Status shows (read with Output, as a supervisor)"
                )

        out.line()
        for line in table.render(result, runner.statuses):
            out.line(line)
        out.line()
        if args.no_wait:
            return 0

        env = _env_file(work / "env.sh", cp, setup)
        ref = result.ref
        assert ref is not None
        _keep_up(out, cp, setup, env, logs)
        out.line(f"{'':22}dispatch-agent status --namespace {ref.namespace} --name {ref.name} --uid {ref.uid}")
        _until_interrupted(out)
        return 0
    except (StepFailed, KeyboardInterrupt) as exc:
        return _failed(exc)
    finally:
        if network is not None:
            network.stop()
        if node is not None:
            node.stop()
        if cp is not None:
            count = len(cp.supervisor.processes)
            cp.stop()
            out.line(f"Stopped {count} processes. The run folder stays: {run_dir}")
        stop_everything()  # anything a failed start-up left registered


if __name__ == "__main__":
    sys.exit(main())
