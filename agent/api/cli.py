"""``dispatch-agent start|open|hold|release|stop|status|list|output|preflight|capabilities``: the API for operators.

The request is the API's JSON (``--request FILE``, ``-`` for stdin); the operations on one object also take
``-n/--namespace --name --uid`` instead. The answer is printed on stdout as JSON (``-o json``, the default),
``-o yaml`` or ``-o table``; ``output`` prints the log as it comes. ``list`` takes ``-n`` and optionally
``--job-id``, ``--limit`` and ``--continue`` (one page; ``--all`` follows every page).

    dispatch-agent status --server https://dispatch-agent:8443 --ca-file ca.crt \\
        -n team-a --name dj-01arz3ndektsv4rrffq69g5fav-s3 --uid 6c1f... -o table

The bearer token is ``--token-file`` (read at each call), else ``$DISPATCH_AGENT_TOKEN_FILE``, else the
token of the kubeconfig's user, the kubeconfig found as kubectl finds it (``--kubeconfig``, ``$KUBECONFIG``,
``~/.kube/config``; ``--context``). The namespace is ``-n``, else the context's, else ``default``.

Exit status (``EXIT_CODES``): 0 done; 1 the agent answered with an error, its JSON body on stderr; 2 a usage
error or an invalid request, nothing sent; 3 the agent could not be reached; 130 interrupted.

A new verb is a line in ``REQUESTS`` (and a method of ``AgentClient`` of the same name); its flags, if it
has any beyond the shared ones, go in ``_verb_flags``.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ValidationError

from agent.api import output
from agent.api.client import AgentClient, AgentError, token_from_file
from agent.api.errors import ErrorKind
from agent.api.models import (
    HoldRequest,
    ListRequest,
    ListResponse,
    ObjectRef,
    OutputRequest,
    PreflightRequest,
    StartRequest,
    WatchRequest,
)
from serving.flags import add_kube_arguments, add_version
from serving.kubeconfig import KubeConfigError, context_namespace

PROG: Final = "dispatch-agent"
REQUESTS: Final[dict[str, type[BaseModel] | None]] = {
    "start": StartRequest,
    "open": ObjectRef,
    "hold": HoldRequest,
    "release": ObjectRef,
    "stop": ObjectRef,
    "status": ObjectRef,
    "list": ListRequest,
    "watch": WatchRequest,
    "output": OutputRequest,
    "preflight": PreflightRequest,
    "capabilities": None,
}
"""Each verb of the API and the model of its request (None: it takes none)."""
COMMANDS: Final = tuple(REQUESTS)
"""The subcommands this module serves; the agent's own CLI lists them beside ``serve``."""
HELP: Final = {
    "start": "create a dispatch TrainJob, closed",
    "open": "open a job's gate: raise A and let it run",
    "hold": "hold a job: suspend it, recording who and why",
    "release": "release a hold",
    "stop": "stop a job: delete its TrainJob",
    "status": "a job's phase, gate, identity and pods",
    "list": "dispatch's TrainJobs in a namespace (--all: every page)",
    "watch": "dispatch's TrainJobs in a namespace: all now, or those changed since --version",
    "output": "rank 0's log (--follow to stream it)",
    "preflight": "prove the gates with a probe job",
    "capabilities": "what the agent found at its last Preflight",
}
TABLE_COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    "list": ("name", "uid", "n", "phase", "deletionTimestamp"),
    "watch": ("name", "uid", "n", "phase", "deletionTimestamp"),
}
"""The columns ``-o table`` shows of a verb's items (``-o wide``: all of them); a verb not here shows all."""
EXIT_CODES: Final = {
    0: "done",
    1: "the agent answered with an error (its JSON body on stderr); serve: a bad config, certificate or kubeconfig",
    2: "a usage error or an invalid request: nothing was sent",
    3: "the agent could not be reached",
    130: "interrupted",
}
ENV_SERVER: Final = "DISPATCH_AGENT_SERVER"
ENV_TOKEN_FILE: Final = "DISPATCH_AGENT_TOKEN_FILE"
ENV_CA_FILE: Final = "DISPATCH_AGENT_CA_FILE"
ENV_RESOLVE: Final = "DISPATCH_AGENT_RESOLVE"
REF_FLAGS: Final = (
    "namespace",
    "name",
    "uid",
    "who",
    "reason",
    "until",
    "follow",
    "tailLines",
    "jobId",
    "limit",
    "continue",
    "version",
    "timeoutSeconds",
)
"""Flags that set a field of the request, by its JSON name."""


