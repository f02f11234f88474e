"""``dispatch-webhook serve``: flags in the style of Kubernetes components, then the server until SIGTERM.

Everything that can be wrong with the inputs (config, certificate, kubeconfig) is checked before the port
opens, and reported on stderr with a non-zero exit, so a bad rollout fails its pod instead of serving.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from collections.abc import Sequence

from serving import flags, logs
from serving.kube import KubeConfigError, api_client
from serving.tls import CertificateLoadError, ReloadingServerContext
from webhook import selftest
from webhook.config import Config, ConfigError, load_config
from webhook.kube import LookupReadiness, RuntimeCopies, RuntimeReader
from webhook.metrics import Metrics
from webhook.server import Webhook, serving

PROG = "dispatch-webhook"
log = logging.getLogger(PROG)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="dispatch's admission webhook")
    flags.add_version(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve /validate and /mutate over HTTPS")
    serve.add_argument("--tls-cert-file", required=True, help="PEM certificate (chain); reloaded on change")
    serve.add_argument("--tls-private-key-file", required=True, help="PEM private key; reloaded on change")
    serve.add_argument("--port", type=int, default=9443, help="HTTPS port (default 9443)")
    serve.add_argument("--bind-address", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    serve.add_argument("--config", required=True, help="YAML config: dispatch's principals and site options")
    flags.add_kube_arguments(serve)
    flags.add_shutdown_delay(serve, "reviews")
    logs.add_arguments(serve)
    test = commands.add_parser(
        "selftest",
        help="prove the API server calls the webhook: a dry-run TrainJob must come back denied by dispatch-k8s "
        "(the chart's helm test); exit 0 if so, 1 naming what is wrong",
    )
    test.add_argument(
        "--namespace", required=True, help="where the dry run is sent: a namespace the webhook is called for"
    )
    flags.add_kube_arguments(test)
    test.add_argument(
        "--timeout",
        type=flags.duration,
        default=60.0,
        metavar="DURATION",
        help="keep trying this long (a fresh install needs a few seconds; default 60s)",
    )
    test.add_argument(
        "--runtime",
        default=selftest.DEFAULT_RUNTIME,
        help=f"the probe's runtimeRef, for other webhooks that check it (default {selftest.DEFAULT_RUNTIME})",
    )
    logs.add_arguments(test)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    try:
        if args.command == "selftest":
            return asyncio.run(_selftest(args))
        config = load_config(args.config)
        tls = ReloadingServerContext(args.tls_cert_file, args.tls_private_key_file)
        return asyncio.run(_serve(args, config, tls))
    except (ConfigError, CertificateLoadError, KubeConfigError, OSError) as exc:  # OSError: cannot bind
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


async def _serve(args: argparse.Namespace, config: Config, tls: ReloadingServerContext) -> int:
    async with await api_client(args.kubeconfig, args.context) as api:
        # The runtime copies from a watch, a GET when memory cannot answer (webhook/kube.py says when).
        metrics = Metrics()
        copies = RuntimeCopies(api, RuntimeReader(api), metrics.count_lookup)
        watching = asyncio.create_task(copies.run(), name="runtime-copies")
        webhook = Webhook(config, tls, lookup=copies, lookup_ready=LookupReadiness(api), metrics=metrics)
        try:
            await _until_stopped(args, webhook)
        finally:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
    log.info("stopped")
    return 0


async def _selftest(args: argparse.Namespace) -> int:
    async with await api_client(args.kubeconfig, args.context) as api:
        verdict, attempts = await selftest.run(api, args.namespace, within=args.timeout, runtime=args.runtime)
    if verdict.result is selftest.Result.PASSED:
        by = (
            "dispatch-k8s's owner policy"
            if selftest.BELONGS in verdict.message
            else "the API server called dispatch-k8s's webhook, which"
        )
        print(f"ok: {by} denied a dispatch TrainJob of a stranger (a dry run in {args.namespace}; "
              f"attempt {attempts}): {verdict.message}")  # fmt: skip
        return 0
    print(f"{PROG} selftest: FAILED after {attempts} attempt(s): {verdict.message}", file=sys.stderr)
    return 1


async def _until_stopped(args: argparse.Namespace, webhook: Webhook) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with serving(webhook, args.bind_address, args.port) as port:
        log.info("serving https on %s:%d", args.bind_address, port)
        await stop.wait()
        webhook.stopping = True
        log.info("stopping: not ready now, closing in %gs", args.shutdown_delay_duration)
        await asyncio.sleep(args.shutdown_delay_duration)
