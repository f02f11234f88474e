"""The sandbox: a local cluster with dispatch installed from its chart, and one job run through it.

    python -m harness.sandbox            # run the scenario, then keep the cluster up until Ctrl-C
    python -m harness.sandbox --no-wait  # run the scenario and stop (exit 0 when it passed, 1 when not)

`scripts/sandbox` builds what is missing first. See README.md, "Run the sandbox".
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import signal
import sys
from pathlib import Path

from harness.binaries import BUILD_SCRIPT, TIER_B_BINARIES, MissingBinaryError, locate
from harness.cluster import ControlPlane, new_run_dir, start_control_plane
from harness.processes import stop_everything
from harness.sandbox import install, scenario, table
from harness.sandbox.steps import Progress, StepFailed
from harness.tier_b import start_tier_b

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
    return parser


def _env_file(path: Path, cp: ControlPlane, api_url: str, token: Path, ca: Path) -> Path:
    bin_dir = Path(sys.executable).parent
    lines = [
        f"export KUBECONFIG={shlex.quote(str(cp.admin_kubeconfig))}",
        f"export DISPATCH_AGENT_SERVER={shlex.quote(api_url)}",
        f"export DISPATCH_AGENT_TOKEN_FILE={shlex.quote(str(token))}",
        f"export DISPATCH_AGENT_CA_FILE={shlex.quote(str(ca))}",
        f'export PATH={shlex.quote(str(bin_dir))}:"$PATH"',
    ]
    path.write_text("# The sandbox's cluster and agent API, for kubectl-style tools and dispatch-agent.\n"
                    + "\n".join(lines) + "\n")  # fmt: skip
    return path


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = Progress()
    try:
        locate().require(SANDBOX_BINARIES)
    except MissingBinaryError as exc:
        print(f"sandbox: {exc}\n(scripts/sandbox builds them: it runs {BUILD_SCRIPT} first)", file=sys.stderr)
        return 2

    run_dir = new_run_dir()
    work = run_dir / "sandbox"
    work.mkdir(parents=True, exist_ok=True)
    logs = run_dir / "logs"
    out.line("dispatch-k8s sandbox: a local Kubernetes cluster with dispatch installed, and one job run through it")
    out.line(f"  run folder {run_dir}")
    out.line()
    cp: ControlPlane | None = None
    try:
        with out.step("cluster", timeout=300, logs=[logs]) as done:
            cp = start_control_plane(run_dir)
            tb = start_tier_b(cp)
            done.detail = (
                f"tier B: kube-apiserver, etcd, controller-manager, scheduler, kwok ({len(tb.node_names)} nodes), "
                "Kueue, JobSet, Trainer"
            )

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
        scenario_logs = [logs / "dispatch-agent.log", logs / "dispatch-webhook.log", logs / "kueue.log"]
        with out.step("queues", timeout=120, logs=scenario_logs) as done:
            setup = scenario.prepare(
                cp, tb, check=check, roles=(f"{install.RELEASE}-supervisor", f"{install.RELEASE}-preflight"),
                api_url=api_url, ca_file=certs.ca, work=work, logs=[*scenario_logs, work / "status.jsonl"],
            )  # fmt: skip
            done.detail = (
                f"ClusterQueue {setup.local_queue} (AdmissionCheck {check}, room for one job) Active; "
                f"LocalQueue {setup.namespace}/{setup.local_queue}"
            )
            done.more.append(
                f"ServiceAccounts {setup.namespace}/supervisor (bound to the chart's supervisor and Preflight roles) "
                f"and {setup.namespace}/stranger (may edit TrainJobs and Workloads)"
            )

        with out.step("scenario", timeout=600, logs=setup.logs) as done:
            names: list[str] = []

            def on_step(name: str) -> None:
                out.partial(("" if not names else ", ") + name)
                names.append(name)

            runner = scenario.Scenario(setup, on_step)
            result = asyncio.run(runner.run())
            done.more.append("Preflight proved the start gate and the readmission gate; every call as the supervisor")

        out.line()
        for line in table.render(result, runner.statuses):
            out.line(line)
        out.line()
        if args.no_wait:
            return 0

        env = _env_file(work / "env.sh", cp, api_url, setup.token_file, certs.ca)
        ref = result.ref
        assert ref is not None
        out.line("The cluster stays up until Ctrl-C.")
        out.line(f"  kubeconfig (admin)  {cp.admin_kubeconfig}")
        out.line(f"  agent API           {api_url}   CA {certs.ca}")
        out.line(f"  supervisor token    {setup.token_file}")
        out.line(f"  try the CLI         . {env}")
        out.line(f"{'':22}dispatch-agent status --namespace {ref.namespace} --name {ref.name} --uid {ref.uid}")
        out.line(f"  logs                {logs}")
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
        out.line()
        return 0
    except StepFailed as exc:
        print(f"\nsandbox: step '{exc.step}' failed: {exc.reason}", file=sys.stderr)
        for log in exc.logs:
            print(f"  read {log}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nsandbox: interrupted", file=sys.stderr)
        return 130
    finally:
        if cp is not None:
            count = len(cp.supervisor.processes)
            cp.stop()
            out.line(f"Stopped {count} processes. The run folder stays: {run_dir}")
        stop_everything()  # anything a failed start-up left registered


if __name__ == "__main__":
    sys.exit(main())
