"""``dispatch-agent start|open|hold|release|stop|status|list|output|preflight|capabilities``: the API for operators.

JSON in, JSON out. The request is the API's JSON (``--request FILE``, ``-`` for stdin); the operations on one
object also take ``--namespace --name --uid`` instead. The answer is printed on stdout; an error's JSON body
goes to stderr with exit status 1 (2 for a usage error). ``output`` prints the log as it comes. ``list`` takes
``--namespace`` and optionally ``--job-id``, ``--limit`` and ``--continue`` (one page; ``--all`` follows every page).

    dispatch-agent status --server https://dispatch-agent:8443 --token-file token --ca-file ca.crt \\
        --namespace team-a --name dj-01arz3ndektsv4rrffq69g5fav-s3 --uid 6c1f...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from pydantic import BaseModel, ValidationError

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
)

PROG: Final = "dispatch-agent"
COMMANDS: Final = (
    "start",
    "open",
    "hold",
    "release",
    "stop",
    "status",
    "list",
    "output",
    "preflight",
    "capabilities",
)
"""The subcommands this module serves; the agent's own CLI hands these over to ``main``."""
REQUESTS: Final[dict[str, type[BaseModel] | None]] = {
    "start": StartRequest,
    "open": ObjectRef,
    "hold": HoldRequest,
    "release": ObjectRef,
    "stop": ObjectRef,
    "status": ObjectRef,
    "list": ListRequest,
    "output": OutputRequest,
    "preflight": PreflightRequest,
    "capabilities": None,
}
ENV_SERVER: Final = "DISPATCH_AGENT_SERVER"
ENV_TOKEN_FILE: Final = "DISPATCH_AGENT_TOKEN_FILE"
ENV_CA_FILE: Final = "DISPATCH_AGENT_CA_FILE"


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog=PROG, description="call the dispatch agent's API")
    commands = top.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        cmd = commands.add_parser(name, help=f"the {name} call")
        cmd.add_argument("--server", default=os.environ.get(ENV_SERVER), help=f"the agent's URL (${ENV_SERVER})")
        cmd.add_argument(
            "--token-file",
            default=os.environ.get(ENV_TOKEN_FILE),
            help=f"bearer token, read per call (${ENV_TOKEN_FILE})",
        )
        cmd.add_argument(
            "--ca-file",
            default=os.environ.get(ENV_CA_FILE),
            help=f"CA bundle for the agent's certificate (${ENV_CA_FILE})",
        )
        if REQUESTS[name] is None:
            continue
        cmd.add_argument("--request", metavar="FILE", help="the request as JSON; - reads stdin")
        if issubclass(REQUESTS[name], ObjectRef):  # type: ignore[arg-type]
            cmd.add_argument("--namespace")
            cmd.add_argument("--name")
            cmd.add_argument("--uid")
        if name == "hold":
            cmd.add_argument("--who")
            cmd.add_argument("--reason")
            cmd.add_argument("--until", help="RFC 3339; a hold until released when absent")
        if name == "list":
            cmd.add_argument("--namespace")
            cmd.add_argument("--job-id", dest="jobId")
            cmd.add_argument("--limit", type=int)
            cmd.add_argument("--continue", dest="continue")
            cmd.add_argument("--all", action="store_true", help="follow every page; print one list of all items")
        if name == "output":
            cmd.add_argument("--follow", action="store_true", default=None)
            cmd.add_argument("--tail-lines", type=int, dest="tailLines")
    return top


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
    flags = ("namespace", "name", "uid", "who", "reason", "until", "follow", "tailLines", "jobId", "limit", "continue")
    for key in flags:
        value = getattr(args, key, None)
        if value is not None:
            data[key] = value
    return model.model_validate(data, by_alias=True, by_name=False)


async def run(args: argparse.Namespace, request: BaseModel | None) -> int:
    token = token_from_file(args.token_file)
    async with AgentClient(args.server, token, ca_file=args.ca_file) as agent:
        if args.command == "output":
            assert isinstance(request, OutputRequest)
            async for chunk in agent.output(request):
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
            return 0
        if args.command == "list" and getattr(args, "all", False):
            assert isinstance(request, ListRequest)
            items = await agent.list_all(request.namespace, request.job_id, request.limit or 100)
            print(ListResponse(items=items).model_dump_json(by_alias=True, indent=2, exclude_none=True))
            return 0
        call = getattr(agent, args.command)
        answer = await (call(request) if request is not None else call())
    print(answer.model_dump_json(by_alias=True, indent=2))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if not args.server or not args.token_file:
        print(f"{PROG} {args.command}: --server and --token-file are required", file=sys.stderr)
        return 2
    try:
        request = request_of(args)
    except (OSError, ValueError, ValidationError) as exc:
        error = AgentError(ErrorKind.INVALID, f"the request: {exc}")
        print(json.dumps(error.body()), file=sys.stderr)
        return 2
    try:
        return asyncio.run(run(args, request))
    except AgentError as exc:
        print(json.dumps(exc.body()), file=sys.stderr)
        return 1
    except OSError as exc:  # the token or CA file
        print(json.dumps(AgentError(ErrorKind.INVALID, str(exc)).body()), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
