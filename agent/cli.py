"""``dispatch-agent serve``: the readmission gate's controller, until SIGTERM.

Everything that can be wrong with the inputs (config, kubeconfig, the health port) is reported on stderr
with a non-zero exit before anything is watched, so a bad rollout fails its pod instead of half-serving.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import uuid
from collections.abc import Callable, Sequence

from agent.api import cli as api_cli
from agent.api.app import ApiServer
from agent.api.app import serving as serve_api
from agent.api.kube import Kube as ApiKube
from agent.config import AgentConfig, ConfigError, load_config, served_api_settings
from agent.gate.controller import WATCHED, Controller
from agent.multicluster.worker_reads import WorkerClients
from agent.runtime.kube import Kube
from agent.runtime.metrics import AgentMetrics
from agent.runtime.server import HealthServer, serving
from serving import flags, logs
from serving.kube import KubeConfigError, api_client
from serving.prometheus import CertificateCollector
from serving.tls import CertificateLoadError, ReloadingServerContext

PROG = "dispatch-agent"
log = logging.getLogger(PROG)


def default_identity() -> str:
    """The pod's name when the chart passes it (POD_NAME, from the Downward API), else hostname and a uuid:
    two processes on one host must never share an identity, or both would think they hold the Lease."""
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}_{uuid.uuid4()}"


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not between {low} and {high}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="dispatch's agent: serve the readmission gate (Kueue AdmissionCheck) and the supervisor "
        "API, or call that API",
        epilog=api_cli.epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    flags.add_version(parser)
    commands = parser.add_subparsers(dest="command", required=True, metavar="VERB")
    serve = commands.add_parser("serve", help="serve the AdmissionCheck dispatch.phpboyscout.uk/admission and the API")
    flags.add_kube_arguments(serve)
    serve.add_argument("--config", help="YAML config (leaseNamespace, leaseName, nodeLossTaints, workers, healthPort)")
    serve.add_argument(
        "--health-port",
        type=_bounded(0, 65535),
        help="port of /healthz, /readyz, /metrics (overrides healthPort; 0 picks a free one)",
    )
    serve.add_argument("--bind-address", default="0.0.0.0", help="address of the health port (default 0.0.0.0)")
    serve.add_argument("--identity", help="holder identity in the Lease (default $POD_NAME, else hostname_uuid)")
    serve.add_argument("--workers", type=_bounded(1, 64), help="Workloads reconciled at once (overrides workers)")
    serve.add_argument("--tls-cert-file", help="PEM certificate of the supervisor API; the API is served only with it")
    serve.add_argument("--tls-private-key-file", help="PEM private key of the supervisor API")
    serve.add_argument("--api-port", type=_bounded(0, 65535), help="HTTPS port of the API (overrides api.port)")
    flags.add_shutdown_delay(serve, "the API")
    logs.add_arguments(serve)
    api_cli.add_verbs(commands)  # the operators' client: dispatch-agent status|open|...
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command in api_cli.COMMANDS:
        return api_cli.run_command(args)
    if (args.tls_cert_file is None) != (args.tls_private_key_file is None):
        print(f"{PROG}: --tls-cert-file and --tls-private-key-file go together", file=sys.stderr)
        return 2
    logs.configure(args.log_level, args.log_format)
    try:
        config = load_config(args.config)
        if args.workers is not None:  # the flags are range-checked by argparse
            config = config.model_copy(update={"workers": args.workers})
        return asyncio.run(_serve(args, config))
    except (ConfigError, KubeConfigError, CertificateLoadError, OSError) as exc:  # OSError: cannot bind a port
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


async def _serve(args: argparse.Namespace, config: AgentConfig) -> int:
    identity = args.identity or default_identity()
    async with await api_client(args.kubeconfig, args.context) as api_client_:
        metrics = AgentMetrics()
        kube = Kube(api_client_, instance=identity)
        workers = (
            WorkerClients(
                config.worker_kubeconfigs,
                lease_namespace=config.worker_lease_namespace or config.lease_namespace,
                origin=config.multikueue_origin,
            )
            if config.worker_kubeconfigs
            else None
        )
        controller = Controller(kube, config, identity=identity, metrics=metrics, workers=workers)

        def ready() -> tuple[bool, str]:
            waiting = [name for name in WATCHED if not controller.synced[name].is_set()]
            if waiting:
                return False, f"not listed yet: {', '.join(waiting)}"
            return True, "ok (leader)" if controller.leading else "ok (standby)"

        api = None
        settings = served_api_settings(config, args.api_port)
        if args.tls_cert_file:
            api_kube = ApiKube(api_client_, timeout=settings.request_timeout, workers=workers)
            api = ApiServer(api_kube, settings, metrics=metrics.registry)
        health = HealthServer(metrics.registry, ready)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        api_closes = loop.time()

        def on_signal() -> None:
            nonlocal api_closes
            health.stopping = True
            if api is not None and not api.stopping:
                api.stopping = True
                api_closes = loop.time() + args.shutdown_delay_duration
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        port = config.health_port if args.health_port is None else args.health_port
        async with contextlib.AsyncExitStack() as stack:
            if workers is not None:
                stack.push_async_callback(workers.close)
            port = await stack.enter_async_context(serving(health, args.bind_address, port))
            if api is not None:
                tls = ReloadingServerContext(args.tls_cert_file, args.tls_private_key_file)
                metrics.registry.register(CertificateCollector("dispatch_api", tls))
                api_port = await stack.enter_async_context(serve_api(api.app(), args.bind_address, settings.port, tls))
                log.info("supervisor API on https://%s:%d", args.bind_address, api_port)
            log.info(
                "identity %s; health on %s:%d; Lease %s/%s",
                identity,
                args.bind_address,
                port,
                config.lease_namespace,
                config.lease_name,
            )
            await controller.run(stop)
            # The gate has stepped down, so a standby takes over at once; the API is every replica's, and
            # goes on answering (each answer closing its connection) until the Service has dropped this pod.
            if (left := api_closes - loop.time()) > 0:
                log.info("stopping: not ready now, the API closes in %.3gs", left)
                await asyncio.sleep(left)
    log.info("stopped")
    return 0
