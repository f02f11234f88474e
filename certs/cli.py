"""``dispatch-certs``: certificates to files for development and the sandbox, and the certificate controller.

    dispatch-certs generate --out DIR --dns NAME... [--ip ADDR...] [--validity DAYS]
    dispatch-certs run --out DIR [--namespace NS] [--secret NAME] [--service NAME] [--once] ...
    dispatch-certs uninstall [--webhook-configuration NAME]... [--prologue-configmap NAME]...

``generate`` writes ca.crt, tls.crt and tls.key (the key 0600); the CA's key is not kept, so nothing
else can ever be signed with it. ``run`` is the controller the chart runs in each pod beside the webhook
and the agent (see docs/certs.md): it fills the Secret, rotates, injects the caBundle, writes the served
files to ``--out`` and answers /readyz, /healthz and /metrics on a plain HTTP port. ``uninstall`` is the
chart's pre-delete hook: it deletes our Validating and Mutating webhook configurations, so an uninstall
never leaves the cluster failing closed on a webhook that is gone, and, with ``--prologue-configmap``, the
prologue's ConfigMap the agent made in each namespace a job ran in.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import logging
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final

import aiohttp
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from certs import lifecycle, pki
from certs.controller import CertController, Target
from certs.files import write_plain
from certs.injection import LABEL, LABEL_VALUE, is_ours
from certs.metrics import certs_registry
from contract.keys import NAME, PROLOGUE_CONFIGMAP_LABELS
from serving import flags, logs
from serving.kube import KubeConfigError, api_client, describe_api_error
from serving.prometheus import CONTENT_TYPE, exposition

PROG: Final = "dispatch-certs"
DEFAULT_SECRET: Final = f"{NAME}-certs"
SERVICE_ACCOUNT_NAMESPACE: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
log = logging.getLogger(PROG)

_DURATION = re.compile(r"(\d+(?:\.\d*)?)(ms|s|m|h|d)")
_UNITS: Final = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> dt.timedelta:
    """A Go-style duration, plus days: "90d", "8760h", "1h30m", "500ms"."""
    if not re.fullmatch(f"(?:{_DURATION.pattern})+", text):
        raise argparse.ArgumentTypeError(f"not a duration like 90d, 24h or 30m: {text!r}")
    return dt.timedelta(seconds=sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(text)))


def _days(text: str) -> dt.timedelta:
    try:
        days = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of days: {text!r}") from None
    if days <= 0:
        raise argparse.ArgumentTypeError("the validity must be positive")
    return dt.timedelta(days=days)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="dispatch-k8s's TLS certificates")
    flags.add_version(parser)
    commands = parser.add_subparsers(dest="command", required=True)

    gen = commands.add_parser("generate", help="a CA and a serving certificate to files (development, sandbox)")
    gen.add_argument("--out", required=True, type=Path, help="directory for ca.crt, tls.crt, tls.key")
    gen.add_argument("--dns", action="extend", nargs="+", default=[], metavar="NAME", help="DNS names (SANs)")
    gen.add_argument("--ip", action="extend", nargs="+", default=[], metavar="ADDR", help="IP addresses (SANs)")
    gen.add_argument("--validity", type=_days, default=dt.timedelta(days=365), metavar="DAYS", help="default 365")

    run = commands.add_parser("run", help="the certificate controller (fills and rotates the Secret, injects)")
    run.add_argument("--out", required=True, type=Path, help="directory the servers read tls.crt/tls.key from")
    run.add_argument("--namespace", help="the Secret's and Service's namespace (default: the pod's)")
    run.add_argument("--secret", default=DEFAULT_SECRET, help=f"the Secret to fill (default {DEFAULT_SECRET})")
    run.add_argument("--service", default=NAME, help=f"the Service whose DNS names are served (default {NAME})")
    run.add_argument("--cluster-domain", default="cluster.local", help="default cluster.local")
    run.add_argument("--dns", action="extend", nargs="+", default=[], metavar="NAME", help="extra DNS names")
    run.add_argument("--ip", action="extend", nargs="+", default=[], metavar="ADDR", help="extra IP addresses")
    run.add_argument(
        "--webhook-configuration",
        dest="configurations",
        action="append",
        metavar="NAME",
        help=f"a Validating/MutatingWebhookConfiguration to inject into (repeatable; default {NAME}); "
        f"it must also carry the label app.kubernetes.io/name={NAME}",
    )
    flags.add_kube_arguments(run)
    run.add_argument("--health-bind-address", default="0.0.0.0", help="default 0.0.0.0")
    run.add_argument(
        "--health-port", type=int, default=8081, help="plain HTTP /healthz, /readyz and /metrics (default 8081)"
    )
    run.add_argument(
        "--once",
        action="store_true",
        help="exit 0 as soon as ready (an init container), 1 if not ready within --once-timeout",
    )
    run.add_argument(
        "--once-timeout",
        type=parse_duration,
        default=dt.timedelta(minutes=2),
        metavar="DURATION",
        help="how long --once waits (default 2m)",
    )
    run.add_argument(
        "--ca-validity",
        type=parse_duration,
        default=lifecycle.CA_VALIDITY,
        metavar="DURATION",
        help="CA lifetime (default 365d)",
    )
    run.add_argument(
        "--serving-validity",
        type=parse_duration,
        default=lifecycle.SERVING_VALIDITY,
        metavar="DURATION",
        help="serving certificate lifetime (default 90d)",
    )
    run.add_argument(
        "--settle",
        type=parse_duration,
        default=lifecycle.SETTLE,
        metavar="DURATION",
        help="a staged CA is trusted this long before it signs (default 1h)",
    )
    run.add_argument(
        "--overlap",
        type=parse_duration,
        default=lifecycle.OVERLAP,
        metavar="DURATION",
        help="the previous CA stays trusted this long after the switch (default 24h)",
    )
    uninstall = commands.add_parser(
        "uninstall", help="delete our webhook configurations (the chart's pre-delete hook); one already gone is fine"
    )
    uninstall.add_argument(
        "--webhook-configuration",
        dest="configurations",
        action="append",
        metavar="NAME",
        help=f"the Validating and the Mutating WebhookConfiguration of this name (repeatable; default {NAME}); "
        f"deleted only if it carries the label {LABEL}={LABEL_VALUE}",
    )
    uninstall.add_argument(
        "--prologue-configmap",
        dest="prologues",
        action="append",
        default=[],
        metavar="NAME",
        help="the prologue's ConfigMap of this name, in every namespace (repeatable; default none); deleted only "
        f"if it carries the prologue's labels {_PROLOGUE_SELECTOR}",
    )
    flags.add_kube_arguments(uninstall)
    for command in (gen, run, uninstall):
        logs.add_arguments(command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure(args.log_level, args.log_format)
    try:
        if args.command == "generate":
            return generate(args.out, dns=args.dns, ips=args.ip, validity=args.validity)
        if args.command == "uninstall":
            return asyncio.run(_uninstall(args))
        return asyncio.run(_run(args))
    except (ValueError, KubeConfigError, OSError, UninstallError) as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1


def generate(out: Path, *, dns: Sequence[str], ips: Sequence[str], validity: dt.timedelta) -> int:
    if not dns and not ips:
        raise ValueError("give at least one --dns or --ip")
    ca = pki.make_ca(f"{lifecycle.CA_NAME}-dev", organization="dispatch-k8s", validity=validity)
    leaf = pki.make_serving_cert(ca, (dns or ips)[0], dns_names=dns, ip_addresses=ips, validity=validity)
    for path in write_plain(out, {"ca.crt": ca.cert_pem, "tls.crt": leaf.cert_pem, "tls.key": leaf.key_pem}):
        print(path)
    return 0


def _namespace(args: argparse.Namespace) -> str:
    namespace = args.namespace or os.environ.get("POD_NAMESPACE")
    if not namespace:
        try:
            namespace = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError:
            raise ValueError("give --namespace (not in a pod: no ServiceAccount namespace file)") from None
    return namespace


def policy_from(args: argparse.Namespace, namespace: str) -> lifecycle.Policy:
    dns = list(lifecycle.service_dns_names(args.service, namespace, args.cluster_domain))
    dns += [d for d in args.dns if d not in dns]
    return lifecycle.Policy(
        dns_names=tuple(dns),
        ip_addresses=tuple(args.ip),
        ca_validity=args.ca_validity,
        serving_validity=args.serving_validity,
        settle=args.settle,
        overlap=args.overlap,
    )


async def _run(args: argparse.Namespace) -> int:
    namespace = _namespace(args)
    policy = policy_from(args, namespace)
    target = Target(
        namespace=namespace,
        secret=args.secret,
        configurations=tuple(args.configurations or (NAME,)),
        out_dir=args.out,
    )
    async with await api_client(args.kubeconfig, args.context) as api:
        controller = CertController(api, target, policy)
        if args.once:
            return await _once(controller, args.once_timeout)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        runner = await _health(controller, args.health_bind_address, args.health_port)
        task = asyncio.create_task(controller.run(), name="certificate-controller")
        try:
            await asyncio.wait([task, asyncio.create_task(stop.wait())], return_when=asyncio.FIRST_COMPLETED)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await runner.cleanup()
        if task.done() and not task.cancelled():
            error = task.exception()
            if error is not None:
                raise error
    return 0


async def _once(controller: CertController, limit: dt.timedelta) -> int:
    task = asyncio.create_task(controller.run(resync=2.0))
    try:
        async with asyncio.timeout(limit.total_seconds()):
            await controller.readiness.wait_ready()
    except TimeoutError:
        print(f"{PROG}: not ready after {limit}: {controller.readiness.check()[1]}", file=sys.stderr)
        return 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    log.info("ready: the certificate is in %s and the CA bundle is injected", controller.target.out_dir)
    return 0


async def _health(controller: CertController, host: str, port: int) -> web.AppRunner:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        ok, why = controller.readiness.check()
        return web.Response(status=200 if ok else 503, text=why)

    metrics_registry = certs_registry(controller)

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=exposition(metrics_registry), headers={"Content-Type": CONTENT_TYPE})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    log.info("health and metrics on http://%s:%d (/readyz, /metrics)", host, port)
    return runner


# -- uninstall ----------------------------------------------------------------------------------------

UNINSTALL_ATTEMPTS: Final = 6
"""Reads and deletes per configuration before giving up (a 409, a 429, a 5xx or a lost connection retries)."""


class UninstallError(RuntimeError):
    pass


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ApiException):
        return exc.status == 429 or exc.status >= 500
    return isinstance(exc, aiohttp.ClientError | TimeoutError | OSError)


async def delete_configuration(
    api: client.ApiClient, kind: str, name: str, *, attempts: int = UNINSTALL_ATTEMPTS, pause: float = 0.5
) -> str:
    """Delete our ``kind`` named ``name`` if it is ours (our label), preconditioned on the uid read.

    Returns what happened: ``deleted``, ``absent`` (404 on the read or the delete) or ``not ours``.
    A 409 means the object was replaced between the read and the delete: the new one is read and judged
    again. Transient failures are retried; anything else raises UninstallError naming the object.
    """
    admission = client.AdmissionregistrationV1Api(api)
    read, delete = {
        "ValidatingWebhookConfiguration": (
            admission.read_validating_webhook_configuration,
            admission.delete_validating_webhook_configuration,
        ),
        "MutatingWebhookConfiguration": (
            admission.read_mutating_webhook_configuration,
            admission.delete_mutating_webhook_configuration,
        ),
    }[kind]
    last = "no attempt"
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(pause * 2 ** (attempt - 1))
        try:
            obj = api.sanitize_for_serialization(await read(name))
        except Exception as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return "absent"
            if not _transient(exc):
                raise UninstallError(f"{kind} {name}: {_describe(exc)}") from None
            last = _describe(exc)
            continue
        if not is_ours(obj, (name,)):
            log.warning("%s %s does not carry the label %s=%s: not ours, left alone", kind, name, LABEL, LABEL_VALUE)
            return "not ours"
        uid = obj["metadata"]["uid"]
        options = client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid))
        try:
            await delete(name, body=options)
        except Exception as exc:
            if isinstance(exc, ApiException) and exc.status == 404:
                return "absent"
            if isinstance(exc, ApiException) and exc.status == 409:
                last = f"replaced since it was read (uid {uid})"
                continue
            if not _transient(exc):
                raise UninstallError(f"{kind} {name}: {_describe(exc)}") from None
            last = _describe(exc)
            continue
        log.info("deleted %s %s (uid %s)", kind, name, uid)
        return "deleted"
    raise UninstallError(f"{kind} {name}: not deleted after {attempts} attempts: {last}")


def _describe(exc: BaseException) -> str:
    return describe_api_error(exc) if isinstance(exc, ApiException) else f"{type(exc).__name__}: {exc}"


_PROLOGUE_SELECTOR: Final = ",".join(f"{k}={v}" for k, v in PROLOGUE_CONFIGMAP_LABELS.items())


async def delete_prologue_configmaps(
    api: client.ApiClient, name: str, *, attempts: int = UNINSTALL_ATTEMPTS, pause: float = 0.5
) -> dict[str, str]:
    """Delete the prologue's ConfigMap ``name`` in every namespace where it carries the prologue's labels, each
    preconditioned on the uid and resourceVersion listed.

    The list names the ConfigMap (a field selector on ``metadata.name``), so RBAC can grant it by name alone.
    Returns namespace -> ``deleted`` or ``absent`` (gone before its delete). A 409 (replaced since the list) or a
    transient failure lists again; anything else raises UninstallError naming the object.
    """
    core = client.CoreV1Api(api)
    outcome: dict[str, str] = {}
    last = "no attempt"
    for attempt in range(attempts):
        if attempt:
            await asyncio.sleep(pause * 2 ** (attempt - 1))
        try:
            listed = api.sanitize_for_serialization(
                await core.list_config_map_for_all_namespaces(
                    field_selector=f"metadata.name={name}", label_selector=_PROLOGUE_SELECTOR
                )
            )
        except Exception as exc:
            if not _transient(exc):
                raise UninstallError(f"ConfigMaps {name}: {_describe(exc)}") from None
            last = _describe(exc)
            continue
        again = False
        for item in listed.get("items") or []:
            meta = item["metadata"]
            namespace, uid = meta["namespace"], meta["uid"]
            if meta["name"] != name:  # the field selector's answer, checked all the same
                continue
            preconditions = client.V1Preconditions(uid=uid, resource_version=meta["resourceVersion"])
            try:
                await core.delete_namespaced_config_map(
                    name, namespace, body=client.V1DeleteOptions(preconditions=preconditions)
                )
            except Exception as exc:
                if isinstance(exc, ApiException) and exc.status == 404:
                    outcome[namespace] = "absent"
                    continue
                if isinstance(exc, ApiException) and exc.status == 409:
                    again, last = True, f"ConfigMap {namespace}/{name} replaced since it was listed (uid {uid})"
                    continue
                if not _transient(exc):
                    raise UninstallError(f"ConfigMap {namespace}/{name}: {_describe(exc)}") from None
                again, last = True, f"ConfigMap {namespace}/{name}: {_describe(exc)}"
                continue
            log.info("deleted ConfigMap %s/%s (uid %s)", namespace, name, uid)
            outcome[namespace] = "deleted"
        if not again:
            return outcome
    raise UninstallError(f"ConfigMaps {name}: not all deleted after {attempts} attempts: {last}")


async def _uninstall(args: argparse.Namespace) -> int:
    names = tuple(dict.fromkeys(args.configurations or (NAME,)))
    async with await api_client(args.kubeconfig, args.context) as api:
        for name in names:
            for kind in ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"):
                print(f"{kind} {name}: {await delete_configuration(api, kind, name)}")
        # After the configurations, which matter more: a ConfigMap left does nothing, a webhook gone fails closed.
        for name in dict.fromkeys(args.prologues):
            deleted = await delete_prologue_configmaps(api, name)
            print(f"ConfigMap {name}: " + (", ".join(f"{ns} {what}" for ns, what in sorted(deleted.items())) or "none"))
    return 0