def epilog() -> str:
    return "exit status:\n" + "\n".join(f"  {code:<4} {what}" for code, what in EXIT_CODES.items())


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog=PROG,
        description="call the dispatch agent's API",
        epilog=epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_version(top)
    add_verbs(top.add_subparsers(dest="command", required=True, metavar="VERB"))
    return top


def add_verbs(commands: Any) -> None:
    """One subcommand per verb of ``REQUESTS``, each with the shared flags (``commands``: what
    ``ArgumentParser.add_subparsers`` returned, so ``dispatch-agent`` lists them beside ``serve``)."""
    for name, model in REQUESTS.items():
        cmd = commands.add_parser(
            name,
            help=HELP.get(name, f"the {name} call"),
            epilog=epilog(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        connection = cmd.add_argument_group("connection")
        connection.add_argument("--server", default=os.environ.get(ENV_SERVER), help=f"the agent's URL (${ENV_SERVER})")
        connection.add_argument(
            "--token-file",
            default=os.environ.get(ENV_TOKEN_FILE),
            help=f"bearer token, read per call (${ENV_TOKEN_FILE}; else the kubeconfig user's token)",
        )
        connection.add_argument(
            "--ca-file",
            default=os.environ.get(ENV_CA_FILE),
            help=f"CA bundle for the agent's certificate (${ENV_CA_FILE})",
        )
        connection.add_argument(
            "--resolve",
            action="append",
            default=os.environ.get(ENV_RESOLVE, "").split(),
            metavar="HOST:ADDRESS",
            help=f"connect to HOST at ADDRESS, e.g. the Service's name at its ClusterIP from outside the cluster's "
            f"DNS, the certificate still checked for HOST (as curl's --resolve; repeatable; ${ENV_RESOLVE}, "
            "space-separated)",
        )
        add_kube_arguments(connection)
        if name != "output":
            cmd.add_argument(
                "-o",
                "--output",
                choices=output.FORMATS,
                default="json",
                help="json (default), yaml, table, or wide (a table with every column)",
            )
        if model is None:
            continue
        cmd.add_argument("--request", metavar="FILE", help="the request as JSON; - reads stdin")
        if "namespace" in model.model_fields:
            cmd.add_argument("-n", "--namespace", help="default: the kubeconfig context's namespace, else default")
        if issubclass(model, ObjectRef):
            cmd.add_argument("--name", help="the TrainJob's name (Start's answer)")
            cmd.add_argument("--uid", help="the TrainJob's uid (Start's answer)")
        _verb_flags(name, cmd)


def _verb_flags(name: str, cmd: argparse.ArgumentParser) -> None:
    """Flags of one verb beyond the shared ones."""
    if name == "hold":
        cmd.add_argument("--who")
        cmd.add_argument("--reason")
        cmd.add_argument("--until", help="RFC 3339; a hold until released when absent")
    if name == "list":
        cmd.add_argument("--job-id", dest="jobId")
        cmd.add_argument("--limit", type=int)
        cmd.add_argument("--continue", dest="continue")
        cmd.add_argument("--all", action="store_true", help="follow every page; print one list of all items")
    if name == "watch":
        cmd.add_argument("--version", help="the version of the previous answer (-o json shows it)")
        cmd.add_argument("--timeout-seconds", type=int, dest="timeoutSeconds", help="with --version: the wait")
    if name == "output":
        cmd.add_argument("--follow", action="store_true", default=None)
        cmd.add_argument("--tail-lines", type=int, dest="tailLines")


def request_of(args: argparse.Namespace) -> BaseModel | None:
    """The request from --request, with flags on top; ValueError (the pydantic message) when it is not valid."""
    model = REQUESTS[args.command]
    if model is None:
        return None
    data: dict[str, Any] = {}
    if args.request:
        text = sys.stdin.read() if args.request == "-" else Path(args.request).read_text(encoding="utf-8")
        loaded = json.loads(text)
        if not isinstance(loaded, dict):
            raise ValueError("the request must be a JSON object")
        data.update(loaded)
    for key in REF_FLAGS:
        value = getattr(args, key, None)
        if value is not None:
            data[key] = value
    if "namespace" in model.model_fields and "namespace" not in data:
        data["namespace"] = context_namespace(args.kubeconfig, args.context) or "default"
    return model.model_validate(data, by_alias=True, by_name=False)


async def token_source(args: argparse.Namespace) -> str | Callable[[], str]:
    """--token-file (or its variable), read at each call; else the kubeconfig's bearer token."""
    if args.token_file:
        return token_from_file(args.token_file)
    from serving.kube import load_configuration  # kubernetes_asyncio: loaded only for the kubeconfig's credentials

    configuration = await load_configuration(args.kubeconfig, args.context)
    token = configuration.api_key.get("BearerToken") or configuration.api_key.get("authorization") or ""
    if not token.startswith("Bearer "):
        raise KubeConfigError("no --token-file, and the kubeconfig's user has no bearer token (a client certificate?)")
    return token.removeprefix("Bearer ")


async def run(args: argparse.Namespace, request: BaseModel | None) -> int:
    resolve = resolve_of(args.resolve)
    async with AgentClient(args.server, await token_source(args), ca_file=args.ca_file, resolve=resolve) as agent:
        if args.command == "output":
            assert isinstance(request, OutputRequest)
            async for chunk in agent.output(request):
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
            return 0
        if args.command == "list" and getattr(args, "all", False):
            assert isinstance(request, ListRequest)
            items = await agent.list_all(request.namespace, request.job_id, request.limit or 100)
            answer: BaseModel = ListResponse(items=items)
        else:
            call = getattr(agent, args.command)
            answer = await (call(request) if request is not None else call())
    answer_json = answer.model_dump(mode="json", by_alias=True)
    sys.stdout.write(output.render(answer_json, args.output, TABLE_COLUMNS.get(args.command)))
    return 0


def resolve_of(entries: Sequence[str]) -> dict[str, str]:
    """``HOST:ADDRESS`` entries (an IPv6 address after the first colon is fine); ValueError names a bad one."""
    hosts = {}
    for entry in entries:
        host, sep, address = entry.partition(":")
        try:
            ipaddress.ip_address(address)
        except ValueError:
            raise ValueError(f"--resolve {entry!r}: give HOST:ADDRESS, ADDRESS an IP address") from None
        if not host or not sep:
            raise ValueError(f"--resolve {entry!r}: give HOST:ADDRESS")
        hosts[host] = address
    return hosts


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(parser().parse_args(argv))


def run_command(args: argparse.Namespace, prog: str = PROG) -> int:
    """A parsed verb, called; returns the exit status (``EXIT_CODES``)."""
    if not args.server:
        print(f"{prog} {args.command}: --server (or ${ENV_SERVER}) is required", file=sys.stderr)
        return 2
    try:
        resolve_of(args.resolve)
        request = request_of(args)
    except (OSError, ValueError, ValidationError) as exc:
        error = AgentError(ErrorKind.INVALID, f"the request: {exc}")
        print(json.dumps(error.body()), file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(args, request))
    except AgentError as exc:
        print(json.dumps(exc.body()), file=sys.stderr)
        return 3 if exc.kind is ErrorKind.UNAVAILABLE and exc.status == 0 else 1
    except (OSError, KubeConfigError) as exc:  # the token or CA file, or no token anywhere
        print(json.dumps(AgentError(ErrorKind.INVALID, str(exc)).body()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
